"""`kvprov collect INVENTORY --out DIR`: capture each host's live KV-cache tier into
DIR/<host>/ (docs/bundle.md), one module call per host (playbooks/collect.yml)."""

from __future__ import annotations

import contextlib

import errno
import json
import os
import posixpath
import stat
import sys
from pathlib import Path

from kvprov import __version__, check, inventory, runner
from kvprov.desired import run_with_states
from kvprov.errors import EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, KvprovError

CAPTURE_TASK = "Probe the live state"


def _safe_name(name: str) -> str | None:
    """A bundle-relative name as the collector sent it, or None if it would leave the bundle
    (absolute, '..', '.', a NUL, a name that is not already normal)."""
    norm = posixpath.normpath(name)
    if not name or "\0" in name or norm == "." or norm.startswith(("/", "..")) or norm != name.rstrip("/"):
        return None
    return norm


def bundle_files(captured: dict, desired: dict | None) -> dict:
    """One host's bundle: the files the collector returned (the result of CAPTURE_TASK), and
    desired.json from the controller's own desired state (runner.RunResult.desired: the
    collector never gets the managed files' content: its arguments travel to the target)."""
    files = captured.get("files")
    files = dict(files) if isinstance(files, dict) else {}
    if isinstance(desired, dict):
        files["desired.json"] = json.dumps(desired, indent=2)
    return files


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _open_dir(parent: int, name: str, shown: Path) -> int:
    """Directory `name` of the directory open at `parent`, made 0700 if missing, opened without
    following a link (OSError ELOOP/ENOTDIR for a link or a file planted there)."""
    try:
        os.mkdir(name, 0o700, dir_fd=parent)
    except FileExistsError:
        pass
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise OSError(e.errno, "a symbolic link or not a directory: nothing is written through it", str(shown)) \
                from None
        raise


def _write_file(parent: int, name: str, text: str, shown: Path) -> None:
    """A private (0600) file `name` in the directory open at `parent`, never through a link: a
    symbolic link there fails (ELOOP), so does anything but a regular file with one link."""
    fd = os.open(name, _FILE_FLAGS, 0o600, dir_fd=parent)
    with os.fdopen(fd, "w") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            raise OSError(errno.EEXIST, "not a regular file of its own (a hard link, a device, a FIFO): "
                          "nothing is written to it", str(shown))
        os.ftruncate(fd, 0)
        os.fchmod(fd, 0o600)
        fh.write(text)


def write_bundle(root: Path, files: dict) -> list[str]:
    """Write one host's captured files under root (DIR/<host>); return the names written.

    Only root's parent (the --out directory the user gave) is opened by path; root and every
    directory and file below it are opened relative to their directory's descriptor without
    following links (a link planted at DIR/<host>, DIR/<host>/files ... raises OSError and
    nothing is written through it). A capture holds the host's configuration: directories
    0700, files 0600. Names that would leave the bundle are dropped."""
    root.parent.mkdir(parents=True, exist_ok=True)
    base = os.open(root.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    dirs: dict[str, int] = {}  # bundle-relative directory ("" is root) -> its descriptor
    try:
        dirs[""] = _open_dir(base, root.name, root)
        written = []
        for name, text in sorted(files.items()):
            rel = _safe_name(str(name))
            if rel is None or not isinstance(text, str):
                continue
            parts = rel.split("/")
            here = ""
            for part in parts[:-1]:
                below = f"{here}/{part}" if here else part
                if below not in dirs:
                    dirs[below] = _open_dir(dirs[here], part, root / below)
                here = below
            _write_file(dirs[here], parts[-1], text, root / rel)
            written.append(rel)
        return written
    finally:
        for fd in [base, *dirs.values()]:
            os.close(fd)


def collect(sources: str | list[str], out: Path, limit: str | None = None, stream=None, *,
            timeout: int) -> runner.RunResult:
    check.require_valid(sources)
    result = run_with_states("collect.yml", sources, name="collect",
                        extravars={"kvprov_version": __version__, "kvprov_collect_timeout": timeout},
                        limit=limit, stream=stream or sys.stderr, capture=CAPTURE_TASK)
    for host, res in result.captured.items():
        if _safe_name(host) != host or "/" in host:
            raise KvprovError(f"host name {host!r} cannot name a directory under --out {out}", EXIT_USAGE)
        try:
            write_bundle(out / host, bundle_files(res, result.desired.get(host)))
        except OSError as e:
            raise KvprovError(f"cannot write the bundle of {host} under --out {out}: "
                              f"{e.filename or out / host}: {e.strerror or e}", EXIT_USAGE) from None
    return result


def add_parser(sub) -> None:
    p = sub.add_parser("collect", help="capture each host's live state into DIR/<host>/ (a validation bundle)",
                       description="Capture mountinfo/mountstats after a forced small write, modules, RDMA links, "
                                   "GDS, cufile.json, the managed config files, unit states, a NIXL probe, storage "
                                   "dirs and packages into DIR/<host>/ (docs/bundle.md), for `kvprov validate "
                                   "--bundle` here or elsewhere.")
    inventory.add_inventory_args(p)
    p.add_argument("--out", required=True, type=Path)
    inventory.add_limit_arg(p)
    p.add_argument("--timeout", type=int, default=30, metavar="S", help="seconds for each host-side probe")
    p.add_argument("--json", metavar="FILE", help="also write the run as JSON to FILE: each host's task counts, the "
                                                  "failures and `bundles` {host: directory} ('-': to stdout, the "
                                                  "bundle list to stderr)")
    runner.add_list_hosts_arg(p)
    p.set_defaults(func=cmd_collect)


def cmd_collect(args) -> int:
    if args.out.exists() and not args.out.is_dir():
        raise KvprovError(f"--out {args.out} is not a directory", EXIT_USAGE)
    if args.json and args.json != "-":
        runner.refuse_link(args.json, "--json")
    sources = inventory.from_args(args)
    if getattr(args, "list_hosts", False):
        check.require_valid(sources)
        return runner.print_list_hosts(args, ["collect.yml"], sources, name="collect-list-hosts")
    human = sys.stderr if args.json == "-" else sys.stdout  # with --json -, stdout is the JSON's alone
    with contextlib.redirect_stdout(sys.stderr) if args.json == "-" else contextlib.nullcontext():
        result = collect(sources, args.out, args.limit, timeout=args.timeout)
    for host in sorted(result.captured):
        print(f"{args.out / host}", file=human)
    if result.failures:
        runner.print_summary(result, sys.stderr, rerun=["collect", *inventory.argv(sources), "--out", str(args.out)])
    if args.json:
        runner.write_json(result, args.json, extra={"bundles": {h: str(args.out / h) for h in sorted(result.captured)}})
    return EXIT_UNREACHABLE if result.unreachable else (EXIT_OK if not result.failures else 1)
