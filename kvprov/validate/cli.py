"""`kvprov validate [INVENTORY] [-i SOURCE ...] [--bundle DIR/HOST ...] [--no-bench] [--json F] [--junit F]`.

Live: collect each host's state (kvprov.validate.collect), run the checks on it, then the
throughput acceptance test (kvprov.bench) unless --no-bench. Offline: the checks on
captured bundles, against their own desired.json or, given an inventory, the desired state
recomputed from it (a bundle that disagrees fails bundle.desired). Every host of a live run is in
every report: one whose state could not be captured fails host.collect. Exit 0: no check failed
(warnings and skips allowed); 1: a check failed (host.collect of a host whose capture failed,
too); 2: no such bundle, or a bundle without a usable desired.json; 3: a host was unreachable
(whatever else failed: README's exit codes).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from kvprov import bench, check, desired, inventory, runner
from kvprov.errors import EXIT_CHECKS_FAILED, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, KvprovError
from kvprov.validate import collect, evaluate, report
from kvprov.validate.result import FAIL, Result, show, summarize


def add_parser(sub) -> None:
    p = sub.add_parser(
        "validate", help="prove the KV-cache tier: mount, RDMA, pNFS, GDS, NIXL, engine (from a bundle)",
        description="Check what a host really runs against its desired state: the live mount (RDMA, NFS version, "
                    "pNFS layout used after a real write), RDMA, GDS, NIXL and the engine services. With --bundle "
                    "the checks run offline on captured files (docs/bundle.md), e.g. a customer's capture. "
                    "Exit 0: no check failed; 1: a check failed; 2: no usable bundle; 3: a host was unreachable "
                    "(whatever else failed).")
    inventory.add_inventory_args(
        p, required=False, help="validate the live hosts of this inventory (collects a bundle per host first); with "
                                "--bundle: judge each bundle against the desired state recomputed from it (contacts "
                                "no host), not the bundle's own desired.json; bundle.desired fails where the two "
                                "disagree")
    inventory.add_limit_arg(p, "Ansible host pattern (with INVENTORY)")
    p.add_argument("--timeout", type=int, default=30, metavar="S",
                   help="seconds for each host-side probe, e.g. the I/O on a possibly hung mount (default 30)")
    p.add_argument("--keep", type=Path, metavar="DIR", help="keep the collected bundles in DIR (with INVENTORY)")
    p.add_argument("--bundle", action="append", default=[], metavar="DIR/HOST",
                   help="a host's bundle directory (repeat for several hosts)")
    p.add_argument("--no-bench", action="store_true", help="skip the throughput acceptance test (with INVENTORY)")
    p.add_argument("--engine-roundtrip", action="store_true",
                   help="(with INVENTORY) per engine instance: warm one conversation, restart the engine's units "
                        "and replay it; passes only when the prefix comes back from the storage tier (restarts "
                        "the engines)")
    bench.add_arguments(p)
    p.add_argument("--json", metavar="F", help="also write the results as JSON to F ('-': to stdout, no table)")
    p.add_argument("--junit", metavar="F", help="also write JUnit XML to F (a testcase per check)")
    runner.add_list_hosts_arg(p)
    p.set_defaults(func=cmd_validate)


def cmd_validate(args) -> int:
    sources = inventory.from_args(args)
    live = [] if args.bundle else sources  # the inventory whose hosts are contacted
    judge = sources if args.bundle else []  # the inventory the given bundles are judged against
    if args.engine_roundtrip and not live:
        raise KvprovError("--engine-roundtrip restarts live engines: give an INVENTORY, without --bundle", EXIT_USAGE)
    if args.engine_roundtrip:  # before any host is contacted, not after the collection and bench
        from kvprov import loadtest

        loadtest.require_extra("kvprov validate --engine-roundtrip")
    if getattr(args, "list_hosts", False):  # the playbooks a live run starts (after collect.yml, on its hosts)
        if not live:
            raise KvprovError("--list-hosts lists the live hosts a run contacts: give an INVENTORY, without --bundle",
                              EXIT_USAGE)
        check.require_valid(live)
        playbooks = ["collect.yml", *([] if args.no_bench else ["bench.yml"]),
                     *(["restart.yml"] if args.engine_roundtrip else [])]
        return runner.print_list_hosts(args, playbooks, live, name="validate-list-hosts")
    unreachable, not_captured = [], []
    if live:
        out = args.keep or Path(tempfile.mkdtemp(prefix="kvprov-validate-"))
        collected = collect.collect(live, out, args.limit, timeout=args.timeout)
        args.bundle = [str(out / h) for h in sorted(collected.captured)]
        unreachable = collected.unreachable
        for f in collected.failures:
            print(f"{f.host}: {'unreachable' if f.unreachable else 'collect failed'}: {f.message}", file=sys.stderr)
        not_captured = [collect_failed(f) for f in collected.failures]  # in every report, not only on stderr
    elif not args.bundle:
        raise KvprovError("give an INVENTORY or --bundle DIR/HOST (a bundle directory, see docs/bundle.md)", EXIT_USAGE)
    want = None
    if judge:
        want = desired.load(judge)
    elif not live:
        print("kvprov: note: each bundle's own desired.json is trusted (an edited one goes unnoticed); give "
              "the inventory (-i/--inventory INV) to judge the bundles against the desired state INV gives",
              file=sys.stderr)
    results, unusable = [], 0
    for path in args.bundle:
        try:
            results += report.checks(evaluate.evaluate_bundle(path, want, inventory.describe(judge)))
        except KvprovError as e:  # one bad bundle is one failed host; the others are still checked
            if e.exit_code != EXIT_USAGE:
                raise
            print(f"kvprov: error: {e}", file=sys.stderr)
            unusable += 1
            expected = (f"a bundle of a GPU node of {show(inventory.describe(judge), 200)}" if want is not None
                        else "a bundle with a desired.json this kvprov reads (docs/bundle.md)")
            results.append(Result("bundle.desired", "bundle", FAIL, expected, str(e),
                                  "capture it again with `kvprov collect`" + (", or give the inventory it belongs to"
                                                                              if want is not None else ""),
                                  host=show(Path(path).name, 80)))
    if live and not args.keep:
        shutil.rmtree(out, ignore_errors=True)
    if live and not args.no_bench and args.bundle:
        hosts = ",".join(sorted(Path(b).name for b in args.bundle))
        bench_results, bench_run = bench.run(live, hosts, args.together, bench.overrides(args))
        results += bench_results
        unreachable += bench_run.unreachable
    if args.engine_roundtrip and args.bundle:
        from kvprov import loadtest

        results += loadtest.roundtrip(live, ",".join(sorted(Path(b).name for b in args.bundle)))
    results += not_captured
    results += [summarize(rs) for rs in report.by_host(results).values()]
    report.write_reports(args, results)
    if args.bundle and unusable == len(args.bundle):
        return EXIT_USAGE  # nothing could be checked at all
    if unreachable:  # wins over 1 (README's exit codes): what was not reached is unknown
        return EXIT_UNREACHABLE
    return EXIT_OK if report.ok(results) else EXIT_CHECKS_FAILED


def collect_failed(f) -> Result:
    """The result of a host whose state the live run could not capture (a runner.Failure)."""
    found, fix = ((f"unreachable: {show(f.message, 400)}",
                   "check ssh to the host (`ansible -i INVENTORY HOST -m ping`), then validate again")
                  if f.unreachable else
                  (f"task '{show(f.task, 80)}' failed: {show(f.message, 400)}",
                   "read the message (the run's artifacts have the whole output), then validate again"))
    return Result("host.collect", "bundle", FAIL, "the host answers over Ansible and its state is captured", found,
                  fix, show(f.host, 80))
