"""#42: the descriptors the bench worker hands to GDS carry only flags cuFile accepts, and are
still never reached through a link; a refused registration quotes cuFile's own reason.

CI has no GPU and no cuFile, so NIXL's side is a stand-in (labelled as such below) that notes
the flags of every descriptor registered as FILE, as cuFileHandleRegister would see them
(fcntl F_GETFL); the opens themselves are the worker's real ones on a real disk. The table
of accepted flags is bench_worker.CUFILE_FD_FLAGS, checked against what cuFile answered on a
GPU host (benchmarks/cufile_flags.py, kept in benchmarks/results/)."""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import tempfile
from pathlib import Path

import pytest

from kvprov import bench_worker as bw

ROOT = Path(__file__).resolve().parents[2]
PROBE_RESULT = ROOT / "benchmarks" / "results" / "cufile-flags-h200.json"
REFUSED = 180226  # "cuFileHandleRegister error, fd opened with unsupported flags: 180226" (#42, H200)


class NixlError(Exception):
    pass


class StandInAgent:
    """Stand-in for NIXL's agent (no GDS here): notes each FILE registration's descriptor flags."""

    def __init__(self, refuse: bool = False):
        self.flags, self.refuse = [], refuse

    def register_memory(self, descs, mem):
        assert mem == "FILE"
        fd = descs[0][2]
        self.flags.append(fcntl.fcntl(fd, fcntl.F_GETFL))
        if self.refuse:
            raise NixlError("NIXL_ERR_BACKEND")
        return "registered"

    def deregister_memory(self, handle):
        assert handle == "registered"


@pytest.fixture
def run_dir():
    """A 0700 run directory on a real disk (tmpfs may refuse O_DIRECT)."""
    with tempfile.TemporaryDirectory(prefix="kvprov-gds-flags-", dir="/var/tmp") as d:
        path = Path(d) / ".kvprov-bench-test-1-2"
        path.mkdir(mode=0o700)
        yield path


def bench_in(run_dir: Path, backend: str, direct: bool, agent=None) -> bw.Bench:
    bench = object.__new__(bw.Bench)
    bench.args = argparse.Namespace(direct=direct, backend=backend)
    bench.run_dir, bench.created, bench.written = str(run_dir), [], {}
    bench.run_fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    bench.size, bench.nixl_errors = bw.BLOCK, (NixlError,)
    bench.agent = agent or StandInAgent()
    return bench


def write_then_read(bench: bw.Bench, name: str = "000000_k") -> None:
    for op in ("WRITE", "READ"):
        bench.close(bench.prepare(op, 0, name))


@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize("backend", ["GDS_MT", "GDS"])
def test_every_descriptor_handed_to_gds_carries_only_flags_cufile_accepts(run_dir, backend, direct):
    bench = bench_in(run_dir, backend, direct)
    write_then_read(bench)
    writes, reads = bench.agent.flags
    for flags in (writes, reads):
        assert not flags & ~bw.CUFILE_FD_FLAGS, (
            f"{bw.flag_names(flags)}: cuFile refuses {bw.flag_names(flags & ~bw.CUFILE_FD_FLAGS, access=False)}")
        assert bool(flags & os.O_DIRECT) == direct
    assert (writes & os.O_ACCMODE, reads & os.O_ACCMODE) == (os.O_RDWR, os.O_RDONLY)
    assert bw.cleanup(bench.created) and os.listdir(run_dir) == []


def test_the_table_is_the_log_lines_flags_less_o_nofollow():
    """The table admits what cuFile registered on the H200 (O_RDWR|O_DIRECT|O_LARGEFILE) and
    refuses the descriptor of #42's log line for its O_NOFOLLOW alone."""
    assert REFUSED & ~bw.CUFILE_FD_FLAGS == os.O_NOFOLLOW
    assert bw.flag_names(REFUSED) == "O_RDWR|O_DIRECT|O_LARGEFILE|O_NOFOLLOW"
    for name in ("O_NOFOLLOW", "O_APPEND", "O_SYNC", "O_DSYNC", "O_NOATIME", "O_NONBLOCK", "O_PATH"):
        assert getattr(os, name) & ~bw.CUFILE_FD_FLAGS, name


