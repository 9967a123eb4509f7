"""A rotated secret is deployed although the audit cannot see secrets' contents: deploy records
per host a keyed digest of the secret files it names (kvprov/deployed_secrets.py) and
converges the audited-clean hosts whose files changed. The deploy's audit and converge are
FAKE here (no host); the lab's engine tests deploy for real."""

from __future__ import annotations

import argparse
import hashlib
import stat
import textwrap

import pytest

from kvprov import deploy, deployed_secrets, runner


@pytest.fixture
def fleet(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    key = tmp_path / "api-key"
    key.write_text("key-one\n")
    inv = tmp_path / "inv.yml"
    inv.write_text(textwrap.dedent(f"""\
        all:
          children:
            gpu_nodes:
              vars: {{kvprov_storage_server: 10.0.0.5, kvprov_engine: vllm_baseline, kvprov_engine_install: false}}
              hosts:
                keyed: {{kvprov_engine_api_key_file: {key}}}
                templated: {{kvprov_engine_api_key_file: "{{{{ playbook_dir }}}}/key"}}
                plain: {{}}
        """))
    return [str(inv)], key


def test_digests_are_keyed_stable_and_follow_the_files(fleet, tmp_path):
    sources, key = fleet
    d = deployed_secrets.digests(sources, ["keyed", "templated", "plain"])
    assert d["plain"] == "" and d["templated"] is None and len(d["keyed"]) == 64
    assert d["keyed"] not in (hashlib.sha256(b"key-one\n").hexdigest(), hashlib.sha256(b"key-one").hexdigest())
    assert deployed_secrets.digests(sources, ["keyed"])["keyed"] == d["keyed"]  # the same key: the same digest
    state = tmp_path / "state/kvprov/deployed-secrets"
    assert stat.S_IMODE(state.stat().st_mode) == 0o700 and stat.S_IMODE((state / "key").stat().st_mode) == 0o600
    key.write_text("key-two\n")
    assert deployed_secrets.digests(sources, ["keyed"])["keyed"] != d["keyed"]


def test_changed_until_saved_then_again_after_a_rotation(fleet, tmp_path):
    sources, key = fleet
    hosts = ["keyed", "templated", "plain"]
    assert deployed_secrets.changed(sources, hosts) == ["keyed", "templated"]  # nothing recorded; plain has no secret
    deployed_secrets.save(sources, hosts)
    assert deployed_secrets.changed(sources, hosts) == ["templated"]  # only Ansible can tell what it names
    record = next((tmp_path / "state/kvprov/deployed-secrets").glob("*.json"))
    assert stat.S_IMODE(record.stat().st_mode) == 0o600 and "key-one" not in record.read_text()
    key.write_text("key-two\n")
    assert deployed_secrets.changed(sources, ["keyed", "plain"]) == ["keyed"]


def test_deploy_converges_a_clean_host_whose_key_was_rotated_and_records_it(fleet, monkeypatch, capsys):
    sources, key = fleet
    runs = []
    monkeypatch.setattr(deploy.check, "require_valid", lambda s: ["keyed", "plain"])
    monkeypatch.setattr(deploy, "audit_first", lambda s, limit: ([], ["keyed", "plain"]))  # FAKE: all clean

    def converge(sources, command, limit, **kw):  # FAKE: the playbook ran on `limit`
        runs.append((limit, kw["check"]))
        return runner.RunResult(rc=0, artifacts=None, hosts={h: runner.HostSummary(ok=1) for h in limit.split(",")})
    monkeypatch.setattr(deploy, "converge", converge)
    args = argparse.Namespace(inventory=sources[0], inventory_sources=[], limit=None, check=False, full=False,
                              diff=False, tags=None, allow_remount=False, stop_engines=False, json=None)
    monkeypatch.setattr(deploy.inventory, "from_args", lambda a: sources)
    assert deploy.cmd_deploy(args) == 0
    assert runs == [("keyed", False)]  # never deployed from here: converged once
    assert "1 audited-clean host(s) have secrets (files or values) other than those last deployed" in capsys.readouterr().err
    assert deploy.cmd_deploy(args) == 0 and runs == [("keyed", False)]  # recorded: audit only
    key.write_text("key-two\n")
    assert deploy.cmd_deploy(argparse.Namespace(**{**vars(args), "check": True})) == 0  # check mode records nothing
    assert deploy.cmd_deploy(argparse.Namespace(**{**vars(args), "tags": "nixl"})) == 0  # nor a run without the engine
    assert deploy.cmd_deploy(args) == 0
    assert runs == [("keyed", False), ("keyed", True), ("keyed", False), ("keyed", False)]
    assert deploy.cmd_deploy(args) == 0 and len(runs) == 4
