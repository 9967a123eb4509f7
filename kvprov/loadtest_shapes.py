"""kvprov loadtest's load shapes (#26): load held over many requests, as serving benchmarks
measure it (`vllm bench serve`, AIPerf, GuideLLM sweep concurrency or request rate).

- concurrency C (closed loop): C conversations in flight at all times; each sends its next
  turn when the answer to the last one arrives, and a finished conversation is followed by a
  new one (a new prefix);
- request rate R (open loop): new conversations arrive as a Poisson process of R / turns per
  second (exponential gaps, seeded), so that requests are offered at R per second; each sends
  its turns one after another as above. The measured rate falls short of R where the engine
  cannot keep up.

A point is one shape at one initial prompt length: `--warmup` requests first (not counted),
then `--requests` measured ones, in the order they were issued; repeated `--repeats` times
(load_rows: the median and the spread). Percentiles are given only where the sample can
support them (nearest rank: p50 from 2 requests, p90 from 10, p99 from 100); each point says
how many requests its figures are from. Multi-turn conversations stay conversations: a
measured request may be a later turn, whose prefix the engine may have cached (the point
counts its turns)."""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from dataclasses import dataclass

from kvprov.loadtest import Settings, Stop, _request_body
from kvprov.loadtest_client import AsyncClient, Client, Endpoint, read_counters
from kvprov.loadtest_metrics import cache_summary, counter_delta, delivery, engine_view, measure_point
from kvprov.loadtest_workload import TokenCounter, make_conversations

# The fewest samples a nearest-rank percentile needs to be more than the sample's maximum.
MIN_SAMPLES = {"p50": 2, "p90": 10, "p99": 100}


@dataclass(frozen=True)
class Shape:
    kind: str  # "concurrency" or "rate"
    value: float

    def label(self) -> str:
        return f"concurrency {self.value:g}" if self.kind == "concurrency" else f"{self.value:g} req/s (Poisson)"


def load_label(row: dict) -> str:
    """The label of a point's, a load row's or the settings' load ({"shape", "load"})."""
    return Shape(row["shape"], row["load"]).label()


def supported(pcts: dict, n: int) -> dict:
    """The percentiles a sample of n can support; the others None (the max is always kept)."""
    return {k: v if n >= MIN_SAMPLES.get(k, 1) else None for k, v in pcts.items()}


class Supply:
    """Conversations without end, the same ones for the same seed. prepare(n) makes
    the first n before a point starts: generating a prompt to a token count costs the client CPU
    (about 4 ms for 512 tokens here), which inside the point would slow the client, and on a
    shared machine the engine, as no reference client does (they make their prompts first)."""

    def __init__(self, counter: TokenCounter, prompt_tokens: int, s: Settings, seed: str):
        self.counter, self.prompt_tokens, self.s, self.seed = counter, prompt_tokens, s, seed
        self.n = 0
        self.ready: list = []

    def _make(self, i: int):
        [conv] = make_conversations(self.counter, self.prompt_tokens, 1, self.s.turns, self.s.turn_tokens,
                                    f"{self.seed}/{i}")
        return conv

    def prepare(self, n: int) -> None:
        self.ready = [self._make(i) for i in range(1, n + 1)]

    def next(self):
        self.n += 1
        i = self.n
        return self.ready[i - 1] if i <= len(self.ready) else self._make(i)


class _Run:
    """One point's requests: hands out request numbers until warmup + requests are issued."""

    def __init__(self, ep: Endpoint, s: Settings, total: int, stop: Stop, client: AsyncClient):
        self.ep, self.s, self.total, self.stop, self.client = ep, s, total, stop, client
        self.issued = 0
        self.samples: list[tuple[int, int, dict]] = []  # (number, turn, sample)

    def take(self) -> int | None:
        if self.issued >= self.total or self.stop.check():
            return None
        self.issued += 1
        return self.issued - 1

    async def conversation(self, conv, due: float) -> bool:
        """Its turns, each sent when the last answer came (the first at `due`); False when no
        request was left to send."""
        history: list[dict] = []
        for turn, message in enumerate(conv.messages, 1):
            number = self.take()
            if number is None:
                return False
            history.append({"role": "user", "content": message})
            path, body = _request_body(self.ep, self.s, history)
            sample = {**await self.client.stream(path, body), "due": due}
            self.samples.append((number, turn, sample))
            if not sample["ok"]:
                return True  # this conversation ends; the load goes on with the next
            due = sample["start"] + sample["e2e"]
            history.append({"role": "assistant", "content": sample.get("text") or ""})
        return True