def test_the_table_admits_nothing_cufile_refused_on_the_gpu_host():
    """benchmarks/cufile_flags.py's record from the H200: every row the table admits, cuFile
    accepted, and the worker's own two opens were among them."""
    rows = json.loads(PROBE_RESULT.read_text())["rows"]
    for row in rows:
        admitted = not row["f_getfl"] & ~bw.CUFILE_FD_FLAGS
        assert not admitted or row["accepted"], row
    assert [r["accepted"] for r in rows if r["row"].startswith("worker")] == [True, True]
    assert not next(r for r in rows if r["row"] == "+O_NOFOLLOW")["accepted"]


def test_a_link_swapped_in_for_a_written_file_is_not_read_through(run_dir, tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"the victim's")
    bench = bench_in(run_dir, "GDS_MT", True)
    bench.close(bench.prepare("WRITE", 0, "000000_k"))
    (run_dir / "000000_k").unlink()
    (run_dir / "000000_k").symlink_to(victim)
    with pytest.raises(bw.Failure, match=r"cannot open .*000000_k: it is a symbolic link .* refusing to read"):
        bench.prepare("READ", 0, "000000_k")
    assert len(bench.agent.flags) == 1  # the link was never registered


def test_another_file_renamed_over_a_written_one_is_not_read(run_dir):
    bench = bench_in(run_dir, "POSIX", False)
    bench.close(bench.prepare("WRITE", 0, "000000_k"))
    (run_dir / "other").write_bytes(b"x" * bw.BLOCK)
    os.rename(run_dir / "other", run_dir / "000000_k")
    with pytest.raises(bw.Failure, match="it is not the file this run wrote"):
        bench.prepare("READ", 0, "000000_k")


def test_a_name_that_exists_is_not_created_through(run_dir, tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"the victim's")
    (run_dir / "000000_k").symlink_to(victim)
    bench = bench_in(run_dir, "GDS_MT", False)
    with pytest.raises(bw.Failure, match="cannot open .*000000_k: File exists"):
        bench.prepare("WRITE", 0, "000000_k")
    assert victim.read_bytes() == b"the victim's"


def test_a_refused_registration_quotes_cufiles_reason(run_dir, monkeypatch, tmp_path):
    log = tmp_path / "cufile.log"
    log.write_text(
        " 05-12-2026 13:40:01:123 [pid=42 tid=42] NOTICE  cufio-drv:705 running in compatible mode\n"
        " 05-12-2026 13:40:01:456 [pid=42 tid=42] ERROR  cufio-obj:129 cuFileHandleRegister error, "
        "fd opened with unsupported flags: 180226\n")
    monkeypatch.setenv(bw.CUFILE_LOG_ENV, str(log))
    bench = bench_in(run_dir, "GDS_MT", True, StandInAgent(refuse=True))
    with pytest.raises(bw.Failure) as e:
        bench.prepare("WRITE", 0, "000000_k")
    assert str(e.value).startswith(f"GDS_MT could not register {run_dir}/000000_k (NIXL: NIXL_ERR_BACKEND); "
                                   "cuFile says: cufio-obj:129 cuFileHandleRegister error, fd opened with "
                                   "unsupported flags: 180226")
    assert bw.cleanup(bench.created)


def test_the_hint_names_the_flags_cufile_does_not_accept(tmp_path, monkeypatch):
    monkeypatch.delenv(bw.CUFILE_LOG_ENV, raising=False)
    hint = bw.cufile_hint(REFUSED, str(tmp_path))
    assert "the descriptor was opened with O_RDWR|O_DIRECT|O_LARGEFILE|O_NOFOLLOW and cuFile accepts none of " \
           "O_NOFOLLOW" in hint


@pytest.mark.parametrize("backend, logged", [("GDS_MT", True), ("GDS", True), ("POSIX", False)])
def test_the_worker_points_cufiles_log_at_a_file_of_its_own_and_removes_it(monkeypatch, tmp_path, backend, logged):
    monkeypatch.delenv(bw.CUFILE_LOG_ENV, raising=False)
    seen = []

    def stand_in_bench(*args):  # stands for NIXL's side, which would load cuFile now
        path = os.environ.get(bw.CUFILE_LOG_ENV)
        seen.append((path, path is not None and os.path.isfile(path) and os.stat(path).st_mode & 0o077 == 0))
        raise bw.Failure("stand-in: no NIXL here")
    monkeypatch.setattr(bw, "Bench", stand_in_bench)
    assert bw.main(["--dir", str(tmp_path), "--backend", backend, "--file-bytes", str(bw.BLOCK),
                    "--no-direct"]) == 1
    (path, private), = seen
    assert (path is not None, private) == (logged, logged)
    assert path is None or not os.path.exists(path)
