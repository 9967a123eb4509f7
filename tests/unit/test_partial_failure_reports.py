"""Partial failure in `kvprov validate` (live) and `kvprov storage check`: a host that was not
captured is in every report, and 3 (unreachable) wins over 1, as README's exit codes say
(#41 item 4; tests/unit/test_exit_code_matrix.py runs every command through every case).
The hosts are faked at the Ansible boundary (labelled FAKE): validate's capture
(kvprov.validate.collect.collect) and the storage systems' read (kvprov.runner.run)."""

import base64
import json
import shutil
from pathlib import Path

import pytest
import yaml

from kvprov import cli, runner
from kvprov.validate import collect
from tests.conftest import FIXTURES
from tests.unit.test_storage_knfsd import EXPORTFS, PORTLIST, STATFS, VERSIONS_LAB

HOST = "gpu-a01.corp.example.com"  # the fixture bundle gpu_a01, which validates clean


def hosts_in(path: Path) -> dict[str, dict[str, dict]]:
    return {h: {r["id"]: r for r in v["results"]} for h, v in json.loads(path.read_text())["hosts"].items()}


@pytest.fixture
def captured(monkeypatch):
    """FAKE: collect.collect captures the hosts named in `captured["ok"]` (the clean fixture
    bundle) and answers `captured["failures"]` for the others."""
    seen = {"ok": [], "failures": []}

    def fake_collect(sources, out, limit=None, stream=None, *, timeout):
        for h in seen["ok"]:
            shutil.copytree(FIXTURES / "bundles/gpu_a01", Path(out) / h)
        hosts = {f.host: runner.HostSummary(unreachable=int(f.unreachable), failed=int(not f.unreachable))
                 for f in seen["failures"]}
        return runner.RunResult(2 if seen["failures"] else 0, Path(out), hosts=hosts, failures=seen["failures"],
                                captured={h: {} for h in seen["ok"]})

    monkeypatch.setattr(collect, "collect", fake_collect)
    return seen


def test_validate_with_every_host_unreachable_exits_3_not_2_and_names_them(captured, tmp_path, capsys):
    """Nothing captured used to read as "no usable bundle" (2) and the hosts were only on stderr."""
    captured["failures"] = [runner.Failure("gpu-a02", "Gathering Facts", "ssh: no route", True),
                            runner.Failure("gpu-a03", "Gathering Facts", "ssh: refused", True)]
    rc = cli.main(["validate", "inventory/example.yml", "--no-bench", "--json", str(tmp_path / "r.json")])
    out = capsys.readouterr().out
    assert rc == 3
    hosts = hosts_in(tmp_path / "r.json")
    assert sorted(hosts) == ["gpu-a02", "gpu-a03"]
    r = hosts["gpu-a02"]["host.collect"]
    assert (r["status"], r["category"], r["found"]) == ("fail", "bundle", "unreachable: ssh: no route")
    assert r["fix"].startswith("check ssh to the host")
    assert "gpu-a02: FAILED (1 failed" in out and "gpu-a03: FAILED (1 failed" in out


def test_validate_with_a_host_whose_capture_failed_exits_1_and_reports_it(captured, tmp_path, capsys):
    """A reachable host whose collector task failed used to pass (exit 0) and be in no report."""
    captured["ok"] = [HOST]
    captured["failures"] = [runner.Failure("gpu-a02", "Probe the live state", "python3 missing")]
    rc = cli.main(["validate", "inventory/example.yml", "--no-bench", "--json", str(tmp_path / "r.json"),
                   "--junit", str(tmp_path / "r.xml")])
    assert rc == 1
    hosts = hosts_in(tmp_path / "r.json")
    assert sorted(hosts) == [HOST, "gpu-a02"]
    assert hosts["gpu-a02"]["host.collect"]["found"] == "task 'Probe the live state' failed: python3 missing"
    assert hosts["gpu-a02"]["summary"]["status"] == "fail"
    assert not [r for r in hosts[HOST].values() if r["status"] == "fail"]
    assert '<testsuite name="gpu-a02" tests="1" failures="1"' in (tmp_path / "r.xml").read_text()


def test_validate_with_an_unreachable_host_and_a_failed_one_exits_3(captured, tmp_path):
    captured["ok"] = [HOST]
    captured["failures"] = [runner.Failure("gpu-a02", "Gathering Facts", "ssh: no route", True),
                            runner.Failure("gpu-a03", "Probe the live state", "python3 missing")]
    assert cli.main(["validate", "inventory/example.yml", "--no-bench", "--json", str(tmp_path / "r.json")]) == 3
    assert sorted(hosts_in(tmp_path / "r.json")) == [HOST, "gpu-a02", "gpu-a03"]


def test_storage_check_with_an_unreachable_system_and_a_failed_check_exits_3(tmp_path, monkeypatch):
    """It used to exit 1 when anything else failed (docs/storage-check.md said so), unlike every
    other command."""
    inv = tmp_path / "inv.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {
        "gpu_nodes": {"hosts": {f"gpu{i}": {"ansible_host": f"10.99.{i}.2", "kvprov_storage_server": f"10.99.{i}.1",
                                            "kvprov_storage_export": "/kv"} for i in (1, 2)}},
        "kv_storage": {"hosts": {f"nfs{i}": {"kvprov_storage_system": "linux",
                                             "kvprov_storage_data_addresses": [f"10.99.{i}.1"]} for i in (1, 2)}}}}}))

    def b64(text: str) -> dict:
        return {"content": base64.b64encode(text.encode()).decode()}

    def fake_run(playbook, sources, **kw):  # FAKE: nfs1 read (NFS 4.1 off: a failed check), nfs2 does not answer
        state = {"versions": b64(VERSIONS_LAB.replace("+4.1", "-4.1")), "portlist": b64(PORTLIST),
                 "exports": {"rc": 0, "stdout": EXPORTFS}, "statfs": [{"item": "/kv", "rc": 0, "stdout": STATFS}]}
        return runner.RunResult(4, None, hosts={"nfs1": runner.HostSummary(ok=4), "nfs2": runner.HostSummary(unreachable=1)},
                                captured={"nfs1": {"ansible_facts": {"kvprov_storage_state": state}}},
                                failures=[runner.Failure("nfs2", "Gathering Facts", "ssh: no route", True)])

    monkeypatch.setattr(runner, "run", fake_run)
    assert cli.main(["storage", "check", str(inv), "--json", str(tmp_path / "r.json")]) == 3
    hosts = hosts_in(tmp_path / "r.json")
    assert hosts["nfs1"]["nfs.v4.1"]["status"] == "fail"
    assert hosts["nfs2"]["storage.ssh"]["found"] == "unreachable: ssh: no route"
