#!/usr/bin/python3
# Managed by kvprov (roles/engine/files/kvprov-evict.py): local changes are overwritten.
"""kvprov-evict: keep one KV namespace (a directory on the shared volume) under its marks.

Usage: kvprov-evict [--high-percent H] [--low-percent L] [--max-bytes B] [--keep-minutes K]
                    [--retire-days D] [--dry-run] DIR

One evictor at a time per directory, across hosts: it first takes the lease, an exclusive
fcntl lock on DIR/.kvprov-evict.lock (NFSv4 locks hold across clients; the server frees the
lock of a client that died once its NFS lease expires). When another evictor holds it, it
says so and exits 0: the next timer run tries again.

When the volume holding DIR has H percent of its space or of its inodes in use, or DIR holds
H percent of B bytes (B > 0), the regular files of DIR that were used least recently go first,
never one used in the last K minutes. How much goes:
  - DIR's own limit: down to L percent of B (the directory's own excess, all of it);
  - the volume's marks: only DIR's fair share of the volume's excess over L percent, that
    excess scaled by DIR's share of what is used (its bytes / the volume's used bytes, its files
    / the volume's used inodes). Every namespace's evictor takes its own share, so together
    they bring the volume under L percent; a directory never pays for what other tenants
    wrote, and never empties itself in one run because others fill the volume (a tenant that
    never evicts still makes each run take a share, until the volume is under H percent).
Retiring old namespaces (--retire-days D): every run, on every host, first touches
DIR/.kvprov-in-use, so its mtime is the last time any host's evictor ran for DIR. A keying change
(kvprov/namespace.py) moves a model's hosts to a new namespace, PREFIX-<fingerprint>, beside the
old one; the old one then has no evictor left. So after its own run, the evictor of a namespace
PREFIX-<12 hex> looks at its siblings PREFIX-<12 hex other>: one whose .kvprov-in-use is older
than D days is emptied (its regular files, never one used in the last K minutes), under that
sibling's own lease. A sibling without the marker, a link, or on another filesystem is left
alone; directories stay.

"Used" is the later of a file's atime and mtime: the atime where the mount updates it
(relatime: at the first read after a write, then once a day), the last write where it
does not (noatime). See docs/capacity.md.

Safety on a shared volume: DIR itself is opened with O_NOFOLLOW; every directory below
it is opened relative to its parent with O_NOFOLLOW and must be on the same filesystem;
files are removed with unlinkat() relative to their parent, after a fresh lstat() says
they are still a regular file not used since the scan. Links, devices, sockets and other
filesystems are never entered or touched; no directory is ever removed; a file that
vanishes or cannot be stat'ed is skipped. The lease file is opened relative to DIR with
O_NOFOLLOW|O_NONBLOCK (a link or a FIFO there is refused), created mode 0600, never removed.
Stdlib only (runs with the host's python3).

Exit status: 0 done (also when another evictor holds the lease, and when DIR's share cannot
be removed without a file used in the last K minutes: said in the journal), 1 DIR or its lease
file unusable, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import math
import os
import re
import stat
import sys
import time
from dataclasses import dataclass, field

MAX_DEPTH = 32  # directories below DIR (the engines use at most a few levels)
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
LEASE = ".kvprov-evict.lock"  # in DIR: the lock every evictor of DIR takes first, on any host
LEASE_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
IN_USE = ".kvprov-in-use"  # in DIR: its mtime is the last run of any host's evictor for DIR
OWN_FILES = (LEASE, IN_USE)  # never counted, never removed
FINGERPRINTED = re.compile(r"(.+)-[0-9a-f]{12}")  # a shared namespace's name: PREFIX-<fingerprint>
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


def share(excess: int, mine: int, used: int) -> int:
    """Pure: this directory's fair share of a volume's excess: the excess scaled by the part of
    the volume's use that is this directory's (rounded up, at most all of it)."""
    if excess <= 0 or mine <= 0 or used <= 0:
        return 0
    return min(mine, -(-excess * mine // used))


def need(vol: Volume, dir_bytes: int, dir_files: int, high: int, low: int, max_bytes: int) -> Need:
    """Pure: how much to remove, from the volume's use and DIR's size against the marks.
    Nothing unless a high mark is reached; then DIR's own excess over its limit, and DIR's fair
    share (share()) of the volume's excess over the low mark: the larger of the byte needs."""
    nbytes = nfiles = 0
    reasons = []
    if vol.size and vol.used * 100 >= high * vol.size:
        excess = vol.used - vol.size * low // 100
        nbytes = share(excess, dir_bytes, vol.used)
        reasons.append(f"volume space {percent(vol.used, vol.size)} >= {high}%: this directory's share "
                       f"{human(nbytes)} ({percent(dir_bytes, vol.used)} of the used space) of the "
                       f"{human(excess)} over {low}%")
    if vol.inodes and vol.inodes_used * 100 >= high * vol.inodes:
        excess = vol.inodes_used - vol.inodes * low // 100
        nfiles = share(excess, dir_files, vol.inodes_used)
        reasons.append(f"volume inodes {percent(vol.inodes_used, vol.inodes)} >= {high}%: this directory's "
                       f"share {nfiles} files ({percent(dir_files, vol.inodes_used)} of the used inodes) of "
                       f"the {excess} over {low}%")
    if max_bytes and dir_bytes * 100 >= high * max_bytes:
        nbytes = max(nbytes, dir_bytes - max_bytes * low // 100)
        reasons.append(f"directory {human(dir_bytes)} >= {high}% of {human(max_bytes)}")
    return Need(nbytes, nfiles, tuple(reasons))


def choose(files: list[Entry], want: Need, keep_since: float = math.inf) -> list[Entry]:
    """Pure: the least recently used files, oldest first, until `want` is met (all of them
    when it cannot be); never one used at or after `keep_since` (epoch seconds)."""
    out, freed = [], 0
    for f in sorted(files, key=lambda e: (e.last_use, e.parts)):
        if (freed >= want.bytes and len(out) >= want.files) or f.last_use >= keep_since:
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


def mark_in_use(root: int) -> None:
    """Touch DIR/.kvprov-in-use (created 0600 relative to DIR, never through a link)."""
    fd = os.open(IN_USE, LEASE_FLAGS, 0o600, dir_fd=root)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        os.utime(fd)
    finally:
        os.close(fd)


def retirable(names: list[str], own: str) -> list[str]:
    """Pure: DIR's sibling namespaces, the same PREFIX with another fingerprint, sorted."""
    m = FINGERPRINTED.fullmatch(own)
    if not m:
        return []
    same = re.compile(re.escape(m.group(1)) + r"-[0-9a-f]{12}")
    return sorted(n for n in names if n != own and same.fullmatch(n))


def take_lease(root: int) -> int | None:
    """The lease of DIR (an fd): the lock file's fd, held until closed; None when another
    evictor (any process, any host) holds it. OSError when the file cannot be used: a link, a
    FIFO or another non-regular file in its place, no permission, or no locks on the mount."""
    fd = os.open(LEASE, LEASE_FLAGS, 0o600, dir_fd=root)  # O_NOFOLLOW: ELOOP on a link
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # an fcntl() lock: NFS carries it to the server
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EACCES, errno.EAGAIN):
            return None
        raise
    return fd


