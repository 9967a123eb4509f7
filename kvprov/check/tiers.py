"""Host rules of `kvprov check` on the sizes of an engine's tiers (called from
kvprov/check/engines.py engine_rules, so the roles' preflight runs them too):

- host_memory   the host-DRAM tiers of every instance (SGLang's --hicache-size per TP rank,
                vLLM's cpu_bytes_to_use, LMCache MP's L1, LMCache in-process's
                max_local_cpu_size per TP worker) against the host's memory,
                kvprov_host_memory_mb: an error that shows the arithmetic per instance. The
                inventory may give the memory; otherwise the preflight reads it on the host
                (roles/preflight: MemTotal of /proc/meminfo) and `kvprov check`, which
                contacts no host, leaves the rule out. Not on config-only hosts
                (kvprov_engine_install: false): their engine never starts.
- storage_below_dram  a storage tier smaller than the DRAM tier it backs, where the inventory
                gives both (a warning): it can never hold what DRAM lost, so a restart or
                another host finds at most the storage tier's share.

Units, as each engine reads them: SGLang's --hicache-size is decimal GB (x 1e9);
LMCache's l1-size-gb and max_local_cpu_size are GiB (x 2**30); cpu_bytes_to_use is bytes,
the total over all workers; kvprov_lmcache_mp_l2_size_gb and max_local_disk_size are GB
as kvprov documents them (x 1e9)."""

from __future__ import annotations

from dataclasses import dataclass

from kvprov import namespace
from kvprov.check.host import HostView, instances_var
from kvprov.check.values import is_int
from kvprov.inventory import Problem

GB, GIB = 10 ** 9, 1 << 30


