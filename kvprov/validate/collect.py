"""`kvprov collect INVENTORY --out DIR`: capture each host's live KV-cache tier into
DIR/<host>/ (docs/bundle.md), one module call per host (playbooks/collect.yml)."""

from __future__ import annotations

import json
import os
import posixpath
import sys
from pathlib import Path

from kvprov import __version__, check, inventory, runner
from kvprov.errors import EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, KvprovError

CAPTURE_TASK = "Capture the live state"


def _safe_name(name: str) -> str | None:
    """A bundle-relative name as the collector sent it, or None if it would leave the bundle."""
    norm = posixpath.normpath(name)
    if not name or norm.startswith(("/", "..")) or norm != name.rstrip("/"):
        return None
    return norm


def bundle_files(captured: dict) -> dict:
    """One host's bundle from the capture task's result (playbooks/collect.yml): the files the
    collector returned, and desired.json from the controller's own desired state (the collector
    never gets the managed files' content: its arguments are logged on the target)."""
    data = (captured.get("ansible_facts") or {}).get("kvprov_collected") or {}
    files = dict(data.get("files") or {})
    if isinstance(data.get("desired"), dict):
        files["desired.json"] = json.dumps(data["desired"], indent=2)
    return files


def write_bundle(root: Path, files: dict) -> list[str]:
    """Write one host's captured files under root; return the names written."""
    written = []
    for name, text in sorted(files.items()):
        rel = _safe_name(str(name))
        if rel is None or not isinstance(text, str):
            continue
        path = root / rel
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        for d in reversed(Path(rel).parents[:-1]):  # each directory 0700 (mkdir's parents would be 0755)
            (root / d).mkdir(mode=0o700, exist_ok=True)
        # a capture holds the host's configuration: readable by its owner only, never through a link
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as fh:
            os.fchmod(fh.fileno(), 0o600)
            fh.write(text)
        written.append(rel)
    return written


def collect(sources: str | list[str], out: Path, limit: str | None = None, stream=None, *,
            timeout: int) -> runner.RunResult:
    check.require_valid(sources)
    result = runner.run("collect.yml", sources, name="collect",
                        extravars={"kvprov_version": __version__, "kvprov_collect_timeout": timeout},
                        limit=limit, stream=stream or sys.stderr, capture=CAPTURE_TASK)
    for host, res in result.captured.items():
        write_bundle(out / host, bundle_files(res))
    return result


def add_parser(sub) -> None:
    p = sub.add_parser("collect", help="capture each host's live state into DIR/<host>/ (a validation bundle)",
                       description="Capture mountinfo/mountstats after a forced small write, modules, RDMA links, "
                                   "GDS, cufile.json, the managed config files, unit states, a NIXL probe, storage "
                                   "dirs and packages into DIR/<host>/ (docs/bundle.md), for `kvprov validate "
                                   "--bundle` here or elsewhere.")
    inventory.add_inventory_args(p)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--limit", help="Ansible host pattern")
    p.add_argument("--timeout", type=int, default=30, metavar="S", help="seconds for each host-side probe")
    p.set_defaults(func=cmd_collect)


def cmd_collect(args) -> int:
    if args.out.exists() and not args.out.is_dir():
        raise KvprovError(f"--out {args.out} is not a directory", EXIT_USAGE)
    sources = inventory.from_args(args)
    result = collect(sources, args.out, args.limit, timeout=args.timeout)
    for host in sorted(result.captured):
        print(f"{args.out / host}")
    if result.failures:
        runner.print_summary(result, sys.stderr, rerun=["collect", *inventory.argv(sources), "--out", str(args.out)])
    return EXIT_UNREACHABLE if result.unreachable else (EXIT_OK if not result.failures else 1)
