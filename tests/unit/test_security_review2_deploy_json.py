"""Security review #24, finding 14 (3): `kvprov deploy --json FILE` names hosts and their
failures: it is written 0600 through a new file in FILE's directory renamed over FILE
(kvprov.validate.report.write_file), and an existing symbolic link at FILE is refused (before
anything runs, and again when writing) with the link's target untouched."""

from __future__ import annotations

import json
import stat

import pytest

from kvprov import cli, deploy, runner
from kvprov.errors import EXIT_USAGE, KvprovError


def result() -> runner.RunResult:
    return runner.RunResult(rc=0, artifacts=None, hosts={"gpu1": runner.HostSummary(ok=3)})


def test_the_json_report_is_private_and_replaces_an_older_one(tmp_path):
    target = tmp_path / "deploy.json"
    target.write_text("an older, longer report")
    target.chmod(0o644)
    runner.write_json(result(), str(target))
    assert json.loads(target.read_text())["hosts"]["gpu1"]["ok"] == 3
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    runner.write_json(result(), str(tmp_path / "new.json"))
    assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deploy.json", "new.json"]  # no temporary file left


def test_a_link_at_the_json_file_is_refused_and_its_target_untouched(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("mine")
    victim.chmod(0o644)
    link = tmp_path / "deploy.json"
    link.symlink_to(victim)
    with pytest.raises(KvprovError) as e:
        runner.write_json(result(), str(link))
    assert e.value.exit_code == EXIT_USAGE
    assert str(e.value) == (f"--json {link} is a symbolic link (to {victim}): refusing to write through it; remove "
                            "it or name another file")
    assert victim.read_text() == "mine" and stat.S_IMODE(victim.stat().st_mode) == 0o644 and link.is_symlink()


def test_deploy_refuses_a_link_at_the_json_file_before_anything_runs(tmp_path, monkeypatch, capsys):
    victim = tmp_path / "victim"
    victim.write_text("mine")
    link = tmp_path / "deploy.json"
    link.symlink_to(victim)
    ran = []
    monkeypatch.setattr(deploy.inventory, "from_args", lambda args: ["inv.yml"])
    monkeypatch.setattr(deploy.check, "require_valid", lambda sources: [])
    monkeypatch.setattr(deploy, "audit_first", lambda *a: ran.append("audit") or ([], ["gpu1"]))
    monkeypatch.setattr(deploy.lock, "inventory_lock", lambda *a: ran.append("lock"))
    assert cli.main(["deploy", "inv.yml", "--json", str(link)]) == EXIT_USAGE
    assert ran == [] and victim.read_text() == "mine"
    assert f"--json {link} is a symbolic link" in capsys.readouterr().err


def test_json_dash_writes_the_summary_to_stdout_alone(monkeypatch, capsys):
    """#39: `--json -` is stdout, as for audit, validate and check (it wrote a file named -); the
    human lines go to stderr so that stdout parses."""
    import contextlib

    monkeypatch.setattr(deploy.inventory, "from_args", lambda args: ["inv.yml"])
    monkeypatch.setattr(deploy.check, "require_valid", lambda sources: ["gpu1"])
    monkeypatch.setattr(deploy, "audit_first", lambda *a: ([], ["gpu1"]))
    monkeypatch.setattr(deploy.deployed_secrets, "changed", lambda *a: [])
    monkeypatch.setattr(deploy.lock, "inventory_lock", lambda *a: contextlib.nullcontext())
    assert cli.main(["deploy", "inv.yml", "--json", "-"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["clean"] == ["gpu1"] and "audited clean, not run" in err
