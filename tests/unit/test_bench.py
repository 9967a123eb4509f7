"""`kvprov bench`: judging one host's acceptance test and the all-hosts aggregate (pure),
and the role's file size from the model geometry."""

from kvprov import bench
from kvprov.bench_worker import kv_file_bytes

MiB = 1 << 20


def host_result(gbps_w=1.5, gbps_r=2.0, start=1000.0, ok=True, **extra):
    def phase(gbps):
        nbytes = 16 * 18 * MiB
        return {"files": 16, "bytes": nbytes, "seconds": nbytes / gbps / 1e9, "gbps": gbps,
                "lat_ms": {"p50": 90.1, "p90": 120.0, "p99": 150.2, "max": 151.0},
                "open_ms": {"p50": 0.2, "p90": 0.3, "p99": 0.4, "max": 0.4},
                "close_ms": {"p50": 0.1, "p90": 0.1, "p99": 0.2, "max": 0.2}}
    return {"ok": ok, "error": None if ok else "NIXL POSIX: cannot load the plugin", "backend": "POSIX",
            "mem": "DRAM", "file_bytes": 18 * MiB, "concurrency": 8, "direct": True, "start": start,
            "write": phase(gbps_w), "read": phase(gbps_r), "verified": True, "compat_mode": None, **extra}


def report(result, min_w=0.0, min_r=0.0):
    return {"result": result, "rc": 0 if result.get("ok") else 1, "stderr": "",
            "min_write_gbps": min_w, "min_read_gbps": min_r, "file_bytes": 18 * MiB}


def test_figures_without_thresholds_pass_and_say_so():
    rs = {r.id: r for r in bench.judge("h1", report(host_result()))}
    assert set(rs) == {"bench.write", "bench.read"} and all(r.status == "pass" for r in rs.values())
    w = rs["bench.write"]
    assert w.expected == "a figure (kvprov_bench_min_write_gbps is 0: no threshold)"
    assert w.found.startswith("1.500 GB/s (16 files, 288 MiB in 0.20 s; latency ms p50 90.1 p90 120.0 p99 150.2 "
                              "max 151.0, open p50 0.2, close p50 0.1)")
    assert "POSIX from DRAM, 18 MiB files, concurrency 8, O_DIRECT" in w.found


def test_threshold_missed_fails_with_a_fix():
    rs = {r.id: r for r in bench.judge("h1", report(host_result(gbps_r=0.4), min_w=1.0, min_r=1.0))}
    assert rs["bench.write"].status == "pass" and rs["bench.write"].expected == ">= 1 GB/s (kvprov_bench_min_write_gbps)"
    assert rs["bench.read"].status == "fail" and rs["bench.read"].found.startswith("0.400 GB/s")
    assert "bench_vs_fio" in rs["bench.read"].fix


def test_the_engine_clock_is_judged_with_the_data_rate_beside_it():
    result = host_result(gbps_w=1.5)
    result["write"] |= {"engine_seconds": 0.3355, "engine_gbps": 0.9}  # open and close of every file on the clock
    w = {r.id: r for r in bench.judge("h1", report(result, min_w=1.0))}["bench.write"]
    assert w.status == "fail" and w.found.startswith("0.900 GB/s (16 files, 288 MiB in 0.34 s, data only 1.500 GB/s;")


def test_worker_failure_bad_data_and_compat_mode():
    [r] = bench.judge("h1", report(host_result(ok=False)))
    assert (r.id, r.status, r.found) == ("bench.run", "fail", "NIXL POSIX: cannot load the plugin")
    [r] = bench.judge("h1", {"result": {}, "rc": 2, "stderr": "Traceback ...\nModuleNotFoundError: nixl\n"})
    assert r.status == "fail" and r.found.endswith("ModuleNotFoundError: nixl")
    rs = {r.id: r for r in bench.judge("h1", report(host_result(verified=False, compat_mode=True)))}
    assert rs["bench.verify"].status == "fail" and rs["bench.gds_mode"].status == "warn"


def test_a_pass_that_moved_no_file_fails():
    result = host_result()
    result["read"] = {**result["read"], "files": 0, "bytes": 0, "gbps": None}
    rs = {r.id: r for r in bench.judge("h1", report(result))}
    assert rs["bench.read"].status == "fail" and rs["bench.read"].found.startswith("no file read completed")


def test_aggregate_over_hosts_started_together():
    a, b = host_result(1.0, 2.0, start=1000.0), host_result(1.0, 2.0, start=1000.01)
    rs = {r.id: r for r in bench.aggregate({"a": report(a), "b": report(b)})}
    w = rs["bench.aggregate.write"]
    # 2 x 288 MiB written between 1000.0 and 1000.01 + 0.302 s
    assert w.found.startswith(f"{2 * 288 * MiB / (0.01 + 288 * MiB / 1e9) / 1e9:.3f} GB/s")
    assert "start skew 10 ms" in w.found and w.host == "(all hosts)"
    assert w.status == rs["bench.aggregate.read"].status == "pass" and w.expected == "2 hosts started together"
    assert bench.aggregate({"a": report(a)}) == []  # one host: no aggregate


def test_aggregate_fails_when_a_host_did_not_complete():
    a, b, c = host_result(start=1000.0), host_result(start=1000.0), host_result(ok=False)
    rs = {r.id: r for r in bench.aggregate({"a": report(a), "b": report(b), "c": report(c)})}
    assert [r.status for r in rs.values()] == ["fail", "fail"]
    assert rs["bench.aggregate.read"].found == "2 of 3 hosts completed (c did not): no aggregate of the fleet"
    assert rs["bench.aggregate.write"].expected == "3 hosts started together"
    # two hosts, one failed: still judged (it used to report nothing)
    assert [r.status for r in bench.aggregate({"a": report(a), "c": report(c)})] == ["fail", "fail"]


def test_aggregate_skips_hosts_without_a_file_plugin():
    a, b = host_result(start=1000.0), host_result(start=1000.0)
    skipped = {"skipped": "the active NIXL plugin is OBJ: no file on the mount"}
    rs = bench.aggregate({"a": report(a), "b": report(b), "s": report(skipped)})
    assert [(r.status, r.expected) for r in rs] == [("pass", "2 hosts started together")] * 2
    assert bench.aggregate({"a": report(a), "s": report(skipped)}) == []


def test_aggregate_warns_when_the_hosts_did_not_start_together():
    a, b = host_result(start=1000.0), host_result(start=1000.5)  # half a second late on 0.2 s passes
    rs = {r.id: r for r in bench.aggregate({"a": report(a), "b": report(b)})}
    w = rs["bench.aggregate.write"]
    assert w.status == "warn" and "start skew 500 ms" in w.found
    assert "the writes began 500 ms apart" in w.found and "did not run together" in w.found and "chrony" in w.fix
    # a host whose write is slower begins its reads later: the reads did not overlap either
    slow = host_result(gbps_w=0.2, start=1000.0)
    r = {r.id: r for r in bench.aggregate({"a": report(host_result(start=1000.0)), "b": report(slow)})}
    assert r["bench.aggregate.write"].status == "pass" and r["bench.aggregate.read"].status == "warn"


def test_kv_page_file_sizes():
    assert kv_file_bytes(36, 256, 8, 128, 2, 1) == 18 * MiB  # Qwen3-8B, page 256, bf16, TP1
    assert kv_file_bytes(36, 256, 8, 128, 2, 2) == 9 * MiB  # TP2: 4 KV heads per rank
    assert kv_file_bytes(80, 64, 8, 128, 2, 16) == 80 * 64 * 128 * 2  # TP beyond the KV heads: 1 head per rank
