#!/usr/bin/python3
# Managed by kvprov (roles/engine/files/kvprov-evict.py): local changes are overwritten.
"""kvprov-evict: keep one engine instance's KV-tier directory under its marks.

Usage: kvprov-evict [--high-percent H] [--low-percent L] [--max-bytes B] [--dry-run] DIR

When the volume holding DIR has H percent of its space or of its inodes in use, or DIR
holds H percent of B bytes (B > 0), the regular files of DIR that were used least recently
go first until the volume and DIR are under L percent again (or DIR has no file left).
"Used" is the later of a file's atime and mtime: the atime where the mount updates it
(relatime: at the first read after a write, then once a day), the last write where it
does not (noatime). See docs/capacity.md.

Safety on a shared volume: DIR itself is opened with O_NOFOLLOW; every directory below
it is opened relative to its parent with O_NOFOLLOW and must be on the same filesystem;
files are removed with unlinkat() relative to their parent, after a fresh lstat() says
they are still a regular file not used since the scan. Links, devices, sockets and other
filesystems are never entered or touched; no directory is ever removed; a file that
vanishes or cannot be stat'ed is skipped. Stdlib only (runs with the host's python3).

Exit status: 0 done (also when the marks cannot be reached from DIR alone: said in the
journal), 1 DIR unusable, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
import time
from dataclasses import dataclass, field

MAX_DEPTH = 32  # directories below DIR (the engines use at most a few levels)
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
WARNING = "<4>"  # journald's priority prefix (SyslogLevelPrefix=yes, systemd's default)


@dataclass(frozen=True)
class Entry:
    """One regular file below DIR."""

    last_use: float  # max(atime, mtime)
    size: int  # bytes allocated (st_blocks * 512), what removing it gives back
    parts: tuple[str, ...]  # its path below DIR, one name per level


@dataclass
class Scan:
    files: list[Entry] = field(default_factory=list)
    skipped: int = 0  # entries that vanished or could not be stat'ed or opened

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)


@dataclass(frozen=True)
class Volume:
    """The filesystem's use as df counts it (space for unprivileged users: f_bavail)."""

    used: int
    size: int  # used + available
    inodes_used: int
    inodes: int  # 0: the filesystem does not count inodes

    @classmethod
    def of(cls, st: os.statvfs_result) -> "Volume":
        unit = st.f_frsize or st.f_bsize
        used = (st.f_blocks - st.f_bfree) * unit
        return cls(used, used + st.f_bavail * unit, st.f_files - st.f_ffree, st.f_files)


@dataclass(frozen=True)
class Need:
    """What has to go: at least `bytes` and at least `files` files, and why."""

    bytes: int
    files: int
    reasons: tuple[str, ...]


def percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "n/a"


