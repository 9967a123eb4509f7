"""kvprov-evict (roles/engine/files/kvprov-evict.py) at its edges (#41 item 1: the evictor under
mutation): the depth limit, entries that vanish or cannot be opened mid-scan (staged for real
where a real race can be staged, by a failing call where only an unprivileged user or another
client would see one), links in the marker's, lease's and siblings' places, every descriptor it
opens closed again, the marks compared at their exact values (the volume's figures and the
clock fixed), and what it says in the journal, word for word."""

from __future__ import annotations

import dataclasses
import errno
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.unit.test_evict import KIB, T0, du, ev, fill

NOW = 1_800_000_000  # the clock, where a test fixes it


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def statvfs(used: int, size: int, inodes_used: int = 0, inodes: int = 0) -> os.statvfs_result:
    """A volume's figures as statvfs gives them (1-byte blocks): used, used + available."""
    return os.statvfs_result((1, 1, size, size - used, size - used, inodes, inodes - inodes_used,
                              inodes - inodes_used, 0, 255))


def fixed_clock(monkeypatch) -> None:
    monkeypatch.setattr(ev, "time", SimpleNamespace(time=lambda: NOW, strftime=time.strftime,
                                                    localtime=time.localtime))


class Listing:
    """os.scandir with its entries in name order (so what comes after an entry is known), and
    `then` run once between the listing and the first stat: a race staged for real."""

    def __init__(self, real, fd, then):
        self.real, self.fd, self.then = real, fd, then

    def __enter__(self):
        with self.real(self.fd) as it:
            entries = sorted(it, key=lambda e: e.name)
        self.then()
        return iter(entries)

    def __exit__(self, *exc):
        return False


def listing(monkeypatch, then=lambda: None) -> None:
    real, once = os.scandir, [then]
    monkeypatch.setattr(os, "scandir", lambda fd: Listing(real, fd, once.pop() if once else (lambda: None)))


def scanned(d: Path) -> ev.Scan:
    root = ev.open_root(str(d))
    try:
        return ev.scan(root)
    finally:
        os.close(root)


# ---------------------------------------------------------------------------- pure

