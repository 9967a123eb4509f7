"""kvprov bench's results whole (every field of each Result), for each way a host's test
and the aggregate can end, and the overrides of --bench-seconds/--bench-files."""

import argparse

from kvprov import bench
from kvprov.validate.result import Result
from tests.unit.test_bench import MiB, host_result, report

SETUP = "POSIX from DRAM, 18 MiB files, concurrency 8, O_DIRECT"


def test_a_hosts_results_whole():
    r = host_result(gbps_w=1.0, gbps_r=2.0)
    write, read = bench.judge("h1", report(r, min_w=1.0, min_r=2.5))
    assert write == Result("bench.write", "bench", "pass", ">= 1 GB/s (kvprov_bench_min_write_gbps)",
                           f"{bench._figures(r['write'])}; {SETUP}", "", "h1")
    assert read == Result("bench.read", "bench", "fail", ">= 2.5 GB/s (kvprov_bench_min_read_gbps)",
                          f"{bench._figures(r['read'])}; {SETUP}",
                          "the tier is slower than accepted: run `kvprov validate` for the mount, RDMA and GDS "
                          "checks, compare with fio (benchmarks/bench_vs_fio.py), then the storage side", "h1")
    assert bench._figures(r["write"]).startswith("1.000 GB/s (16 files, 288 MiB in 0.30 s; latency ms p50 90.1")
    # exactly at the threshold passes
    assert bench.judge("h1", report(r, min_w=1.0))[0].status == "pass"
    no_threshold = bench.judge("h1", report(host_result(direct=False)))[0]
    assert no_threshold == Result("bench.write", "bench", "pass", "a figure (kvprov_bench_min_write_gbps is 0: "
                                  "no threshold)", f"{bench._figures(host_result()['write'])}; POSIX from DRAM, "
                                  "18 MiB files, concurrency 8", "", "h1")
    empty = bench.judge("h1", report(host_result(read={"gbps": None})))[1]
    assert empty == Result("bench.read", "bench", "fail", "reads of whole files", f"no file read completed; {SETUP}",
                           "the tier is hung or extremely slow: see `kvprov validate`'s mount checks", "h1")


def test_a_host_that_did_not_run_skipped_or_lost_data():
    failed = {"ok": False, "error": None}
    assert bench.judge("h1", {"result": failed, "rc": 3, "stderr": "  " + "e" * 600 + "  \n"}) == [
        Result("bench.run", "bench", "fail", "the acceptance test runs through NIXL", "e" * 500,
               "read the error; `kvprov validate` checks the NIXL venv, plugin and mount", "h1")]
    assert bench.judge("h1", {"result": failed, "rc": 3})[0].found == "exit 3"
    assert bench.judge("h1", {"rc": 4, "stderr": ""})[0].found == "exit 4"
    assert bench.judge("h1", {"result": {"ok": False, "error": "no plugin"}, "stderr": "x"})[0].found == "no plugin"
    assert bench.judge("h1", {"result": {"skipped": "OBJ: no file"}}) == [
        Result("bench.run", "bench", "skip", "the acceptance test runs through a NIXL file plugin", "OBJ: no file", "",
               "h1")]
    out = bench.judge("h1", report(host_result(verified=False, compat_mode=True)))
    assert out[2:] == [
        Result("bench.verify", "bench", "fail", "the data read back equals the data written", "read-back differs",
               "a data integrity problem on the tier: stop and investigate", "h1"),
        Result("bench.gds_mode", "bench", "warn", "GDS through nvidia-fs",
               "cuFile ran in compat mode (no nvidia-fs driver): POSIX I/O inside cuFile",
               "see the gds.* checks of `kvprov validate`", "h1")]
    assert len(bench.judge("h1", report(host_result(verified=None, compat_mode=False)))) == 2


def test_the_aggregate_whole():
    a, b = host_result(1.0, 2.0, start=1000.0), host_result(1.0, 2.0, start=1000.01)
    write, read = bench.aggregate({"a": report(a), "b": report(b)})
    w, rd = a["write"]["seconds"], a["read"]["seconds"]
    span_w, span_r = 0.01 + w, 0.01 + w + rd - w  # reads begin after each host's writes
    total = 2 * 288 * MiB
    assert write == Result("bench.aggregate.write", "bench", "pass", "2 hosts started together",
                           f"{total / span_w / 1e9:.3f} GB/s (576 MiB in {span_w:.2f} s; start skew 10 ms)", "",
                           "(all hosts)")
    assert read == Result("bench.aggregate.read", "bench", "pass", "2 hosts started together",
                          f"{total / span_r / 1e9:.3f} GB/s (576 MiB in {span_r:.2f} s; start skew 10 ms)", "",
                          "(all hosts)")
    late = host_result(1.0, 2.0, start=1000.0 + 0.2 * (w + 0.5))  # its writes begin after 10 % of the span
    write, read = bench.aggregate({"a": report(a), "b": report(late)})
    assert (write.status, write.host) == ("warn", "(all hosts)") and write.found.endswith(
        "more than 10% of the span, so the hosts did not run together and the figure understates the storage")
    assert write.fix == ("synchronise the hosts' clocks (chrony), or raise kvprov_bench_files or --bench-seconds "
                         "so each pass runs longer")
    c = host_result(ok=False)
    failed = bench.aggregate({"a": report(a), "c": report(c)})
    assert failed == [Result(f"bench.aggregate.{op}", "bench", "fail", "2 hosts started together",
                             "1 of 2 hosts completed (c did not): no aggregate of the fleet",
                             "see those hosts' bench.run", "(all hosts)") for op in ("write", "read")]


