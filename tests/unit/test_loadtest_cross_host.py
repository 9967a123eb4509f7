"""`kvprov loadtest --cross-host` and validate's engine.<instance>.cross_host: which instance's
conversations go to which other host, the restart before, the rows and results. Run against
the protocol stand-in of test_loadtest (not an engine: it has no storage tier, so its
cross-host turns hit nothing); the real engines on a shared namespace are a lab test
(tests/lab/test_5_engine.py)."""

import json

from kvprov import loadtest as lt
from kvprov import loadtest_client as ltc
from kvprov import loadtest_metrics as ltm
from kvprov import loadtest_report as rep
from kvprov import loadtest_workload as ltw
from tests.unit.test_loadtest import standins  # noqa: F401 (fixture)


def ep(name: str, storage_dir: str | None = "/kv/ns", engine: str = "lmcache_mp", **kw) -> ltc.Endpoint:
    host = name.split("/")[0]
    return ltc.Endpoint(name=name, url=f"http://{host}:8000", engine=engine, host=host, storage_dir=storage_dir,
                        units=[f"kvprov-vllm-{name.split('/')[1]}.service"], **kw)


def test_each_instance_goes_to_the_next_host_of_its_namespace_and_the_others_are_named():
    a, a2, b, c = ep("a/main"), ep("a/second"), ep("b/main"), ep("c/main", "/kv/c/main")
    tierless, down = ep("d/main", None, "vllm_baseline"), ep("e/main", problem="down")
    pairs, why = lt.cross_host_pairs([a, a2, b, c, tierless, down])
    assert [(x.name, y.name) for x, y in pairs] == [("a/main", "b/main"), ("a/second", "b/main"), ("b/main", "a/main")]
    assert why["c/main"].startswith("no other host's instance uses its storage directory /kv/c/main")
    assert why["d/main"] == "engine vllm_baseline keeps no KV files on the volume"
    assert "e/main" not in why  # a down endpoint is reported as such, not here
    # the only other host of a namespace is down: said so, with its reason
    _, why = lt.cross_host_pairs([ep("a/main"), ep("b/main", problem="not reachable: Connection refused")])
    assert why == {"a/main": "the other hosts' instances of its namespace could not be measured: b/main: not "
                             "reachable: Connection refused"}
    # another engine in the same directory is no partner (check refuses that inventory anyway)
    assert lt.cross_host_pairs([ep("a/main"), ep("b/main", engine="vllm_offload")])[0] == []


def test_cross_host_rows_compare_the_other_hosts_prefix_with_the_hosts_own_cold_turn():
    def point(phase, inst, length, turn, ttft, hits, source=None):
        return {"phase": phase, "instance": inst, "prompt_tokens": length, "turn": turn, "ttft_ms": {"p50": ttft},
                "cache": {"hit_tokens": hits}, **({"source": source} if source else {})}
    points = [point("sweep", "a/main", 1024, 1, 400.0, {}), point("sweep", "b/main", 1024, 1, 380.0, {}),
              point("cross_host", "b/main", 1024, 1, 90.0, {"lmcache_l2": 1024.0, "vllm_prefix": 0.0}, "a/main"),
              point("cross_host", "b/main", 1024, 2, 50.0, {"vllm_prefix": 1100.0}, "a/main")]
    assert ltm.cross_host_rows(points) == [
        {"instance": "b/main", "source": "a/main", "prompt_tokens": 1024, "storage_hit_tokens": 1024.0,
         "hit_tokens": {"lmcache_l2": 1024.0, "vllm_prefix": 0.0}, "cold_ttft_ms_p50": 380.0,
         "source_cold_ttft_ms_p50": 400.0, "cross_host_ttft_ms_p50": 90.0}]
    b = ep("b/main")
    ok = lt.cross_host_result(ep("a/main"), b, points)
    assert (ok.id, ok.status, ok.host) == ("engine.main.cross_host", "pass", "b")
    assert ok.found == ("1024 of the prompt's tokens came from the storage tier; TTFT p50 of its own cold prompt "
                        "380 ms, of a/main's prefix 90 ms")
    points[2]["cache"]["hit_tokens"] = {"vllm_prefix": 0.0}
    bad = lt.cross_host_result(ep("a/main"), b, points)
    assert bad.status == "fail" and bad.found.startswith("no prompt token came from the storage tier: b/main did not "
                                                         "find what a/main stored")
    assert "/kv/ns" in bad.fix and "journalctl -u kvprov-vllm-main.service" in bad.fix
    b.problem = "restart: not answering"
    assert lt.cross_host_result(ep("a/main"), b, []).found == "restart: not answering"


