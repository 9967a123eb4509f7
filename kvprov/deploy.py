"""`kvprov deploy INVENTORY [--check] [--full] [--limit P] [--tags T] [--skip-tags T] [--list-hosts] [--allow-remount]`:
check the inventory, audit every GPU node (kvprov.audit: one module call a host), then
converge with playbooks/site.yml only the hosts the audit did not find clean. A host the
audit calls clean gets changed=0 from a full run (the lab tests prove this for every kind
of drift the audit knows); --full runs the playbook on every host regardless."""

from __future__ import annotations

import contextlib
import sys
import time

from kvprov import audit, check, deployed_secrets, inventory, lock, runner
from kvprov.converge import converge, exit_code, rollout
from kvprov.errors import EXIT_USAGE, KvprovError
from kvprov.validate.result import FAIL


def add_parser(sub) -> None:
    p = sub.add_parser("deploy", help="converge GPU nodes: storage mount, RDMA, GDS, NIXL, SGLang unit",
                       description="Check the inventory, then run playbooks/site.yml on the gpu_nodes group "
                                   "through ansible-runner. Exit 0 ok, 1 a task failed, 2 bad inventory, "
                                   "3 unreachable hosts (also when others failed a task). Failed and unreachable "
                                   "hosts are written to a retry file for --limit @FILE.")
    inventory.add_inventory_args(p)
    p.add_argument("-C", "--check", action="store_true", help="dry run (Ansible check mode with diff): change nothing")
    p.add_argument("--full", action="store_true",
                   help="run the playbook on every host, also those the audit finds clean (by default the "
                        "hosts are audited first and only those with drift, or that could not be audited, "
                        "are converged)")
    p.add_argument("-D", "--diff", action="store_true", help="show file diffs")
    inventory.add_limit_arg(p, "Ansible host pattern; @FILE: the patterns in FILE, one a line (a retry file)")
    p.add_argument("-t", "--tags", help="only these role tags (e.g. nixl,sglang)")
    p.add_argument("--skip-tags", metavar="TAGS", help="skip the tasks of these role tags (e.g. gds,nixl)")
    runner.add_list_hosts_arg(p, all_listings=True)
    p.add_argument("--allow-remount", action="store_true",
                   help="remount the KV mount when its live options differ (only if nothing uses it)")
    p.add_argument("--stop-engines", action="store_true",
                   help="with --allow-remount: stop the running engines that require the mount, remount, "
                        "start them again (otherwise such a remount is refused)")
    p.add_argument("--json", metavar="FILE", help="write the per-host summary and failures as JSON ('-': to stdout, "
                                                  "the human summary to stderr)")
    p.set_defaults(func=cmd_deploy)


def cmd_deploy(args) -> int:
    listing = runner.chosen_listing(args)
    if listing:  # what a --full run would do: no audit, no lock, no host contacted
        sources = inventory.from_args(args)
        check.require_valid(sources)
        if not args.full and listing != "--syntax-check":
            print(f"deploy {listing}: what a run does at most (without --full, only on the hosts the audit finds "
                  "drifted or cannot audit)", file=sys.stderr)
        return runner.print_list_hosts(args, ["site.yml"], sources, name="deploy-list-hosts",
                                       extravars=rollout(sources), tags=args.tags, skip_tags=skip_tags(args))
    with contextlib.redirect_stdout(sys.stderr) if args.json == "-" else contextlib.nullcontext():
        result, clean = deploy(args)  # with --json -, stdout is the JSON's alone
    if args.json:
        runner.write_json(result, args.json, clean=clean)
    return exit_code(result)


def deploy(args) -> tuple[runner.RunResult, list[str]]:
    sources = inventory.from_args(args)
    hosts = check.require_valid(sources)
    print(f"deploy: {len(hosts)} host(s) in the inventory{f', limited to {args.limit}' if args.limit else ''}"
          f"{' (check mode: no changes)' if args.check else ''}", file=sys.stderr)
    command = "deploy --check" if args.check else "deploy"
    if args.stop_engines and not args.allow_remount:
        raise KvprovError("--stop-engines goes with --allow-remount", EXIT_USAGE)
    if args.json and args.json != "-":
        runner.refuse_link(args.json, "--json")  # before anything runs (write_json checks again)
    with lock.inventory_lock(sources, command):
        todo, clean = ([], []) if args.full else audit_first(sources, args.limit)
        rotated = deployed_secrets.changed(sources, clean)  # the audit does not see secrets' contents
        if rotated:
            print(f"deploy: {len(rotated)} audited-clean host(s) have secrets (files or values) other than those last "
                  f"deployed to them from this controller (or none recorded): converged too: {runner.shorten(rotated)}",
                  file=sys.stderr)
            todo, clean = sorted(todo + rotated), [h for h in clean if h not in rotated]
        result = runner.RunResult(rc=0, artifacts=None)  # every host clean: nothing to run
        if args.full or todo:
            result = converge(sources, command, args.limit if args.full else ",".join(todo), check=args.check,
                              diff=args.diff or args.check, tags=args.tags, skip_tags=skip_tags(args),
                              allow_remount=args.allow_remount, stop_engines=args.stop_engines)
            if not args.check and secrets_deployed(args.tags, skip_tags(args)):
                deployed_secrets.save(sources, [h for h, st in result.hosts.items()
                                                if not st.failed and not st.unreachable])
    if args.diff or args.check:
        print(runner.format_diffs(result) or "\nno file would change" if args.check else runner.format_diffs(result))
    if result.hosts or result.failures:
        runner.print_summary(result, rerun=["deploy", *(["--check"] if args.check else []), *inventory.argv(sources)])
    if clean:
        print(f"\n{len(clean)} host(s) audited clean, not run (--full runs them too): {runner.shorten(clean)}")
    return result, clean


# The tags that skip the engine role's secret files (roles/engine/tasks/secrets.yml: configure, and
# engine from the role's include, whose own tags are engine and always); `all` skips everything.
SECRETS_SKIPPED_BY = frozenset({"engine", "configure", "always", "all"})


def skip_tags(args) -> str | None:
    return getattr(args, "skip_tags", None)


def secrets_deployed(tags: str | None, skip_tags: str | None) -> bool:
    """Whether a run with these --tags and --skip-tags writes the engine's secret files (then
    deploy records what each host got: kvprov.deployed_secrets)."""
    if tags is not None and "engine" not in tags.split(","):
        return False
    return not SECRETS_SKIPPED_BY & {t.strip() for t in (skip_tags or "").split(",")}


def audit_first(sources: list[str], limit: str | None) -> tuple[list[str], list[str]]:
    """Audit the hosts: (the hosts to converge, the clean ones). Hosts with drift, and those the
    audit could not reach or read, are converged."""
    t0 = time.monotonic()
    print("deploy: auditing the hosts first (--full skips this)", file=sys.stderr)
    results = audit.gather(sources, limit, timeout=30)[0]
    hosts = sorted({r.host for r in results})
    todo = sorted({r.host for r in results if r.status == FAIL})
    clean = [h for h in hosts if h not in todo]
    print(f"deploy: audit of {len(hosts)} host(s) in {time.monotonic() - t0:.1f}s: {len(clean)} clean, "
          f"{len(todo)} to converge{': ' + runner.shorten(todo) if todo else ''}", file=sys.stderr)
    return todo, clean
