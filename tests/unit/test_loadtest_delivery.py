"""#40: loadtest delivers the load it reports. Every point records when each request left
and the load it delivered (loadtest_metrics.delivery); a point whose requests were held back
-- they left late, or the server answered fewer at once than the wave's users or the loop's
concurrency -- is flagged on the console, in the JSON, the HTML and the chart, and a healthy
point is not. Against the OpenAI-compatible stand-in of test_loadtest (a real HTTP server on
127.0.0.1; FAKE engine: no model runs here), threaded (healthy) or serving one connection at
a time (a server that holds requests back)."""

from __future__ import annotations

import json

import pytest

from kvprov import loadtest as lt
from kvprov import loadtest_client as ltc
from kvprov import loadtest_metrics as ltm
from kvprov import loadtest_shapes as shapes
from kvprov import loadtest_workload as ltw
from tests.conftest import kvprov
from tests.unit.test_loadtest import standins  # noqa: F401 - the fixture

# Slow tokens: the margin (10 % of a TTFT of at least 1 s) is far above what scheduling noise
# can add, so the healthy case passes by construction and the held-back one fails by it.
SETTINGS = lt.Settings(prompt_tokens=[30], turns=1, users=4, output_tokens=1, turn_tokens=10, request_timeout=30)
TOKEN_DELAY = 1.0


def sample(due, sent, answered, start, e2e, ok=True) -> dict:
    return {"due": due, "sent": sent, "answered": answered, "start": start, "e2e": e2e, "ok": ok}


def test_a_wave_sent_together_and_answered_together_is_not_short():
    xs = [sample(10.0, 10.0 + i * 0.0005, 10.01, 10.0, 1.0) for i in range(4)]
    d = ltm.delivery(xs, 4, 10.0, 500.0)
    assert d["sent_ms"] == [0.0, 0.5, 1.0, 1.5] and d["spread_ms"] == 1.5
    assert d["lag_ms"]["max"] == 1.5 and d["in_flight"]["answered_peak"] == 4 and d["asked"] == 4
    assert d["in_flight"]["mean"] == pytest.approx(4 * (1.0 - 0.00075) / 1.0, abs=0.01)
    assert d["short"] is None


def test_a_wave_whose_requests_left_one_after_another_is_short_both_ways():
    """#40's case: each request of the wave left when the one before had finished."""
    xs = [sample(0.0, i * 0.05, i * 0.05 + 0.001, i * 0.05, 0.045) for i in range(16)]
    d = ltm.delivery(xs, 16, 0.0, 11.0)
    assert d["spread_ms"] == 750.0 and d["in_flight"]["answered_peak"] == 1
    assert "requests left late: 90 % within 700 ms" in d["short"] and "(margin 10 ms)" in d["short"]
    assert "the engine answered at most 1 of 16 requests at once" in d["short"]


def test_the_margin_is_a_share_of_the_ttft_and_a_rate_has_no_peak_to_reach():
    xs = [sample(0.0, i * 0.03, i * 0.03, i * 0.03, 0.01) for i in range(10)]  # late by up to 270 ms, never together
    assert ltm.delivery(xs, None, 0.0, 3000.0)["short"] is None  # margin 300 ms; no concurrency asked
    assert "margin 100 ms" in ltm.delivery(xs, None, 0.0, 1000.0)["short"]


def test_a_request_never_sent_is_in_the_record_but_not_in_the_figures():
    xs = [sample(0.0, 0.001, 0.002, 0.0, 0.5), sample(0.0, None, None, 0.0, 0.2, ok=False)]
    d = ltm.delivery(xs, 2, 0.0, 400.0)
    assert d["sent_ms"] == [1.0, None] and d["in_flight"]["answered_peak"] == 1 and d["short"] is None


