"""Benchmarks that cannot rot (#41 item 5): each benchmark the docs name that needs no lab
runs here in its smallest form, for real, end to end (one directory, one round, a few files):
its figures come out and its own pass/fail verdict can fail (loadtest_vs_reference.py runs in
tests/lab/test_5_engine.py, against the lab's engine). Figures from these runs mean nothing: they only prove the scripts still work."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
STANDIN = ROOT / "tests/fixtures/standins/cufile_standin.c"


def bench(script: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


@pytest.fixture
def disk_dir(tmp_path_factory):
    """A directory on a real disk (tmpfs may refuse O_DIRECT), not yet created: the benchmarks make
    it and must remove it."""
    parent = Path(os.environ.get("KVPROV_BENCH_DIR", "/var/tmp"))
    d = parent / f"kvprov-bench-smallest-{os.getpid()}"
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_fs_block_size_on_a_local_directory(tmp_path):
    """vLLM's fs-tier I/O pattern, two block sizes, one round, on a local directory through `sh -c`
    (the script's --ssh): a figure per block size, and nothing of it left behind."""
    out = tmp_path / "figures.json"
    r = bench("fs_block_size.py", "--ssh", "sh -c", "--mount", str(tmp_path), "--blocks", "4,8",
              "--total-mib", "1", "--rounds", "1", "--threads", "2", "--json", str(out))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "not NFS" in r.stderr  # a local directory is said to be one
    rows = json.loads(out.read_text())["rows"]
    assert [row["block_tokens"] for row in rows] == [4, 8]
    assert all(row["samples"] == 1 and row["write_mib_s"] > 0 and row["read_mib_s"] > 0 for row in rows)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["figures.json"]


def test_bench_vs_fio_smallest(nixl_python, disk_dir):
    """The acceptance worker (real NIXL POSIX) beside fio, depth 1, 2 files of 1 MiB, one round."""
    if not shutil.which("fio"):
        pytest.fail("fio is not installed (scripts/install-deps installs it)")
    disk_dir.mkdir()
    out = disk_dir.parent / f"{disk_dir.name}.json"
    try:
        r = bench("bench_vs_fio.py", "--dir", str(disk_dir), "--python", nixl_python, "--files", "2",
                  "--file-bytes", str(1 << 20), "--concurrency", "1", "--repeat", "1", "--json", str(out))
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]  # a failed worker or fio run exits 1
        figures = json.loads(out.read_text())
    finally:
        out.unlink(missing_ok=True)
    [run] = figures["runs"]
    assert run["concurrency"] == 1 and all(run[side][op]["gbps"] > 0 for side in ("worker", "fio")
                                           for op in ("write", "read")), run
    assert figures["summary"][0]["write"]["engine"]["ratio"] is not None
    assert list(disk_dir.iterdir()) == []  # it removes what it wrote


def test_gpu_nixl_without_a_gpu(nixl_python, disk_dir):
    """The GPU benchmark's smallest form on a machine without a GPU (--no-gpu): the POSIX path
    through the worker and the fio baseline, 2 files, depth 1; the directory it made is removed."""
    out = disk_dir.parent / f"{disk_dir.name}.json"
    try:
        r = bench("gpu_nixl.py", "--dir", str(disk_dir), "--python", nixl_python, "--files", "2",
                  "--file-bytes", str(1 << 20), "--concurrency", "1", "--no-gpu", "--json", str(out))
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        report = json.loads(out.read_text())
    finally:
        out.unlink(missing_ok=True)
    [run] = report["runs"]
    assert run["ok"] and run["backend"] == "POSIX" and run["verified"] is True, run
    assert report["baseline"][0]["concurrency"] == 1 and report["baseline"][0]["write"]["gbps"] > 0
    assert "--no-gpu: no GDS run" in report["notes"]
    assert not disk_dir.exists()