def need(vol: Volume, dir_bytes: int, high: int, low: int, max_bytes: int) -> Need:
    """Pure: how much to remove, from the volume's use and DIR's size against the marks.
    Nothing unless a high mark is reached; then enough for every mark reached to fall under
    its low mark."""
    nbytes = nfiles = 0
    reasons = []
    if vol.size and vol.used * 100 >= high * vol.size:
        nbytes = max(nbytes, vol.used - vol.size * low // 100)
        reasons.append(f"volume space {percent(vol.used, vol.size)} >= {high}%")
    if vol.inodes and vol.inodes_used * 100 >= high * vol.inodes:
        nfiles = vol.inodes_used - vol.inodes * low // 100
        reasons.append(f"volume inodes {percent(vol.inodes_used, vol.inodes)} >= {high}%")
    if max_bytes and dir_bytes * 100 >= high * max_bytes:
        nbytes = max(nbytes, dir_bytes - max_bytes * low // 100)
        reasons.append(f"directory {human(dir_bytes)} >= {high}% of {human(max_bytes)}")
    return Need(nbytes, nfiles, tuple(reasons))


def choose(files: list[Entry], want: Need) -> list[Entry]:
    """Pure: the least recently used files, oldest first, until `want` is met (all of them
    when it cannot be)."""
    out, freed = [], 0
    for f in sorted(files, key=lambda e: (e.last_use, e.parts)):
        if freed >= want.bytes and len(out) >= want.files:
            break
        out.append(f)
        freed += f.size
    return out


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n}"


# ---------------------------------------------------------------------------- I/O

def open_root(path: str) -> int:
    """DIR itself, never through a link."""
    return os.open(path, DIR_FLAGS)


def scan(root: int, depth: int = MAX_DEPTH) -> Scan:
    """Every regular file below the directory `root` (an fd), on its filesystem only."""
    out = Scan()
    dev = os.fstat(root).st_dev
    _scan(root, (), dev, depth, out)
    return out


def _scan(fd: int, parts: tuple[str, ...], dev: int, depth: int, out: Scan) -> None:
    try:
        with os.scandir(fd) as it:
            entries = list(it)
    except OSError:
        out.skipped += 1
        return
    for e in entries:
        try:
            st = e.stat(follow_symlinks=False)  # fstatat(fd, name, AT_SYMLINK_NOFOLLOW)
        except OSError:  # vanished, or not ours to stat
            out.skipped += 1
            continue
        if stat.S_ISREG(st.st_mode):
            out.files.append(Entry(max(st.st_atime, st.st_mtime), st.st_blocks * 512, parts + (e.name,)))
        elif stat.S_ISDIR(st.st_mode) and st.st_dev == dev and depth > 0:
            try:
                child = os.open(e.name, DIR_FLAGS, dir_fd=fd)
            except OSError:  # vanished, replaced by a link, or not ours
                out.skipped += 1
                continue
            try:
                if os.fstat(child).st_dev == dev:
                    _scan(child, parts + (e.name,), dev, depth - 1, out)
            finally:
                os.close(child)


def remove(root: int, f: Entry) -> int | None:
    """Remove one file if it is still a regular file not used since the scan: the bytes
    it gave back, None when it was left (vanished, used again, replaced, not ours)."""
    fds = []
    try:
        fd = root
        for name in f.parts[:-1]:
            fd = os.open(name, DIR_FLAGS, dir_fd=fd)
            fds.append(fd)
        st = os.stat(f.parts[-1], dir_fd=fd, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode) or max(st.st_atime, st.st_mtime) > f.last_use:
            return None
        os.unlink(f.parts[-1], dir_fd=fd)  # unlinkat(): the name in this directory, never a link's target
        return st.st_blocks * 512
    except OSError:
        return None
    finally:
        for fd in fds:
            os.close(fd)


@dataclass
class Run:
    removed: int = 0
    freed: int = 0
    oldest: float | None = None
    newest: float | None = None


def evict(root: int, files: list[Entry], want: Need, dry_run: bool = False) -> Run:
    run = Run()
    for f in choose(files, want):
        got = f.size if dry_run else remove(root, f)
        if got is not None:
            run.removed += 1
            run.freed += got
            run.oldest = f.last_use if run.oldest is None else run.oldest
            run.newest = f.last_use
    return run


def when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t is not None else "-"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="kvprov-evict", description=__doc__.split("\n\n")[1])
    p.add_argument("directory")
    p.add_argument("--high-percent", type=int, default=90, help="start at this use (1..100)")
    p.add_argument("--low-percent", type=int, default=80, help="stop under this use (0..high-1)")
    p.add_argument("--max-bytes", type=int, default=0, help="the directory's own limit (0: none)")
    p.add_argument("--dry-run", action="store_true", help="say what would go, remove nothing")
    a = p.parse_args(argv)
    if not (1 <= a.high_percent <= 100 and 0 <= a.low_percent < a.high_percent and a.max_bytes >= 0):
        p.error("need 1 <= --high-percent <= 100, 0 <= --low-percent < --high-percent, --max-bytes >= 0")
    d = a.directory
    try:
        root = open_root(d)
    except OSError as e:
        print(f"{d}: cannot open the directory without following a link: {e.strerror} "
              "(kvprov deploy creates it; a link there is refused)", file=sys.stderr)
        return 1
    try:
        found = scan(root)
        vol = Volume.of(os.fstatvfs(root))
        want = need(vol, found.bytes, a.high_percent, a.low_percent, a.max_bytes)
        limit = f" of limit {human(a.max_bytes)}" if a.max_bytes else ""
        state = (f"volume space {percent(vol.used, vol.size)}, inodes {percent(vol.inodes_used, vol.inodes)}; "
                 f"directory {human(found.bytes)}{limit} in {len(found.files)} files"
                 + (f" ({found.skipped} entries skipped: vanished or unreadable)" if found.skipped else ""))
        if not want.reasons:
            print(f"{d}: under the marks ({a.high_percent}%/{a.low_percent}%): {state}")
            return 0
        run = evict(root, found.files, want, a.dry_run)
        verb = "would remove" if a.dry_run else "removed"
        print(f"{d}: {'; '.join(want.reasons)}: {verb} {run.removed} files, {human(run.freed)} (last used "
              f"{when(run.oldest)} to {when(run.newest)}); before: {state}")
        after = Volume.of(os.fstatvfs(root))
        left = found.bytes - run.freed
        short = run.freed < want.bytes or run.removed < want.files
        if short and not a.dry_run:
            print(f"{WARNING}{d}: still above the low mark {a.low_percent}% after removing every file it could "
                  f"(directory {human(left)} left, volume space {percent(after.used, after.size)}, inodes "
                  f"{percent(after.inodes_used, after.inodes)}): the rest of the volume is not this instance's")
        return 0
    finally:
        os.close(root)


if __name__ == "__main__":
    sys.exit(main())
