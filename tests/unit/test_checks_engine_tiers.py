"""The per-engine rules on the vLLM bundles of test_validate_engines: LMCache MP's cache counters
when one side's /metrics is missing, LMCache in-process's YAML (missing, not YAML, without a
tier directory, each key it may hold the directory in), vLLM offloading's tiers and settings."""

from kvprov.validate.result import FAIL, PASS
from tests.unit.test_validate_engines import (SERVER_METRICS, VLLM_METRICS, EngineBundle, edit_json_flag, prometheus,
                                              vllm_unit)

YAML = "files/etc/kvprov/lmcache-main.yaml"
DEPLOY = "kvprov deploy INVENTORY --limit kvlab-gpu1 --tags engine"
KV = "/mnt/kvcache/kvlab-gpu1/main"


# ---------------------------------------------------------------------------- lmcache_mp

def test_lmcache_mp_server_metrics_not_captured(tmp_path):
    b = EngineBundle(tmp_path, "lmcache_mp")
    (b.root / "metrics/main-server.txt").unlink()
    r = b.results()["engine.main.cache"]
    assert (r.status, r.found) == (FAIL, "the LMCache server's /metrics was not captured (" + ", ".join(
        f"{k} {v:g}" for k, v in VLLM_METRICS.items()) + ")")


def test_lmcache_mp_server_counters_judged_after_one_query_only(tmp_path):
    b = EngineBundle(tmp_path, "lmcache_mp")
    b.write("metrics/main-server.txt", "")
    b.write("metrics/main.txt", prometheus({**VLLM_METRICS, "vllm:prefix_cache_queries_total": 1}, ""))
    r = b.results()["engine.main.cache"]
    assert r.status == FAIL and r.found.startswith(
        "lmcache_mp_lookup_requested_tokens_total is not exposed by the LMCache server after requests were served")


def test_lmcache_mp_without_vllm_metrics_the_server_counters_alone(tmp_path):
    b = EngineBundle(tmp_path, "lmcache_mp")
    (b.root / "metrics/main.txt").unlink()
    b.write("metrics/main-server.txt", prometheus({k: v for k, v in SERVER_METRICS.items() if "l2" not in k}, ""))
    r = b.results()["engine.main.cache"]
    assert (r.status, r.found) == (PASS, "lmcache_mp_lookup_requested_tokens_total 3072, "
                                         "lmcache_mp_lookup_hit_l1_tokens_total 1024")


def test_lmcache_mp_names_a_bypassed_tier(tmp_path):
    """kvprov's fail-open adapter bypasses a tier whose storage stopped answering: serving goes on,
    degraded, and validate says so (the gauge is 0 again once a probe answers)."""
    b = EngineBundle(tmp_path, "lmcache_mp")
    gauge = 'kvprov_l2_bypassed{base_path="/mnt/kvcache/kv/lmcache_mp/x"}'
    b.write("metrics/main-server.txt", prometheus(SERVER_METRICS, "") + f"{gauge} 1.0\n")
    r = b.results()["engine.main.cache"]
    assert r.status == FAIL and r.found.startswith(
        "the KV tier is bypassed (kvprov_l2_bypassed 1 on the LMCache server's /metrics): its storage did not answer "
        "in time, and serving goes on without it until a probe of the directory answers (the server's journal: "
        "`journalctl -u kvprov-lmcache-main.service`) ("), r.found
    b.write("metrics/main-server.txt", prometheus(SERVER_METRICS, "") + f"{gauge} 0.0\n")
    assert b.results()["engine.main.cache"].status == PASS


# ---------------------------------------------------------------------------- lmcache_inproc

def inproc_env(tmp_path, yaml: str | None):
    b = EngineBundle(tmp_path, "lmcache_inproc")
    if yaml is None:
        (b.root / YAML).unlink()
    else:
        b.write(YAML, yaml)
    r = b.results()["engine.main.storage_env"]
    return r.status, r.found, r.fix


def test_lmcache_inproc_yaml_missing_or_not_yaml_names_the_engine_role(tmp_path):
    assert inproc_env(tmp_path / "a", None)[2] == DEPLOY
    status, found, fix = inproc_env(tmp_path / "b", "local_disk: [unclosed\n")
    assert (status, fix) == (FAIL, DEPLOY)
    assert found.startswith(f"{YAML}: not YAML: ")


def test_lmcache_inproc_tier_directory_in_any_of_its_keys(tmp_path):
    assert inproc_env(tmp_path / "a", f"gds_path: {KV}\n")[:2] == (
        PASS, f"{KV} (gds_path in /etc/kvprov/lmcache-main.yaml)")
    assert inproc_env(tmp_path / "b", f"local_disk: ''\ngds_path: {KV}\n")[:2] == (
        PASS, f"{KV} (gds_path in /etc/kvprov/lmcache-main.yaml)")
    assert inproc_env(tmp_path / "d", f"remote_url: fs://localhost:0{KV}\n")[:2] == (  # the fs tier
        PASS, f"{KV} (remote_url in /etc/kvprov/lmcache-main.yaml)")
    assert inproc_env(tmp_path / "c", "chunk_size: 256\nlocal_disk: ''\n")[:2] == (
        FAIL, "no storage directory is set (/etc/kvprov/lmcache-main.yaml has no local_disk, nixl_path, gds_path or "
              "fs:// remote_url): "
              "LMCache keeps KV in host memory only")


# ---------------------------------------------------------------------------- vllm_offload

def offload_unit(tmp_path, change):
    b = EngineBundle(tmp_path, "vllm_offload")
    b.set_argv(vllm_unit("main"), edit_json_flag("--kv-transfer-config", change))
    r = b.results()["engine.main.unit"]
    return r.status, r.found


def test_vllm_offload_spec_cpu_bytes_and_tier_types(tmp_path):
    assert offload_unit(tmp_path / "a", lambda kv: kv["kv_connector_extra_config"].update(
        spec_name="CPUOffloadingSpec")) == (
        FAIL, "spec_name CPUOffloadingSpec, want TieringOffloadingSpec")
    assert offload_unit(tmp_path / "b", lambda kv: kv["kv_connector_extra_config"].update(cpu_bytes_to_use=0)) == (
        FAIL, "cpu_bytes_to_use 0: vLLM requires an integer > 0")
    assert offload_unit(tmp_path / "c", lambda kv: kv["kv_connector_extra_config"].update(cpu_bytes_to_use=1)) == (
        PASS, "loaded, enabled; configuration read from the running process")
    assert offload_unit(tmp_path / "d", lambda kv: kv["kv_connector_extra_config"].update(
        secondary_tiers=[{"type": "cpu", "root_dir": KV}, "fs"])) == (
        FAIL, "no secondary tier of type fs: nothing reaches the KV mount")