@pytest.mark.skipif(Path("/dev/nvidia0").exists(), reason="a GPU is present: GDS may work here")
def test_gpu_nixl_with_its_gds_runs_and_no_gpu_fails(nixl_python, disk_dir):
    """Without --no-gpu on a machine without a GPU the GDS runs fail, and the benchmark says so
    and exits 1 (it used to note "nvidia-fs driver loaded" over failed runs)."""
    r = bench("gpu_nixl.py", "--dir", str(disk_dir), "--python", nixl_python, "--files", "1",
              "--file-bytes", str(1 << 20), "--concurrency", "1")
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    assert "GDS_MT VRAM depth 1" in r.stdout and "failed:" in r.stdout
    assert "nvidia-fs driver loaded" not in r.stdout


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    """The labelled libcufile stand-in (tests/fixtures/standins/cufile_standin.c), built twice: as
    the real cuFile behaved on the H200, and refusing O_DIRECT (which the worker needs)."""
    d = tmp_path_factory.mktemp("cufile-standin")
    libs = {}
    for name, refused in (("h200", None), ("no-direct", "O_DIRECT")):
        lib = d / f"libcufile-{name}.so"
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(STANDIN),
                        *([f"-DREFUSED={refused}"] if refused else [])], check=True, capture_output=True)
        libs[name] = str(lib)
    return libs


def test_cufile_flags_against_the_standin(standin, disk_dir):
    """Every probe row, each descriptor's flags as the kernel reports them, the stand-in's answer
    and its log line; the worker's table agrees with a cuFile that refuses what the H200's did."""
    out = disk_dir.parent / f"{disk_dir.name}.json"
    try:
        r = bench("cufile_flags.py", "--dir", str(disk_dir), "--library", standin["h200"], "--json", str(out))
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        rows = {row["row"]: row for row in json.loads(out.read_text())["rows"]}
    finally:
        out.unlink(missing_ok=True)
    assert len(rows) == 12
    refused = {name for name, row in rows.items() if not row["accepted"]}
    assert refused == {"+O_NOFOLLOW", "+O_APPEND", "+O_NONBLOCK"}
    assert all(rows[n]["log"] and "unsupported file open flags" in rows[n]["log"][-1] for n in refused)
    assert rows["worker READ: O_PATH|O_NOFOLLOW, /proc/self/fd/N O_RDONLY|O_DIRECT"]["flags"] == \
        "O_RDONLY|O_DIRECT|O_LARGEFILE"
    assert not disk_dir.exists()


def test_cufile_flags_fails_when_cufile_refuses_what_the_worker_opens(standin, disk_dir):
    r = bench("cufile_flags.py", "--dir", str(disk_dir), "--library", standin["no-direct"])
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    assert "the table admits flags cuFile refuses" in r.stdout and "cuFile refuses the worker's opens" in r.stdout


def test_cufile_flags_without_cufile_says_so(disk_dir):
    r = bench("cufile_flags.py", "--dir", str(disk_dir), "--library", "libcufile-absent.so.0")
    assert r.returncode == 2 and "cannot load libcufile-absent.so.0" in r.stderr and "LD_LIBRARY_PATH" in r.stderr
    assert not disk_dir.exists()


def test_every_benchmark_the_docs_name_exists_and_runs_in_ci():
    """The benchmarks the README and docs/ name are files, and each runs in one of the suite's
    smallest-form tests (a benchmark added to the docs without one fails here)."""
    import re

    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    named = set(re.findall(r"benchmarks/(\w+\.py)", "".join(p.read_text() for p in docs)))
    retired = {"audit.py", "deploy.py"}  # named as former benchmarks: scale.py measures what they did
    runners = "".join(p.read_text() for p in (ROOT / "tests/unit/test_benchmarks_smallest.py",
                                               ROOT / "tests/unit/test_mutation_smallest.py",
                                               ROOT / "tests/lab/test_9_benchmarks.py",
                                               ROOT / "tests/lab/test_5_engine.py"))
    assert named - retired, "the docs name no benchmark"
    for name in sorted(named - retired):
        assert (BENCH / name).is_file(), f"the docs name benchmarks/{name}, which does not exist"
        assert re.search(rf'["/]{re.escape(name)}"', runners), f"benchmarks/{name} runs in no smallest-form test"
    assert not any((BENCH / name).exists() for name in retired)
