"""Security review #24, finding 14 (4): the bench worker runs as root in a directory on a
volume others may write. It must not check a path for a link and then use the path (a link
swapped in between is followed): the storage directory and its run directory are opened
with O_NOFOLLOW, every file without following a link (#42: created with O_CREAT|O_EXCL,
read through an O_PATH|O_NOFOLLOW reference, as cuFile refuses O_NOFOLLOW), the run
directory and the files relative to their directory's descriptor, and cleanup removes them
relative to those descriptors too. Here a check that
misses the link (os.path.islink answering False) stands for a link swapped in after the
check, and the run directory is swapped for a link mid-run. No NIXL is needed: the parts
that touch the file system run with a stand-in for the NIXL side."""

from __future__ import annotations

import argparse
import os

import pytest

from kvprov import bench_worker as bw


@pytest.fixture
def dirs(tmp_path):
    base, victim = tmp_path / "base", tmp_path / "victim"
    base.mkdir()
    victim.mkdir()
    (base / "someone-elses-file").write_bytes(b"keep me")
    return base, victim


def start(base, monkeypatch) -> tuple[dict, list, list]:
    """run() up to the NIXL side (a stand-in that notes what the victim holds, then fails)."""
    seen: list = []

    def no_nixl(*args):
        seen.append(args)
        raise bw.Failure("stand-in: no NIXL here")
    monkeypatch.setattr(bw, "Bench", no_nixl)
    args = bw.parse_args(["--dir", str(base), "--file-bytes", str(1 << 20), "--files", "2"])
    result = {"run_dir": os.path.join(args.dir, ".kvprov-bench-test-1-2")}
    created: list = []
    with pytest.raises(bw.Failure) as e:
        bw.run(args, result, created)
    return {"error": str(e.value), "result": result}, created, seen


def test_a_storage_dir_link_a_check_would_miss_is_refused_by_the_open(dirs, monkeypatch):
    base, victim = dirs
    link = base / "hostdir"
    link.symlink_to(victim)
    monkeypatch.setattr(os.path, "islink", lambda path: False)  # the link came after any check
    out, created, seen = start(link, monkeypatch)
    assert seen == [] and os.listdir(victim) == [], out
    assert out["error"].startswith(f"cannot open the storage directory {link}: ")  # ELOOP or ENOTDIR
    assert bw.cleanup(created) and os.listdir(victim) == []


def test_a_storage_dir_given_with_a_trailing_slash_is_not_followed_either(dirs, monkeypatch):
    base, victim = dirs
    (base / "hostdir").symlink_to(victim)
    out, _, seen = start(f"{base / 'hostdir'}/", monkeypatch)
    assert seen == [] and os.listdir(victim) == []
    assert out["error"] == f"storage directory {base / 'hostdir'}/ is a symbolic link (to {victim}): refusing to " \
                           "write through it; remove it"


def test_the_run_directory_is_made_and_removed_relative_to_the_storage_dir(dirs, monkeypatch):
    base, _ = dirs
    out, created, seen = start(base, monkeypatch)
    assert out["error"] == "stand-in: no NIXL here" and len(seen) == 1
    assert sorted(os.listdir(base)) == [".kvprov-bench-test-1-2", "someone-elses-file"]
    assert oct(os.stat(base / ".kvprov-bench-test-1-2").st_mode & 0o777) == "0o700"
    assert bw.cleanup(created) and os.listdir(base) == ["someone-elses-file"]


def bench_in(run_dir, created: list) -> bw.Bench:
    """A Bench of the file-system side only (no NIXL, no numpy)."""
    bench = object.__new__(bw.Bench)
    bench.args = argparse.Namespace(direct=False)
    bench.run_dir, bench.created, bench.written = str(run_dir), created, {}
    bench.run_fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    return bench


def swap_for_a_link(run_dir, victim):
    moved = run_dir.with_name(run_dir.name + "-moved")
    run_dir.rename(moved)
    run_dir.symlink_to(victim)
    return moved


def test_files_are_opened_in_the_run_directory_even_when_a_link_is_swapped_in_for_it(dirs):
    base, victim = dirs
    run_dir = base / ".kvprov-bench-test-1-2"
    run_dir.mkdir(mode=0o700)
    created: list = []
    bench = bench_in(run_dir, created)
    moved = swap_for_a_link(run_dir, victim)
    os.close(bench.open("WRITE", 0, "000000_k"))
    assert os.listdir(victim) == [] and os.listdir(moved) == ["000000_k"]
    bench.settle(["000000_k"])
    os.close(bench.open("READ", 0, "000000_k"))
    assert bw.cleanup(created) and os.listdir(moved) == [] and os.listdir(victim) == []


def test_cleanup_removes_its_own_files_not_those_a_swapped_in_link_points_at(dirs):
    base, victim = dirs
    (victim / "000000_k").write_bytes(b"the victim's")
    run_dir = base / ".kvprov-bench-test-1-2"
    run_dir.mkdir(mode=0o700)
    created: list = []
    bench = bench_in(run_dir, created)
    os.close(bench.open("WRITE", 0, "000000_k"))
    moved = swap_for_a_link(run_dir, victim)
    bw.cleanup(created)
    assert (victim / "000000_k").read_bytes() == b"the victim's"
    assert os.listdir(moved) == []


def test_a_file_planted_as_a_link_in_the_run_directory_is_not_opened(dirs):
    base, victim = dirs
    (victim / "000000_k").write_bytes(b"the victim's")
    run_dir = base / ".kvprov-bench-test-1-2"
    run_dir.mkdir(mode=0o700)
    (run_dir / "000000_k").symlink_to(victim / "000000_k")
    bench = bench_in(run_dir, [])
    with pytest.raises(bw.Failure, match="cannot open .*000000_k"):
        bench.open("READ", 0, "000000_k")
