"""`kvprov deploy INVENTORY [--check] [--limit P] [--tags T] [--allow-remount]`:
check the inventory, then converge every GPU node with playbooks/site.yml."""

from __future__ import annotations

import sys

from kvprov import check, lock, runner
from kvprov.errors import EXIT_CHECKS_FAILED, EXIT_OK, EXIT_UNREACHABLE


def add_parser(sub) -> None:
    p = sub.add_parser("deploy", help="converge GPU nodes: storage mount, RDMA, GDS, NIXL, SGLang unit",
                       description="Check the inventory, then run playbooks/site.yml on the gpu_nodes group "
                                   "through ansible-runner. Exit 0 ok, 1 a task failed, 2 bad inventory, "
                                   "3 unreachable hosts.")
    p.add_argument("inventory")
    p.add_argument("--check", action="store_true", help="dry run (Ansible check mode with diff): change nothing")
    p.add_argument("--diff", action="store_true", help="show file diffs")
    p.add_argument("--limit", help="Ansible host pattern")
    p.add_argument("--tags", help="only these role tags (e.g. nixl,sglang)")
    p.add_argument("--allow-remount", action="store_true",
                   help="remount the KV mount when its live options differ (only if nothing uses it)")
    p.add_argument("--json", metavar="FILE", help="write the per-host summary and failures as JSON")
    p.set_defaults(func=cmd_deploy)


def cmd_deploy(args) -> int:
    hosts = check.require_valid(args.inventory)
    print(f"deploy: {len(hosts)} host(s){' (check mode: no changes)' if args.check else ''}", file=sys.stderr)
    extravars = {"kvprov_storage_allow_remount": True} if args.allow_remount else {}
    with lock.inventory_lock(args.inventory, "deploy --check" if args.check else "deploy"):
        result = runner.run("site.yml", args.inventory, name="deploy", extravars=extravars, limit=args.limit,
                            tags=args.tags, check=args.check, diff=args.diff or args.check)
    if args.diff or args.check:
        print(runner.format_diffs(result) or "\nno file would change" if args.check else runner.format_diffs(result))
    runner.print_summary(result)
    if args.json:
        runner.write_json(result, args.json)
    if result.unreachable:
        return EXIT_UNREACHABLE
    if result.failures or result.rc != 0:
        return EXIT_CHECKS_FAILED
    return EXIT_OK