def scan(root: int, depth: int = MAX_DEPTH) -> Scan:
    """Every regular file below the directory `root` (an fd), on its filesystem only; the
    lease file at the top is not one of them."""
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
        if not parts and e.name in OWN_FILES:
            continue
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


def evict(root: int, files: list[Entry], want: Need, dry_run: bool = False, keep_since: float = math.inf) -> Run:
    run = Run()
    for f in choose(files, want, keep_since):
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
    p.add_argument("--high-percent", type=int, default=85, help="start at this use (1..100)")
    p.add_argument("--low-percent", type=int, default=70, help="stop under this use (0..high-1)")
    p.add_argument("--max-bytes", type=int, default=0, help="the directory's own limit (0: none)")
    p.add_argument("--keep-minutes", type=int, default=60, help="never remove a file used this recently (0: none)")
    p.add_argument("--retire-days", type=int, default=0,
                   help="empty a sibling namespace no evictor has run on for this many days (0: never)")
    p.add_argument("--dry-run", action="store_true", help="say what would go, remove nothing")
    a = p.parse_args(argv)
    if not (1 <= a.high_percent <= 100 and 0 <= a.low_percent < a.high_percent and a.max_bytes >= 0
            and a.keep_minutes >= 0 and a.retire_days >= 0):
        p.error("need 1 <= --high-percent <= 100, 0 <= --low-percent < --high-percent, --max-bytes >= 0, "
                "--keep-minutes >= 0, --retire-days >= 0")
    d = a.directory
    try:
        root = open_root(d)
    except OSError as e:
        print(f"{d}: cannot open the directory without following a link: {e.strerror} "
              "(kvprov deploy creates it; a link there is refused)", file=sys.stderr)
        return 1
    try:
        if not a.dry_run:
            try:
                mark_in_use(root)
            except OSError as e:
                print(f"{WARNING}{d}: cannot touch {IN_USE}: {e.strerror} (the evictors of newer namespaces may "
                      f"take this one for abandoned after --retire-days)")
        try:
            lease = take_lease(root)
        except OSError as e:
            print(f"{d}: cannot take the lease {LEASE}: {e.strerror} (a link or non-regular file there is "
                  "refused; it must be the engine user's, the same uid on every host; the mount must "
                  "support locks)", file=sys.stderr)
            return 1
        if lease is None:
            print(f"{d}: another evictor holds the lease ({LEASE}): nothing done, the next run tries again")
            return 0
        taken = time.time()
        try:
            rc = _run(root, d, a)
        finally:
            os.close(lease)  # closing the fd drops the lock
            print(f"{d}: released the lease, held {taken:.3f} to {time.time():.3f} (epoch seconds)")
    finally:
        os.close(root)
    if a.retire_days:
        retire(d, a)
    return rc