def test_run_restarts_the_target_then_replays_the_sources_conversations_there(standins):  # noqa: F811
    sa, sb = standins(), standins()
    a, b = (ep(f"{h}/main", api="chat", model="tiny") for h in "ab")
    a.url, b.url = sa.url, sb.url
    a.metrics_urls, b.metrics_urls = [sa.url + "/metrics"], [sb.url + "/metrics"]
    s = lt.Settings(prompt_tokens=[40], turns=2, users=1, output_tokens=4, turn_tokens=10, duration=60,
                    seed="x", cross_host=True)
    restarted = []
    counters = {e.name: ltw.TokenCounter(None) for e in (a, b)}
    result = lt.run([a, b], s, lambda line: None, counters, lambda e: restarted.append((e.name, len(sb.prompts))))
    assert result["planned_points"] == len(result["points"]) == 8 and result["cross_host_skipped"] == {}
    assert [(p["phase"], p["instance"], p.get("source"), p["turn"]) for p in result["points"]] == [
        ("sweep", "a/main", None, 1), ("sweep", "a/main", None, 2), ("sweep", "b/main", None, 1),
        ("sweep", "b/main", None, 2), ("cross_host", "b/main", "a/main", 1), ("cross_host", "b/main", "a/main", 2),
        ("cross_host", "a/main", "b/main", 1), ("cross_host", "a/main", "b/main", 2)]
    assert [name for name, _ in restarted] == ["b/main", "a/main"]
    assert restarted[0][1] == 2  # b restarted after its own sweep, before a's conversations reached it
    assert sb.prompts[2] == sa.prompts[0]  # b got a's first turn, word for word
    rows = ltm.cross_host_rows(result["points"])
    assert [(r["source"], r["instance"], r["storage_hit_tokens"]) for r in rows] == [
        ("a/main", "b/main", 0.0), ("b/main", "a/main", 0.0)]  # the stand-in has no storage tier


def test_the_report_shows_the_cross_host_rows_and_the_first_turn_panel(tmp_path):
    doc = {"format": 1, "kind": "kvprov-loadtest", "label": "shared", "settings": {"turns": 1},
           "points": [], "endpoints": [], "done_points": 0, "planned_points": 0, "exit_code": 1,
           "replay": [{"instance": "a/main", "prompt_tokens": 1024, "storage_hit_tokens": 1024.0, "hit_tokens": {},
                       "cold_ttft_ms_p50": 400.0, "replay_ttft_ms_p50": 120.0}],
           "cross_host": [{"instance": "b/main", "source": "a/main", "prompt_tokens": 1024, "storage_hit_tokens": 896.0,
                           "hit_tokens": {}, "cold_ttft_ms_p50": 380.0, "source_cold_ttft_ms_p50": 400.0,
                           "cross_host_ttft_ms_p50": 110.0}],
           "cross_host_skipped": {"c/main": "no other host's instance uses its storage directory /kv/c/main"}}
    assert rep.first_turn_ttft([doc]) == {"a/main · 1024": {"cold": 400.0, "restart": 120.0},
                                         "b/main · 1024": {"cross_host": 110.0, "cold": 380.0}}
    paths = rep.write_run(doc, tmp_path)
    page = (tmp_path / "loadtest.html").read_text()
    assert "a/main → b/main" in page and "<td>896</td><td>380</td><td>110</td>" in page
    assert "no other host&#x27;s instance uses its storage directory" in page or "no other host's instance" in page
    assert (tmp_path / "loadtest.png").stat().st_size > 10_000 and json.loads((tmp_path / "loadtest.json").read_text())
    assert len(paths) == 3


