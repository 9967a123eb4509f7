"""benchmarks/loadtest_vs_reference.py's arithmetic (pure): the engine-side TTFT p50 from two
readings of vLLM's histogram, and the summary's medians and ratios. The benchmark itself runs
on the lab's vLLM in tests/lab/test_5_engine.py (short form)."""

import importlib.util

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("loadtest_vs_reference", ROOT / "benchmarks/loadtest_vs_reference.py")
ref = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ref)

INF = float("inf")


def test_the_p50_of_the_requests_between_two_readings_is_interpolated_in_its_bucket():
    before = {0.01: 5, 0.02: 10, 0.04: 10, INF: 10}  # earlier requests: subtracted
    after = {0.01: 5, 0.02: 20, 0.04: 30, INF: 30}  # since: 10 in (0.01, 0.02], 10 in (0.02, 0.04]
    assert ref.histogram_p50(before, after) == (20.0, 20)  # the 10th of 20 ends the 0.02 bucket
    after = {0.01: 5, 0.02: 15, 0.04: 30, INF: 30}  # 5 and 15: the 10th is 5/15 into (0.02, 0.04]
    p50, n = ref.histogram_p50(before, after)
    assert n == 20 and abs(p50 - (20 + 20 * 5 / 15)) < 1e-9
    assert ref.histogram_p50(after, after) == (None, 0)
    assert ref.histogram_p50({}, {0.01: 0, INF: 4}) == (10.0, 4)  # all above the last bound: its lower edge


def test_the_summary_takes_medians_over_rounds_and_kvprov_over_the_reference():
    runs = [{"concurrency": 1, "side": side, "ttft_p50": t, "ttft_p99": None, "req_s": r, "out_tok_s": r * 16,
             "engine_ttft_p50": 5.0, "prefix_cache_hit_rate": 0.0}
            for side, t, r in (("kvprov", 10.0, 20.0), ("kvprov", 30.0, 40.0), ("kvprov", 20.0, 30.0),
                               ("reference", 25.0, 30.0), ("reference", 25.0, 30.0))]
    [row] = ref.summarize(runs, [1])
    assert row["kvprov_ttft_p50"] == 20.0 and row["reference_ttft_p50"] == 25.0 and row["ratio_ttft_p50"] == 0.8
    assert row["ratio_req_s"] == 1.0 and row["kvprov_ttft_p99"] is None and row["ratio_ttft_p99"] is None
    assert row["ratio_prefix_cache_hit_rate"] is None  # 0 / 0: no ratio
    assert "| 1 | TTFT p50 (ms) | 20.0 | 25.0 | 0.80 |" in ref.table([row])
