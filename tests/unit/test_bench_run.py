"""kvprov bench's run step with Ansible faked (FAKE: kvprov.runner.run answers with each
host's `kvprov_bench_report`, as bench.yml's capture task returns it): what is run, the
judged results per host, the aggregate only with --together, and the hosts that failed."""

import time

import pytest

from kvprov import bench, runner
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
