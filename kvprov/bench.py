"""`kvprov bench INVENTORY [--limit P] [--together] [--json F] [--junit F]`: the throughput
acceptance test of the KV tier, per host (playbooks/bench.yml, roles/kvcache_bench).

On each host, NIXL from the deployed venv (GDS_MT from GPU memory on GPU hosts, POSIX
from DRAM elsewhere) writes, then reads back with O_DIRECT, files shaped like SGLang
HiCache's KV pages (kvprov/bench_worker.py), and reports GB/s and per-I/O latency
percentiles. kvprov compares them with the inventory's thresholds. With --together all
hosts start their I/O at the same moment and the aggregate is reported too: the storage's
own acceptance figure. `kvprov validate` runs this after its checks unless --no-bench.

Exit 0: every figure meets its threshold; 1: a host failed or missed a threshold;
2: bad inventory; 3: a host was unreachable.
"""

from __future__ import annotations

import argparse
import sys
import time

from kvprov import check, inventory, runner
from kvprov.errors import EXIT_CHECKS_FAILED, EXIT_OK, EXIT_UNREACHABLE
from kvprov.validate import report
from kvprov.validate.result import FAIL, PASS, SKIP, WARN, Result, summarize

CAPTURE_TASK = "Report the acceptance test"
MiB = 1 << 20
LEAD_SECONDS = 20  # --together: time for every host to start its worker before the common start


# ---------------------------------------------------------------------------- judging (pure)

def _headline(p: dict) -> float:
    """The GB/s judged: on the engine's clock (open, I/O and close of every file); the data-only
    rate from a worker older than that figure."""
    return p.get("engine_gbps", p["gbps"])


def _figures(p: dict) -> str:
    lat = p.get("lat_ms") or {}
    meta = "".join(f", {k[:-3]} p50 {(p.get(k) or {}).get('p50')}" for k in ("open_ms", "close_ms") if p.get(k))
    if p.get("overhead_us"):  # the worker's own work a file, and the rate it alone would cap the test at
        meta += f", worker {p['overhead_us']:.0f} µs a file (caps {p['overhead_cap_gbps']:.0f} GB/s)"
    data = f", data only {p['gbps']:.3f} GB/s" if "engine_gbps" in p else ""
    return (f"{_headline(p):.3f} GB/s ({p['files']} files, {p['bytes'] / MiB:.0f} MiB in {p.get('engine_seconds', p['seconds']):.2f} s{data}; "
            f"latency ms p50 {lat.get('p50')} p90 {lat.get('p90')} p99 {lat.get('p99')} max {lat.get('max')}"
            f"{meta})")


def _threshold(host: str, op: str, p: dict | None, minimum: float, setup: str) -> Result:
    name = f"kvprov_bench_min_{op}_gbps"
    if not p or p.get("gbps") is None:
        return Result(f"bench.{op}", "bench", FAIL, f"{op}s of whole files", f"no file {op} completed; {setup}",
                      "the tier is hung or extremely slow: see `kvprov validate`'s mount checks", host)
    if not minimum:
        return Result(f"bench.{op}", "bench", PASS, f"a figure ({name} is 0: no threshold)",
                      f"{_figures(p)}; {setup}", "", host)
    expected = f">= {minimum:g} GB/s ({name})"
    if _headline(p) < minimum:
        return Result(f"bench.{op}", "bench", FAIL, expected, f"{_figures(p)}; {setup}",
                      "the tier is slower than accepted: run `kvprov validate` for the mount, RDMA and GDS "
                      "checks, compare with fio (benchmarks/bench_vs_fio.py), then the storage side", host)
    return Result(f"bench.{op}", "bench", PASS, expected, f"{_figures(p)}; {setup}", "", host)


def judge(host: str, report_: dict) -> list[Result]:
    """The results of one host's acceptance test (the role's `kvprov_bench_report`)."""
    r = report_.get("result") or {}
    if r.get("skipped"):  # the active plugin is not a file plugin (obj): nothing on the mount to measure
        return [Result("bench.run", "bench", SKIP, "the acceptance test runs through a NIXL file plugin",
                       r["skipped"], "", host)]
    if not r.get("ok"):
        why = r.get("error") or (report_.get("stderr") or "").strip()[-500:] or f"exit {report_.get('rc')}"
        return [Result("bench.run", "bench", FAIL, "the acceptance test runs through NIXL", why,
                       "read the error; `kvprov validate` checks the NIXL venv, plugin and mount", host)]
    setup = (f"{r['backend']} from {r['mem']}, {r['file_bytes'] / MiB:g} MiB files, concurrency {r['concurrency']}"
             + (", O_DIRECT" if r.get("direct") else ""))
    out = [_threshold(host, "write", r.get("write"), float(report_.get("min_write_gbps") or 0), setup),
           _threshold(host, "read", r.get("read"), float(report_.get("min_read_gbps") or 0), setup)]
    if r.get("verified") is False:
        out.append(Result("bench.verify", "bench", FAIL, "the data read back equals the data written",
                          "read-back differs", "a data integrity problem on the tier: stop and investigate", host))
    if r.get("compat_mode"):
        out.append(Result("bench.gds_mode", "bench", "warn", "GDS through nvidia-fs",
                          "cuFile ran in compat mode (no nvidia-fs driver): POSIX I/O inside cuFile",
                          "see the gds.* checks of `kvprov validate`", host))
    return out


