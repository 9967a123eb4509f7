"""kvprov loadtest's arithmetic on the engines' counters and its own samples, with exact
figures: the Prometheus parser, which counters count as hits and queries per source, the
deltas across a restart, the storage tier's share of a replay or a cross-host run, and a
point's rates and percentiles (pure functions; the live runs are the lab's)."""

from kvprov import loadtest_metrics as L


def test_prometheus_text_with_labels_escapes_comments_and_junk():
    text = "\n".join([
        "# HELP vllm:prefix_cache_hits_total hits", "# TYPE vllm:prefix_cache_hits_total counter",
        'vllm:prefix_cache_hits_total{model_name="m",engine="0"} 12.0',
        'vllm:prefix_cache_queries_total{engine="0"} 40 1700000000',
        "plain_metric 3.5", "   ", "no_value", "bad_value x", 'open_brace{a="1" 5',
        'esc{a="x\\"y",b="l1\\nl2", c="back\\\\slash"} 7', 'half{a=1} 2', 'tail{a="1",} 4', "",
    ])
    parsed = L.parse_prometheus(text)
    assert parsed == {
        ("vllm:prefix_cache_hits_total", (("engine", "0"), ("model_name", "m"))): 12.0,
        ("vllm:prefix_cache_queries_total", (("engine", "0"),)): 40.0,
        ("plain_metric", ()): 3.5,
        ("esc", (("a", 'x"y'), ("b", "l1\nl2"), ("c", "back\\slash"))): 7.0,
        ("half", ()): 2.0,  # a label without quotes ends the labels
        ("tail", (("a", "1"),)): 4.0,
    }
    assert list(L._labels('a="1",b="2"')) == [("a", "1"), ("b", "2")]
    assert list(L._labels('a="1" , b="2"')) == [("a", "1"), ("b", "2")]
    assert list(L._labels('a=')) == [] and list(L._labels('a="unterminated')) == [("a", "unterminated")]
    assert list(L._labels('a="x\\')) == [("a", "x\\")]


def test_cache_counters_sum_other_labels_split_by_source_and_skip_the_rest():
    text = "\n".join([
        'vllm:prefix_cache_hits_total{engine="0"} 10', 'vllm:prefix_cache_hits_total{engine="1"} 5',
        'vllm:prefix_cache_hits_created{engine="0"} 1700000000',
        'vllm:prompt_tokens_cached_by_source_total{source="disk",engine="0"} 300',
        'vllm:prompt_tokens_cached_by_source_total{source="disk",engine="1"} 100',
        'vllm:prompt_tokens_cached_by_source_total{source="cpu"} 50',
        'vllm:prompt_tokens_cached_by_source_total{engine="9"} 1',
        'sglang:cached_tokens_total{cache_source="storage",tp_rank="0"} 64',
        "sglang:prompt_tokens_total 1000", "sglang:prefetched_tokens_total 32",
        'lmcache_mp_lookup_hit_l2_tokens{x="1"} 256', "lmcache_mp_lookup_hit_l2_tokens_bucket 9",
        "vllm:num_requests_running 3", "vllm:prompt_tokens_cached 7",
    ])
    assert L.cache_counters(text) == {
        "vllm:prefix_cache_hits": 15.0,
        "vllm:prompt_tokens_cached_by_source{source=disk}": 400.0,
        "vllm:prompt_tokens_cached_by_source{source=cpu}": 50.0,
        "vllm:prompt_tokens_cached_by_source": 1.0,  # no source label: under the bare name
        "sglang:cached_tokens{cache_source=storage}": 64.0,
        "sglang:prompt_tokens": 1000.0, "sglang:prefetched_tokens": 32.0,
        "lmcache_mp_lookup_hit_l2_tokens": 256.0, "vllm:prompt_tokens_cached": 7.0,
    }


def test_counter_delta_counts_new_and_restarted_counters_from_zero():
    before = {"a": 10.0, "b": 5.0, "gone": 3.0, "same": 2.0}
    after = {"a": 15.5, "b": 2.0, "new": 7.0, "same": 2.0}
    assert L.counter_delta(before, after) == {"a": 5.5, "b": 2.0, "new": 7.0, "same": 0.0}


def test_cache_summary_hits_and_queries_per_source():
    delta = {"vllm:prefix_cache_hits": 10.0, "vllm:gpu_prefix_cache_hits": 2.0, "vllm:prefix_cache_queries": 40.0,
             "vllm:prompt_tokens_cached_by_source{source=disk}": 300.0,
             "sglang:cached_tokens{cache_source=storage}": 64.0, "sglang:prompt_tokens": 100.0,
             "lmcache_mp_lookup_requested_tokens": 512.0, "lmcache_mp_lookup_hit_l2_tokens": 256.0,
             "vllm:prompt_tokens_cached": 7.0}
    s = L.cache_summary(delta)
    assert s["hit_tokens"] == {"vllm_prefix": 12.0, "vllm_cached_disk": 300.0, "lmcache_l2": 256.0,
                               "sglang_storage": 64.0}
    assert s["queried_tokens"] == {"vllm_prefix": 40.0, "lmcache": 512.0, "sglang": 100.0}
    assert s["counters"] == dict(sorted(delta.items())) and list(s["counters"]) == sorted(delta)
    assert L.cache_summary({}) == {"hit_tokens": {}, "queried_tokens": {}, "counters": {}}


