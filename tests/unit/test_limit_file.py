"""`--limit @FILE` (Ansible's own form, a retry file): every command that takes --limit reads the
patterns from FILE; a missing or empty file is a usage error. And for real: a deploy whose hosts
are closed ports on 127.0.0.1 writes the retry file, and `--limit @FILE` reruns exactly those."""

import argparse
import json
import shlex
import shutil

import pytest

from kvprov import cli, inventory
from kvprov.errors import EXIT_UNREACHABLE, EXIT_USAGE, KvprovError
from tests.conftest import kvprov
from tests.unit.test_inventory import write


def test_the_file_gives_one_pattern_a_line_blank_lines_ignored(tmp_path):
    write(tmp_path / "hosts.retry", "gpu1\n\n  gpu7  \nrack_b:&gpu_nodes\n\n")
    assert inventory.limit_patterns(f"@{tmp_path}/hosts.retry") == "gpu1,gpu7,rack_b:&gpu_nodes"
    assert inventory.limit_patterns(f"gpu9,@{tmp_path}/hosts.retry,!gpu1") == "gpu9,gpu1,gpu7,rack_b:&gpu_nodes,!gpu1"
    assert inventory.limit_patterns("gpu1,gpu2") == "gpu1,gpu2"
    assert inventory.limit_patterns(None) is None


def test_a_relative_file_is_read_from_the_working_directory(tmp_path, monkeypatch):
    write(tmp_path / "failed.txt", "gpu3\n")
    monkeypatch.chdir(tmp_path)
    assert inventory.limit_patterns("@failed.txt") == "gpu3"


@pytest.mark.parametrize("text, why", [(None, "cannot read the file"), ("\n \n", "the file names no host")])
def test_a_missing_or_empty_file_is_a_usage_error_naming_it(tmp_path, text, why):
    path = tmp_path / "hosts.retry"
    if text is not None:
        path.write_text(text)
    with pytest.raises(KvprovError) as e:
        inventory.limit_patterns(f"@{path}")
    assert e.value.exit_code == EXIT_USAGE and f"--limit @{path}: {why}" in str(e.value)


def test_the_sources_become_command_line_words_again():
    assert inventory.argv(["a.yml"]) == ["a.yml"]
    assert inventory.argv(["a.yml", "b dir", "c.ini"]) == ["a.yml", "-i", "b dir", "-i", "c.ini"]
    assert inventory.argv([]) == []


def commands_with_limit() -> list[str]:
    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(name for name, p in sub.choices.items() if any("--limit" in a.option_strings for a in p._actions))


def test_every_command_with_limit_refuses_a_missing_file_with_exit_2(tmp_path, monkeypatch, capsys):
    """Each command reaches Ansible through kvprov.runner, which expands the file first."""
    monkeypatch.setenv("KVPROV_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("KVPROV_LOCK_DIR", str(tmp_path / "locks"))
    inv = write(tmp_path / "hosts.ini", "[gpu_nodes]\ngpu1 kvprov_storage_server=10.0.0.5 kvprov_storage_export=/kv\n")
    commands = commands_with_limit()
    assert {"check", "render", "deploy", "audit", "bench", "validate", "collect", "loadtest"} <= set(commands)
    extra = {"collect": ["--out", str(tmp_path / "out")], "render": ["--out", str(tmp_path / "out")]}
    for command in commands:
        capsys.readouterr()
        rc = cli.main([command, str(inv), "--limit", f"@{tmp_path}/missing.retry", *extra.get(command, [])])
        assert rc == EXIT_USAGE, command
        assert f"--limit @{tmp_path}/missing.retry: cannot read the file" in capsys.readouterr().err, command
    assert not list((tmp_path / "runs").glob("*/artifacts/*/command")), "no ansible-playbook ran"


CLOSED = """
    all:
      vars: {ansible_host: 127.0.0.1, kvprov_storage_server: 10.0.0.5, kvprov_storage_export: /kv}
      children:
        gpu_nodes:
          hosts:
            c1: {ansible_port: 9}
            c2: {ansible_port: 9}
            c3: {ansible_port: 19}
            c4: {ansible_port: 9}
"""


@pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-playbook not installed")
def test_a_deploy_writes_the_retry_file_and_limit_at_it_reruns_exactly_those_hosts(tmp_path, monkeypatch):
    """Real ansible-playbook, real ssh: the hosts are closed ports on 127.0.0.1, so they are
    unreachable for real. The first run is limited to c1 and c3 (different ports, one reason)."""
    inv = write(tmp_path / "closed.yml", CLOSED)
    for name, value in (("XDG_STATE_HOME", "state"), ("KVPROV_RUNS_DIR", "runs"), ("KVPROV_LOCK_DIR", "locks")):
        monkeypatch.setenv(name, str(tmp_path / value))
    first = kvprov("deploy", "--check", str(inv), "--limit", "c1,c3", timeout=300)
    assert first.returncode == EXIT_UNREACHABLE, first.stdout + first.stderr
    retry = tmp_path / "state/kvprov/retry/deploy.retry"
    assert retry.read_text() == "c1\nc3\n"
    [group] = [line for line in first.stdout.splitlines() if line.startswith("unreachable (")]
    assert group.startswith("unreachable (2 hosts): ") and group.endswith(" \u2014 c1, c3")
    assert "Connection refused" in group
    [rerun] = [line for line in first.stdout.splitlines() if line.startswith("rerun the failed hosts: ")]
    argv = shlex.split(rerun.removeprefix("rerun the failed hosts: "))
    assert argv == ["kvprov", "deploy", "--check", str(inv), "--limit", f"@{retry}"]

    again = kvprov(*argv[1:], "--json", str(tmp_path / "again.json"), timeout=300)  # the command as printed
    assert again.returncode == EXIT_UNREACHABLE, again.stdout + again.stderr
    report = json.loads((tmp_path / "again.json").read_text())
    assert sorted(report["hosts"]) == ["c1", "c3"]
    assert sorted(f["host"] for f in report["failures"]) == ["c1", "c3"]
    assert all("Connection refused" in f["message"] for f in report["failures"])

    # collect takes the same file, and writes its own retry file with the same hosts
    collected = kvprov("collect", str(inv), "--out", str(tmp_path / "bundles"), "--limit", f"@{retry}", timeout=300)
    assert collected.returncode == EXIT_UNREACHABLE, collected.stdout + collected.stderr
    assert (tmp_path / "state/kvprov/retry/collect.retry").read_text() == "c1\nc3\n"
    assert "unreachable (2 hosts): " in collected.stderr
