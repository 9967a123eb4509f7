"""`kvprov render INVENTORY --out DIR [--host H]`: every file a host would get, written
under DIR/<host>/<absolute path> from the roles' own templates (kvprov.desired).
Contacts no host."""

from __future__ import annotations

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
    p.set_defaults(func=cmd_render)


def cmd_render(args) -> int:
    for path in render(inventory.from_args(args), args.out, args.host, args.limit):
        print(path)
    return EXIT_OK