MAX_SKEW = 0.1  # --together: the hosts' passes may begin at most this share of the aggregate's span apart


def aggregate(reports: dict[str, dict]) -> list[Result]:
    """All hosts started together: total bytes over the span from the first start to the last
    end. It fails when a host that should have taken part did not complete (the figure would
    be a smaller fleet's), and warns when the hosts' passes began further apart than MAX_SKEW
    of the span (they did not really run together: the figure understates the storage)."""
    measured = {h: rep.get("result") or {} for h, rep in reports.items()}
    measured = {h: r for h, r in measured.items() if not r.get("skipped")}  # no file plugin: nothing to add
    if len(measured) < 2:
        return []
    failed = sorted(h for h, r in measured.items() if not r.get("ok"))
    runs = [(r["start"], r["write"], r["read"]) for r in measured.values() if r.get("ok")]
    out = []
    for op in ("write", "read"):
        expected = f"{len(measured)} hosts started together"
        if failed:
            out.append(Result(f"bench.aggregate.{op}", "bench", FAIL, expected,
                              f"{len(runs)} of {len(measured)} hosts completed ({', '.join(failed)} did not): no "
                              "aggregate of the fleet", "see those hosts' bench.run", "(all hosts)"))
            continue
        begin = [s if op == "write" else s + w["seconds"] for s, w, _ in runs]
        end = [s + w["seconds"] + (rd["seconds"] if op == "read" else 0) for s, w, rd in runs]
        total = sum((w if op == "write" else rd)["bytes"] for _, w, rd in runs)
        span = max(end) - min(begin)
        skew = max(s for s, _, _ in runs) - min(s for s, _, _ in runs)
        found = (f"{total / span / 1e9:.3f} GB/s ({total / MiB:.0f} MiB in {span:.2f} s; start skew "
                 f"{skew * 1000:.0f} ms)")
        spread = max(begin) - min(begin)
        if spread > MAX_SKEW * span:
            out.append(Result(f"bench.aggregate.{op}", "bench", WARN, expected,
                              f"{found}: the {op}s began {spread * 1000:.0f} ms apart, more than {MAX_SKEW:.0%} of "
                              "the span, so the hosts did not run together and the figure understates the storage",
                              "synchronise the hosts' clocks (chrony), or raise kvprov_bench_files or "
                              "--bench-seconds so each pass runs longer", "(all hosts)"))
            continue
        out.append(Result(f"bench.aggregate.{op}", "bench", PASS, expected, found, "", "(all hosts)"))
    return out


# ---------------------------------------------------------------------------- running (I/O)

def run(sources: str | list[str], limit: str | None = None, together: bool = False, overrides: dict | None = None,
        stream=None) -> tuple[list[Result], runner.RunResult]:
    extravars = dict(overrides or {})
    if together:
        extravars["kvprov_bench_start_at"] = round(time.time() + LEAD_SECONDS, 3)
    result = runner.run("bench.yml", sources, name="bench", extravars=extravars, limit=limit,
                        stream=stream or sys.stderr, capture=CAPTURE_TASK)
    reports = {h: res.get("ansible_facts", {}).get("kvprov_bench_report", {}) for h, res in result.captured.items()}
    results = [x for h, rep in sorted(reports.items()) for x in judge(h, rep)]
    results += aggregate(reports) if together else []
    for f in result.failures:
        results.append(Result("bench.run", "bench", FAIL, "the host runs the acceptance test",
                              ("unreachable: " if f.unreachable else f"task '{f.task}' failed: ") + f.message,
                              "", f.host))
    return results, result


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The acceptance test's knobs (bench and validate); they override the inventory's."""
    p.add_argument("--bench-seconds", type=int, metavar="S", help="time bound of each pass (kvprov_bench_seconds)")
    p.add_argument("--bench-files", type=int, metavar="N", help="files per pass (kvprov_bench_files)")
    p.add_argument("--together", action="store_true",
                   help=f"all hosts start together (in {LEAD_SECONDS} s) and the aggregate is reported")


def overrides(args) -> dict:
    return {k: v for k, v in (("kvprov_bench_seconds", args.bench_seconds), ("kvprov_bench_files", args.bench_files))
            if v is not None}


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="throughput acceptance test through NIXL (KV-page files, per host)",
                       description=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    inventory.add_inventory_args(p)
    inventory.add_limit_arg(p)
    add_arguments(p)
    p.add_argument("--json", metavar="F", help="also write the results as JSON to F ('-': to stdout, no table)")
    p.add_argument("--junit", metavar="F", help="also write JUnit XML to F")
    runner.add_list_hosts_arg(p)
    p.set_defaults(func=cmd_bench)


def cmd_bench(args) -> int:
    sources = inventory.from_args(args)
    check.require_valid(sources)
    if getattr(args, "list_hosts", False):
        return runner.print_list_hosts(args, ["bench.yml"], sources, name="bench-list-hosts")
    results, run_result = run(sources, args.limit, args.together, overrides(args))
    for host, rs in report.by_host(list(results)).items():
        results.append(summarize(rs))
    report.write_reports(args, results, "kvprov bench")
    if run_result.unreachable:
        return EXIT_UNREACHABLE
    return EXIT_OK if report.ok(results) else EXIT_CHECKS_FAILED
