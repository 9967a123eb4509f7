"""`kvprov validate --bundle DIR/HOST [--json F] [--junit F]`: the checks on captured bundles.

Exit 0: no check failed (warnings and skips allowed); 1: a check failed; 2: no such bundle,
or a bundle without a usable desired.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

from kvprov.errors import EXIT_CHECKS_FAILED, EXIT_OK, EXIT_USAGE, KvprovError
from kvprov.validate import evaluate, report


def add_parser(sub) -> None:
    p = sub.add_parser(
        "validate", help="prove the KV-cache tier: mount, RDMA, pNFS, GDS, NIXL, engine (from a bundle)",
        description="Check what a host really runs against its desired state: the live mount (RDMA, NFS version, "
                    "pNFS layout used after a real write), RDMA, GDS, NIXL and the engine services. With --bundle "
                    "the checks run offline on captured files (docs/bundle.md), e.g. a customer's capture. "
                    "Exit 0: no check failed; 1: a check failed; 2: no usable bundle.")
    p.add_argument("inventory", nargs="?", metavar="INVENTORY",
                   help="live hosts of an inventory (not in this version: use --bundle on a capture)")
    p.add_argument("--bundle", action="append", default=[], metavar="DIR/HOST",
                   help="a host's bundle directory (repeat for several hosts)")
    p.add_argument("--json", metavar="F", help="also write the results as JSON to F ('-': to stdout, no table)")
    p.add_argument("--junit", metavar="F", help="also write JUnit XML to F (a testcase per check)")
    p.set_defaults(func=cmd_validate)


def _write(path: str, text: str) -> None:
    try:
        Path(path).write_text(text)
    except OSError as e:
        raise KvprovError(f"cannot write {path}: {e.strerror or e}", EXIT_USAGE) from None


def cmd_validate(args) -> int:
    if args.inventory and args.bundle:
        raise KvprovError("give either an inventory or --bundle, not both", EXIT_USAGE)
    if args.inventory:
        raise KvprovError("validating live hosts from an inventory is not in this version of kvprov; capture a "
                          "bundle per host (docs/bundle.md) and run `kvprov validate --bundle DIR/HOST`", EXIT_USAGE)
    if not args.bundle:
        raise KvprovError("give --bundle DIR/HOST (a bundle directory, see docs/bundle.md)", EXIT_USAGE)
    results = []
    for path in args.bundle:
        results += evaluate.evaluate_bundle(path)
    if args.json:
        text = report.format_json(results)
        if args.json == "-":
            sys.stdout.write(text)
        else:
            _write(args.json, text)
    if args.junit:
        _write(args.junit, report.to_junit(results))
    if args.json != "-":
        print(report.format_table(results))
    return EXIT_OK if report.ok(results) else EXIT_CHECKS_FAILED