def test_the_aggregate_at_exactly_the_allowed_skew_passes():
    a = host_result(1.0, 1.0, start=1000.0)
    w = a["write"]["seconds"]
    # the second host starts d later: span = d + w, and d == 10 % of it when d = w / 9
    b = host_result(1.0, 1.0, start=1000.0 + w / 9)
    assert bench.aggregate({"a": report(a), "b": report(b)})[0].status == "pass"


def test_overrides_and_their_arguments():
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    assert bench.overrides(p.parse_args([])) == {}
    args = p.parse_args(["--bench-seconds", "0", "--bench-files", "8", "--together"])
    assert bench.overrides(args) == {"kvprov_bench_seconds": 0, "kvprov_bench_files": 8} and args.together
    helps = {a.dest: a for a in p._actions}
    assert (helps["bench_seconds"].metavar, helps["bench_files"].metavar) == ("S", "N")
    assert "in 20 s" in helps["together"].help and bench.LEAD_SECONDS == 20


def phase(files, seconds):
    return {"files": files, "bytes": files * 18 * MiB, "seconds": seconds, "gbps": files * 18 * MiB / seconds / 1e9,
            "lat_ms": {}}


def test_the_aggregate_counts_each_passes_own_bytes_and_span_exactly():
    # exact binary times: host b starts 0.125 s late, writes 1.125 s, reads 0.5 s; a reads 16 files, b 8
    a = host_result(start=0.0, write=phase(16, 1.25), read=phase(16, 0.5))
    b = host_result(start=0.125, write=phase(16, 1.125), read=phase(8, 0.5))
    write, read = bench.aggregate({"a": report(a), "b": report(b)})
    assert write.found == f"{32 * 18 * MiB / 1.25 / 1e9:.3f} GB/s (576 MiB in 1.25 s; start skew 125 ms)"
    assert read.found == f"{24 * 18 * MiB / 0.5 / 1e9:.3f} GB/s (432 MiB in 0.50 s; start skew 125 ms)"
    assert write.status == "pass"  # began 0.125 s apart: exactly 10 % of the 1.25 s span
    c = host_result(start=0.9, write=phase(16, 0.475), read=phase(16, 0.5))
    skewed = bench.aggregate({"a": report(a), "c": report(c)})[0]
    assert skewed.status == "warn" and "start skew 900 ms" in skewed.found and "began 900 ms apart" in skewed.found


def test_no_threshold_means_none_however_slow():
    slow = host_result(gbps_w=0.2)
    r = bench.judge("h1", {"result": slow, "rc": 0, "min_write_gbps": None, "min_read_gbps": None})[0]
    assert (r.status, r.expected) == ("pass", "a figure (kvprov_bench_min_write_gbps is 0: no threshold)")


def test_the_run_itself(monkeypatch):
    import sys

    from kvprov import runner

    seen = {}

    def fake_run(playbook, sources, **kw):
        seen.update(kw)
        return runner.RunResult(0, None, failures=[runner.Failure("c", "t", "down", True)])

    monkeypatch.setattr(runner, "run", fake_run)
    results, _ = bench.run("inv.yml", together=True)
    assert seen["name"] == "bench" and seen["stream"] is sys.stderr
    start = seen["extravars"]["kvprov_bench_start_at"]
    assert start == round(start, 3)
    assert results == [Result("bench.run", "bench", "fail", "the host runs the acceptance test", "unreachable: down",
                              "", "c")]


def test_the_workers_own_per_file_work_is_shown_with_the_rate_it_caps():
    r = host_result()
    r["write"] |= {"overhead_us": 212.4, "overhead_cap_gbps": 88.86}
    assert bench._figures(r["write"]).endswith(
        "max 151.0, open p50 0.2, close p50 0.1, worker 212 µs a file (caps 89 GB/s))")
    assert "worker" not in bench._figures(r["read"])  # a worker older than that figure
