"""SGLang HiCache: its storage directory is SGLANG_HICACHE_NIXL_BACKEND_STORAGE_DIR (unset,
it silently falls back to /tmp/hicache_storage), and its command line passes the NIXL
TOML with --hicache-storage-backend-extra-config @<absolute path>."""

from __future__ import annotations

from kvprov.validate.bundle import Instance
from kvprov.validate.checks.engine import ENGINES, EngineRules, flag, live_argv, live_env
from kvprov.validate.context import Context

STORAGE_DIR_ENV = "SGLANG_HICACHE_NIXL_BACKEND_STORAGE_DIR"
SGLANG_FALLBACK_DIR = "/tmp/hicache_storage"


def storage_setting(c: Context, inst: Instance) -> tuple[str | None, str]:
    env, where = live_env(c, inst.unit)
    return env.get(STORAGE_DIR_ENV), f"{STORAGE_DIR_ENV}, {where}"


def config_problems(c: Context, inst: Instance) -> list[str]:
    argv, where = live_argv(c, inst.unit)
    want = f"@{c.d.nixl_config_path}"
    if flag(argv, "--hicache-storage-backend-extra-config") != want:
        return [f"ExecStart does not pass --hicache-storage-backend-extra-config {want} ({where})"]
    return []


ENGINES["sglang_hicache"] = EngineRules(
    storage_setting, config_problems, cache=lambda c, inst: None,
    fallback=f": SGLang silently falls back to {SGLANG_FALLBACK_DIR}, so the third tier lands on local disk "
             "(and in the service's private /tmp)")
