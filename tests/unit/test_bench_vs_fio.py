"""benchmarks/bench_vs_fio.py: its summary arithmetic, and its fio script run for real on a tmp dir."""

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_vs_fio as bvf  # noqa: E402

MIB = 1 << 20


def side(write_gbps, read_gbps):
    return {op: {"gbps": g * 1.1, "engine_gbps": g} for op, g in (("write", write_gbps), ("read", read_gbps))}


def test_spread_and_ratio():
    assert bvf.spread([3.0, 1.0, 2.0, 10.0, 4.0]) == {"median": 3.0, "min": 1.0, "max": 10.0}
    assert bvf.spread([1.0, 2.0]) == {"median": 1.5, "min": 1.0, "max": 2.0}
    assert bvf.ratio(3.0, 2.0) == 1.5
    assert bvf.ratio(None, 2.0) is None and bvf.ratio(1.0, 0) is None


def test_summary_compares_medians_per_op_and_clock():
    rows = [{"worker": side(w, r), "fio": side(fw, fr)}
            for w, r, fw, fr in ((1.0, 2.0, 2.0, 2.0), (3.0, 2.0, 2.0, 1.0), (2.0, 1.0, 4.0, 1.0))]
    s = bvf.summarize(rows)
    assert set(s) == {(op, clock) for op in ("write", "read") for clock in ("engine", "data")}
    w = s["write", "engine"]
    assert w["worker"] == {"median": 2.0, "min": 1.0, "max": 3.0}
    assert w["fio"] == {"median": 2.0, "min": 2.0, "max": 4.0}
    assert w["ratio"] == 1.0
    assert w["run_ratios"] == {"median": 0.5, "min": 0.5, "max": 1.5}
    assert s["write", "data"]["worker"]["median"] == pytest.approx(2.2)
    assert s["read", "engine"]["ratio"] == 2.0 / 1.0


def test_misses_name_the_depths_and_ops_below_the_target():
    def entry(depth, write, read):
        return {"concurrency": depth, "write": {"engine": {"ratio": write}}, "read": {"engine": {"ratio": read}}}

    summary = [entry(1, 0.99, 0.95), entry(8, 0.94, None), entry(32, 1.2, 0.5)]
    assert bvf.misses(summary) == ["depth 8 write 0.94", "depth 8 read -", "depth 32 read 0.50"]
    assert bvf.misses([entry(1, 0.95, 1.0)]) == []


def test_fio_engine_follows_the_nixl_queue():
    assert bvf.fio_engine({}) == "libaio"
    assert bvf.fio_engine({"use_aio": "false"}) == "libaio"
    assert bvf.fio_engine({"use_uring": "true"}) == "io_uring"
    assert bvf.fio_engine({"use_posix_aio": True}) == "posixaio"


@pytest.mark.skipif(not shutil.which("fio"), reason="fio is not installed")
def test_fio_script_writes_then_reads_new_files_and_cleans_up():
    with tempfile.TemporaryDirectory(prefix="kvprov-fio-test-", dir="/var/tmp") as d:
        (Path(d) / "someone-elses-file").write_bytes(b"keep me")
        script = bvf.fio_script(d, "libaio", 2, MIB, 4, 30)
        assert "--fallocate=none --create_on_open=1" in script  # empty files, created in fio's clock
        assert "--rw=read --zero_buffers=1" in script  # read buffers touched before the clock
        res = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=False, timeout=120)
        assert res.returncode == 0, res.stderr
        figures = bvf.fio_figures(res.stdout, overhead=0.01)
        for op in ("write", "read"):
            f = figures[op]
            assert f["bytes"] == 4 * MIB and f["gbps"] > 0 and f["wall_seconds"] > f["seconds"]
            # the engine clock: the wall-clock less fio's own start and exit, never below its runtime
            assert f["engine_seconds"] == max(f["seconds"], f["wall_seconds"] - 0.01)
            assert f["engine_gbps"] == 4 * MIB / f["engine_seconds"] / 1e9
        assert bvf.fio_figures(res.stdout, overhead=1e6)["write"]["engine_seconds"] == figures["write"]["seconds"]
        assert [p.name for p in Path(d).iterdir()] == ["someone-elses-file"]


def test_overheads_are_the_workers_per_file_work_and_the_rate_it_caps():
    def row(write_us, read_us):
        return {"worker": {"write": {"overhead_us": write_us}, "read": {"overhead_us": read_us}}}

    o = bvf.overheads([row(100.0, 300.0), row(300.0, 200.0), row(200.0, 250.0)], 18 * MIB)
    assert o["write"] == {"us": {"median": 200.0, "min": 100.0, "max": 300.0}, "cap_gbps": 18 * MIB / 200.0 / 1e3}
    assert o["read"]["us"]["median"] == 250.0 and o["read"]["cap_gbps"] == pytest.approx(75.5, abs=0.1)
    # a worker older than the figure reports none
    assert bvf.overheads([{"worker": {"write": {}, "read": {}}}], MIB) == {"write": None, "read": None}
