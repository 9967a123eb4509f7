"""`kvprov loadtest`: the pure parts (workload and token counts, percentiles, cache-counter
deltas from Prometheus text, endpoints from the inventory) and end-to-end runs of the real
CLI against a small in-process HTTP server.

That server is a PROTOCOL STAND-IN, not an engine: it speaks the OpenAI streaming protocol
(/v1/models, /v1/chat/completions and /v1/completions with `stream: true` server-sent
events, `usage` in the last chunk) and serves /metrics with vLLM's and LMCache MP's counter
names (as engines-lab.md records them from the real engines), counting a prefix hit when a
prompt starts with an earlier one. The real engine is measured by a lab test."""

from __future__ import annotations

import json
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer
from pathlib import Path

import pytest

from kvprov import cli
from kvprov import loadtest as lt
from kvprov import loadtest_client as ltc
from kvprov import loadtest_metrics as ltm
from kvprov import loadtest_report as rep
from kvprov import loadtest_workload as ltw
from tests.conftest import ROOT, kvprov

# What vLLM 0.32 and the LMCache MP server print on /metrics (prometheus_client text format:
# HELP/TYPE lines, _total and _created samples, labels), with the counters loadtest reads.
VLLM_METRICS = """\
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{{engine="0",model_name="tiny"}} {q}
vllm:prefix_cache_queries_created{{engine="0",model_name="tiny"}} 1.7645e+09
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{{engine="0",model_name="tiny"}} {h}
# HELP vllm:external_prefix_cache_queries_total External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.
# TYPE vllm:external_prefix_cache_queries_total counter
vllm:external_prefix_cache_queries_total{{engine="0",model_name="tiny"}} {q}
# TYPE vllm:external_prefix_cache_hits_total counter
vllm:external_prefix_cache_hits_total{{engine="0",model_name="tiny"}} {x}
# TYPE vllm:prompt_tokens_cached_by_source_total counter
vllm:prompt_tokens_cached_by_source_total{{engine="0",model_name="tiny",source="device"}} {h}
vllm:prompt_tokens_cached_by_source_total{{engine="0",model_name="tiny",source="external_unspecified"}} {x}
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="tiny"}} 0.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{{engine="0",le="0.001",model_name="tiny"}} 0.0
"""
LMCACHE_METRICS = """\
# HELP lmcache_mp_lookup_requested_tokens_total Tokens looked up
# TYPE lmcache_mp_lookup_requested_tokens_total counter
lmcache_mp_lookup_requested_tokens_total {q}
# TYPE lmcache_mp_lookup_hit_l1_tokens_total counter
lmcache_mp_lookup_hit_l1_tokens_total {l1}
# TYPE lmcache_mp_lookup_hit_l2_tokens_total counter
lmcache_mp_lookup_hit_l2_tokens_total {l2}
# TYPE lmcache_mp_l2_load_completed_requests_total counter
lmcache_mp_l2_load_completed_requests_total{{l2_name="fs"}} 3.0
# TYPE lmcache_mp_l2_usage_bytes gauge
lmcache_mp_l2_usage_bytes{{l2_name="fs"}} 917504.0
"""


# ---------------------------------------------------------------------------- the stand-in

