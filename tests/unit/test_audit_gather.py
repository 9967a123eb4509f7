"""`kvprov audit INVENTORY` (the live path) with Ansible faked (FAKE below): kvprov.runner.run
returns what the collect.yml capture task returned per host, built from fixture bundles.
What is real: the capture's bundle, the audit of each host, the hosts that did not answer,
the outputs and the exit code (0 with warnings only, 1 with drift, 3 with a host down)."""

import json

import pytest

from kvprov import audit, cli, runner
from kvprov.validate.collect import CAPTURE_TASK
from tests.conftest import FIXTURES

TOML = "/etc/kvprov/nixl_backend_config.toml"


def captured(bundle: str, edit=None) -> tuple[dict, dict]:
    """The capture task's result for a host, as the collector module returns it, and the host's
    desired state, as the run returns it (runner.RunResult.desired)."""
    root = FIXTURES / "bundles" / bundle
    files = {str(p.relative_to(root)): p.read_text() for p in root.rglob("*") if p.is_file()}
    desired = json.loads(files.pop("desired.json"))
    if edit:
        edit(files)
    return {"changed": False, "files": files}, desired


def with_unmanaged_file(files: dict) -> None:  # a warning, no drift
    dirs = json.loads(files[audit.MANAGED_DIRS])
    dirs["/etc/kvprov"] += ["nixl_backend_config.toml.bak"]
    files[audit.MANAGED_DIRS] = json.dumps(dirs)


def with_usage(files: dict) -> None:  # the volume's figures, as the collector measures them
    dirs = json.loads(files["storage_dirs.json"])
    dirs["mount_point"]["usage"] = {"size_bytes": 1000, "used_bytes": 10, "inodes": 100, "inodes_used": 1}
    files["storage_dirs.json"] = json.dumps(dirs)


def with_hand_edit(files: dict) -> None:  # drift
    files["files" + TOML] += "# hand edit\n"


@pytest.fixture
def ansible(monkeypatch):
    """FAKE: runner.run (and the collect run) answers with `ansible["captured"]` ({host: (capture, desired state)}) and
    `ansible["failures"]`."""
    seen = {"captured": {}, "failures": [], "rc": 0}

    def fake_run(playbook, sources, *, name, extravars=None, limit=None, stream=None, capture=None, **kw):
        seen.update(playbook=playbook, sources=sources, name=name, extravars=extravars, limit=limit, capture=capture)
        return runner.RunResult(seen["rc"], None, failures=seen["failures"],
                                captured={h: c for h, (c, _) in seen["captured"].items()},
                                desired={h: d for h, (_, d) in seen["captured"].items()})

    monkeypatch.setattr(runner, "run", fake_run)
    monkeypatch.setattr(audit, "run_with_states", fake_run)  # the collect run, its desired states included
    return seen


def test_gather_audits_each_capture_and_names_the_hosts_that_did_not_answer(ansible):
    ansible["captured"] = {"kvlab-gpu1": captured("lab_gpu1", with_hand_edit), "kvlab-c1": captured("local_c1", with_usage),
                           "bad": ({"files": {}}, {"format": 99})}
    ansible["failures"] = [runner.Failure("gpu9", "Gathering Facts", "ssh: no route", True),
                           runner.Failure("gpu8", "capture", "python3 missing")]
    results, gauges, namespaces = audit.gather(["inv.yml"], "gpu*", 7)
    assert ansible == {**ansible, "playbook": "collect.yml", "sources": ["inv.yml"], "limit": "gpu*", "name": "audit",
                       "capture": CAPTURE_TASK, "extravars": {"kvprov_collect_timeout": 7,
                                                              "kvprov_collect_probes": False}}
    by_host = {}
    for r in results:
        by_host.setdefault(r.host, {})[r.id] = r
    assert audit.drifted(results) == ["kvlab-gpu1"]
    assert by_host["kvlab-gpu1"][f"file:{TOML}"].status == "fail"
    assert not [r for r in by_host["kvlab-c1"].values() if r.status == "fail"]
    assert [r.id for r in by_host["bad"].values()] == ["host.reachable"]
    assert by_host["bad"]["host.reachable"].found.startswith("the collector returned no usable desired state: ")
    assert by_host["gpu9"]["host.reachable"].found == "unreachable: ssh: no route"
    assert by_host["gpu8"]["host.reachable"].found == "collect failed: python3 missing"
    assert [(g.name, dict(g.labels)["host"], g.value) for g in gauges][:2] == [
        ("kvprov_storage_volume_size_bytes", "kvlab-c1", 1000), ("kvprov_storage_volume_used_bytes", "kvlab-c1", 10)]
    assert audit._exit_code(results) == 3
    assert namespaces == []  # bundles of a collector that did not list them: nothing, no error


def test_gather_with_nothing_captured_and_a_failed_run_is_an_error(ansible):
    ansible["rc"] = 2
    with pytest.raises(audit.KvprovError) as e:
        audit.gather("inv.yml", None, 30)
    assert e.value.exit_code == 3 and "ansible-playbook failed" in str(e.value)
    ansible["rc"] = 0  # no host matched: no results, no error
    assert audit.gather("inv.yml", None, 30) == ([], [], [])


def test_audit_exits_0_with_warnings_only_1_with_drift(ansible, tmp_path, capsys):
    ansible["captured"] = {"kvlab-gpu1": captured("lab_gpu1", with_unmanaged_file)}
    assert cli.main(["audit", "inventory/lab.yml", "--json", str(tmp_path / "a.json")]) == 0
    statuses = [r["status"] for h in json.loads((tmp_path / "a.json").read_text())["hosts"].values()
                for r in h["results"]]
    assert "warn" in statuses and "fail" not in statuses
    assert "drift on: none" in capsys.readouterr().out
    ansible["captured"] = {"kvlab-gpu1": captured("lab_gpu1", with_hand_edit)}
    assert cli.main(["audit", "inventory/lab.yml"]) == 1
    assert "drift on: kvlab-gpu1" in capsys.readouterr().out