def test_the_records_it_makes_are_immutable_values(tmp_path):
    """What scan(), Volume.of() and need() hand on cannot be changed by whoever holds them."""
    fill(tmp_path / "ns", 1)
    [e] = scanned(tmp_path / "ns").files
    vol = ev.Volume.of(os.statvfs(tmp_path))
    want = ev.need(ev.Volume(950, 1000, 0, 0), 950, 1, 90, 80, 0)
    for record, name in ((e, "size"), (vol, "used"), (want, "bytes")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(record, name, 0)
    assert len({e, ev.Entry(e.last_use, e.size, e.parts)}) == 1  # hashable, equal by value
    assert ev.Scan().skipped == 0 and ev.Run() == ev.Run(0, 0, None, None)


def test_the_volume_is_counted_in_fragments_and_in_blocks_only_without_them():
    frag = ev.Volume.of(os.statvfs_result((1 << 20, 4096, 100, 40, 30, 50, 20, 20, 0, 255)))
    assert frag == ev.Volume(60 * 4096, 90 * 4096, 30, 50)  # f_frsize, not the 1 MiB f_bsize
    block = ev.Volume.of(os.statvfs_result((8192, 0, 100, 40, 30, 50, 20, 20, 0, 255)))
    assert block == ev.Volume(60 * 8192, 90 * 8192, 30, 50)


def test_the_directorys_own_excess_is_whole_bytes_of_an_odd_limit():
    n = ev.need(ev.Volume(0, 1000, 0, 0), 999, 0, 85, 70, 999)  # 70 % of 999 is 699.3: 699 whole bytes
    assert n.bytes == 300 and isinstance(n.bytes, int)


def test_choose_counts_what_it_freed_from_nothing():
    files = [ev.Entry(10, 9, ("a",)), ev.Entry(20, 9, ("b",)), ev.Entry(30, 9, ("c",))]
    assert [f.parts for f in ev.choose(files, ev.Need(10, 0, ("r",)))] == [("a",), ("b",)]  # 9 < 10: two
    assert [f.parts for f in ev.choose(files, ev.Need(9, 0, ("r",)))] == [("a",)]


def test_human_names_every_unit():
    assert [ev.human(5 * 1024 ** k) for k in range(5)] == ["5 B", "5.0 KiB", "5.0 MiB", "5.0 GiB", "5.0 TiB"]


def test_the_usage_names_the_evictor_and_the_help_says_what_it_does(capsys):
    with pytest.raises(SystemExit):
        ev.main([])
    assert capsys.readouterr().err.startswith("usage: kvprov-evict ")
    with pytest.raises(SystemExit) as e:
        ev.main(["--help"])
    assert e.value.code == 0
    help = " ".join(capsys.readouterr().out.split())
    assert "Usage: kvprov-evict [--high-percent H]" in help and "One evictor at a time" not in help


@pytest.mark.parametrize("args", [["--high-percent", "101"], ["--high-percent", "80", "--low-percent", "80"],
                                  ["--low-percent", "-1"], ["--keep-minutes", "-1"], ["--retire-days", "-1"]])
def test_marks_out_of_range_are_refused(tmp_path, args):
    with pytest.raises(SystemExit) as e:
        ev.main(args + [str(tmp_path)])
    assert e.value.code == 2


def test_the_highest_marks_in_range_are_taken(tmp_path, capsys):
    assert ev.main(["--high-percent", "100", "--low-percent", "99", "--max-bytes", "10", str(tmp_path)]) == 0
    assert "under the marks (100%/99%)" in capsys.readouterr().out


# ---------------------------------------------------------------------------- the scan

def test_the_scan_goes_32_directories_deep_and_no_deeper(tmp_path):
    d = tmp_path / "ns"
    deep = d
    for i in range(33):
        deep = deep / f"d{i}"
        fill(deep, 1, prefix="at", size=KIB)
    found = scanned(d)
    depths = sorted(len(f.parts) - 1 for f in found.files)  # directories above each file, below DIR
    assert depths == list(range(1, 33)) and found.skipped == 0
    root = ev.open_root(str(d))
    try:
        assert len(ev.scan(root, depth=2).files) == 2  # a lower limit: the files 1 and 2 levels down
    finally:
        os.close(root)


def test_links_fifos_and_sockets_are_neither_counted_nor_entered_nor_skipped(tmp_path):
    d, outside = tmp_path / "ns", tmp_path / "outside"
    own = fill(d, 2)
    fill(outside, 2)
    (d / "to-file").symlink_to(outside / "f000")
    (d / "to-dir").symlink_to(outside, target_is_directory=True)
    (d / "dangling").symlink_to(tmp_path / "nowhere")
    os.mkfifo(d / "fifo")
    found = scanned(d)
    assert sorted(f.parts for f in found.files) == [(p.name,) for p in own]
    assert found.skipped == 0  # nothing it tried to open and could not: it never tries


def test_its_own_marker_and_lease_at_the_top_are_not_counted_but_files_of_those_names_below_are(tmp_path):
    d = tmp_path / "ns"
    fill(d, 1)
    for name in (".kvprov-in-use", ".kvprov-evict.lock"):
        (d / name).write_bytes(b"x" * KIB)
        (d / "sub").mkdir(exist_ok=True)
        (d / "sub" / name).write_bytes(b"x" * KIB)
    assert sorted(f.parts for f in scanned(d).files) == [
        ("f000",), ("sub", ".kvprov-evict.lock"), ("sub", ".kvprov-in-use")]


def test_an_entry_vanishing_between_the_listing_and_its_stat_is_skipped_and_the_rest_scanned(tmp_path, monkeypatch,
                                                                                           capsys):
    d = tmp_path / "ns"
    files = fill(d, 4)
    listing(monkeypatch, then=files[0].unlink)  # f000 listed, then removed by someone else
    found = scanned(d)
    assert sorted(f.parts[0] for f in found.files) == ["f001", "f002", "f003"] and found.skipped == 1
    monkeypatch.undo()
    fill(d, 1)
    limit = 10 * du(d)
    listing(monkeypatch, then=files[0].unlink)
    assert ev.main(["--max-bytes", str(limit), str(d)]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("in 3 files (1 entries skipped: vanished or unreadable)")


def test_a_directory_it_cannot_open_or_list_is_skipped_and_the_rest_scanned(tmp_path, monkeypatch):
    """An unprivileged evictor meets directories that are not its own (EACCES) and, on NFS, stale
    ones (ESTALE); the tests run as any user, so the failing call is staged."""
    d = tmp_path / "ns"
    fill(d / "a-closed", 2)
    fill(d / "b-stale", 2)
    fill(d / "c-fine", 2)
    own = fill(d, 2, prefix="z")
    stale = (d / "b-stale").stat().st_ino
    real_open, real_scandir = os.open, os.scandir

    def opening(path, flags, mode=0o777, *, dir_fd=None):
        if path == "a-closed":
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_open(path, flags, mode, dir_fd=dir_fd)

    def scanning(fd):
        if os.fstat(fd).st_ino == stale:
            raise OSError(errno.ESTALE, "Stale file handle")
        return Listing(real_scandir, fd, lambda: None)

    monkeypatch.setattr(os, "open", opening)
    monkeypatch.setattr(os, "scandir", scanning)
    found = scanned(d)
    assert sorted(f.parts for f in found.files) == [("c-fine", "f000"), ("c-fine", "f001")] + [(p.name,) for p in own]
    assert found.skipped == 2


# ---------------------------------------------------------------------------- removing

def test_a_file_replaced_by_a_link_after_the_scan_is_left_and_its_target_untouched(tmp_path):
    d, outside = tmp_path / "ns", tmp_path / "outside"
    files = fill(d, 2)
    target = fill(outside, 1, t0=T0 - 10**6)[0]  # older than the file it stands in for
    root = ev.open_root(str(d))
    try:
        found = ev.scan(root)
        files[0].unlink()
        files[0].symlink_to(target)
        run = ev.evict(root, found.files, ev.Need(found.bytes, 0, ("test",)))
    finally:
        os.close(root)
    assert files[0].is_symlink() and target.exists() and not files[1].exists()
    assert (run.removed, run.freed) == (1, next(f.size for f in found.files if f.parts == ("f001",)))


def test_a_run_counts_the_bytes_it_gave_back_and_the_times_of_the_first_and_last_file(tmp_path):
    d = tmp_path / "ns"
    files = fill(d / "a" / "b", 3) + fill(d, 2, prefix="g", t0=T0 + 30)
    blocks = {p.name: p.stat().st_blocks * 512 for p in files}
    root = ev.open_root(str(d))
    try:
        found = ev.scan(root)
        run = ev.evict(root, found.files, ev.Need(found.bytes, 0, ("test",)))
        assert ev.evict(root, [], ev.Need(10, 0, ("test",))) == ev.Run(0, 0, None, None)
    finally:
        os.close(root)
    assert run == ev.Run(5, sum(blocks.values()), T0, T0 + 120)
    assert not any(p.exists() for p in files) and (d / "a" / "b").is_dir()


def test_every_descriptor_it_opens_is_closed(tmp_path, capsys):
    """Nested files removed, a sibling retired (with a link and an unmarked one beside it), the
    lease and the marker refused as links, and the lease busy: the process's descriptors are
    what they were (a leaked lease descriptor would also keep the lock held)."""
    kv = tmp_path / "kv"
    new, old = kv / "m-0000000000aa", kv / "m-0000000000bb"
    fill(new / "x" / "y", 3)
    fill(old / "z", 2)
    (old / ev.IN_USE).touch()
    os.utime(old / ev.IN_USE, (0, 0))
    (kv / "m-0000000000cc").symlink_to(old)
    fill(kv / "m-0000000000dd", 1)
    before = fds()
    assert ev.main(["--max-bytes", "1", "--retire-days", "1", str(new)]) == 0
    assert fds() == before and not list((old / "z").iterdir()) and not list((new / "x" / "y").iterdir())
    assert ev.main(["--dry-run", "--max-bytes", "1", "--retire-days", "1", str(new)]) == 0
    assert fds() == before
    (new / ".kvprov-evict.lock").unlink()
    (new / ".kvprov-evict.lock").symlink_to(tmp_path / "nowhere")
    assert ev.main(["--max-bytes", "1", str(new)]) == 1
    assert fds() == before
    (new / ".kvprov-evict.lock").unlink()
    holder = hold(new / ".kvprov-evict.lock")
    before = fds()  # with the pipe to the holder
    try:
        capsys.readouterr()
        assert ev.main(["--max-bytes", "1", str(new)]) == 0  # busy: returns 0, not None
        assert capsys.readouterr().out == (f"{new}: another evictor holds the lease (.kvprov-evict.lock): nothing "
                                           "done, the next run tries again\n")
        assert fds() == before
    finally:
        holder.kill()
        holder.wait()


def hold(lease: Path) -> subprocess.Popen:
    """Another process holding the lock on `lease` until killed."""
    p = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], "
                          "os.O_RDWR | os.O_CREAT, 0o600); fcntl.lockf(fd, fcntl.LOCK_EX); print('held', flush=True); "
                          "time.sleep(60)", str(lease)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def test_a_regular_file_given_as_the_directory_is_refused(tmp_path, capsys):
    f = fill(tmp_path, 1)[0]
    assert ev.main(["--max-bytes", "1", str(f)]) == 1
    assert "cannot open the directory without following a link: Not a directory" in capsys.readouterr().err
    assert f.read_bytes() == b"\1" * 64 * KIB


# ---------------------------------------------------------------------------- the marker and retiring

def test_every_run_touches_the_marker_by_its_name_and_a_dry_run_does_not(tmp_path):
    d = tmp_path / "ns"
    fill(d, 1)
    marker = d / ".kvprov-in-use"
    marker.touch()
    os.utime(marker, (T0, T0))
    assert ev.main(["--dry-run", "--max-bytes", "1", str(d)]) == 0
    assert marker.stat().st_mtime == T0
    assert ev.main(["--max-bytes", str(10**12), str(d)]) == 0
    assert marker.stat().st_mtime > time.time() - 60
    (d / "fresh").mkdir()
    ev.main(["--max-bytes", str(10**12), str(d / "fresh")])
    assert oct((d / "fresh" / ".kvprov-in-use").stat().st_mode & 0o777) == "0o600"  # created by it: 0600


def test_a_link_in_the_markers_place_is_not_followed_warned_and_the_run_goes_on(tmp_path, capsys):
    d, outside = tmp_path / "ns", tmp_path / "outside"
    files = fill(d, 2)
    victim = fill(outside, 1)[0]
    (d / ".kvprov-in-use").symlink_to(victim)
    assert ev.main(["--max-bytes", "1", str(d)]) == 0
    out = capsys.readouterr().out
    assert f"<4>{d}: cannot touch .kvprov-in-use: " in out.splitlines()[0]
    assert victim.stat().st_mtime == T0 and not any(p.exists() for p in files)


def test_without_retire_days_no_sibling_is_retired(tmp_path):
    kv = tmp_path / "kv"
    new, old = kv / "m-0000000000aa", kv / "m-0000000000bb"
    fill(new, 1)
    stale = fill(old, 2)
    (old / ".kvprov-in-use").touch()
    os.utime(old / ".kvprov-in-use", (0, 0))  # no evictor for 56 years
    assert ev.main(["--max-bytes", str(10**12), str(new)]) == 0
    assert all(p.exists() for p in stale)


def retire_layout(kv: Path, age: float) -> tuple[Path, Path, list[Path]]:
    new, old = kv / "m-0000000000aa", kv / "m-0000000000bb"
    fill(new, 1)
    files = fill(old, 2)
    (old / ".kvprov-in-use").touch()
    os.utime(old / ".kvprov-in-use", (age, age))
    return new, old, files


def test_a_sibling_is_retired_only_once_its_marker_is_older_than_the_retire_days_exactly(tmp_path, monkeypatch, capsys):
    fixed_clock(monkeypatch)
    new, old, files = retire_layout(tmp_path / "a", NOW - 10 * 86400)  # exactly 10 days: not over
    assert ev.main(["--retire-days", "10", str(new)]) == 0
    assert all(p.exists() for p in files)
    new, old, files = retire_layout(tmp_path / "b", NOW - 10 * 86400 - 5)  # 5 s over 10 days
    assert ev.main(["--retire-days", "10", str(new)]) == 0
    assert not any(p.exists() for p in files)
    assert f"{old}: an old namespace" in capsys.readouterr().out


def test_retiring_keeps_the_guard_time_in_minutes(tmp_path, monkeypatch, capsys):
    fixed_clock(monkeypatch)
    new, old, files = retire_layout(tmp_path / "kv", 0)
    os.utime(files[0], (NOW - 10 * 60 - 5, NOW - 10 * 60 - 5))  # 5 s past a 10-minute guard: goes
    os.utime(files[1], (NOW - 5 * 60, NOW - 5 * 60))  # 5 minutes ago: kept
    assert ev.main(["--retire-days", "1", "--keep-minutes", "10", str(new)]) == 0
    assert [p.exists() for p in files] == [False, True]
    assert "removed 1 of 2 files" in capsys.readouterr().out


def test_a_sibling_whose_marker_is_a_link_to_an_old_file_is_not_retired(tmp_path):
    kv = tmp_path / "kv"
    new, old, files = retire_layout(kv, 0)
    (old / ".kvprov-in-use").unlink()
    ancient = fill(tmp_path / "outside", 1, t0=0)[0]
    (old / ".kvprov-in-use").symlink_to(ancient)
    assert ev.main(["--retire-days", "1", str(new)]) == 0
    assert all(p.exists() for p in files)


def test_a_sibling_whose_lease_is_a_link_is_warned_about_and_kept(tmp_path, capsys):
    new, old, files = retire_layout(tmp_path / "kv", 0)
    (old / ".kvprov-evict.lock").symlink_to(tmp_path / "nowhere")
    assert ev.main(["--retire-days", "1", str(new)]) == 0
    assert f"<4>{old}: cannot take its lease: " in capsys.readouterr().out
    assert all(p.exists() for p in files)


def test_a_sibling_that_cannot_be_entered_does_not_stop_the_next_one_being_retired(tmp_path):
    kv = tmp_path / "kv"
    new, old, files = retire_layout(kv, 0)  # m-...bb
    (kv / "m-000000000000").symlink_to(tmp_path, target_is_directory=True)  # sorted first, a link: not entered
    assert ev.main(["--retire-days", "1", str(new)]) == 0
    assert not any(p.exists() for p in files)


def test_a_parent_it_cannot_open_is_warned_about(tmp_path, monkeypatch, capsys):
    new, old, files = retire_layout(tmp_path / "kv", 0)
    real_open = os.open

    def opening(path, flags, mode=0o777, *, dir_fd=None):
        if path == str(tmp_path / "kv"):
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", opening)
    assert ev.main(["--retire-days", "1", str(new)]) == 0
    assert f"<4>{tmp_path / 'kv'}: cannot open it to retire old namespaces: Permission denied" in capsys.readouterr().out
    assert all(p.exists() for p in files)


# ---------------------------------------------------------------------------- the run's figures and words

def test_the_guard_time_is_minutes_and_a_file_used_at_its_edge_is_kept(tmp_path, monkeypatch, capsys):
    fixed_clock(monkeypatch)
    d = tmp_path / "ns"
    files = fill(d, 4)
    os.utime(files[1], (NOW - 10 * 60 - 5, NOW - 10 * 60 - 5))  # 5 s past the guard: goes
    os.utime(files[2], (NOW - 10 * 60, NOW - 10 * 60))  # at the guard's edge exactly: kept
    os.utime(files[3], (NOW - 5 * 60, NOW - 5 * 60))  # 5 minutes ago: kept
    assert ev.main(["--max-bytes", "1", "--keep-minutes", "10", str(d)]) == 0
    assert [p.exists() for p in files] == [False, False, True, True]
    size = files[2].stat().st_blocks * 512
    out = capsys.readouterr().out
    assert (f"<4>{d}: short of what it had to remove ({ev.human(2 * size)} of {ev.human(4 * size)}, 2 of 0 "
            f"files; directory {ev.human(2 * size)} left): 2 files ({ev.human(2 * size)}) used in the last 10 "
            "minutes are kept") in out


def test_a_need_met_exactly_is_not_short_and_the_state_is_said_exactly(tmp_path, capsys):
    d = tmp_path / "ns"
    files = fill(d, 10, size=4 * KIB)
    total = du(d)
    assert ev.main(["--max-bytes", str(total), "--high-percent", "90", "--low-percent", "50", str(d)]) == 0
    out = capsys.readouterr().out
    assert sum(p.exists() for p in files) == 5
    assert "short of" not in out and "<4>" not in out
    assert out.splitlines()[0].endswith(f"; directory {ev.human(total)} of limit {ev.human(total)} in 10 files")


def test_on_the_volumes_marks_alone_the_state_names_no_limit(tmp_path, monkeypatch, capsys):
    d = tmp_path / "ns"
    fill(d, 4, size=KIB)
    total = du(d)
    monkeypatch.setattr(os, "fstatvfs", lambda fd: statvfs(900, 1000))  # 90 %, all of it this directory's?
    assert ev.main(["--dry-run", str(d)]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line.endswith(f"before: volume space 90.0%, inodes n/a; directory {ev.human(total)} in 4 files")


def test_an_inode_share_met_exactly_is_not_short(tmp_path, monkeypatch, capsys):
    """1000 inodes, 900 used (90 %): down to 700, 200 over; this directory's 9 files are 1 % of
    the used ones, so 2 files are its share, and removing 2 meets it."""
    d = tmp_path / "ns"
    files = fill(d, 9, size=KIB)
    monkeypatch.setattr(os, "fstatvfs", lambda fd: statvfs(10, 1000, 900, 1000))
    assert ev.main(["--high-percent", "85", "--low-percent", "70", str(d)]) == 0
    out = capsys.readouterr().out
    assert [p.exists() for p in files] == [False, False] + [True] * 7
    assert "share 2 files (1.0% of the used inodes) of the 200 over 70%" in out and "<4>" not in out
    assert "still at" not in out  # the volume's space is at 1 %


@pytest.mark.parametrize("used, size, said", [(70, 100, True), (69, 100, False), (70, 101, False), (0, 0, False)])
def test_after_the_run_the_volume_still_at_or_over_the_low_mark_is_said(tmp_path, monkeypatch, capsys,
                                                                        used, size, said):
    d = tmp_path / "ns"
    fill(d, 2, size=KIB)
    figures = iter([statvfs(0, 1000), statvfs(used, size)])  # before: under the marks; after: `used` of `size`
    monkeypatch.setattr(os, "fstatvfs", lambda fd: next(figures))
    assert ev.main(["--max-bytes", "1", "--high-percent", "85", "--low-percent", "70", str(d)]) == 0
    out = capsys.readouterr().out
    assert (f"{d}: the volume is still at {ev.percent(used, size)} (low mark 70%): the rest of its excess is the "
            "other tenants' share" in out) is said

