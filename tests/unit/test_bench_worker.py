"""kvprov/bench_worker.py: its pure parts, its argument errors, and real runs through NIXL's
POSIX plugin in a venv built from the offline wheelhouse (as a GPU host's NIXL venv is)."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from kvprov.bench_worker import (Failure, available_memory, kv_file_bytes, mean_in_flight, nixl_params, percentiles,
                                 require_memory)

WORKER = Path(__file__).resolve().parents[2] / "kvprov" / "bench_worker.py"
MIB = 1 << 20


def run_worker(python: str, *args: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess, dict | None]:
    res = subprocess.run([python, str(WORKER), *args], capture_output=True, text=True, check=False, timeout=timeout)
    lines = res.stdout.splitlines()
    return res, json.loads(lines[0]) if lines else None


def test_kv_file_bytes_of_qwen3_8b():
    # 36 layers, page 256, 8 KV heads, head_dim 128, bf16
    assert kv_file_bytes(36, 256, 8, 128, 2, 1) == 18 * MIB
    assert kv_file_bytes(36, 256, 8, 128, 2, 2) == 9 * MIB
    assert kv_file_bytes(36, 256, 8, 128, 2, 16) == kv_file_bytes(36, 256, 1, 128, 2, 1)  # at least one head


def test_buffers_beyond_nine_tenths_of_the_available_memory_are_refused():
    require_memory(90, 5, 1, 100)  # at the limit
    require_memory(10**15, 5, 1, None)  # the kernel does not say: not judged
    with pytest.raises(Failure, match=r"^the test's buffers need 1\.00 GiB of host memory \(98 file-sized slots at "
                                      r"concurrency 32\) and 1\.11 GiB are available: lower kvprov_bench_concurrency"):
        require_memory(2**30, 98, 32, int(2**30 / 0.9) - 1)
    with open("/proc/meminfo") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))
    assert abs(available_memory() - kib * 1024) < 2**30  # this machine's, moving a little meanwhile


def test_percentiles_are_nearest_rank():
    assert percentiles(range(100, 0, -1)) == {"p50": 50, "p90": 90, "p99": 99, "max": 100}
    assert percentiles([float(x) for x in range(1, 11)]) == {"p50": 5.0, "p90": 9.0, "p99": 10.0, "max": 10.0}
    assert percentiles([3, 1, 2]) == {"p50": 2, "p90": 3, "p99": 3, "max": 3}
    assert percentiles([7]) == {"p50": 7, "p90": 7, "p99": 7, "max": 7}
    assert percentiles([]) == {"p50": None, "p90": None, "p99": None, "max": None}


def test_mean_in_flight_is_littles_law():
    # Four 10 ms I/Os in 20 ms: two in flight on average; one after the other: one.
    assert mean_in_flight([10.0, 10.0, 10.0, 10.0], 0.020) == 2.0
    assert mean_in_flight([5.0, 5.0], 0.010) == 1.0
    assert mean_in_flight([], 1.0) is None and mean_in_flight([1.0], 0) is None


def test_params_become_nixl_strings():
    assert nixl_params('{"use_aio": false, "thread_count": 32, "x": "y", "on": true}') == {
        "use_aio": "false", "thread_count": "32", "x": "y", "on": "true"}
    for bad in ('{"a": [1]}', '{"a": null}', "[1]", "{oops"):
        with pytest.raises(Failure):
            nixl_params(bad)


@pytest.mark.parametrize("args, message", [
    (["--file-bytes", "1000"], "--file-bytes 1000 must be a positive multiple of 4096"),
    (["--concurrency", "0"], "--concurrency must be positive"),
    (["--mem", "VRAM"], "the POSIX backend moves host memory only"),
    (["--params", '{"thread_count": 1.5}'], "--params thread_count: 1.5 is not a string, integer or boolean"),
])
def test_argument_errors_are_json_and_exit_1(tmp_path, args, message):
    # Rejected before NIXL is imported: any python will do.
    res, out = run_worker(sys.executable, "--dir", str(tmp_path), *args)
    assert res.returncode == 1, res.stderr
    assert out["ok"] is False and out["error"].startswith(message)
    assert out["cleaned"] is True and os.listdir(tmp_path) == []


def test_unparsable_arguments_exit_2():
    res = subprocess.run([sys.executable, str(WORKER), "--files", "8"], capture_output=True, text=True, check=False)
    assert res.returncode == 2 and res.stdout == "" and "--dir" in res.stderr


@pytest.fixture
def base():
    """A storage directory on a real disk (tmpfs may refuse O_DIRECT), with a file of someone else's."""
    with tempfile.TemporaryDirectory(prefix="kvprov-bench-test-", dir="/var/tmp") as d:
        (Path(d) / "someone-elses-file").write_bytes(b"keep me")
        yield Path(d)


