"""kvprov-evict (roles/engine/files/kvprov-evict.py), the per-instance evictor: its pure
marks on made-up figures, and its scan and removal on real files in a temporary directory
(LRU order, links never followed, nothing outside touched, files vanishing mid-run)."""

from __future__ import annotations

import importlib.util
import os
import sys
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
    assert ev.need(ev.Volume(899, 1000, 899, 1000), 10**9, 90, 80, 0) == ev.Need(0, 0, ())
    assert ev.need(ev.Volume(0, 1000, 0, 1000), 899, 90, 80, 1000).reasons == ()


def test_a_full_volume_is_brought_to_the_low_mark():
    n = ev.need(VOL, 0, 90, 80, 0)
    assert (n.bytes, n.files) == (150, 0)
    assert n.reasons == ("volume space 95.0% >= 90%",)


def test_inodes_count_as_files_and_the_larger_byte_need_wins():
    n = ev.need(ev.Volume(950, 1000, 920, 1000), 700, 90, 80, 600)
    assert n.files == 120  # 920 -> 800 inodes
    assert n.bytes == 220  # the directory's 700 -> 480 is more than the volume's 150
    assert len(n.reasons) == 3


def test_a_filesystem_without_inode_counts_is_judged_on_space_only():
    assert ev.need(ev.Volume(100, 1000, 0, 0), 0, 90, 80, 0).reasons == ()


def test_choose_takes_the_least_recently_used_first():
    files = [ev.Entry(30, 10, ("c",)), ev.Entry(10, 10, ("a",)), ev.Entry(20, 10, ("b", "x"))]
    assert [f.parts for f in ev.choose(files, ev.Need(15, 0, ("r",)))] == [("a",), ("b", "x")]
    assert [f.parts for f in ev.choose(files, ev.Need(0, 3, ("r",)))] == [("a",), ("b", "x"), ("c",)]
    assert len(ev.choose(files, ev.Need(10**6, 0, ("r",)))) == 3  # not enough: all of them


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
    limit = total  # 100% of the limit: over 90%, down to 80%
    assert ev.main(["--max-bytes", str(limit), str(d)]) == 0
    left = [p for p in files if p.exists()]
    assert du(d) <= limit * 80 // 100
    ages = sorted(files, key=lambda p: (T0 + 60 * int(p.name[1:]) + (30 if p.name[0] == "g" else 0)))
    assert len(left) == 9 and set(left) == set(ages[3:])  # 768 KiB -> under 614 KiB: the 3 oldest went
    assert (d / "sub").is_dir()  # directories stay
    out = capsys.readouterr().out
    assert f"removed {len(files) - len(left)} files" in out and ">= 90% of" in out


def test_under_the_mark_nothing_is_removed(tmp_path, capsys):
    d = tmp_path / "inst"
    files = fill(d, 4)
    assert ev.main(["--max-bytes", str(du(d) * 2), str(d)]) == 0
    assert all(p.exists() for p in files)
    assert "under the marks" in capsys.readouterr().out


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


def test_the_volume_mark_removes_every_file_and_says_the_rest_is_not_its_own(tmp_path, capsys):
    """The temporary filesystem is more than 1% used: bringing it to 0% takes every file
    and is still not enough."""
    d = tmp_path / "inst"
    files = fill(d, 3)
    assert ev.main(["--high-percent", "1", "--low-percent", "0", str(d)]) == 0
    assert not any(p.exists() for p in files)
    out = capsys.readouterr().out
    assert "volume space" in out and "<4>" in out and "not this instance's" in out


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
