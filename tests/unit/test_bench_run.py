"""kvprov bench's run step with Ansible faked (FAKE: kvprov.runner.run answers with each
host's `kvprov_bench_report`, as bench.yml's capture task returns it): what is run, the
judged results per host, the aggregate only with --together, and the hosts that failed."""

import argparse
import json
import time

import pytest

from kvprov import bench, runner
from kvprov.errors import EXIT_CHECKS_FAILED, EXIT_OK, EXIT_UNREACHABLE, KvprovError
from tests.unit.test_bench import host_result, report


@pytest.fixture
def ansible(monkeypatch):
    seen = {}

    def fake_run(playbook, sources, *, name, extravars=None, limit=None, stream=None, capture=None, **kw):
        seen.update(playbook=playbook, sources=sources, name=name, extravars=extravars, limit=limit, capture=capture)
        captured = {h: {"ansible_facts": {"kvprov_bench_report": rep}} for h, rep in seen["reports"].items()}
        return runner.RunResult(0, None, failures=seen.get("failures", []), captured=captured)

    monkeypatch.setattr(runner, "run", fake_run)
    return seen


def test_each_host_judged_and_the_failures_named(ansible):
    ansible["reports"] = {"b": report(host_result(start=1000.0)), "a": report(host_result(gbps_w=0.5), min_w=1.0)}
    ansible["failures"] = [runner.Failure("c", "Gathering Facts", "ssh: no route", True),
                           runner.Failure("d", "Run the acceptance test", "nixl missing")]
    results, run = bench.run(["inv.yml"], "gpu*", overrides={"kvprov_bench_files": 4})
    assert (ansible["playbook"], ansible["sources"], ansible["limit"], ansible["capture"]) == (
        "bench.yml", ["inv.yml"], "gpu*", bench.CAPTURE_TASK)
    assert ansible["extravars"] == {"kvprov_bench_files": 4}
    assert [(r.host, r.id, r.status) for r in results] == [
        ("a", "bench.write", "fail"), ("a", "bench.read", "pass"), ("b", "bench.write", "pass"),
        ("b", "bench.read", "pass"), ("c", "bench.run", "fail"), ("d", "bench.run", "fail")]
    assert results[4].found == "unreachable: ssh: no route"
    assert results[5].found == "task 'Run the acceptance test' failed: nixl missing"
    assert run.rc == 0


def test_together_starts_every_host_at_one_moment_and_adds_the_aggregate(ansible):
    ansible["reports"] = {"a": report(host_result(start=1000.0)), "b": report(host_result(start=1000.01))}
    before = time.time()
    results, _ = bench.run("inv.yml", together=True)
    start = ansible["extravars"]["kvprov_bench_start_at"]
    assert before + bench.LEAD_SECONDS - 0.001 <= start <= time.time() + bench.LEAD_SECONDS + 0.001  # (3 decimals)
    assert [r.id for r in results][-2:] == ["bench.aggregate.write", "bench.aggregate.read"]
    assert ansible["extravars"] == {"kvprov_bench_start_at": start}
    results, _ = bench.run("inv.yml")
    assert not [r for r in results if r.id.startswith("bench.aggregate")]
    assert "kvprov_bench_start_at" not in ansible["extravars"]


def test_a_missing_threshold_is_none_whatever_the_figure():
    slow = host_result(gbps_w=0.01, gbps_r=0.02)
    rep = {"result": slow, "rc": 0, "stderr": ""}  # no min_write_gbps / min_read_gbps at all
    assert [(r.id, r.status, r.expected) for r in bench.judge("h", rep)] == [
        ("bench.write", "pass", "a figure (kvprov_bench_min_write_gbps is 0: no threshold)"),
        ("bench.read", "pass", "a figure (kvprov_bench_min_read_gbps is 0: no threshold)")]


def test_the_aggregate_is_a_bench_result_of_all_hosts():
    rs = bench.aggregate({"a": report(host_result(start=1000.0)), "b": report(host_result(start=1000.0))})
    assert [(r.id, r.category, r.host) for r in rs] == [("bench.aggregate.write", "bench", "(all hosts)"),
                                                         ("bench.aggregate.read", "bench", "(all hosts)")]
    failed = bench.aggregate({"a": report(host_result()), "b": report(host_result(ok=False))})
    assert [(r.status, r.category, r.host) for r in failed] == [("fail", "bench", "(all hosts)")] * 2
    apart = bench.aggregate({"a": report(host_result(start=1000.0)), "b": report(host_result(start=1100.0))})
    assert [(r.status, r.category, r.host) for r in apart] == [("warn", "bench", "(all hosts)")] * 2


@pytest.fixture
def cli(ansible, monkeypatch, tmp_path):
    """cmd_bench on inv.yml with the inventory check faked too: what it was asked, and the args."""
    from kvprov import check, inventory
    asked = []
    monkeypatch.setattr(inventory, "from_args", lambda args: ["inv.yml"])

    def require_valid(sources):
        asked.append(sources)
        if ansible.get("invalid"):
            raise KvprovError("inv.yml: 1 error; no host was contacted", 2)
        return ["a"]

    monkeypatch.setattr(check, "require_valid", require_valid)
    args = argparse.Namespace(limit=None, together=False, bench_seconds=None, bench_files=None,
                              json=str(tmp_path / "out.json"), junit=None)
    return {"asked": asked, "args": args, "json": tmp_path / "out.json"}


def test_cmd_bench_checks_the_inventory_first_and_exits_by_the_results(cli, ansible, capsys):
    ansible["reports"] = {"a": report(host_result()), "b": report(host_result(gbps_w=0.5), min_w=1.0)}
    assert bench.cmd_bench(cli["args"]) == EXIT_CHECKS_FAILED
    assert cli["asked"] == [["inv.yml"]] and ansible["sources"] == ["inv.yml"]
    hosts = json.loads(cli["json"].read_text())["hosts"]
    assert [(r["id"], r["status"]) for r in hosts["a"]["results"]] == [
        ("bench.write", "pass"), ("bench.read", "pass"), ("summary", "pass")]
    assert hosts["b"]["results"][-1]["id"] == "summary" and hosts["b"]["results"][-1]["status"] == "fail"
    assert "bench.write" in capsys.readouterr().out  # the table
    ansible["reports"] = {"a": report(host_result())}
    assert bench.cmd_bench(cli["args"]) == EXIT_OK


def test_cmd_bench_an_unreachable_host_exits_3(cli, ansible, monkeypatch):
    real = runner.run

    def unreachable(*a, **kw):
        res = real(*a, **kw)
        res.hosts = {"a": runner.HostSummary(unreachable=1)}
        return res

    monkeypatch.setattr(runner, "run", unreachable)
    ansible["reports"] = {"a": report(host_result())}
    assert bench.cmd_bench(cli["args"]) == EXIT_UNREACHABLE


def test_cmd_bench_contacts_no_host_when_the_inventory_is_invalid(cli, ansible):
    ansible["invalid"] = True
    with pytest.raises(KvprovError, match="no host was contacted"):
        bench.cmd_bench(cli["args"])
    assert cli["asked"] == [["inv.yml"]] and "playbook" not in ansible