def test_posix_dram_round_trip(nixl_python, base):
    res, out = run_worker(nixl_python, "--dir", str(base), "--backend", "POSIX", "--params", '{"use_aio": true}',
                          "--file-bytes", str(MIB), "--files", "8", "--concurrency", "4", "--label", "unit")
    assert res.returncode == 0, res.stderr
    assert out["ok"] is True and out["error"] is None, out
    assert (out["label"], out["backend"], out["mem"], out["params"]) == ("unit", "POSIX", "DRAM", {"use_aio": "true"})
    assert (out["file_bytes"], out["concurrency"], out["direct"]) == (MIB, 4, True)
    for op in ("write", "read"):
        assert out[op]["files"] == 8 and out[op]["bytes"] == 8 * MIB, out[op]
        assert out[op]["seconds"] > 0 and out[op]["gbps"] > 0
        lat = out[op]["lat_ms"]
        assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
        # The engine clock (open to close of every file) holds the data clock.
        assert out[op]["engine_seconds"] >= out[op]["seconds"] and out[op]["engine_gbps"] <= out[op]["gbps"]
        assert out[op]["engine_gbps"] == pytest.approx(8 * MIB / out[op]["engine_seconds"] / 1e9, rel=1e-3)
        assert 0 < out[op]["in_flight"] <= 4  # never more than --concurrency transfers at once
    assert out["verified"] is True and out["compat_mode"] is None
    run_dir = Path(out["run_dir"])
    assert run_dir.parent == base and run_dir.name.startswith(".kvprov-bench-")
    assert out["cleaned"] is True and not run_dir.exists()
    assert os.listdir(base) == ["someone-elses-file"]
    assert (base / "someone-elses-file").read_bytes() == b"keep me"


def test_missing_storage_dir_fails_clearly(nixl_python, base):
    res, out = run_worker(nixl_python, "--dir", str(base / "absent"), "--file-bytes", str(MIB), "--files", "2")
    assert res.returncode == 1
    assert out["ok"] is False and out["error"] == f"storage directory {base / 'absent'} does not exist"
    assert out["write"] is None and out["cleaned"] is True
    assert os.listdir(base) == ["someone-elses-file"]


def test_a_link_planted_as_the_storage_dir_is_refused(nixl_python, base):
    victim = base / "victim"
    victim.mkdir()
    link = base / "hostdir"
    link.symlink_to(victim)
    res, out = run_worker(nixl_python, "--dir", str(link), "--file-bytes", str(MIB), "--files", "2")
    assert res.returncode == 1
    assert out["error"] == f"storage directory {link} is a symbolic link (to {victim}): refusing to write through it; " \
                           "remove it"
    assert os.listdir(victim) == []


def test_a_depth_whose_buffers_exceed_the_memory_fails_clearly_before_any_file(nixl_python, base):
    res, out = run_worker(nixl_python, "--dir", str(base), "--file-bytes", str(64 * MIB), "--files", "4",
                          "--concurrency", "2000")
    assert res.returncode == 1
    assert out["error"].startswith("the test's buffers need 375.12 GiB of host memory (6002 file-sized slots at "
                                   "concurrency 2000) and "), out
    assert out["write"] is None and out["cleaned"] is True
    assert os.listdir(base) == ["someone-elses-file"]


def test_missing_plugin_is_named(nixl_python, base):
    """No CUDA here: GDS_MT cannot load, and the error says so on one line."""
    if Path("/proc/driver/nvidia").exists():
        pytest.skip("this machine has an NVIDIA driver: GDS_MT may load")
    res, out = run_worker(nixl_python, "--dir", str(base), "--backend", "GDS_MT", "--file-bytes", str(MIB))
    assert res.returncode == 1
    assert out["error"].startswith("NIXL cannot create the GDS_MT backend with {}: ")
    assert "libcufile.so.0" in out["error"] and "\n" not in out["error"]
    assert out["compat_mode"] is True and out["cleaned"] is True
    assert os.listdir(base) == ["someone-elses-file"]