def run_point(ep: Endpoint, s: Settings, shape: Shape, supply: Supply, requests: int, warmup: int, stop: Stop,
              seed: str) -> dict | None:
    """One point: warmup + requests requests under `shape`, from one event loop; None when cut
    short by --duration."""
    return asyncio.run(_point(ep, s, shape, supply, requests, warmup, stop, seed))


async def _point(ep: Endpoint, s: Settings, shape: Shape, supply: Supply, requests: int, warmup: int, stop: Stop,
                 seed: str) -> dict | None:
    counters = Client(ep, s.request_timeout)
    conversations = -(-(warmup + requests) // s.turns)  # each brings `turns` requests, the last ones cut short
    supply.prepare(conversations + int(shape.value) if shape.kind == "concurrency" else warmup + requests)
    before, metric_errors = read_counters(counters, ep.metrics_urls)
    async with AsyncClient(ep, s.request_timeout) as client:
        run = _Run(ep, s, warmup + requests, stop, client)
        t0 = time.monotonic()
        if shape.kind == "concurrency":
            async def slot() -> None:
                due = t0
                while await run.conversation(supply.next(), due):
                    due = time.monotonic()
            tasks = [asyncio.ensure_future(slot()) for _ in range(int(shape.value))]
        else:
            gaps = random.Random(f"{seed}/arrivals")
            tasks, due = [], t0
            while run.issued < run.total and not stop.check():
                tasks.append(asyncio.ensure_future(run.conversation(supply.next(), due)))
                due += gaps.expovariate(shape.value / s.turns)  # each conversation brings `turns` requests
                await asyncio.sleep(max(0.0, due - time.monotonic()))
        await asyncio.gather(*tasks)
    if stop.reason:
        return None
    measured = [x[2] for x in sorted(run.samples, key=lambda x: x[0]) if x[0] >= warmup]
    if not measured:
        return None
    seconds = max(x["start"] + x["e2e"] for x in measured) - min(x["start"] for x in measured)
    point = measure_point(measured, seconds)
    ok = point["ok"]
    point["ttft_ms"], point["latency_ms"] = supported(point["ttft_ms"], ok), supported(point["latency_ms"], ok)
    after, errs = read_counters(counters, ep.metrics_urls)
    delta = counter_delta(before, after)
    turns: dict[int, int] = {}
    for number, turn, _ in run.samples:
        if number >= warmup:
            turns[turn] = turns.get(turn, 0) + 1
    asked = int(shape.value) if shape.kind == "concurrency" else None
    return {"phase": "load", "instance": ep.name, "engine": ep.engine, "url": ep.url, "api": ep.api,
            "prompt_tokens": supply.prompt_tokens, "shape": shape.kind, "load": shape.value, "warmup": warmup,
            "samples": ok, "turn": None, "turns_measured": {str(k): v for k, v in sorted(turns.items())},
            **point,
            "delivery": delivery(measured, asked, t0, point["ttft_ms"]["p50"]),
            "engine_view": engine_view(delta),
            "cache": cache_summary(delta) if (before or after) else None,
            "metrics_errors": metric_errors + [e for e in errs if e not in metric_errors]}


def load_rows(points: list[dict]) -> list[dict]:
    """Per instance, prompt length and load: the median of its repeats and their spread."""
    groups: dict[tuple, list[dict]] = {}
    for p in points:
        if p.get("phase") == "load":
            groups.setdefault((p["instance"], p["prompt_tokens"], p["shape"], p["load"]), []).append(p)
    rows = []
    for (instance, tokens, shape, load), ps in groups.items():
        row = {"instance": instance, "prompt_tokens": tokens, "shape": shape, "load": load, "repeats": len(ps),
               "samples": sum(p["samples"] for p in ps),
               "short": sum(1 for p in ps if (p.get("delivery") or {}).get("short"))}
        for name, get in (("requests_per_s", lambda p: p.get("requests_per_s")),
                          ("output_tokens_per_s", lambda p: p.get("output_tokens_per_s")),
                          ("ttft_ms_p50", lambda p: (p.get("ttft_ms") or {}).get("p50")),
                          ("ttft_ms_p99", lambda p: (p.get("ttft_ms") or {}).get("p99"))):
            values = [v for v in map(get, ps) if v is not None]
            row[name] = {"median": round(statistics.median(values), 3), "min": min(values), "max": max(values)} \
                if values else None
        rows.append(row)
    return rows
