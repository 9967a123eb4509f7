"""Ansible's CLI habits on kvprov's commands (#25): -l/--limit on check and render too, -e/--extra-vars
applied by kvprov's own inventory reading and passed to ansible-playbook, -u, --forks and the
become password passed on as ansible-playbook takes them (its command line, as ansible-runner
recorded it in the run's artifacts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvprov import ansible_cli
from kvprov.errors import KvprovError
from tests.conftest import ROOT

INVENTORY = ("all:\n  children:\n    gpu_nodes:\n      hosts:\n        v1:\n        v2:\n      vars:\n"
             "        kvprov_storage_profile: local\n        kvprov_storage_pnfs_layout: none\n")


@pytest.fixture
def inv(tmp_path) -> Path:
    (tmp_path / "inv.yml").write_text(INVENTORY)
    return tmp_path


SECRET = "ghp-kvprov-test-token-0042"  # in the controller's environment: never in a run's artifacts


def kvprov(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_STATE_HOME": str(cwd / "state"), "GITHUB_TOKEN": SECRET}
    return subprocess.run([sys.executable, "-m", "kvprov", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def test_check_and_render_take_a_limit(inv):
    (inv / "inv.yml").write_text(INVENTORY.replace("        v2:\n", "        v2:\n          kvprov_sglang_tp_size: 0\n"))
    r = kvprov(inv, "check", "inv.yml")
    assert r.returncode == 2 and "host v2: kvprov_sglang_tp_size" in r.stdout, r.stdout
    r = kvprov(inv, "check", "inv.yml", "-l", "v1")  # v2's problem is not reported
    assert r.returncode == 0 and "1 host(s) checked" in r.stdout, r.stdout + r.stderr
    r = kvprov(inv, "check", "inv.yml", "--limit", "nope")
    assert r.returncode == 2 and "no host matches --limit nope" in r.stderr and "WARNING" not in r.stderr
    (inv / "inv.yml").write_text(INVENTORY)  # render and deploy check the whole inventory first
    r = kvprov(inv, "render", "inv.yml", "-l", "v2", "--out", "out")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (inv / "out").iterdir()) == ["v2"]


def test_extra_vars_win_in_check_and_reach_ansible_playbook(inv):
    r = kvprov(inv, "check", "inv.yml", "-e", "kvprov_sglang_tp_size=0")  # a string, converted as the role would
    assert r.returncode == 2 and "-e (extra vars): kvprov_sglang_tp_size: 0 is out of range" in r.stdout, r.stdout
    assert kvprov(inv, "check", "inv.yml", "-e", "kvprov_sglang_tp_size=2 kvprov_engine_install=false").returncode == 0
    r = kvprov(inv, "render", "inv.yml", "--out", "out", "-e", '{"kvprov_engine_model_path": "/models/From-E"}',
               "-e", "kvprov_sglang_tp_size=2", "-u", "deployer", "--forks", "3")
    assert r.returncode == 0, r.stderr
    unit = (inv / "out/v1/etc/systemd/system/kvprov-sglang-main.service").read_text()
    assert "--model-path /models/From-E" in unit and "--tp-size 2" in unit
    [command] = (inv / "state/kvprov/runs").glob("*-desired-*/artifacts/*/command")
    assert SECRET not in command.read_text() and json.loads(command.read_text())["env"]["GITHUB_TOKEN"] == "<redacted>"
    assert not [p for p in (inv / "state/kvprov/runs").rglob("*") if p.is_file() and SECRET in p.read_text()]
    words = json.loads(command.read_text())["command"]
    assert ["-u", "deployer"] == words[words.index("-u"):words.index("-u") + 2]
    assert ["--forks", "3"] == words[words.index("--forks"):words.index("--forks") + 2]
    assert '{"kvprov_engine_model_path": "/models/From-E"}' in words
    assert '{"kvprov_sglang_tp_size": 2}' in words  # the key=value string converted, as kvprov check read it


def test_extra_vars_files_and_mistakes(tmp_path):
    f = tmp_path / "e.yml"
    f.write_text("kvprov_engine_host: 0.0.0.0\n")
    assert ansible_cli.parse_extra_vars(f"@{f}") == {"kvprov_engine_host": "0.0.0.0"}
    assert ansible_cli.parse_extra_vars("a=1 b='x y'") == {"a": "1", "b": "x y"}
    for bad, why in ((f"@{tmp_path}/missing.yml", "cannot read"), ("justaword", "expected key=value"),
                     ("[1, 2]", "must be a mapping")):
        with pytest.raises(KvprovError, match=why):
            ansible_cli.parse_extra_vars(bad)


def test_a_crash_is_one_line_exit_7_and_a_saved_root_only_traceback(tmp_path, monkeypatch, capsys):
    """#25: an internal error is not "drift found" (1): its own exit code, one line, the traceback
    in a file (with any decrypted vault value hidden)."""
    from kvprov import check, cli

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.delenv("KVPROV_DEBUG", raising=False)  # CI sets it: tracebacks in the log

    def broken(*args):
        raise RuntimeError("kvprov bug, somewhere deep")

    monkeypatch.setattr(check, "run", broken)
    (tmp_path / "inv.yml").write_text(INVENTORY)
    assert cli.main(["check", str(tmp_path / "inv.yml")]) == 7
    err = capsys.readouterr().err.strip()
    assert err.startswith("kvprov: internal error: RuntimeError: kvprov bug, somewhere deep; traceback saved in ")
    assert "\n" not in err
    [saved] = (tmp_path / "kvprov/crashes").iterdir()
    assert str(saved) in err and "Traceback" in saved.read_text() and "def broken" not in err
    assert oct(saved.stat().st_mode & 0o777) == "0o600"


def test_cli_habits_options_spelled_out_version_on_stdout_verbosity_reaches_ansible_and_a_closed_pipe(tmp_path):
    """#39: argparse's abbreviations are off (--che was --check), --version prints to stdout as
    ansible's does, -vvv reaches ansible-playbook, and a reader that leaves is no internal error."""
    import argparse

    r = kvprov(ROOT, "check", "--che", "inventory/lab.yml")
    assert r.returncode == 2 and "unrecognized arguments: --che" in r.stderr
    r = kvprov(ROOT, "--version")
    assert r.returncode == 0 and r.stdout.startswith("kvprov ") and "ansible-core" in r.stdout and r.stderr == ""
    parser = argparse.ArgumentParser()
    ansible_cli.add_args(parser)
    for given, words in (([], []), (["-v"], []), (["-vvv"], ["-vvv"]), (["-v", "-v"], ["-vv"])):
        ansible_cli.configure(parser.parse_args(given))
        assert ansible_cli.playbook_args() == words and ansible_cli.verbose() == bool(given), given
    # stdout a pipe whose reader left before kvprov wrote (`| head -c 0`)
    code = ("import os, sys; r, w = os.pipe(); os.close(r); os.dup2(w, 1); from kvprov import cli; "
            "sys.exit(cli.main(['check', '--json', '-', 'inventory/example.yml']))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert (r.returncode, r.stderr) == (141, "")


def test_ansible_playbooks_short_flags_on_deploy():
    """#39: the short spellings an Ansible user types: -C (--check), -D (--diff), -t (--tags), -f (--forks)."""
    from kvprov.cli import build_parser

    short = build_parser().parse_args(["deploy", "inv.yml", "-C", "-D", "-t", "nixl,engine", "-f", "7"])
    long = build_parser().parse_args(["deploy", "inv.yml", "--check", "--diff", "--tags", "nixl,engine", "--forks", "7"])
    assert (short.check, short.diff, short.tags, short.forks) == (True, True, "nixl,engine", 7)
    assert vars(short) == vars(long)