def _num(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else None


@dataclass(frozen=True)
class HostTier:
    """One instance's host-DRAM tier: its variable, the bytes, and how they were reckoned."""

    variable: str
    bytes: float
    arithmetic: str


def host_tier(h: HostView) -> HostTier | None:
    """The host-DRAM tier of ONE instance of the host's engine (each instance has the same
    settings), or None when the engine has none or its size is not known from the values."""
    engine = h.get("kvprov_engine")
    if engine == "sglang_hicache":
        size, tp = _num(h.get("kvprov_sglang_hicache_size")), h.get("kvprov_sglang_tp_size")
        if size and is_int(tp) and tp > 0:
            return HostTier("kvprov_sglang_hicache_size", size * GB * tp,
                            f"--hicache-size {size:g} GB x --tp-size {tp} (per TP rank)")
    if engine == "vllm_offload":
        cpu = h.get("kvprov_vllm_offload_cpu_bytes_to_use")
        if is_int(cpu) and cpu > 0:
            return HostTier("kvprov_vllm_offload_cpu_bytes_to_use", float(cpu),
                            f"cpu_bytes_to_use {cpu} (all workers, in /dev/shm)")
    if engine == "lmcache_mp":
        l1 = _num(h.get("kvprov_lmcache_mp_l1_size_gb"))
        if l1:
            return HostTier("kvprov_lmcache_mp_l1_size_gb", l1 * GIB, f"--l1-size-gb {l1:g} GiB (one server)")
    if engine == "lmcache_inproc":
        cpu, tp = _num(h.get("kvprov_lmcache_inproc_max_local_cpu_size")), h.get("kvprov_vllm_tensor_parallel_size")
        if cpu and is_int(tp) and tp > 0:
            return HostTier("kvprov_lmcache_inproc_max_local_cpu_size", cpu * GIB * tp,
                            f"max_local_cpu_size {cpu:g} GiB x --tensor-parallel-size {tp} (per worker)")
    return None


def _gb(n: float) -> str:
    return f"{n / GB:.1f} GB"


def host_memory(h: HostView) -> list[Problem]:
    memory_mb = h.get("kvprov_host_memory_mb")
    if not (is_int(memory_mb) and memory_mb > 0) or h.get("kvprov_engine_install") is False:
        return []
    tier = host_tier(h)
    instances = [i for i in (h.get(instances_var(h)) or []) if isinstance(i, dict)]
    if tier is None or not instances:
        return []
    memory, total = memory_mb * (1 << 20), tier.bytes * len(instances)
    if total <= memory:
        return []
    names = ", ".join(str(i.get("name", "?")) for i in instances)
    return [h.problem(tier.variable,
                      f"the host-DRAM tiers need {_gb(total)} but the host has {_gb(memory)} "
                      f"(kvprov_host_memory_mb {memory_mb}): per instance {tier.arithmetic} = {_gb(tier.bytes)}, "
                      f"x {len(instances)} instance(s) ({names}) = {_gb(total)}; lower {tier.variable} or the "
                      "instances, or the engine is killed for memory (or never starts)")]


def storage_tier(h: HostView) -> tuple[str, float, str] | None:
    """(variable, bytes, what) of one instance's storage tier where the inventory bounds it."""
    engine = h.get("kvprov_engine")
    if engine == "lmcache_mp":
        l2 = _num(h.get("kvprov_lmcache_mp_l2_size_gb"))
        if h.get("kvprov_lmcache_mp_l2_type") == "nixl_store":
            pool, size = h.get("kvprov_lmcache_mp_nixl_pool_size"), h.get("kvprov_lmcache_mp_nixl_file_size")
            if is_int(pool) and is_int(size) and pool > 0 and size > 0:
                if l2 and pool * size < l2 * GB:
                    return None  # already an error: the pool cannot hold kvprov_lmcache_mp_l2_size_gb
                return ("kvprov_lmcache_mp_nixl_pool_size", float(pool * size),
                        f"nixl_store pool {pool} x {size} bytes")
        l2_type = h.get("kvprov_lmcache_mp_l2_type")  # bounded by it: nixl_store, fs_native in its own directory
        if l2 and (l2_type == "nixl_store" or (l2_type == "fs_native" and not namespace.shares(engine, h.get))):
            return "kvprov_lmcache_mp_l2_size_gb", l2 * GB, f"L2 {l2:g} GB"
    if engine == "lmcache_inproc":
        tier = h.get("kvprov_lmcache_inproc_tier")
        if tier == "local_disk":
            disk = _num(h.get("kvprov_lmcache_inproc_max_local_disk_size"))
            if disk:
                return ("kvprov_lmcache_inproc_max_local_disk_size", disk * GB * _tp(h),
                        f"max_local_disk_size {disk:g} GB x {_tp(h)} worker(s)")
        if tier == "nixl":
            chunk = _chunk_bytes(h)
            pool = h.get("kvprov_lmcache_inproc_nixl_pool_size")
            if chunk and is_int(pool) and pool > 0:
                return ("kvprov_lmcache_inproc_nixl_pool_size", float(pool * chunk * _tp(h)),
                        f"nixl_pool_size {pool} x {chunk} bytes a chunk x {_tp(h)} worker(s)")
    evict, max_bytes = h.get("kvprov_engine_evict"), h.get("kvprov_engine_evict_max_bytes")
    if evict != "never" and is_int(max_bytes) and max_bytes > 0:
        return "kvprov_engine_evict_max_bytes", float(max_bytes), f"kvprov_engine_evict_max_bytes {max_bytes}"
    return None


def _tp(h: HostView) -> int:
    tp = h.get("kvprov_vllm_tensor_parallel_size")
    return tp if is_int(tp) and tp > 0 else 1


def _chunk_bytes(h: HostView) -> int | None:
    """One LMCache chunk of one TP worker: chunk_size x layers x 2 (K, V) x KV heads per worker
    x head dim x dtype bytes, from the model geometry in kvprov_bench_model_*."""
    names = ("kvprov_lmcache_inproc_chunk_size", "kvprov_bench_model_layers", "kvprov_bench_model_kv_heads",
             "kvprov_bench_model_head_dim", "kvprov_bench_kv_dtype_bytes")
    chunk, layers, heads, head_dim, dtype = (h.get(n) for n in names)
    if not all(is_int(v) and v > 0 for v in (chunk, layers, heads, head_dim, dtype)):
        return None
    return chunk * layers * 2 * max(1, heads // _tp(h)) * head_dim * dtype


def storage_below_dram(h: HostView) -> list[Problem]:
    dram, storage = host_tier(h), storage_tier(h)
    if dram is None or storage is None or storage[1] >= dram.bytes:
        return []
    variable, size, what = storage
    return [h.problem(variable,
                      f"the storage tier ({what} = {_gb(size)} an instance) is smaller than the DRAM tier it backs "
                      f"({dram.arithmetic} = {_gb(dram.bytes)}): it can never hold what DRAM lost, so after a "
                      f"restart or on another host at most {size / dram.bytes:.0%} of it can be served from "
                      f"storage; make the storage tier at least as large, or the DRAM tier ({dram.variable}) "
                      "smaller", severity="warning")]


def rules(h: HostView) -> list[Problem]:
    return host_memory(h) + storage_below_dram(h)
