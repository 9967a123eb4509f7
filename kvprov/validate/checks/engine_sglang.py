"""SGLang HiCache: its storage directory is SGLANG_HICACHE_NIXL_BACKEND_STORAGE_DIR (unset,
it silently falls back to /tmp/hicache_storage), and its command line passes the NIXL
TOML with --hicache-storage-backend-extra-config @<absolute path>.

Its cache counters (SGLang 0.5.23, srt/observability/metrics_collector.py) exist only with
--enable-metrics: sglang:cached_tokens_total{cache_source=device|host|storage} (the prompt
tokens each tier served; "storage" is HiCache's L3 on the KV mount), sglang:prompt_tokens_total,
and the storage tier's own, one series per TP rank: sglang:prefetched_tokens_total,
sglang:backuped_tokens_total, sglang:storage_prefetch_hit_tokens_total and
sglang:storage_prefetch_unfulfilled_tokens_total{reason} (created at start, at 0, when the
storage backend is attached)."""

from __future__ import annotations

from kvprov.validate.bundle import METRICS_DIR, Instance
from kvprov.validate.checks.engine import ENGINES, EngineRules, flag, live_argv, live_env, server_command
from kvprov.validate.context import Context

STORAGE_DIR_ENV = "SGLANG_HICACHE_NIXL_BACKEND_STORAGE_DIR"
SGLANG_FALLBACK_DIR = "/tmp/hicache_storage"


def storage_setting(c: Context, inst: Instance) -> tuple[str | None, str]:
    env, where = live_env(c, inst.unit)
    return env.get(STORAGE_DIR_ENV), f"{STORAGE_DIR_ENV}, {where}"


def config_problems(c: Context, inst: Instance) -> list[str]:
    argv, where = live_argv(c, inst.unit)
    server, _ = server_command(argv)
    if server != "sglang":
        return [f"ExecStart runs {' '.join(argv[:3])[:120]!r} ({where}), not SGLang's server "
                "(`sglang serve` or `python3 -m sglang.launch_server`)"]
    want = f"@{c.d.nixl_config_path}"
    if flag(argv, "--hicache-storage-backend-extra-config") != want:
        return [f"ExecStart does not pass --hicache-storage-backend-extra-config {want} ({where})"]
    return []


# Written per request (absent until the first); STORAGE_COUNTERS per TP rank by the storage tier.
REQUEST_COUNTERS = ("sglang:prompt_tokens", "sglang:cached_tokens{cache_source=device}",
                    "sglang:cached_tokens{cache_source=host}", "sglang:cached_tokens{cache_source=storage}")
STORAGE_COUNTERS = ("sglang:storage_prefetch_hit_tokens", "sglang:prefetched_tokens", "sglang:backuped_tokens",
                    "sglang:storage_prefetch_unfulfilled_tokens")


def cache(c: Context, inst: Instance) -> tuple[dict[str, float], list[str]] | None:
    """SGLang's counters from /metrics: the tokens each tier served, and the storage tier's own.
    None when /metrics was not captured (an audit does not probe, a bundle of an older kvprov)."""
    from kvprov.loadtest import cache_counters

    name = f"{METRICS_DIR}/{inst.name}.txt"
    if not c.b.exists(name):
        return None
    argv, where = live_argv(c, inst.unit)
    if "--enable-metrics" not in argv:
        return {}, [f"no --enable-metrics ({where}): SGLang serves no /metrics, so its storage (L3) hits cannot be "
                    "seen by validate or loadtest"]
    counters = cache_counters(c.b.text(name))
    values = {k: counters[k] for k in (*REQUEST_COUNTERS, *STORAGE_COUNTERS) if k in counters}
    problems = []
    if values.get("sglang:prompt_tokens", 0) > 0 and not any(k in counters for k in STORAGE_COUNTERS):
        problems.append("requests were served but SGLang exports none of its storage-tier counters "
                        f"({', '.join(k + '_total' for k in STORAGE_COUNTERS)}): the HiCache storage backend "
                        "is not attached")
    return values, problems


ENGINES["sglang_hicache"] = EngineRules(
    storage_setting, config_problems, cache=cache,
    fallback=f": SGLang silently falls back to {SGLANG_FALLBACK_DIR}, so the third tier lands on local disk "
             "(and in the service's private /tmp)")