def test_the_engines_own_view_comes_from_its_histograms():
    delta = {"vllm:time_to_first_token_seconds_sum": 1.6, "vllm:time_to_first_token_seconds_count": 16.0,
             "vllm:request_queue_time_seconds_sum": 0.32, "vllm:request_queue_time_seconds_count": 16.0}
    assert ltm.engine_view(delta) == {"ttft_ms_mean": 100.0, "queue_ms_mean": 20.0, "requests": 16}
    assert ltm.engine_view({"vllm:prefix_cache_hits": 3.0}) is None
    text = ("vllm:time_to_first_token_seconds_sum{model_name=\"m\"} 2.5\n"
            "vllm:time_to_first_token_seconds_count{model_name=\"m\"} 5\n"
            "vllm:time_to_first_token_seconds_bucket{le=\"0.1\",model_name=\"m\"} 1\n")
    assert ltm.cache_counters(text) == {"vllm:time_to_first_token_seconds_sum": 2.5,
                                        "vllm:time_to_first_token_seconds_count": 5.0}


def endpoint(server) -> ltc.Endpoint:
    ep = ltc.Endpoint("s/main", server.url, metrics_urls=[server.url + "/metrics"], engine="vllm_offload", api="chat")
    ltc.probe(ep, 10)
    return ep


def wave(server) -> dict:
    ep = endpoint(server)
    convs = ltw.make_conversations(ltw.TokenCounter(None), 30, SETTINGS.users, 1, 10, "seed")
    [point] = lt.run_conversations(ep, convs, SETTINGS, lt.Stop(120))
    assert point["ok"] == SETTINGS.users, point["first_error"]
    return point["delivery"]


def test_a_wave_on_a_healthy_server_is_delivered_whole(standins):
    d = wave(standins(token_delay=TOKEN_DELAY))
    assert d["in_flight"]["answered_peak"] == SETTINGS.users and len(d["sent_ms"]) == SETTINGS.users
    # the server is never blamed; a client starved of CPU (a busy CI machine: all four sent 118 ms
    # late once) may say so itself, which is that warning's job
    assert d["short"] is None or "the engine answered" not in d["short"], d


def test_a_wave_on_a_server_that_serves_one_connection_at_a_time_is_flagged(standins):
    d = wave(standins(token_delay=TOKEN_DELAY, serial=True))
    assert d["in_flight"]["answered_peak"] == 1
    assert f"the engine answered at most 1 of {SETTINGS.users} requests at once" in d["short"]


@pytest.mark.parametrize("serial", [False, True])
def test_a_closed_loop_is_flagged_only_where_the_server_holds_requests_back(standins, serial):
    ep = endpoint(standins(token_delay=TOKEN_DELAY, serial=serial))
    supply = shapes.Supply(ltw.TokenCounter(None), 30, SETTINGS, "seed")
    point = shapes.run_point(ep, SETTINGS, shapes.Shape("concurrency", 3), supply, 6, 0, lt.Stop(120), "seed")
    d = point["delivery"]
    assert (d["asked"], len(d["sent_ms"])) == (3, 6)
    assert (d["short"] is not None, d["in_flight"]["answered_peak"]) == ((True, 1) if serial else (False, 3)), d


def test_the_warning_reaches_the_console_the_json_and_the_html(standins, tmp_path):
    server = standins(token_delay=TOKEN_DELAY, serial=True)
    out = tmp_path / "run"
    r = kvprov("loadtest", "--url", server.url, "--users", "3", "--turns", "1", "--prompt-tokens", "30",
               "--output-tokens", "1", "--out", str(out), timeout=120)
    assert r.returncode == 0, r.stderr
    assert "WARNING: less load than asked: the engine answered at most 1 of 3 requests at once" in r.stderr
    doc = json.loads((out / "loadtest.json").read_text())
    [point] = doc["points"]
    assert point["delivery"]["short"] and len(point["delivery"]["sent_ms"]) == 3
    assert "WARNING: 1 of 1 points delivered less load than asked" in (out / "loadtest.html").read_text()
