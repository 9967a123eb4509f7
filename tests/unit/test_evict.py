"""kvprov-evict (roles/engine/files/kvprov-evict.py), the evictor of one KV namespace: its pure
marks and fair share on made-up figures, and its lease, scan and removal on real files in a
temporary directory (LRU order, the guard time, the quota, links never followed, nothing
outside touched, files vanishing mid-run, real processes contending for the lease)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT

SCRIPT = ROOT / "roles/engine/files/kvprov-evict.py"
_spec = importlib.util.spec_from_file_location("kvprov_evict", SCRIPT)
ev = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = ev  # dataclasses look their module up
_spec.loader.exec_module(ev)

KIB = 1024
T0 = 1_700_000_000  # file i was last used at T0 + i * 60


def fill(d: Path, n: int, size: int = 64 * KIB, prefix: str = "f", t0: int = T0) -> list[Path]:
    """n files of `size` real bytes, file i last used at t0 + 60 i (atime and mtime)."""
    d.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        p = d / f"{prefix}{i:03d}"
        p.write_bytes(b"\1" * size)
        os.utime(p, (t0 + 60 * i, t0 + 60 * i))
        out.append(p)
    return out


def du(d: Path) -> int:
    return sum(p.lstat().st_blocks * 512 for p in d.rglob("*") if p.is_file() and not p.is_symlink())


# ---------------------------------------------------------------------------- pure

VOL = ev.Volume(used=950, size=1000, inodes_used=10, inodes=1000)


def test_nothing_to_do_under_the_high_mark():
    assert ev.need(ev.Volume(899, 1000, 899, 1000), 10**9, 10**6, 90, 80, 0) == ev.Need(0, 0, ())
    assert ev.need(ev.Volume(0, 1000, 0, 1000), 899, 0, 90, 80, 1000).reasons == ()


def test_a_full_volume_that_is_all_this_directory_is_brought_to_the_low_mark():
    n = ev.need(VOL, 950, 10, 90, 80, 0)
    assert (n.bytes, n.files) == (150, 0)
    assert n.reasons == ("volume space 95.0% >= 90%: this directory's share 150 B (100.0% of the used space) "
                         "of the 150 B over 80%",)


def test_on_a_shared_volume_a_directory_removes_only_its_share_of_the_excess():
    """Other tenants hold 90% of what is used: this directory pays a tenth of the excess, not
    all of it (which would have emptied it: 95 of its 95 bytes)."""
    assert ev.need(VOL, 95, 1, 90, 80, 0).bytes == 15  # 150 x 95/950
    assert ev.need(VOL, 1, 1, 90, 80, 0).bytes == 1  # rounded up: never 0 for a directory with use
    assert ev.need(VOL, 0, 0, 90, 80, 0).bytes == 0  # nothing of its own: nothing to pay
    assert ev.share(150, 95, 950) == 15 and ev.share(150, 950, 950) == 150 and ev.share(-5, 10, 950) == 0
    # every tenant paying its share brings the volume to the low mark (each rounded up: 79 + 48 + 24)
    tenants = [500, 300, 150]
    assert [ev.need(VOL, t, 1, 90, 80, 0).bytes for t in tenants] == [79, 48, 24]


def test_inodes_count_as_files_by_share_and_the_larger_byte_need_wins():
    n = ev.need(ev.Volume(950, 1000, 920, 1000), 700, 460, 90, 80, 600)
    assert n.files == 60  # 920 -> 800 inodes: 120, half of which are this directory's
    assert n.bytes == 220  # the directory's 700 -> 480 is more than its volume share 111 (150 x 700/950)
    assert len(n.reasons) == 3


def test_a_filesystem_without_inode_counts_is_judged_on_space_only():
    assert ev.need(ev.Volume(100, 1000, 0, 0), 0, 0, 90, 80, 0).reasons == ()


def test_choose_takes_the_least_recently_used_first():
    files = [ev.Entry(30, 10, ("c",)), ev.Entry(10, 10, ("a",)), ev.Entry(20, 10, ("b", "x"))]
    assert [f.parts for f in ev.choose(files, ev.Need(15, 0, ("r",)))] == [("a",), ("b", "x")]
    assert [f.parts for f in ev.choose(files, ev.Need(0, 3, ("r",)))] == [("a",), ("b", "x"), ("c",)]
    assert len(ev.choose(files, ev.Need(10**6, 0, ("r",)))) == 3  # not enough: all of them
    # never a file used at or after the guard time, even when the need is not met
    assert [f.parts for f in ev.choose(files, ev.Need(10**6, 0, ("r",)), keep_since=20)] == [("a",)]


def test_the_marks_and_the_order_at_their_exact_boundaries():
    """Each comparison at its edge (#41: the evictor under mutation): a mark reached exactly
    counts, a need met exactly stops, whole bytes and files only."""
    at = ev.need(ev.Volume(850, 1000, 0, 0), 100, 0, 85, 70, 0)  # the high mark reached exactly
    assert at.bytes == 18 and isinstance(at.bytes, int)  # 150 over 70 %, 100/850 of it, rounded up
    assert ev.need(ev.Volume(849, 1000, 0, 0), 100, 0, 85, 70, 0).reasons == ()
    files = ev.need(ev.Volume(0, 1000, 850, 1000), 0, 85, 85, 70, 0)  # the inode mark reached exactly
    assert files.files == 15 and isinstance(files.files, int)
    own = ev.need(ev.Volume(0, 1000, 0, 0), 85, 0, 85, 70, 100)  # 85 % of the limit exactly
    assert own.bytes == 15 and own.reasons == ("directory 85 B >= 85% of 100 B",)
    odd = ev.need(ev.Volume(995, 999, 0, 0), 995, 0, 85, 70, 0)  # 70 % of 999 is 699 whole bytes
    assert odd.bytes == 296 and isinstance(odd.bytes, int)
    assert ev.share(0, 5, 10) == 0 and ev.share(-5, 5, 10) == 0 and ev.share(5, -5, 10) == 0
    assert ev.share(5, 5, 0) == 0 and ev.share(5, 5, -1) == 0 and ev.share(1, 1, 1) == 1
    files = [ev.Entry(10, 10, ("a",)), ev.Entry(20, 10, ("b",)), ev.Entry(30, 10, ("c",))]
    assert [f.parts for f in ev.choose(files, ev.Need(20, 2, ("r",)))] == [("a",), ("b",)]  # met exactly: stop
    assert [f.parts for f in ev.choose(files, ev.Need(0, 0, ("r",)))] == []
    assert [f.parts for f in ev.choose(files, ev.Need(30, 0, ("r",)), keep_since=20)] == [("a",)]  # used at 20: kept
    assert ev.human(1023) == "1023 B" and ev.human(1024) == "1.0 KiB" and ev.human(5 * 1024**3) == "5.0 GiB"
    assert ev.human(3 * 1024**5) == "3072.0 TiB" and ev.when(None) == "-"
    assert ev.percent(1, 0) == "n/a" and ev.percent(1, 8) == "12.5%"


def test_the_script_is_rendered_unchanged():
    """Deploy and render pass it through the template engine: it must hold no Jinja syntax."""
    text = SCRIPT.read_text()
    assert not [s for s in ("{{", "{%", "{#") if s in text]
    assert text.startswith("#!/usr/bin/python3\n")


# ---------------------------------------------------------------------------- real files

def test_a_directory_past_its_limit_is_brought_under_the_low_mark_oldest_first(tmp_path, capsys):
    d = tmp_path / "inst"
    files = fill(d / "sub", 6) + fill(d, 6, prefix="g", t0=T0 + 30)  # interleaved ages in two directories
    total = du(d)
    limit = total  # 100% of the limit: over 85% (the default), down to 70%
    assert ev.main(["--max-bytes", str(limit), str(d)]) == 0
    left = [p for p in files if p.exists()]
    assert du(d) <= limit * 70 // 100
    ages = sorted(files, key=lambda p: (T0 + 60 * int(p.name[1:]) + (30 if p.name[0] == "g" else 0)))
    assert len(left) == 8 and set(left) == set(ages[4:])  # 768 KiB -> under 538 KiB: the 4 oldest went
    assert (d / "sub").is_dir()  # directories stay
    out = capsys.readouterr().out
    assert f"removed {len(files) - len(left)} files" in out and ">= 85% of" in out


def test_under_the_mark_nothing_is_removed(tmp_path, capsys):
    d = tmp_path / "inst"
    files = fill(d, 4)
    assert ev.main(["--max-bytes", str(du(d) * 2), str(d)]) == 0
    assert all(p.exists() for p in files)
    assert "under the marks" in capsys.readouterr().out


def test_without_a_limit_of_its_own_the_volume_decides_before_any_scan(tmp_path, capsys, monkeypatch):
    """#37: statvfs first; a directory with no --max-bytes on a volume under its high mark is not
    walked at all (on a shared NFS namespace a walk costs minutes of metadata calls)."""
    d = tmp_path / "inst"
    fill(d, 4)
    walked = []
    monkeypatch.setattr(ev, "scan", lambda root: walked.append(root) or pytest.fail("scanned"))
    assert ev.main(["--high-percent", "100", "--low-percent", "99", str(d)]) == 0  # 100 %: never reached here
    assert not walked and capsys.readouterr().out.splitlines()[0].endswith("; not scanned")
    monkeypatch.undo()
    assert ev.main(["--max-bytes", str(du(d) * 2), str(d)]) == 0  # a limit of its own: the walk measures it
    assert "directory" in capsys.readouterr().out


def test_links_are_never_followed_and_nothing_outside_is_touched(tmp_path):
    d, outside = tmp_path / "inst", tmp_path / "outside"
    victims = fill(outside, 3, t0=T0 - 10**6)  # older than anything inside
    sibling = fill(tmp_path / "inst2", 3, t0=T0 - 10**6)  # another instance's directory
    (d).mkdir()
    (d / "link-file").symlink_to(victims[0])
    (d / "link-dir").symlink_to(outside, target_is_directory=True)
    (d / "dangling").symlink_to(tmp_path / "nowhere")
    own = fill(d, 3)
    assert ev.main(["--high-percent", "1", "--low-percent", "0", "--max-bytes", "1", str(d)]) == 0
    assert not [p for p in own if p.exists()]  # every file of its own went
    assert all(p.exists() for p in victims + sibling)
    assert (d / "link-file").is_symlink() and (d / "link-dir").is_symlink() and (d / "dangling").is_symlink()


def test_the_directory_itself_a_link_is_refused(tmp_path, capsys):
    victims = fill(tmp_path / "outside", 2)
    (tmp_path / "inst").symlink_to(tmp_path / "outside", target_is_directory=True)
    assert ev.main(["--max-bytes", "1", str(tmp_path / "inst")]) == 1
    assert all(p.exists() for p in victims)
    assert "without following a link" in capsys.readouterr().err


def test_a_file_vanishing_or_used_again_mid_run_is_left_alone(tmp_path):
    d = tmp_path / "inst"
    files = fill(d, 6)
    root = ev.open_root(str(d))
    try:
        found = ev.scan(root)
        assert len(found.files) == 6
        files[0].unlink()  # another process removed it after the scan
        os.utime(files[1], (T0 + 10**6, T0 + 60))  # read again after the scan: no longer the least recent
        run = ev.evict(root, found.files, ev.Need(found.bytes, 0, ("test",)))
    finally:
        os.close(root)
    assert run.removed == 4
    assert files[1].exists() and not any(p.exists() for p in files[2:])


def test_the_volume_mark_takes_only_this_directorys_share_and_says_the_rest_is_not_its_own(tmp_path, capsys):
    """The temporary filesystem, used by others: a high mark at its use is reached, and a low mark of
    half its use, gives an excess of about half of what is used. The directory removes about
    half of its own bytes (its share), not all of them, and says the rest is others'."""
    st = os.statvfs(tmp_path)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    real = 100 * used / (used + st.f_bavail * st.f_frsize)
    pct = int(real)
    if pct < 10:
        pytest.skip(f"the temporary filesystem is only {pct}% used")
    d = tmp_path / "inst"
    files = fill(d, 40)
    low = int(pct) // 2
    assert ev.main(["--high-percent", str(pct), "--low-percent", str(low), str(d)]) == 0
    gone = sum(not p.exists() for p in files)
    expect = 40 * (1 - low / real)  # the excess's fraction of what is used, of 40 files
    assert abs(gone - expect) <= 4, (gone, expect, pct, low)
    assert 0 < gone < 40
    out = capsys.readouterr().out
    assert f"removed {gone} files" in out and "this directory's share" in out
    assert "the rest of its excess is the other tenants' share" in out and "<4>" not in out


def test_a_dry_run_removes_nothing(tmp_path, capsys):
    d = tmp_path / "inst"
    files = fill(d, 4)
    assert ev.main(["--dry-run", "--max-bytes", "1", str(d)]) == 0
    assert all(p.exists() for p in files)
    assert "would remove 4 files" in capsys.readouterr().out


def test_atime_counts_when_the_mount_updates_it(tmp_path):
    """relatime: a file read after it was written has a later atime than mtime; it is kept."""
    d = tmp_path / "inst"
    files = fill(d, 4)
    os.utime(files[0], (T0 + 10**6, T0))  # the oldest write, read last
    assert ev.main(["--max-bytes", str(du(d)), str(d)]) == 0
    assert files[0].exists() and not files[1].exists()


@pytest.mark.parametrize("args", [["--high-percent", "0"], ["--low-percent", "90"], ["--max-bytes", "-1"]])
def test_bad_marks_are_refused(tmp_path, args):
    with pytest.raises(SystemExit) as e:
        ev.main(args + [str(tmp_path)])
    assert e.value.code == 2


# ---------------------------------------------------------------------------- the guard time and the quota

def test_a_file_read_within_the_guard_time_is_kept_even_past_the_quota(tmp_path, capsys):
    """The quota wants every file gone; the oldest write was read a minute ago (atime): it stays,
    every file not used in the last 60 minutes goes, and the journal says why it fell short."""
    d = tmp_path / "inst"
    files = fill(d, 6)
    now = time.time()
    os.utime(files[0], (now - 60, T0))  # written first, read a minute ago
    os.utime(files[1], (now - 61 * 60, T0 + 60))  # read 61 minutes ago: past the guard
    assert ev.main(["--max-bytes", "1", str(d)]) == 0
    assert [p.name for p in files if p.exists()] == ["f000"]
    out = capsys.readouterr().out
    assert "removed 5 files" in out and "<4>" in out and "1 files (64.0 KiB) used in the last 60 minutes are kept" in out
    assert ev.main(["--max-bytes", "1", "--keep-minutes", "0", str(d)]) == 0  # no guard: it goes too
    assert not files[0].exists()


def test_a_file_written_within_the_guard_time_is_kept(tmp_path):
    d = tmp_path / "inst"
    old = fill(d, 4)
    new = d / "fresh"
    new.write_bytes(b"\1" * 64 * KIB)  # written now: mtime within the guard
    assert ev.main(["--max-bytes", "1", "--keep-minutes", "5", str(d)]) == 0
    assert new.exists() and not any(p.exists() for p in old)


def test_the_quota_is_reached_oldest_first_and_a_rerun_has_nothing_to_do(tmp_path, capsys):
    d = tmp_path / "inst"
    files = fill(d, 20)  # 20 x 64 KiB = 1280 KiB
    quota = 1024 * KIB  # 125%: past 85%, down to 70% of it, 716.8 KiB: 11 files of 64 KiB stay at most
    assert ev.main(["--max-bytes", str(quota), str(d)]) == 0
    assert du(d) <= quota * 70 // 100
    left = [p for p in files if p.exists()]
    assert left == files[len(files) - len(left):] and len(left) == 11
    assert ev.main(["--max-bytes", str(quota), str(d)]) == 0
    assert [p for p in files if p.exists()] == left
    assert "under the marks (85%/70%)" in capsys.readouterr().out.splitlines()[-2]


# ---------------------------------------------------------------------------- the lease

# A second process that takes the lease through the evictor's own take_lease() and holds it
# until its stdin closes; it says "held" once it holds it, "busy" if it could not.
HOLDER = f"""
import importlib.util, os, sys
spec = importlib.util.spec_from_file_location("kvprov_evict", {str(SCRIPT)!r})
ev = importlib.util.module_from_spec(spec); sys.modules[spec.name] = ev; spec.loader.exec_module(ev)
root = ev.open_root(sys.argv[1])
fd = ev.take_lease(root)
print("held" if fd is not None else "busy", flush=True)
sys.stdin.read()
"""


def evictor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_while_another_process_holds_the_lease_the_evictor_does_nothing_and_exits_0(tmp_path):
    d = tmp_path / "ns"
    files = fill(d, 6)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(d)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        r = evictor("--max-bytes", "1", str(d))
        assert r.returncode == 0, r.stderr
        assert "another evictor holds the lease (.kvprov-evict.lock)" in r.stdout
        assert all(p.exists() for p in files)
        other = subprocess.run([sys.executable, "-c", HOLDER, str(d)], input="", capture_output=True,
                               text=True, timeout=60)
        assert other.stdout.strip() == "busy"  # the lock excludes any other process, not only the evictor
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    r = evictor("--max-bytes", "1", str(d))  # the holder is gone: its lock went with it
    assert r.returncode == 0 and "removed 6 files" in r.stdout, r.stdout + r.stderr
    assert not any(p.exists() for p in files)
    lease = d / ".kvprov-evict.lock"
    assert lease.is_file() and oct(lease.stat().st_mode & 0o777) == "0o600"  # kept, never evicted
    assert "released the lease, held " in r.stdout


def test_evictors_started_at_once_never_work_at_the_same_time(tmp_path):
    """Four real processes start on one directory at the same instant (each sleeps until the
    same moment): one at a time holds the lease (the times each held it never overlap), the
    others say another holds it or find it under its marks, and together they remove no more
    than one evictor alone would on the same directory; and at least one was turned away, so
    they did run at the same time."""
    d = tmp_path / "ns"
    files = fill(d, 40, size=4 * KIB) + fill(d / "bulk", 3000, size=1, prefix="b", t0=T0 + 10**6)
    quota = du(d)  # 100% of it: past 85%, down to 70%: the 40 small files and about 900 of the bulk go
    start = time.time() + 1.5
    go = f"import time, runpy, sys; time.sleep(max(0, {start} - time.time())); sys.argv = sys.argv[1:]; " \
         "runpy.run_path(sys.argv[0], run_name='__main__')"
    procs = [subprocess.Popen([sys.executable, "-c", go, str(SCRIPT), "--max-bytes", str(quota), str(d)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    held, refused, removed = [], 0, 0
    for out, _ in outs:
        refused += "another evictor holds the lease" in out
        for line in out.splitlines():
            if "released the lease, held " in line:
                a, b = line.split("held ")[1].split(" (")[0].split(" to ")
                held.append((float(a), float(b)))
            if ": removed " in line:
                removed += int(line.split(": removed ")[1].split()[0])
    held.sort()
    assert all(b1 <= a2 for (_, b1), (a2, _) in zip(held, held[1:])), held  # one at a time
    assert refused >= 1, outs  # they did contend
    assert len(held) + refused == 4
    assert du(d) <= quota * 70 // 100
    single = evict_alone(tmp_path / "alone", quota)
    assert removed == single and sum(not p.exists() for p in files) == single


def evict_alone(d: Path, quota: int) -> int:
    """The same directory as above, one evictor: how many files it removes."""
    fill(d, 40, size=4 * KIB)
    fill(d / "bulk", 3000, size=1, prefix="b", t0=T0 + 10**6)
    r = evictor("--max-bytes", str(quota), str(d))
    return int(r.stdout.split(": removed ")[1].split()[0])


def test_a_link_or_fifo_in_the_lease_files_place_is_refused(tmp_path, capsys):
    d, outside = tmp_path / "ns", tmp_path / "outside"
    files = fill(d, 3)
    victim = fill(outside, 1)[0]
    before = victim.stat()
    (d / ".kvprov-evict.lock").symlink_to(victim)
    assert ev.main(["--max-bytes", "1", str(d)]) == 1
    assert "cannot take the lease .kvprov-evict.lock" in capsys.readouterr().err
    assert all(p.exists() for p in files) and victim.read_bytes() == b"\1" * 64 * KIB
    after = victim.stat()  # the link's target untouched: not truncated, not re-moded, not locked open
    assert (after.st_mode, after.st_size, after.st_mtime) == (before.st_mode, before.st_size, before.st_mtime)
    (d / ".kvprov-evict.lock").unlink()
    os.mkfifo(d / ".kvprov-evict.lock")
    assert ev.main(["--max-bytes", "1", str(d)]) == 1  # O_NONBLOCK: no hang on a FIFO
    assert all(p.exists() for p in files)


def test_the_lease_file_is_not_counted_nor_removed(tmp_path):
    d = tmp_path / "ns"
    (d).mkdir()
    (d / ".kvprov-evict.lock").write_bytes(b"x" * 64 * KIB)  # a lease file with bytes in it
    os.utime(d / ".kvprov-evict.lock", (T0 - 10**6, T0 - 10**6))
    files = fill(d, 2)
    root = ev.open_root(str(d))
    try:
        assert sorted(f.parts for f in ev.scan(root).files) == [("f000",), ("f001",)]
    finally:
        os.close(root)
    assert ev.main(["--max-bytes", "1", str(d)]) == 0
    assert (d / ".kvprov-evict.lock").exists() and not any(p.exists() for p in files)


# ---------------------------------------------------------------------------- retiring old namespaces (#37)

def test_retirable_siblings_are_the_same_prefix_with_another_fingerprint():
    names = ["m-0123456789ab", "m-aaaaaaaaaaaa", "m-x-bbbbbbbbbbbb", "m-ABCDEF012345", "m-0123", "n-cccccccccccc", "m"]
    assert ev.retirable(names, "m-0123456789ab") == ["m-aaaaaaaaaaaa"]
    assert ev.retirable(names, "m-x-bbbbbbbbbbbb") == []
    assert ev.retirable(names, "m") == []  # not a fingerprinted namespace: nothing is its sibling


def test_a_sibling_no_evictor_ran_on_for_the_retire_days_is_emptied_and_nothing_else(tmp_path, capsys):
    """The layout a keying change leaves: the model's new namespace beside the old one (no host's
    evictor left on it), another live one, another model's, one from before the marker, and a
    link to a directory outside. Only the old one loses its files, under its own lease."""
    kv = tmp_path / "kv" / "lmcache_mp"
    new, old, live = kv / "m-0000000000aa", kv / "m-0000000000bb", kv / "m-0000000000cc"
    other, unmarked, outside = kv / "z-0000000000dd", kv / "m-0000000000ee", tmp_path / "outside"
    fill(new, 1)
    old_files = fill(old / "sub", 3) + fill(old, 1, prefix="top")
    for d, age_days in ((old, 8), (live, 1), (other, 30)):
        fill(d, 1, prefix="keep" if d != old else "x")
        (d / ev.IN_USE).touch()
        t = time.time() - age_days * 86400
        os.utime(d / ev.IN_USE, (t, t))
    old_files.append(old / "x000")
    fill(unmarked, 2)
    fill(outside, 2)
    (kv / "m-0000000000ff").symlink_to(outside)
    before = {p: p.stat().st_mtime for p in tmp_path.rglob("*") if p.is_file() and old not in p.parents}
    assert ev.main(["--retire-days", "7", "--max-bytes", "0", str(new)]) == 0
    out = capsys.readouterr().out
    assert not any(p.exists() for p in old_files) and (old / "sub").is_dir()  # directories stay
    assert (old / ".kvprov-evict.lock").exists() and (old / ev.IN_USE).exists()
    assert f"{old}: an old namespace, no evictor has run on it since" in out and "removed 5 of 5 files" in out
    assert f"{unmarked}: no {ev.IN_USE}: not retired" in out
    assert all(p.exists() for p in before), "only the old namespace loses files"
    assert (new / ev.IN_USE).stat().st_mtime > time.time() - 60  # this run marked its own namespace
    assert str(live) not in out and str(other) not in out


def test_retiring_keeps_files_used_within_the_guard_time_and_waits_for_the_siblings_lease(tmp_path, capsys):
    kv = tmp_path / "kv"
    new, old = kv / "m-0000000000aa", kv / "m-0000000000bb"
    fill(new, 1)
    [stale, recent] = fill(old, 2)
    os.utime(recent, None)  # read just now: someone still uses it
    (old / ev.IN_USE).touch()
    os.utime(old / ev.IN_USE, (0, 0))
    held = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], "
                             "os.O_RDWR | os.O_CREAT, 0o600); fcntl.lockf(fd, fcntl.LOCK_EX); print('held', "
                             "flush=True); time.sleep(60)", str(old / ".kvprov-evict.lock")], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert held.stdout.readline().strip() == "held"
        assert ev.main(["--retire-days", "1", str(new)]) == 0
        assert "another evictor holds its lease: not retired this run" in capsys.readouterr().out
        assert stale.exists() and recent.exists()
    finally:
        held.kill()
        held.wait()
    assert ev.main(["--retire-days", "1", "--keep-minutes", "5", str(new)]) == 0
    assert "removed 1 of 2 files" in capsys.readouterr().out and not stale.exists() and recent.exists()