def retire(d: str, a: argparse.Namespace) -> None:
    """Empty DIR's sibling namespaces that no evictor has run on for --retire-days (module doc)."""
    parent, own = os.path.split(os.path.normpath(d))
    now = time.time()
    keep_since = now - 60 * a.keep_minutes if a.keep_minutes else math.inf
    try:
        top = os.open(parent, DIR_FLAGS)
    except OSError as e:
        print(f"{WARNING}{parent}: cannot open it to retire old namespaces: {e.strerror}")
        return
    try:
        dev = os.fstat(top).st_dev
        for name in retirable(os.listdir(top), own):
            try:
                sib = os.open(name, DIR_FLAGS, dir_fd=top)  # O_NOFOLLOW: a link is not entered
            except OSError:
                continue
            try:
                if os.fstat(sib).st_dev == dev:
                    _retire(sib, f"{parent}/{name}", now - 86400 * a.retire_days, keep_since, a)
            finally:
                os.close(sib)
    finally:
        os.close(top)


def _retire(sib: int, path: str, cutoff: float, keep_since: float, a: argparse.Namespace) -> None:
    try:
        st = os.stat(IN_USE, dir_fd=sib, follow_symlinks=False)
    except OSError:
        print(f"{path}: no {IN_USE}: not retired (no evictor of this kind has run on it)")
        return
    if not stat.S_ISREG(st.st_mode) or st.st_mtime >= cutoff:
        return
    try:
        lease = take_lease(sib)
    except OSError as e:
        print(f"{WARNING}{path}: cannot take its lease: {e.strerror}; not retired")
        return
    if lease is None:
        print(f"{path}: another evictor holds its lease: not retired this run")
        return
    try:
        found = scan(sib)
        run = evict(sib, found.files, Need(found.bytes, len(found.files), ()), a.dry_run, keep_since)
    finally:
        os.close(lease)
    print(f"{path}: an old namespace, no evictor has run on it since {when(st.st_mtime)} (over {a.retire_days} "
          f"days): {'would remove' if a.dry_run else 'removed'} {run.removed} of {len(found.files)} files, "
          f"{human(run.freed)}")


def _run(root: int, d: str, a: argparse.Namespace) -> int:
    now = time.time()
    keep_since = now - 60 * a.keep_minutes if a.keep_minutes else math.inf
    vol = Volume.of(os.fstatvfs(root))
    if not a.max_bytes and not need(vol, 0, 0, a.high_percent, a.low_percent, 0).reasons:
        # no limit of its own and the volume under its marks: nothing can be due, so no scan (a
        # namespace of millions of files on NFS costs minutes of metadata calls to walk)
        print(f"{d}: under the marks ({a.high_percent}%/{a.low_percent}%): volume space "
              f"{percent(vol.used, vol.size)}, inodes {percent(vol.inodes_used, vol.inodes)}; not scanned")
        return 0
    found = scan(root)
    want = need(vol, found.bytes, len(found.files), a.high_percent, a.low_percent, a.max_bytes)
    limit = f" of limit {human(a.max_bytes)}" if a.max_bytes else ""
    state = (f"volume space {percent(vol.used, vol.size)}, inodes {percent(vol.inodes_used, vol.inodes)}; "
             f"directory {human(found.bytes)}{limit} in {len(found.files)} files"
             + (f" ({found.skipped} entries skipped: vanished or unreadable)" if found.skipped else ""))
    if not want.reasons:
        print(f"{d}: under the marks ({a.high_percent}%/{a.low_percent}%): {state}")
        return 0
    run = evict(root, found.files, want, a.dry_run, keep_since)
    verb = "would remove" if a.dry_run else "removed"
    print(f"{d}: {'; '.join(want.reasons)}: {verb} {run.removed} files, {human(run.freed)} (last used "
          f"{when(run.oldest)} to {when(run.newest)}); before: {state}")
    recent = [f for f in found.files if f.last_use >= keep_since]
    if run.freed < want.bytes or run.removed < want.files:
        left = found.bytes - run.freed
        why = (f"{len(recent)} files ({human(sum(f.size for f in recent))}) used in the last {a.keep_minutes} "
               "minutes are kept" if recent else "files vanished or were used again during the run")
        print(f"{WARNING}{d}: short of what it had to remove ({human(run.freed)} of {human(want.bytes)}, "
              f"{run.removed} of {want.files} files; directory {human(left)} left): {why}")
    if not a.dry_run:
        after = Volume.of(os.fstatvfs(root))
        if after.size and after.used * 100 >= a.low_percent * after.size:
            print(f"{d}: the volume is still at {percent(after.used, after.size)} (low mark {a.low_percent}%): "
                  "the rest of its excess is the other tenants' share")
    return 0


if __name__ == "__main__":
    sys.exit(main())