class StandIn:
    """An OpenAI-compatible streaming protocol stand-in on 127.0.0.1 (see the module doc)."""

    def __init__(self, chat=True, max_model_len=4096, fail=False, token_delay=0.0, key=None, lmcache=True,
                 vllm=True, serial=False):
        self.chat, self.max_model_len, self.fail, self.delay, self.key, self.lmcache, self.vllm = \
            chat, max_model_len, fail, token_delay, key, lmcache, vllm
        self.seen: list[tuple[str, str, str | None]] = []  # (method, path, Authorization)
        self.prompts: list[list[str]] = []
        self.ignore_eos: list = []  # each POST's ignore_eos (None: not sent)
        self.q = self.h = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def reply(self, status, obj, ctype="application/json"):
                data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                outer.seen.append(("GET", self.path, self.headers.get("Authorization")))
                # the key guards the API; /metrics is open (vLLM, kvprov's vLLM guard and SGLang alike)
                if outer.key and self.path != "/metrics" and self.headers.get("Authorization") != f"Bearer {outer.key}":
                    return self.reply(401, {"error": "Unauthorized"})
                if self.path == "/v1/models":
                    return self.reply(200, {"object": "list", "data": [
                        {"id": "tiny", "object": "model", "max_model_len": outer.max_model_len}]})
                if self.path == "/metrics":
                    with outer.lock:
                        v = dict(q=float(outer.q), h=float(outer.h), x=float(outer.h // 2),
                                 l1=float(outer.h // 4), l2=float(outer.h // 8))
                    text = (VLLM_METRICS.format(**v) if outer.vllm else "") + \
                        (LMCACHE_METRICS.format(**v) if outer.lmcache else "")
                    return self.reply(200, text.encode(), "text/plain; version=0.0.4")
                self.reply(404, {"error": "not found"})

            def do_POST(self):
                outer.seen.append(("POST", self.path, self.headers.get("Authorization")))
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path == "/tokenize":  # a server without one (loadtest then approximates)
                    return self.reply(404, {"error": "not found"})
                outer.ignore_eos.append(body.get("ignore_eos"))
                if outer.fail:
                    return self.reply(500, {"error": {"message": "engine core died", "code": 500}})
                chat = self.path == "/v1/chat/completions"
                if chat and not outer.chat:
                    return self.reply(400, {"error": {"message": "this model has no chat template"}})
                if self.path not in ("/v1/chat/completions", "/v1/completions"):
                    return self.reply(404, {"error": "not found"})
                prompt = ("".join(m["content"] + " " for m in body["messages"]) if chat else body["prompt"]).split()
                with outer.lock:
                    best = max((_common(prompt, p) for p in outer.prompts), default=0)
                    outer.prompts.append(prompt)
                    outer.q += len(prompt)
                    outer.h += best // 16 * 16
                n = body["max_tokens"]
                if not body.get("stream"):
                    return self.reply(200, {"choices": [{"message": {"role": "assistant", "content": "x"}}]})
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()

                def event(obj):
                    self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
                    self.wfile.flush()
                if chat:
                    event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
                for i in range(n):
                    time.sleep(outer.delay)
                    event({"choices": [{"index": 0, "delta": {"content": f"w{i} "}} if chat else
                                       {"index": 0, "text": f"w{i} "}]})
                event({"choices": [], "usage": {"prompt_tokens": len(prompt), "completion_tokens": n,
                                                "total_tokens": len(prompt) + n}})
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

        # serial: one connection served at a time (HTTPServer), as a server that holds requests back
        self.server = (HTTPServer if serial else ThreadingHTTPServer)(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def posts(self) -> list[str]:
        """The inference requests (not /tokenize: loadtest asks it to count tokens without a tokenizer.json)."""
        return [p for m, p, _ in self.seen if m == "POST" and p != "/tokenize"]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _common(a, b) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@pytest.fixture
def standins():
    made = []

    def make(**kw):
        s = StandIn(**kw)
        made.append(s)
        return s
    yield make
    for s in made:
        s.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SMALL = ["--prompt-tokens", "40,120", "--turns", "2", "--users", "2", "--output-tokens", "6",
         "--turn-tokens", "20", "--seed", "7", "--duration", "60"]


# ---------------------------------------------------------------------------- pure parts

def test_conversations_are_deterministic_unique_per_user_and_sized_in_words_without_a_tokenizer():
    c = ltw.TokenCounter(None)
    assert not c.exact and "approximate" in c.note
    a = ltw.make_conversations(c, 300, users=3, turns=3, turn_tokens=50, seed="s")
    b = ltw.make_conversations(c, 300, users=3, turns=3, turn_tokens=50, seed="s")
    assert [x.messages for x in a] == [x.messages for x in b]
    assert [x.message_tokens for x in a] == [[300, 50, 50]] * 3
    firsts = [x.messages[0].split()[:4] for x in a]
    assert len({tuple(f) for f in firsts}) == 3  # each user's text differs from its first words
    assert ltw.make_conversations(c, 300, 3, 3, 50, "other")[0].messages != a[0].messages


def test_prompt_lengths_are_real_token_counts_with_the_models_tokenizer(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    rng = random.Random(0)
    corpus = [" ".join(rng.choice(ltw.WORDS) for _ in range(12)) for _ in range(300)]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=["<|im_end|>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                        show_progress=False))
    (tmp_path / "model").mkdir()
    tok.save(str(tmp_path / "model" / "tokenizer.json"))
    c = ltw.TokenCounter(str(tmp_path / "model"))  # a model directory, as kvprov_engine_model_path names it
    assert c.exact and c.describe()["path"].endswith("tokenizer.json")
    for n in (1, 17, 256, 1000):
        text = ltw.make_text(c, n, random.Random(n), "Conversation 0a1b of user 0:")
        assert n - 2 <= c.count(text) <= n
        assert len(tok.encode(text).ids) == c.count(text)
    conv = ltw.make_conversations(c, 500, 2, 2, 40, "x")[0]
    assert conv.message_tokens[0] in range(498, 501) and conv.message_tokens[1] in range(38, 41)


def test_an_unreadable_tokenizer_falls_back_to_a_labelled_approximation(tmp_path):
    (tmp_path / "tokenizer.json").write_text("not json")
    c = ltw.TokenCounter(str(tmp_path))
    assert not c.exact and c.note.startswith("approximate")
    assert "no tokenizer.json at /nonexistent" in ltw.TokenCounter("/nonexistent").note


def test_percentiles_of_a_point():
    samples = [{"ok": True, "ttft": t / 1000, "e2e": t / 100, "output_tokens": 10, "prompt_tokens": 100}
               for t in range(1, 101)] + [{"ok": False, "error": "HTTP 500: boom"}]
    p = ltm.measure_point(samples, 10.0)
    assert p["ttft_ms"] == {"p50": 50.0, "p90": 90.0, "p99": 99.0, "max": 100.0}
    assert p["latency_ms"]["p50"] == 500.0
    assert (p["requests"], p["ok"], p["errors"], p["first_error"]) == (101, 100, 1, "HTTP 500: boom")
    assert p["requests_per_s"] == 10.0 and p["output_tokens_per_s"] == 100.0
    assert ltm.measure_point([], 1.0)["ttft_ms"]["p50"] is None


def test_prometheus_text_and_cache_deltas_per_source():
    before = VLLM_METRICS.format(q=1000.0, h=256.0, x=128.0) + LMCACHE_METRICS.format(q=900.0, l1=0.0, l2=0.0)
    after = VLLM_METRICS.format(q=3000.0, h=1280.0, x=640.0) + LMCACHE_METRICS.format(q=2900.0, l1=512.0, l2=256.0)
    parsed = ltm.parse_prometheus(after)
    assert parsed[("vllm:prefix_cache_hits_total", (("engine", "0"), ("model_name", "tiny")))] == 1280.0
    b, a = ltm.cache_counters(before), ltm.cache_counters(after)
    assert "vllm:num_requests_running" not in a and "vllm:prefix_cache_queries" in a
    assert a["vllm:prompt_tokens_cached_by_source{source=device}"] == 1280.0
    s = ltm.cache_summary(ltm.counter_delta(b, a))
    assert s["hit_tokens"] == {"vllm_prefix": 1024.0, "vllm_external": 512.0, "vllm_cached_device": 1024.0,
                               "vllm_cached_external_unspecified": 512.0, "lmcache_l1": 512.0, "lmcache_l2": 256.0}
    assert s["queried_tokens"] == {"vllm_prefix": 2000.0, "vllm_external": 2000.0, "lmcache": 2000.0}
    assert s["counters"]["lmcache_mp_l2_load_completed_requests"] == 0.0


def test_counters_registered_late_or_reset_by_a_restart_count_from_zero():
    # the LMCache MP server registers its lookup counters at the first lookup; a restart resets them
    assert ltm.counter_delta({}, {"lmcache_mp_lookup_hit_l2_tokens": 768.0}) == {"lmcache_mp_lookup_hit_l2_tokens": 768.0}
    assert ltm.counter_delta({"vllm:prefix_cache_hits": 5000.0}, {"vllm:prefix_cache_hits": 300.0}) == \
        {"vllm:prefix_cache_hits": 300.0}
    sg = ('sglang:cached_tokens_total{model_name="q",cache_source="device"} 100\n'
          'sglang:cached_tokens_total{model_name="q",cache_source="storage"} 40\n'
          'sglang:prompt_tokens_total{model_name="q"} 400\nsglang:cache_hit_rate{model_name="q"} 0.3\n'
          'weird{a="x\\"y,z",b="2"} 7 1700000000\nbroken{a="1" 3\n')
    s = ltm.cache_summary(ltm.counter_delta({}, ltm.cache_counters(sg)))
    assert s["hit_tokens"] == {"sglang_device": 100.0, "sglang_storage": 40.0}
    assert s["queried_tokens"] == {"sglang": 400.0}
    assert ltm.parse_prometheus(sg)[("weird", (("a", 'x"y,z'), ("b", "2")))] == 7.0


def test_urls_and_the_context_check():
    assert lt.parse_url("http://h:8000/v1/") == "http://h:8000"
    assert lt.parse_url("h:9000") == "http://h:9000"
    assert lt.parse_url("https://[::1]/proxy/v1") == "https://[::1]:443/proxy"
    for bad in ("ftp://h/", "http://u:p@h:1", "http://h:1/?x=1", "http://h:99999"):
        with pytest.raises(lt.KvprovError) as e:
            lt.parse_url(bad)
        assert e.value.exit_code == 2
    ep = ltc.Endpoint("h/main", "http://h:8000", max_model_len=4096, max_model_len_from="/v1/models")
    assert ltw.context_needed(1000, 3, 100, 64) == 1000 + 2 * 164 + 64 + 48
    assert ltw.context_problems([ep], [1000, 3000], 3, 100, 64) == []
    [line] = ltw.context_problems([ep], [1000, 4000], 3, 100, 64)
    assert "--prompt-tokens 4000" in line and "max_model_len 4096 (/v1/models)" in line and "h/main" in line


def test_endpoints_from_the_inventory(tmp_path):
    key = tmp_path / "key"
    key.write_text("sk-secret-123\n")
    hosts = {"a": {"ansible_host": "10.0.0.5", "kvprov_engine_host": "0.0.0.0", "kvprov_engine_api_key_file": str(key),
                   "kvprov_vllm_max_model_len": 8192, "kvprov_engine_model_path": "/models/q"},
             "b": {"ansible_host": "10.0.0.6", "kvprov_engine_host": "127.0.0.1"},
             "c": {"ansible_host": "fd00::7", "kvprov_engine_host": "10.1.0.7", "kvprov_engine_api_key_file": "/nope"}}
    inst = [{"name": "main", "port": 8000, "metrics_port": 19000,
             "units": ["kvprov-lmcache-main.service", "kvprov-vllm-main.service"]},
            {"name": "two", "port": 8001, "metrics_port": 19001}]
    states = {"a": {"engine": {"name": "lmcache_mp", "instances": inst}},
              "b": {"engine": {"name": "sglang_hicache", "instances": [{"name": "main", "port": 30000}]}},
              "c": {"engine": {"name": "vllm_offload", "instances": [{"name": "main", "port": 8000}]}}}
    eps = {e.name: e for e in lt.inventory_endpoints(hosts, states)}
    a = eps["a/main"]
    assert a.url == "http://10.0.0.5:8000" and a.metrics_urls == ["http://10.0.0.5:8000/metrics",
                                                                   "http://10.0.0.5:19000/metrics"]
    assert a.api_key == "sk-secret-123" and "sk-secret" not in repr(a) and "sk-secret" not in json.dumps(a.public())
    assert (a.max_model_len, a.model_path, a.engine) == (8192, "/models/q", "lmcache_mp")
    assert (a.host, a.units) == ("a", ["kvprov-lmcache-main.service", "kvprov-vllm-main.service"])
    # on another host's loopback: reached through an ssh tunnel with the host's connection variables
    b = eps["b/main"]
    assert (b.problem, b.url, b.via) == (None, "http://127.0.0.1:30000", hosts["b"]) and "10.0.0.6" not in repr(b)
    assert eps["c/main"].url == "http://10.1.0.7:8000" and "cannot read the API key file /nope" in eps["c/main"].problem
    # ssh on this controller's loopback (a port-forwarded VM): its engine's loopback is not this one (#38)
    vm = {"ansible_host": "127.0.0.1", "ansible_port": 2221, "kvprov_engine_host": "127.0.0.1",
          "kvprov_engine_api_key_file": str(key)}
    local = {"ansible_connection": "local", "kvprov_engine_host": "127.0.0.1"}
    one = {"engine": {"name": "vllm_offload", "instances": [{"name": "main", "port": 8000}]}}
    both = {e.host: e for e in lt.inventory_endpoints({"vm": vm, "me": local}, {"vm": one, "me": one})}
    assert (both["vm"].via, both["vm"].url) == (vm, "http://127.0.0.1:8000")
    assert (both["me"].via, both["me"].url) == (None, "http://127.0.0.1:8000")
    assert [e.name for e in lt.inventory_endpoints(hosts, states, ["two"])] == ["a/two"]
    assert [e.name for e in lt.inventory_endpoints(hosts, states, ["c/main"])] == ["c/main"]


# ---------------------------------------------------------------------------- the real CLI

def test_run_writes_json_png_and_html_and_later_turns_hit_the_prefix(standins, tmp_path):
    chat, comp = standins(), standins(chat=False)
    key = tmp_path / "key"
    key.write_text("sk-standin-key\n")
    out = tmp_path / "run"
    r = kvprov("loadtest", "--url", chat.url, "--url", comp.url + "/v1", "--api-key-file", str(key), *SMALL,
               "--out", str(out), "--json", str(tmp_path / "copy.json"), "--label", "before", timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "loadtest.json").read_text())
    assert json.loads((tmp_path / "copy.json").read_text()) == doc
    assert (doc["kind"], doc["format"], doc["label"], doc["stopped"], doc["exit_code"]) == \
        ("kvprov-loadtest", 1, "before", None, 0)
    assert doc["planned_points"] == doc["done_points"] == 2 * 2 * 2
    assert [(e["api"], e["model"], e["max_model_len"], e["problem"]) for e in doc["endpoints"]] == \
        [("chat", "tiny", 4096, None), ("completions", "tiny", 4096, None)]
    # no tokenizer.json and a stand-in without /tokenize: approximate, saying why
    note = doc["endpoints"][0]["tokenizer"]["note"]
    assert note.startswith("approximate") and "the server's /tokenize: POST /tokenize: HTTP 404" in note, note
    assert [(p["instance"].split(":")[0], p["prompt_tokens"], p["turn"]) for p in doc["points"]] == \
        [("127.0.0.1", n, t) for _ in range(2) for n in (40, 120) for t in (1, 2)]
    for p in doc["points"]:
        assert (p["requests"], p["ok"], p["errors"], p["output_tokens"]) == (2, 2, 0, 12)
        assert p["requests_per_s"] > 0 and p["output_tokens_per_s"] > 0
        assert set(p["ttft_ms"]) == set(p["latency_ms"]) == {"p50", "p90", "p99", "max"}
        assert 0 < p["ttft_ms"]["p50"] <= p["latency_ms"]["p50"]
        assert set(p["cache"]) == {"hit_tokens", "queried_tokens", "counters"} and not p["metrics_errors"]
        assert p["cache"]["queried_tokens"]["vllm_prefix"] > 0
        assert (p["cache"]["hit_tokens"]["vllm_prefix"] > 0) == (p["turn"] == 2)  # turn 2 repeats turn 1's prefix
    assert doc["points"][1]["server_prompt_tokens_mean"] > doc["points"][0]["server_prompt_tokens_mean"]
    # every API request carried the key, /metrics (open on every engine) none; nothing anywhere
    # else; the key never reached an output
    assert all(a == (None if p == "/metrics" else "Bearer sk-standin-key") for s in (chat, comp) for _, p, a in s.seen)
    assert {p for s in (chat, comp) for _, p, _ in s.seen} > {"/metrics"}
    assert set(comp.posts()) == {"/v1/chat/completions", "/v1/completions"} and set(chat.posts()) == {
        "/v1/chat/completions"}
    for f in out.iterdir():
        assert b"sk-standin-key" not in f.read_bytes()
    assert "sk-standin-key" not in r.stdout + r.stderr
    png = (out / "loadtest.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10000
    page = (out / "loadtest.html").read_text()
    assert "data:image/png;base64," in page and "kvprov loadtest: before" in page and page.count("<tr") >= 8 + 2
    assert "[8/8]" in r.stderr and "points/min" in r.stderr

    # a second run and --compare overlays both
    r = kvprov("loadtest", "--url", chat.url, *SMALL[:1], "40", *SMALL[2:], "--out", str(tmp_path / "run2"),
               "--label", "after", "--json", "-", timeout=60)
    assert r.returncode == 0, r.stderr
    # --json -: the run's JSON on stdout alone (#39), the files written named on stderr
    assert json.loads(r.stdout) == json.loads((tmp_path / "run2" / "loadtest.json").read_text())
    assert str(tmp_path / "run2" / "loadtest.json") in r.stderr and not (ROOT / "-").exists()
    r = kvprov("loadtest", "--compare", str(out / "loadtest.json"), str(tmp_path / "run2" / "loadtest.json"),
               "--out", str(tmp_path / "cmp"), timeout=60)
    assert r.returncode == 0, r.stderr
    page = (tmp_path / "cmp" / "compare.html").read_text()
    assert "before vs after" in page and (tmp_path / "cmp" / "compare.png").read_bytes().startswith(b"\x89PNG")


def test_inventory_endpoints_with_the_key_the_lmcache_server_metrics_and_the_models_tokenizer(standins, tmp_path):
    """The engine instance of an inventory (inventory/lab-engine.yml aimed at this machine): its
    port, its LMCache server's metrics port and its API key from the desired state; the lab
    model's tokenizer when the controller has it. The desired state is computed locally."""
    key = tmp_path / "api-key"
    key.write_text("sk-inventory-key\n")
    key.chmod(0o600)
    engine, server = standins(key="sk-inventory-key", lmcache=False), standins(vllm=False)
    port, mport = (int(u.rsplit(":", 1)[1]) for u in (engine.url, server.url))
    text = (ROOT / "inventory/lab-engine.yml").read_text().replace(
        "ansible_host: 10.98.1.2", "ansible_host: 127.0.0.1\n              ansible_connection: local")  # this machine
    text = text.replace("            kvprov_engine: lmcache_mp\n", f"""            kvprov_engine: lmcache_mp
            kvprov_engine_api_key_file: {key}
            kvprov_engine_instances:
            - name: main
              port: {port}
              lmcache_port: 18000
              metrics_port: {mport}
""")
    inv = tmp_path / "inv.yml"
    inv.write_text(text)
    out = tmp_path / "run"
    r = kvprov("loadtest", str(inv), "--instances", "main", "--prompt-tokens", "64", "--turns", "2",
               "--output-tokens", "4", "--turn-tokens", "16", "--out", str(out), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out / "loadtest.json").read_text())
    [ep] = doc["endpoints"]
    assert (ep["name"], ep["url"], ep["engine"], ep["max_model_len_from"]) == \
        ("kvlab-c1/main", engine.url, "lmcache_mp", "/v1/models")
    assert ep["metrics_urls"] == [f"{engine.url}/metrics", f"{server.url}/metrics"]
    assert all(a == (None if p == "/metrics" else "Bearer sk-inventory-key") for _, p, a in engine.seen)
    # LMCache's metrics port (plain HTTP, another port): never the key
    assert [(p, a) for _, p, a in server.seen] == [("/metrics", None)] * 4  # before and after each of the 2 points
    assert doc["settings"]["source"] == "inventory" and len(doc["points"]) == 2
    assert doc["points"][1]["cache"]["hit_tokens"]["vllm_prefix"] > 0 and not doc["points"][1]["metrics_errors"]
    import importlib.util
    if Path("/var/lib/kvprov/lab/models/tiny-qwen3/tokenizer.json").is_file() and importlib.util.find_spec("tokenizers"):
        assert ep["tokenizer"]["exact"] and doc["points"][0]["new_tokens"] == [64]
    assert "sk-inventory-key" not in (out / "loadtest.json").read_text() + r.stdout + r.stderr


def test_a_down_endpoint_and_an_erroring_one_get_a_line_each_and_the_other_is_measured(standins, tmp_path):
    good, bad = standins(), standins(fail=True)
    down = f"http://127.0.0.1:{free_port()}"
    out = tmp_path / "run"
    r = kvprov("loadtest", "--url", down, "--url", good.url, "--url", bad.url, *SMALL, "--out", str(out),
               "--ready-timeout", "1", timeout=60)  # a refused connection is waited for that long (test_loadtest_ready)
    assert r.returncode == 1, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.startswith("kvprov loadtest: 127.0.0.1")]
    assert len(lines) == 2, r.stderr
    assert any(down[7:] in x and "not reachable: GET /v1/models" in x and "refused" in x.lower() for x in lines)
    assert any(bad.url[7:] in x and "HTTP 500" in x and "engine core died" in x for x in lines)
    doc = json.loads((out / "loadtest.json").read_text())
    assert doc["exit_code"] == 1 and (out / "loadtest.html").exists()
    measured = {p["instance"] for p in doc["points"] if p["ok"]}
    assert measured == {good.url[7:]} and len([p for p in doc["points"] if p["instance"] == good.url[7:]]) == 4
    assert len(bad.posts()) == 1 + 2  # the API probe and one turn of 2 users; then it stops sending
    problems = {e["name"]: e["problem"] for e in doc["endpoints"]}
    assert problems[good.url[7:]] is None and "every request failed" in problems[bad.url[7:]]


def test_not_openai_compatible(tmp_path):
    class Plain(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(b"<html>hello</html>")

        def log_message(self, *a):
            pass
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Plain)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        r = kvprov("loadtest", "--url", f"http://127.0.0.1:{srv.server_address[1]}", *SMALL, "--out",
                   str(tmp_path / "o"), timeout=60)
    finally:
        srv.shutdown()
        srv.server_close()
    assert r.returncode == 1 and "not an OpenAI-compatible server: GET /v1/models did not answer JSON" in r.stderr


def test_a_prompt_over_the_context_is_refused_before_any_request(standins, tmp_path):
    """Without a tokenizer (no tokenizer.json, no /tokenize) a word may be up to 9 tokens: 100
    words fit 2048 even so, 1000 could not (the review's 1024 "tokens" that were 4097)."""
    s = standins(max_model_len=2048)
    r = kvprov("loadtest", "--url", s.url, "--prompt-tokens", "100,1000", "--turns", "2", "--out",
               str(tmp_path / "o"), timeout=60)
    assert r.returncode == 2, r.stderr
    assert "--prompt-tokens 1000: without a tokenizer" in r.stderr and "1000 words may be up to 9000 tokens" in \
        r.stderr and "max_model_len 2048 (/v1/models)" in r.stderr
    assert "--prompt-tokens 100:" not in r.stderr
    assert s.posts() == [] and [p for _, p, _ in s.seen] == ["/v1/models", "/tokenize"]
    assert not (tmp_path / "o").exists()


def test_usage_errors_exit_2(standins, tmp_path):
    for args in ([], ["inv.yml", "--url", "http://h:1"], ["--url", "http://h:1", "--prompt-tokens", "0"],
                 ["--url", "http://h:1", "--instances", "main"], ["--compare", str(tmp_path / "none.json")],
                 ["--url", "http://h:1", "--api-key-file", str(tmp_path / "none")],
                 ["--url", "http://h:1", "--replay"]):
        assert cli.main(["loadtest", *args]) == 2, args  # in-process: the same entry point, faster


def test_ctrl_c_stops_and_still_writes_what_was_measured(standins, tmp_path):
    s = standins(token_delay=0.05)
    out = tmp_path / "run"
    p = subprocess.Popen([sys.executable, "-m", "kvprov", "loadtest", "--url", s.url, "--prompt-tokens",
                          "40,80,120", "--turns", "3", "--users", "2", "--output-tokens", "10", "--out", str(out)],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = []
    for line in p.stderr:  # the first point is done: interrupt the second
        seen.append(line)
        if "[1/9]" in line:
            break
    p.send_signal(signal.SIGINT)
    rest_out, rest_err = p.communicate(timeout=30)
    assert p.returncode == 130, "".join(seen) + rest_err
    doc = json.loads((out / "loadtest.json").read_text())
    assert doc["stopped"] == "interrupted" and doc["exit_code"] == 130
    assert 1 <= doc["done_points"] < 9 and len(doc["points"]) == doc["done_points"]
    assert (out / "loadtest.png").exists() and "interrupted" in rest_err


def test_duration_bounds_the_run(standins, tmp_path):
    s = standins(token_delay=0.05)
    t0 = time.monotonic()
    r = kvprov("loadtest", "--url", s.url, "--prompt-tokens", "40,80", "--turns", "3", "--output-tokens", "20",
               "--duration", "1.5", "--out", str(tmp_path / "o"), timeout=60)
    assert time.monotonic() - t0 < 15
    doc = json.loads((tmp_path / "o" / "loadtest.json").read_text())
    assert doc["stopped"] == "duration" and doc["done_points"] < doc["planned_points"]
    assert "stopped at --duration" in r.stderr
    assert r.returncode == 0 and all(p["errors"] == 0 for p in doc["points"])  # a cut turn is not an error


def test_report_of_a_run_without_points_still_renders(tmp_path):
    pytest.importorskip("matplotlib")
    doc = {"kind": "kvprov-loadtest", "format": 1, "label": "empty", "settings": {"turns": 2, "prompt_tokens": [1]},
           "endpoints": [{"name": "x", "url": "http://x:1", "problem": "not reachable"}], "points": [],
           "planned_points": 0, "done_points": 0, "stopped": None, "exit_code": 1}
    paths = rep.write_run(doc, tmp_path)
    assert [p.name for p in paths] == ["loadtest.json", "loadtest.png", "loadtest.html"]
    assert "No point was measured" in (tmp_path / "loadtest.html").read_text()


def test_replay_rows_compare_the_cold_first_turn_with_the_replayed_one_and_count_storage_hits():
    def point(phase, length, turn, ttft, hits):
        return {"phase": phase, "instance": "h/main", "prompt_tokens": length, "turn": turn,
                "ttft_ms": {"p50": ttft}, "cache": {"hit_tokens": hits}}
    points = [point("sweep", 256, 1, 90.0, {}), point("sweep", 256, 2, 40.0, {"vllm_prefix": 256.0}),
              point("replay", 256, 1, 50.0, {"lmcache_l2": 256.0, "lmcache_l1": 0.0}),
              point("replay", 256, 2, 30.0, {"vllm_prefix": 300.0}),
              point("sweep", 1024, 1, 200.0, {}), point("replay", 1024, 1, 210.0, {"vllm_prefix": 16.0})]
    assert ltm.replay_rows(points) == [
        {"instance": "h/main", "prompt_tokens": 256, "storage_hit_tokens": 256.0,
         "hit_tokens": {"lmcache_l2": 256.0, "lmcache_l1": 0.0}, "cold_ttft_ms_p50": 90.0, "replay_ttft_ms_p50": 50.0},
        {"instance": "h/main", "prompt_tokens": 1024, "storage_hit_tokens": 0.0,
         "hit_tokens": {"vllm_prefix": 16.0}, "cold_ttft_ms_p50": 200.0, "replay_ttft_ms_p50": 210.0}]


def test_engine_roundtrip_passes_only_when_the_storage_tier_serves_the_replay():
    ep = ltc.Endpoint(name="h/main", url="http://h:8000", engine="lmcache_mp", host="h",
                      units=["kvprov-lmcache-main.service", "kvprov-vllm-main.service"])

    def points(stored, l2):
        return [{"phase": "sweep", "instance": "h/main", "prompt_tokens": 1024, "turn": 1, "ttft_ms": {"p50": 400.0},
                 "cache": {"hit_tokens": {}, "counters": {"lmcache_mp_l2_store_completed_objects_chunks": stored}}},
                {"phase": "replay", "instance": "h/main", "prompt_tokens": 1024, "turn": 1, "ttft_ms": {"p50": 150.0},
                 "cache": {"hit_tokens": {"lmcache_l2": l2}, "counters": {}}}]

    ok = lt.roundtrip_result(ep, points(4, 1024.0))
    assert (ok.id, ok.status, ok.host) == ("engine.main.roundtrip", "pass", "h")
    assert ok.found.startswith("1024 of the replayed prompt's tokens came from the storage tier; TTFT p50 cold 400 ms")
    bad = lt.roundtrip_result(ep, points(0, 0.0))
    assert bad.status == "fail" and bad.found.startswith("the warm-up stored nothing in the storage tier")
    assert "journalctl -u kvprov-lmcache-main.service -u kvprov-vllm-main.service" in bad.fix
    ep.problem = "not answering 900 s after the restart: connection refused"
    down = lt.roundtrip_result(ep, [])
    assert down.status == "fail" and down.found == ep.problem


def test_ignore_eos_is_sent_unless_switched_off(standins, tmp_path):
    on, off = standins(), standins()
    for s, more in ((on, []), (off, ["--no-ignore-eos"])):
        r = kvprov("loadtest", "--url", s.url, "--prompt-tokens", "40", "--turns", "1", "--users", "1",
                   "--output-tokens", "4", "--out", str(tmp_path / str(len(more))), *more, timeout=60)
        assert r.returncode == 0, r.stderr[-2000:]
    # the first POST is the API probe (chat or completions?), then the measured requests
    assert on.ignore_eos[1:] == [True] and off.ignore_eos[1:] == [None], (on.ignore_eos, off.ignore_eos)
    doc = json.loads((tmp_path / "1" / "loadtest.json").read_text())
    assert doc["settings"]["ignore_eos"] is False


def test_engine_roundtrip_skips_an_engine_without_a_tier(tmp_path, monkeypatch):
    inv = tmp_path / "inv.yml"
    inv.write_text("all:\n  children:\n    gpu_nodes:\n      vars:\n        kvprov_engine: vllm_baseline\n"
                   "        kvprov_storage_server: 10.0.0.5\n      hosts:\n        h1:\n")
    monkeypatch.setattr(ltc, "probe", lambda *a: pytest.fail("no request to an engine without a tier"))
    [r] = lt.roundtrip(str(inv), None)
    assert (r.id, r.status, r.host) == ("engine.main.roundtrip", "skip", "h1")
    assert r.found == "engine vllm_baseline has no KV tier: nothing to serve from storage after a restart"
