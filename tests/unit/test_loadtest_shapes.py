"""loadtest's load shapes (#26): a concurrency sweep holds C conversations in flight over
--requests measured requests after --warmup, a request rate offers Poisson arrivals, each
point says how many requests its figures are from and gives no percentile its sample cannot
support. Against the OpenAI-compatible stand-in of test_loadtest (a real HTTP server on
127.0.0.1; FAKE engine: no model runs here, the lab's test_5 runs a real vLLM)."""

import json

import pytest

from kvprov import loadtest as lt
from kvprov import loadtest_client as ltc
from kvprov import loadtest_shapes as shapes
from kvprov import loadtest_workload as ltw
from tests.conftest import kvprov
from tests.unit.test_loadtest import standins  # noqa: F401 - the fixture

SETTINGS = lt.Settings(prompt_tokens=[40], turns=3, output_tokens=4, turn_tokens=10, request_timeout=30)


def test_percentiles_only_where_the_sample_supports_them():
    pcts = {"p50": 1.0, "p90": 2.0, "p99": 3.0, "max": 4.0}
    assert shapes.supported(pcts, 1) == {"p50": None, "p90": None, "p99": None, "max": 4.0}
    assert shapes.supported(pcts, 2) == {"p50": 1.0, "p90": None, "p99": None, "max": 4.0}
    assert shapes.supported(pcts, 10) == {"p50": 1.0, "p90": 2.0, "p99": None, "max": 4.0}
    assert shapes.supported(pcts, 99)["p99"] is None and shapes.supported(pcts, 100) == pcts


def endpoint(server) -> ltc.Endpoint:
    ep = ltc.Endpoint("s/main", server.url, metrics_urls=[server.url + "/metrics"], engine="vllm_offload", api="chat")
    ltc.probe(ep, 10)
    return ep


def in_flight(monkeypatch) -> list[int]:
    """The most requests the client had in flight at once, observed around AsyncClient.stream."""
    now, most = [0], [0]
    stream = ltc.AsyncClient.stream

    async def counted(self, path, body):
        now[0] += 1
        most[0] = max(most[0], now[0])
        try:
            return await stream(self, path, body)
        finally:
            now[0] -= 1
    monkeypatch.setattr(ltc.AsyncClient, "stream", counted)
    return most


def test_concurrency_holds_c_conversations_in_flight_and_counts_after_the_warmup(standins, monkeypatch):
    server = standins(token_delay=0.01)
    ep = endpoint(server)
    most = in_flight(monkeypatch)
    supply = shapes.Supply(ltw.TokenCounter(None), 40, SETTINGS, "seed")
    point = shapes.run_point(ep, SETTINGS, shapes.Shape("concurrency", 3), supply, 30, 6, lt.Stop(60), "seed")
    assert len(server.posts()) == 36 and most[0] == 3  # warm-up and measured requests, never more than 3 at once
    assert point["requests"] == point["ok"] == point["samples"] == 30 and point["warmup"] == 6
    assert point["phase"] == "load" and point["shape"] == "concurrency" and point["load"] == 3
    assert point["ttft_ms"]["p90"] is not None and point["ttft_ms"]["p99"] is None  # 30 requests: no p99
    assert point["requests_per_s"] > 0 and point["output_tokens"] == 30 * 4
    assert sum(point["turns_measured"].values()) == 30 and set(point["turns_measured"]) <= {"1", "2", "3"}
    # conversations stay conversations: a later turn carries the earlier question and answer
    prompts = [" ".join(p) for p in server.prompts]
    later = [p for p in prompts if p.count("w0") >= 1]
    assert later and all(any(q.startswith(p.split(" w0")[0]) for q in prompts) for p in later)
    assert point["cache"] is not None  # the engine's counters over the point


