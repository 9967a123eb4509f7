"""`kvprov validate INVENTORY` (the live path) in-process, with the two steps that need live hosts
faked (labelled FAKE below): the capture (kvprov.validate.collect.collect, Ansible on every host)
writes fixture bundles, and the throughput test (kvprov.bench.run) returns one result. What is
real: where the bundles go and whether they are kept, the collect failures reported, the bench
step run or skipped, the results and the exit code."""

import json
import shutil
from pathlib import Path

import pytest

from kvprov import bench, cli, loadtest, runner
from kvprov.validate import collect
from kvprov.validate.result import PASS, Result
from tests.conftest import FIXTURES

GOOD = FIXTURES / "bundles/gpu_a01"
OTHER = FIXTURES / "bundles/local_c1"
HOST = "gpu-a01.corp.example.com"


def results(path: Path) -> list[dict]:
    return [r for host in json.loads(path.read_text())["hosts"].values() for r in host["results"]]


@pytest.fixture
def live(monkeypatch):
    """FAKE hosts: gpu-a01 and kvlab-c1 are captured (fixture bundles), gpu-a02 is unreachable."""
    seen = {}

    def fake_collect(sources, out, limit=None, stream=None, *, timeout):
        seen.update(sources=sources, out=Path(out), timeout=timeout)
        shutil.copytree(GOOD, Path(out) / HOST)
        shutil.copytree(OTHER, Path(out) / "kvlab-c1")
        return runner.RunResult(0, Path(out), hosts={"gpu-a02": runner.HostSummary(unreachable=1)},
                                failures=[runner.Failure("gpu-a02", "Gathering Facts", "ssh: no route", True),
                                          runner.Failure("gpu-a03", "capture", "python3 missing")],
                                captured={"kvlab-c1": {}, HOST: {}})

    def fake_bench(sources, hosts, together, overrides):
        seen.update(bench_hosts=hosts)
        return ([Result("bench.aggregate.write", "bench", PASS, "1 GB/s", "2 GB/s", host=HOST)],
                runner.RunResult(0, Path("."), hosts={"gpu-a04": runner.HostSummary(unreachable=1)}))

    monkeypatch.setattr(collect, "collect", fake_collect)
    monkeypatch.setattr(bench, "run", fake_bench)
    return seen


def test_live_validate_checks_the_captures_benches_them_and_exits_3_for_an_unreachable_host(live, tmp_path, capsys):
    assert cli.main(["validate", "inventory/example.yml", "--json", str(tmp_path / "r.json")]) == 3
    err = capsys.readouterr().err
    assert "gpu-a02: unreachable: ssh: no route\n" in err and "gpu-a03: collect failed: python3 missing\n" in err
    assert "note:" not in err  # the live hosts' desired state comes from the inventory
    assert live["sources"] == ["inventory/example.yml"] and live["timeout"] == 30
    assert live["out"].name.startswith("kvprov-validate-") and not live["out"].exists()  # not kept
    assert live["bench_hosts"] == f"{HOST},kvlab-c1"
    ids = {r["id"] for r in results(tmp_path / "r.json")}
    assert {"mount.present", "engine.gpu0-3.state", "bench.aggregate.write"} <= ids


def test_live_validate_keeps_the_bundles_and_skips_the_bench_when_asked(live, tmp_path, capsys):
    keep = tmp_path / "kept"
    rc = cli.main(["validate", "inventory/example.yml", "--keep", str(keep), "--no-bench", "--timeout", "5",
                   "--json", str(tmp_path / "r.json")])
    assert rc == 3
    assert live["out"] == keep and (keep / HOST / "desired.json").is_file()
    assert live["timeout"] == 5 and "bench_hosts" not in live
    assert not any(r["id"].startswith("bench.") for r in results(tmp_path / "r.json"))


def test_engine_roundtrip_runs_on_the_captured_hosts(live, tmp_path, monkeypatch):
    def fake_roundtrip(sources, hosts):  # FAKE: it restarts the live engines
        live.update(roundtrip=(sources, hosts))
        return [Result("engine.gpu0-3.roundtrip", "engine", PASS, "the prefix from the tier", "it was", host=HOST)]

    monkeypatch.setattr(loadtest, "roundtrip", fake_roundtrip)
    rc = cli.main(["validate", "inventory/example.yml", "--no-bench", "--engine-roundtrip", "--json",
                   str(tmp_path / "r.json")])
    assert rc == 3  # gpu-a02 unreachable
    assert live["roundtrip"] == (["inventory/example.yml"], f"{HOST},kvlab-c1")
    assert "engine.gpu0-3.roundtrip" in {r["id"] for r in results(tmp_path / "r.json")}