def test_sigterm_mid_run_still_reports_and_cleans(nixl_python, base):
    proc = subprocess.Popen([nixl_python, str(WORKER), "--dir", str(base), "--file-bytes", str(MIB),
                             "--files", "1000", "--seconds", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 60
    while not any(p.name != "someone-elses-file" and any(p.iterdir()) for p in base.iterdir()):
        assert proc.poll() is None and time.monotonic() < deadline, "the worker wrote no file"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    stdout, _ = proc.communicate(timeout=60)
    out = json.loads(stdout)
    assert proc.returncode == 1
    assert out["ok"] is False and out["error"] == "stopped by SIGTERM" and out["cleaned"] is True
    assert os.listdir(base) == ["someone-elses-file"]


def test_a_full_volume_fails_clearly_and_leaves_nothing(nixl_python, tmp_path):
    """A real 3 MiB tmpfs: the 4th 1 MiB file cannot be written."""
    small = tmp_path / "small"
    small.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "kvprov-test", str(small)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        (small / "someone-elses-file").write_bytes(b"keep me")
        res, out = run_worker(nixl_python, "--dir", str(small), "--backend", "POSIX", "--no-direct",
                              "--file-bytes", str(MIB), "--files", "8", "--concurrency", "2")
        assert res.returncode == 1, res.stderr
        assert "No space left on device" in out["error"], out["error"]
        assert out["cleaned"] is True and os.listdir(small) == ["someone-elses-file"]
    finally:
        subprocess.run(["umount", str(small)], check=True)


def _trace(out: dict, op: str) -> list[dict]:
    """The --trace records of a pass, by file index (µs from the pass's start; None: not reached)."""
    rows = sorted(out[op]["trace"])
    keys = ("index", "prepared", "armed", "submitted", "done", "closed")
    return [dict(zip(keys, row, strict=True)) for row in rows]


@pytest.mark.parametrize("depth", [1, 3])
def test_the_next_file_is_prepared_before_a_transfer_starts(nixl_python, base, depth):
    """The per-file work overlaps the I/O: from the worker's own records, each file was opened and
    registered before the previous file's transfer was submitted (so before it completed), and it
    is closed after its own transfer; the window is never exceeded."""
    res, out = run_worker(nixl_python, "--dir", str(base), "--file-bytes", str(MIB), "--files", "8",
                          "--concurrency", str(depth), "--trace")
    assert res.returncode == 0, res.stderr
    for op in ("write", "read"):
        files = _trace(out, op)
        assert [f["index"] for f in files] == list(range(8))
        for f in files:
            assert f["prepared"] <= f["armed"] <= f["submitted"] <= f["done"] <= f["closed"], f
        for prev, f in zip(files, files[1:]):
            assert f["prepared"] <= prev["submitted"] < prev["done"], (op, prev, f)
            assert f["submitted"] >= prev["submitted"]  # in order: the files done are the first ones
        for f in files:  # transfers in flight when f was submitted (f included)
            assert sum(g["submitted"] <= f["submitted"] < g["done"] for g in files) <= depth, (op, files)
        if depth == 1:  # one at a time: the next is submitted once the previous is done
            assert all(f["submitted"] >= prev["done"] for prev, f in zip(files, files[1:]))


def test_the_per_file_overhead_is_reported_with_the_rate_it_caps(nixl_python, base):
    res, out = run_worker(nixl_python, "--dir", str(base), "--file-bytes", str(MIB), "--files", "4",
                          "--concurrency", "2")
    assert res.returncode == 0, res.stderr
    for op in ("write", "read"):
        p = out[op]
        assert "trace" not in p  # only with --trace
        assert p["overhead_us"] > 0
        assert p["overhead_cap_gbps"] == pytest.approx(MIB / p["overhead_us"] / 1e3, rel=1e-2)
        line = (f"bench: {op} 4 files, engine clock {p['engine_gbps']} GB/s, data {p['gbps']} GB/s, "
                f"{p['in_flight']} in flight; the worker's own work {p['overhead_us']} us a file "
                f"(caps it at {p['overhead_cap_gbps']} GB/s)")
        assert line in res.stderr.splitlines()


def test_files_prepared_but_not_started_by_the_deadline_are_closed_and_removed(nixl_python, base):
    res, out = run_worker(nixl_python, "--dir", str(base), "--file-bytes", str(MIB), "--files", "3000",
                          "--concurrency", "2", "--seconds", "0.3", "--trace")
    assert res.returncode == 0, res.stderr
    files = _trace(out, "write")
    moved = [f for f in files if f["done"] is not None]
    assert 0 < len(moved) == out["write"]["files"] < len(files) < 3000
    assert moved == files[:len(moved)]  # the files done are the first ones
    assert all(f["submitted"] is None and f["closed"] is not None for f in files[len(moved):])
    assert out["read"]["files"] <= len(moved) and out["verified"] is True
    assert out["cleaned"] is True and os.listdir(base) == ["someone-elses-file"]


def test_the_read_back_check_finds_any_changed_word():
    """Bench.check (DRAM), without NIXL: a slot read back as written passes; a changed stamp (the
    first word of a block), a changed word elsewhere, or another file's stamps do not."""
    np = pytest.importorskip("numpy")
    import threading

    from kvprov.bench_worker import Bench

    bench = object.__new__(Bench)
    bench.np, bench.cuda, bench.size, bench.blocks, bench.base = np, None, 4 * 4096, 4, 12345
    bench.block_ids = np.arange(4, dtype=np.uint64)
    bench.expect = np.frombuffer(np.random.default_rng(1).bytes(2 * bench.size), np.uint8).copy()  # 2 write slots
    bench.src = (0, bench.expect)
    bench.dst = (0, np.zeros(2 * bench.size, np.uint8))
    bench.slot_of, bench.local_check = {7: 1, 8: 1}, threading.local()
    bench.stamp(1, 7)  # file 7 written from write slot 1
    written = bench.expect[bench.size:].copy()
    bench.stamp(1, 9)  # the slot reused for a later file: its stamps are not file 7's
    read = bench.dst[1][bench.size:]  # read slot 1
    read[:] = written
    assert bench.check(7, 1) is True
    for offset in (0, 8, 4096, 4 * 4096 - 1):  # a stamp, the word after it, the next stamp, the last byte
        read[:] = written
        read[offset] ^= 1
        assert bench.check(7, 1) is False, offset
    read[:] = written
    assert bench.check(8, 1) is False  # file 8's stamps expected from the same slot: not what was read