def test_a_request_rate_offers_the_requests_and_a_dead_engine_ends_the_point(standins):
    server = standins()
    ep = endpoint(server)
    supply = shapes.Supply(ltw.TokenCounter(None), 40, SETTINGS, "seed")
    point = shapes.run_point(ep, SETTINGS, shapes.Shape("rate", 200.0), supply, 12, 3, lt.Stop(60), "seed")
    assert len(server.posts()) == 15 and point["samples"] == 12 and point["shape"] == "rate"
    dead = standins(fail=True)
    ep = endpoint(dead)
    point = shapes.run_point(ep, SETTINGS, shapes.Shape("concurrency", 2),
                             shapes.Supply(ltw.TokenCounter(None), 40, SETTINGS, "s"), 8, 0, lt.Stop(60), "s")
    assert point["ok"] == 0 and point["errors"] == 8 and "engine core died" in point["first_error"]


def test_repeats_give_the_median_and_the_spread():
    def point(load, rate, ttft):
        return {"phase": "load", "instance": "h/main", "prompt_tokens": 40, "shape": "concurrency", "load": load,
                "samples": 10, "requests_per_s": rate, "output_tokens_per_s": rate * 4,
                "ttft_ms": {"p50": ttft, "p99": None}}
    rows = shapes.load_rows([point(1, 2.0, 10.0), point(1, 4.0, 30.0), point(1, 3.0, 20.0), point(4, 8.0, 50.0),
                             {"phase": "sweep"}])
    assert [(r["load"], r["repeats"], r["samples"]) for r in rows] == [(1, 3, 30), (4, 1, 10)]
    assert rows[0]["requests_per_s"] == {"median": 3.0, "min": 2.0, "max": 4.0}
    assert rows[0]["ttft_ms_p50"] == {"median": 20.0, "min": 10.0, "max": 30.0} and rows[0]["ttft_ms_p99"] is None


def test_the_cli_sweeps_concurrency_with_repeats_and_reports_each_point(standins, tmp_path):
    server = standins()
    out = tmp_path / "run"
    r = kvprov("loadtest", "--url", server.url, "--concurrency", "2,1", "--requests", "12", "--warmup", "2",
               "--repeats", "2", "--prompt-tokens", "40", "--turns", "2", "--output-tokens", "4", "--turn-tokens", "10",
               "--seed", "7", "--out", str(out), timeout=120)
    assert r.returncode == 0, r.stderr
    assert "concurrency 1, concurrency 2, 12 requests a point after 2 warm-up, 2 repeat(s)" in r.stderr
    assert "[4/4] 127.0.0.1" in r.stderr and "p99 - (needs 100 requests)" in r.stderr
    doc = json.loads((out / "loadtest.json").read_text())
    assert [(p["load"], p["repeat"], p["samples"]) for p in doc["points"]] == [(1, 1, 12), (1, 2, 12), (2, 1, 12),
                                                                               (2, 2, 12)]
    assert doc["settings"]["load"] == [{"shape": "concurrency", "load": 1}, {"shape": "concurrency", "load": 2}]
    assert [(row["load"], row["repeats"], row["samples"]) for row in doc["load"]] == [(1, 2, 24), (2, 2, 24)]
    assert len(server.posts()) == 4 * 14 + 1  # four points of 2 + 12, and the chat API probe
    html = (out / "loadtest.html").read_text()
    assert "Load (median of the repeats" in html and "concurrency 2, repeat 2, after 2 warm-up" in html
    assert (out / "loadtest.png").stat().st_size > 10_000


@pytest.mark.parametrize("args,message", [
    (["--concurrency", "2", "--request-rate", "3"], "not allowed with argument"),
    (["--request-rate", "0"], "expected positive numbers"),
    (["--concurrency", "2", "--warmup", "-1"], "--warmup -1: give 0 or more"),
])
def test_bad_load_options_are_refused_before_any_request(standins, args, message):
    server = standins()
    r = kvprov("loadtest", "--url", server.url, *args, timeout=60)
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert server.seen == []
    r = kvprov("loadtest", "inventory/example.yml", "--concurrency", "2", "--replay", timeout=60)
    assert r.returncode == 2 and "--replay and --cross-host measure single waves" in r.stderr, r.stderr
