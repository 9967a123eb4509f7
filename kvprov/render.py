"""`kvprov render INVENTORY --out DIR [--host H]`: every file a host would get, written
under DIR/<host>/<absolute path> by the roles' own templates (playbooks/render.yml).
Contacts no host."""

from __future__ import annotations

import io
import sys
from pathlib import Path

from kvprov import check, runner
from kvprov.errors import EXIT_CHECKS_FAILED, EXIT_OK, EXIT_USAGE, KvprovError


def render(inventory: str, out: Path, host: str | None = None, stream=None) -> list[Path]:
    hosts = check.require_valid(inventory)
    if host and host not in hosts:
        raise KvprovError(f"{inventory}: no host {host!r} in gpu_nodes (hosts: {', '.join(hosts)})", EXIT_USAGE)
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    result = runner.run("render.yml", inventory, name="render", extravars={"kvprov_render_dir": str(out)},
                        limit=host, stream=stream or io.StringIO())  # quiet: only the paths are output
    if result.failures or result.rc != 0:
        runner.print_summary(result, sys.stderr)
        raise KvprovError("render failed", EXIT_CHECKS_FAILED)
    return sorted(p for h in ([host] if host else hosts) for p in (out / h).rglob("*") if p.is_file())


def add_parser(sub) -> None:
    p = sub.add_parser("render", help="write every file each host would get (contacts no host)",
                       description="Render the roles' templates for each host into DIR/<host>/<absolute path>.")
    p.add_argument("inventory")
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument("--host", help="only this host")
    p.set_defaults(func=cmd_render)


def cmd_render(args) -> int:
    for path in render(args.inventory, args.out, args.host):
        print(path)
    return EXIT_OK