def test_validate_engine_roundtrip_adds_the_cross_host_form_per_pair(standins, monkeypatch):  # noqa: F811
    """validate --engine-roundtrip on two hosts of one namespace: each instance's own round trip,
    then each one's prefix on the other host, restarted first; judged by the storage hits (the
    stand-in counts a repeated prompt as partly from L2, so its own round trips pass; it never
    saw the other host's prompt, so the cross-host ones fail, with the reason)."""
    sa, sb = standins(), standins()
    a, b = ep("a/main"), ep("b/main")
    a.url, b.url = sa.url, sb.url
    a.metrics_urls, b.metrics_urls = [sa.url + "/metrics"], [sb.url + "/metrics"]
    monkeypatch.setattr(lt, "load_inventory_endpoints", lambda *args: [a, b])
    restarts = []
    monkeypatch.setattr(lt, "restart_engine", lambda sources, e, *t: restarts.append(e.name))
    results = lt.roundtrip(["inv.yml"], None)
    assert [(r.id, r.host, r.status) for r in results] == [
        ("engine.main.roundtrip", "a", "pass"), ("engine.main.roundtrip", "b", "pass"),
        ("engine.main.cross_host", "b", "fail"), ("engine.main.cross_host", "a", "fail")]
    assert restarts == ["a/main", "b/main", "b/main", "a/main"]  # own round trips, then the target of each pair
    assert results[2].found.startswith("no prompt token came from the storage tier: b/main did not find what "
                                       "a/main stored")
    warmup_a = next(p for p in sa.prompts if p[0] == "Conversation")  # (the first POSTs: the API probes)
    assert warmup_a in sb.prompts  # b was sent a's warm-up conversation (after its restart)


def test_the_hit_panels_keep_served_tokens_apart_from_lmcache_lookups_and_each_phase_apart():
    """#26: vLLM's served tokens and LMCache's lookup counters never share an axis; the cold run,
    the replay after a restart and the other host's replay are bars of their own; the title names
    model, engine and load shape."""
    points = [{"phase": phase, "instance": "c4/main", "cache": {"hit_tokens": hits}} for phase, hits in (
        ("sweep", {"vllm_prefix": 512.0, "lmcache_l1": 5100.0, "lmcache_l2": 300.0}),
        ("sweep", {"vllm_prefix": 256.0}),
        ("replay", {"vllm_external": 896.0, "lmcache_l2": 900.0}))]
    doc = {"label": "lab", "points": points, "settings": {"users": 2, "turns": 3, "output_tokens": 16},
           "endpoints": [{"model": "tiny", "engine": "lmcache_mp"}, {"model": "x", "engine": "sglang", "problem": "down"}]}
    assert rep.hits_by_source(doc) == {("c4/main", "sweep"): {"vllm_prefix": 768.0, "lmcache_l1": 5100.0,
                                                              "lmcache_l2": 300.0},
                                       ("c4/main", "replay"): {"vllm_external": 896.0, "lmcache_l2": 900.0}}
    served, found = rep.split_hits([("cold", {"vllm_prefix": 768.0, "lmcache_l1": 5100.0}),
                                    ("restart", {"vllm_external": 896.0, "lmcache_l2": 900.0})])
    assert served == [("cold", {"vllm_prefix": 768.0}), ("restart", {"vllm_external": 896.0})]
    assert found == [("cold", {"lmcache_l1": 5100.0}), ("restart", {"lmcache_l2": 900.0})]
    assert rep.run_title(doc) == "lab: tiny on lmcache_mp · 2 user(s) × 3 turn(s), 16 output tokens"
