"""`kvprov render INVENTORY --out DIR [--host H] [--json FILE|-]`: every file a host would get,
written under DIR/<host>/<absolute path> from the roles' own templates (kvprov.desired); with
--json, the list of them (host, path on the host, mode, sha256, where it was written).
Contacts no host."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from kvprov import desired, inventory
from kvprov.errors import EXIT_OK, EXIT_USAGE, KvprovError


def render(sources: list[str], out: Path, host: str | None = None, limit: str | None = None) -> list[Path]:
    states = desired.load(sources, limit)
    if host and host not in states:
        raise KvprovError(f"{inventory.describe(sources)}: no host {host!r} in gpu_nodes (hosts: {', '.join(states)})", EXIT_USAGE)
    written = []
    for name, state in states.items():
        if host and name != host:
            continue
        for dest, f in state["files"].items():
            path = out / name / dest.lstrip("/")
            if not path.resolve().is_relative_to(out.resolve()):  # a host or path with .. in it
                raise KvprovError(f"{inventory.describe(sources)}: host {name}: {dest} would be written outside {out}", EXIT_USAGE)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f["content"])
            path.chmod(int(f["mode"], 8))
            written.append(path)
    return sorted(written)


def add_parser(sub) -> None:
    p = sub.add_parser("render", help="write every file each host would get (contacts no host)",
                       description="Render the roles' templates for each host into DIR/<host>/<absolute path>.")
    inventory.add_inventory_args(p)
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument("--host", help="only this host")
    inventory.add_limit_arg(p, "only the hosts of this Ansible host pattern")
    p.add_argument("--json", metavar="FILE", help="also write the files as JSON to FILE: {\"files\": [{host, path, "
                                                  "mode, sha256, written}]} ('-': to stdout, instead of the paths)")
    p.set_defaults(func=cmd_render)


def cmd_render(args) -> int:
    from kvprov.validate.report import refuse_link
    from kvprov.validate.report import write_file

    if args.json and args.json != "-":
        refuse_link(args.json, "--json")
    written = render(inventory.from_args(args), args.out, args.host, args.limit)
    if args.json != "-":
        for path in written:
            print(path)
    if args.json:
        out = args.out.resolve()
        files = [{"host": p.relative_to(out).parts[0], "path": "/" + "/".join(p.relative_to(out).parts[1:]),
                  "mode": f"{p.stat().st_mode & 0o7777:04o}", "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
                  "written": str(p)} for p in (w.resolve() for w in written)]
        text = json.dumps({"files": files}, indent=2) + "\n"
        if args.json == "-":
            sys.stdout.write(text)
        else:
            write_file(args.json, text)
    return EXIT_OK
