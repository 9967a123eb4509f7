"""vLLM's native offloading (OffloadingConnector, TieringOffloadingSpec): the fs tier's
root_dir in --kv-transfer-config is the instance's storage directory; cpu_bytes_to_use set.
And vLLM without a KV tier (vllm_baseline): no --kv-transfer-config, prefix caching on."""

from __future__ import annotations

from kvprov.validate.bundle import Instance
from functools import partial

from kvprov.validate.checks.engine import (ENGINES, EngineRules, connector_problems, flag, kv_transfer_config,
                                           live_argv, port_problems, vllm_cache)
from kvprov.validate.context import Context
from kvprov.validate.result import show


def _fs_tiers(kv: dict | None) -> list[dict]:
    extra = (kv or {}).get("kv_connector_extra_config")
    tiers = extra.get("secondary_tiers") if isinstance(extra, dict) else None
    return [t for t in tiers if isinstance(t, dict) and t.get("type") == "fs"] if isinstance(tiers, list) else []


def storage_setting(c: Context, inst: Instance) -> tuple[str | None, str]:
    kv, why, where = kv_transfer_config(c, inst)
    roots = [t.get("root_dir") for t in _fs_tiers(kv) if isinstance(t.get("root_dir"), str)]
    return (",".join(roots) or None), f"--kv-transfer-config secondary_tiers fs root_dir, {where}"


def config_problems(c: Context, inst: Instance) -> list[str]:
    kv, problems = connector_problems(c, inst, "OffloadingConnector")
    extra = kv.get("kv_connector_extra_config") if isinstance(kv.get("kv_connector_extra_config"), dict) else {}
    if kv and extra.get("spec_name") != "TieringOffloadingSpec":
        problems.append(f"spec_name {show(extra.get('spec_name'))}, want TieringOffloadingSpec")
    cpu = extra.get("cpu_bytes_to_use")
    if kv and not (isinstance(cpu, int) and not isinstance(cpu, bool) and cpu > 0):
        problems.append(f"cpu_bytes_to_use {show(cpu)}: vLLM requires an integer > 0")
    if kv and not _fs_tiers(kv):
        problems.append("no secondary tier of type fs: nothing reaches the KV mount")
    return problems


ENGINES["vllm_offload"] = EngineRules(storage_setting, config_problems, cache=vllm_cache,
                                      fallback=": vLLM keeps the offloaded KV in host memory only")


def baseline_problems(c: Context, inst: Instance) -> list[str]:
    argv, where = live_argv(c, inst.unit)
    problems = port_problems(c, inst)
    if flag(argv, "--kv-transfer-config") is not None:
        problems.append(f"--kv-transfer-config is set ({where}): the baseline is vLLM without a KV tier")
    if "--no-enable-prefix-caching" in argv:
        problems.append(f"--no-enable-prefix-caching ({where}): the baseline keeps vLLM's GPU prefix cache")
    return problems


ENGINES["vllm_baseline"] = EngineRules(lambda c, inst: (None, "no KV tier"), baseline_problems,
                                       cache=partial(vllm_cache, external=False))
