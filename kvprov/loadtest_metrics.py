"""kvprov loadtest's arithmetic on counters and samples: the cache counters of an engine's
Prometheus /metrics page, their delta over a load point and its hits per cache source; a
point's throughput and latency percentiles from its request samples; and the rows that set a
replay (after a restart) or a cross-host run against the cold run. Pure: no I/O.
"""

from __future__ import annotations

from kvprov.bench_worker import percentiles, rounded


# ---------------------------------------------------------------------------- cache counters

def parse_prometheus(text: str) -> dict[tuple[str, tuple], float]:
    """Prometheus text -> {(name, ((label, value), ...)): value}; comments and junk skipped."""
    out: dict[tuple[str, tuple], float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        labels: tuple = ()
        if "{" in line:
            name, _, rest = line.partition("{")
            body, sep, tail = rest.rpartition("}")
            if not sep:
                continue
            labels = tuple(sorted(_labels(body)))
        else:
            name, _, tail = line.partition(" ")
        fields = tail.split()
        if not fields:
            continue
        try:
            out[(name.strip(), labels)] = float(fields[0])
        except ValueError:
            continue
    return out


def _labels(body: str):
    i, n = 0, len(body)
    while i < n:
        eq = body.find("=", i)
        if eq < 0 or eq + 1 >= n or body[eq + 1] != '"':
            return
        key = body[i:eq].strip().lstrip(",").strip()
        j, value = eq + 2, []
        while j < n and body[j] != '"':
            if body[j] == "\\" and j + 1 < n:
                j += 1
                value.append({"n": "\n"}.get(body[j], body[j]))
            else:
                value.append(body[j])
            j += 1
        yield key, "".join(value)
        i = j + 1
        while i < n and body[i] in ", ":
            i += 1


# (metric, label that splits it, kind, source name): kind "hit" or "query"
CACHE_COUNTERS = (
    ("vllm:prefix_cache_queries", None, "query", "vllm_prefix"),
    ("vllm:prefix_cache_hits", None, "hit", "vllm_prefix"),
    ("vllm:gpu_prefix_cache_queries", None, "query", "vllm_prefix"),  # before vLLM 0.10
    ("vllm:gpu_prefix_cache_hits", None, "hit", "vllm_prefix"),
    ("vllm:external_prefix_cache_queries", None, "query", "vllm_external"),
    ("vllm:external_prefix_cache_hits", None, "hit", "vllm_external"),
    ("vllm:prompt_tokens_cached_by_source", "source", "hit", "vllm_cached_{}"),
    ("lmcache_mp_lookup_requested_tokens", None, "query", "lmcache"),
    ("lmcache_mp_lookup_hit_l1_tokens", None, "hit", "lmcache_l1"),
    ("lmcache_mp_lookup_hit_l2_tokens", None, "hit", "lmcache_l2"),
    ("sglang:prompt_tokens", None, "query", "sglang"),
    ("sglang:cached_tokens", "cache_source", "hit", "sglang_{}"),
)
# more counters worth keeping in the raw deltas (not hits themselves). SGLang's storage-tier
# counters (0.5.23, with --enable-metrics) have one series per TP rank, summed here: tokens the
# L3 lookups found, read into host memory, written to L3, and found but not used (by reason).
EXTRA_COUNTERS = ("vllm:prompt_tokens_cached", "lmcache_mp_l2_store_completed_objects_chunks",
                  "lmcache_mp_l2_load_completed_requests", "sglang:storage_prefetch_hit_tokens",
                  "sglang:prefetched_tokens", "sglang:backuped_tokens", "sglang:storage_prefetch_unfulfilled_tokens")
# The engine's own view of a point (engine_view): its histograms' sums and counts, in seconds.
ENGINE_HISTOGRAMS = {"ttft": ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"),
                     "queue": ("vllm:request_queue_time_seconds", "sglang:queue_time_seconds")}
HISTOGRAM_COUNTERS = tuple(f"{name}_{part}" for names in ENGINE_HISTOGRAMS.values() for name in names
                           for part in ("sum", "count"))


def cache_counters(text: str) -> dict[str, float]:
    """The cache counters of a /metrics page: {name or name{label=value}: value summed over other labels}."""
    parsed = parse_prometheus(text)
    out: dict[str, float] = {}
    wanted = {c[0]: c[1] for c in CACHE_COUNTERS} | dict.fromkeys(EXTRA_COUNTERS + HISTOGRAM_COUNTERS)
    for (name, labels), value in parsed.items():
        base = name[:-6] if name.endswith("_total") else name
        if base not in wanted or name.endswith(("_created", "_bucket")):
            continue
        split = wanted[base]
        key = base
        if split:
            label = dict(labels).get(split)
            key = f"{base}{{{split}={label}}}" if label is not None else base
        out[key] = out.get(key, 0.0) + value
    return out


def counter_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """after - before per counter; a counter that appears only after (registered at first use) counts
    from 0; a counter that went down (the engine restarted) counts from 0 too."""
    out = {}
    for key, value in after.items():
        prev = before.get(key, 0.0)
        out[key] = value - prev if value >= prev else value
    return out


def cache_summary(delta: dict[str, float]) -> dict:
    """{hit_tokens: {source: n}, queried_tokens: {scope: n}, counters: raw deltas}."""
    hits, queries = {}, {}
    for metric, split, kind, source in CACHE_COUNTERS:
        for key, value in delta.items():
            if split and key.startswith(metric + "{"):
                label = key[len(metric) + len(split) + 2:-1]
                (hits if kind == "hit" else queries)[source.format(label)] = value
            elif key == metric:
                target = hits if kind == "hit" else queries
                target[source] = target.get(source, 0.0) + value
    counters = {k: v for k, v in sorted(delta.items()) if k not in HISTOGRAM_COUNTERS}  # those: engine_view
    return {"hit_tokens": hits, "queried_tokens": queries, "counters": counters}


# ---------------------------------------------------------------------------- points and rows

def measure_point(samples: list[dict], seconds: float) -> dict:
    ok = [x for x in samples if x["ok"]]
    errors = [x for x in samples if not x["ok"]]
    out_tokens = sum(x["output_tokens"] or 0 for x in ok)
    server_prompt = [x["prompt_tokens"] for x in ok if isinstance(x.get("prompt_tokens"), int)]
    return {
        "requests": len(samples), "ok": len(ok), "errors": len(errors),
        "first_error": errors[0]["error"] if errors else None,
        "seconds": round(seconds, 3),
        "requests_per_s": round(len(ok) / seconds, 3) if seconds > 0 else None,
        "output_tokens": out_tokens,
        "output_tokens_per_s": round(out_tokens / seconds, 3) if seconds > 0 else None,
        "server_prompt_tokens_mean": round(sum(server_prompt) / len(server_prompt), 1) if server_prompt else None,
        "ttft_ms": rounded(percentiles([x["ttft"] * 1000 for x in ok])),
        "latency_ms": rounded(percentiles([x["e2e"] * 1000 for x in ok])),
    }


def engine_view(delta: dict[str, float]) -> dict | None:
    """What the engine itself saw over a point, from its histograms' growth: the mean TTFT and
    queue time of the requests it finished (ms) and how many; None when it exports neither."""
    view = {}
    for what, names in ENGINE_HISTOGRAMS.items():
        for name in names:
            count = delta.get(f"{name}_count")
            if count:
                view[f"{what}_ms_mean"] = round(delta.get(f"{name}_sum", 0.0) / count * 1000, 3)
                view.setdefault("requests", int(count))
    return view or None


# ---------------------------------------------------------------------------- delivered load

# A point's load fell short of the one asked when its requests left late -- the 90th percentile
# of (sent - when the load shape said to send) above LATE_MS or LATE_SHARE of the point's TTFT
# p50, whichever is larger -- or, for a wave of N users or a closed loop of concurrency N, when
# the engine never answered N of them at once (a request's answer ran from its status line to
# its last byte): they ran partly one after another.
LATE_MS = 10.0
LATE_SHARE = 0.10


def delivery(samples: list[dict], asked: int | None, t0: float, ttft_p50_ms: float | None) -> dict:
    """The load a point delivered, from its samples' times (time.monotonic(): `due`, when the
    shape said to send; `sent`, when the headers were written; `answered`, when the status line
    came; `start` + `e2e`, when the answer ended), `asked` the users of a wave or the
    concurrency of a closed loop (None for a request rate), `t0` the point's start.
    {sent_ms: each request's send after t0 (ms, None: never sent), spread_ms: first to last send,
    lag_ms: percentiles of sent - due, in_flight: {mean (Little's law over first send to last
    end), answered_peak}, asked, short: why the delivered load fell short of the asked, or None}."""
    sent = [x for x in samples if x.get("sent") is not None]
    ends = [x["start"] + x["e2e"] for x in sent]
    out = {"sent_ms": [None if x.get("sent") is None else round((x["sent"] - t0) * 1000, 3) for x in samples],
           "spread_ms": round((max(x["sent"] for x in sent) - min(x["sent"] for x in sent)) * 1000, 3) if sent else None,
           "lag_ms": rounded(percentiles([(x["sent"] - x["due"]) * 1000 for x in sent])),
           "in_flight": {"mean": None, "answered_peak": None}, "asked": asked, "short": None}
    if sent:
        span = max(ends) - min(x["sent"] for x in sent)
        if span > 0:
            out["in_flight"]["mean"] = round(sum(e - x["sent"] for x, e in zip(sent, ends)) / span, 2)
        events = sorted([(x["answered"], 1) for x in sent if x.get("answered") is not None]
                        + [(e, -1) for x, e in zip(sent, ends) if x.get("answered") is not None])
        level = peak = 0
        for _, step in events:  # an end before an answer at the same instant: -1 sorts first
            level += step
            peak = max(peak, level)
        out["in_flight"]["answered_peak"] = peak
    margin = max(LATE_MS, LATE_SHARE * (ttft_p50_ms or 0.0))
    reasons = []
    if out["lag_ms"]["p90"] is not None and out["lag_ms"]["p90"] > margin:
        reasons.append(f"requests left late: 90 % within {out['lag_ms']['p90']:.0f} ms of when the load shape said "
                       f"(margin {margin:.0f} ms); the client could not keep up")
    peak = out["in_flight"]["answered_peak"]
    if asked and peak is not None and peak < min(asked, len(sent)):
        reasons.append(f"the engine answered at most {peak} of {min(asked, len(sent))} requests at once: they ran "
                       "partly one after another")
    out["short"] = "; ".join(reasons) or None
    return out


# Cache sources that are the storage tier (docs/loadtest.md): what a replay after a restart hits.
STORAGE_SOURCES = ("lmcache_l2", "vllm_cached_disk", "sglang_storage")


def _storage_hits(point: dict) -> dict:
    """A point's hits per source, and the prompt tokens the storage tier served."""
    hits = (point["cache"] or {}).get("hit_tokens", {})
    return {"storage_hit_tokens": sum(hits.get(s, 0.0) for s in STORAGE_SOURCES), "hit_tokens": hits}


def replay_rows(points: list[dict]) -> list[dict]:
    """Per endpoint and prompt length: the cold run's first turn against the replay's first
    turn after the restart (GPU and host tiers empty), and what the storage tier served."""
    cold = {(p["instance"], p["prompt_tokens"]): p for p in points if p["phase"] == "sweep" and p["turn"] == 1}
    rows = []
    for p in points:
        if p["phase"] != "replay" or p["turn"] != 1 or (p["instance"], p["prompt_tokens"]) not in cold:
            continue
        c = cold[p["instance"], p["prompt_tokens"]]
        rows.append({"instance": p["instance"], "prompt_tokens": p["prompt_tokens"], **_storage_hits(p),
                     "cold_ttft_ms_p50": c["ttft_ms"]["p50"],
                     "replay_ttft_ms_p50": p["ttft_ms"]["p50"]})
    return rows


def cross_host_rows(points: list[dict]) -> list[dict]:
    """Per pair and prompt length: the first turn of the source's conversations on the target
    (restarted: its GPU and host tiers empty, and it never saw them) against the target's own
    cold first turn, and what the storage tier served."""
    cold = {(p["instance"], p["prompt_tokens"]): p for p in points if p["phase"] == "sweep" and p["turn"] == 1}
    rows = []
    for p in points:
        if p["phase"] != "cross_host" or p["turn"] != 1:
            continue
        own, src = cold.get((p["instance"], p["prompt_tokens"])), cold.get((p.get("source"), p["prompt_tokens"]))
        rows.append({"instance": p["instance"], "source": p.get("source"), "prompt_tokens": p["prompt_tokens"],
                     **_storage_hits(p),
                     "cold_ttft_ms_p50": own["ttft_ms"]["p50"] if own else None,
                     "source_cold_ttft_ms_p50": src["ttft_ms"]["p50"] if src else None,
                     "cross_host_ttft_ms_p50": p["ttft_ms"]["p50"]})
    return rows