def point(phase, instance, prompt, turn, p50, hits=None, source=None):
    p = {"phase": phase, "instance": instance, "prompt_tokens": prompt, "turn": turn, "ttft_ms": {"p50": p50},
         "cache": None if hits is None else {"hit_tokens": hits}}
    if source:
        p["source"] = source
    return p


def test_the_storage_tiers_share_of_a_replay_and_a_cross_host_run():
    hits = {"lmcache_l2": 100.0, "vllm_cached_disk": 20.0, "sglang_storage": 3.0, "vllm_prefix": 500.0}
    points = [point("sweep", "a", 1000, 1, 80.0), point("sweep", "a", 1000, 2, 10.0),
              point("sweep", "b", 1000, 1, 90.0), point("sweep", "a", 2000, 1, 150.0),
              point("replay", "a", 1000, 1, 30.0, hits), point("replay", "a", 1000, 2, 5.0, hits),
              point("replay", "a", 4000, 1, 30.0, hits),  # no cold run of that length: no row
              point("replay", "c", 1000, 1, 30.0, None),
              point("cross_host", "b", 1000, 1, 40.0, hits, source="a"),
              point("cross_host", "b", 1000, 2, 4.0, hits, source="a"),
              point("cross_host", "c", 2000, 1, 60.0, None, source="x")]
    assert L.replay_rows(points) == [{"instance": "a", "prompt_tokens": 1000, "storage_hit_tokens": 123.0,
                                      "hit_tokens": hits, "cold_ttft_ms_p50": 80.0, "replay_ttft_ms_p50": 30.0}]
    assert L.cross_host_rows(points) == [
        {"instance": "b", "source": "a", "prompt_tokens": 1000, "storage_hit_tokens": 123.0, "hit_tokens": hits,
         "cold_ttft_ms_p50": 90.0, "source_cold_ttft_ms_p50": 80.0, "cross_host_ttft_ms_p50": 40.0},
        {"instance": "c", "source": "x", "prompt_tokens": 2000, "storage_hit_tokens": 0, "hit_tokens": {},
         "cold_ttft_ms_p50": None, "source_cold_ttft_ms_p50": None, "cross_host_ttft_ms_p50": 60.0}]
    assert L._storage_hits({"cache": {"hit_tokens": {"vllm_prefix": 9.0}}}) == {"storage_hit_tokens": 0,
                                                                               "hit_tokens": {"vllm_prefix": 9.0}}


def sample(ok, ttft=0.0, e2e=0.0, out=0, prompt=None, error=None):
    return {"ok": ok, "ttft": ttft, "e2e": e2e, "output_tokens": out, "prompt_tokens": prompt, "error": error}


def test_a_points_rates_and_percentiles():
    samples = [sample(True, 0.1, 1.0, 10, 100), sample(True, 0.3, 2.0, 30, 300), sample(True, 0.2, 1.5, None, "n"),
               sample(False, error="HTTP 500"), sample(False, error="timeout")]
    assert L.measure_point(samples, 4.0) == {
        "requests": 5, "ok": 3, "errors": 2, "first_error": "HTTP 500", "seconds": 4.0, "requests_per_s": 0.75,
        "output_tokens": 40, "output_tokens_per_s": 10.0, "server_prompt_tokens_mean": 200.0,
        "ttft_ms": {"p50": 200.0, "p90": 300.0, "p99": 300.0, "max": 300.0},
        "latency_ms": {"p50": 1500.0, "p90": 2000.0, "p99": 2000.0, "max": 2000.0}}
    empty = L.measure_point([sample(False, error="refused")], 0.0)
    assert empty == {"requests": 1, "ok": 0, "errors": 1, "first_error": "refused", "seconds": 0.0,
                     "requests_per_s": None, "output_tokens": 0, "output_tokens_per_s": None,
                     "server_prompt_tokens_mean": None,
                     "ttft_ms": {"p50": None, "p90": None, "p99": None, "max": None},
                     "latency_ms": {"p50": None, "p90": None, "p99": None, "max": None}}
    assert L.measure_point([], 2.0)["first_error"] is None and L.measure_point([], 2.0)["requests_per_s"] == 0.0


def test_a_comment_is_skipped_whatever_it_holds():
    assert L.parse_prometheus('# x{a="1"} 2\n#{b="2"} 3\n# 4\nm 1\n') == {("m", ()): 1.0}


def test_labels_at_their_edges():
    assert list(L._labels(',a="1"')) == [("a", "1")]  # a comma before the first label
    assert list(L._labels('="x",a="1"')) == [("", "x"), ("a", "1")]  # a label without a name: the rest kept
    assert list(L._labels('a="')) == [("a", "")]  # the value cut right after its quote
    assert list(L._labels('a="x\\"')) == [("a", 'x"')]  # an escaped quote as the last character
    assert list(L._labels('a="1"b="2"')) == [("a", "1"), ("b", "2")]  # no separator between two labels
    assert list(L._labels('X="1",Xb="2"')) == [("X", "1"), ("Xb", "2")]


def test_a_points_figures_are_rounded_to_their_places():
    samples = [sample(True, 0.1, 1.0, 10, 100), sample(True, 0.3, 2.0, 30, 101), sample(True, 0.2, 1.5, 0, 101)]
    p = L.measure_point(samples, 6.54321)
    assert (p["seconds"], p["requests_per_s"], p["output_tokens_per_s"], p["server_prompt_tokens_mean"]) == (
        6.543, 0.458, 6.113, 100.7)
    p = L.measure_point(samples, 0.5)  # under a second: rates all the same
    assert (p["requests_per_s"], p["output_tokens_per_s"]) == (6.0, 80.0)
