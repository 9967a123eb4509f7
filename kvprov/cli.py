"""The `kvprov` command line. Each command lives in a module of the same name."""

from __future__ import annotations

import argparse
import sys

import importlib

from kvprov import __version__
from kvprov.errors import EXIT_USAGE, KvprovError


# Modules that each add one command (their `add_parser(subparsers)`), in help order.
COMMANDS = [
    "kvprov.check",
    "kvprov.render",
    "kvprov.deploy",
    "kvprov.validate.cli",
    "kvprov.validate.collect",
    "kvprov.bench",
    "kvprov.audit",
    "kvprov.storage.cli",
    "kvprov.loadtest",
    "kvprov.lab.cli",
]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kvprov",
        description="Provision and prove a GPU KV-cache tier on NetApp pNFS over RDMA.",
        epilog="Exit codes: 0 ok, 1 checks failed/drift, 2 usage or inventory error, "
               "3 unreachable hosts, 4 environment (root, tools, disk, ports), 5 lab failure.")
    p.add_argument("--version", action="version", version=f"kvprov {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(name).add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: 2 on usage errors, 0 for --help/--version
        return int(e.code or 0) and EXIT_USAGE
    try:
        return args.func(args) or 0
    except KvprovError as e:
        print(f"kvprov: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("kvprov: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
