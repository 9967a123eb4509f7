"""kvprov check: each engine's settings that only make sense together, settings of another
engine, exposure beyond loopback and the evictor's marks (pure)."""

from __future__ import annotations

from kvprov import namespace
from kvprov.check import bounds
from kvprov.check.fleet import sharing
from kvprov.check.host import HostView, instances_var
from kvprov.check.values import (DEPRECATED, ENGINES, ENGINE_PREFIXES, LMCACHE_MP_INSTANCE_KEYS, NFS_PROFILES,
                                 SECRET_VALUES, TIERLESS_ENGINES, VALUE_RULES, VLLM_ENGINES, int_range, is_int,
                                 listen_address, tls_pair_mismatch)
from kvprov.inventory import Problem

# LMCache's fs_native (csrc/storage_backends/fs/connector.cpp, do_single_set) closes the temporary file
# without looking at close()'s result, then renames it into place. On NFS a buffered write's error (the
# volume full, the server failing) is reported at close(): the file is published short or with a hole
# and served as a hit. use_odirect does not avoid it: O_DIRECT is used only for a length that is a
# multiple of the mount's block size (its wsize on NFS), else the write is buffered all the same.
FS_NATIVE_ON_NFS = ("fs_native on an NFS storage profile can publish a short or holed KV file: LMCache's C++ "
                    "adapter ignores close()'s error before renaming the file into place, and NFS reports a failed "
                    "write (a full volume, a server error) at close(); the file is then served as a hit (a wrong "
                    "answer). Use fs (the default), whose failed close() removes the file")


def engine_rules(h: HostView) -> list[Problem]:
    """Each engine's settings that only make sense together, and settings of another engine."""
    engine = h.get("kvprov_engine")
    if engine not in ENGINES:
        return []
    out = _other_engines_settings(h, engine) + _secret_twice(h) + _exposure(h) + _tls(h) + _s3_without_credentials(h) + _evict_marks(h) + sharing(h) + _unbounded_waits(h)
    instances = h.get(instances_var(h)) or []
    out += _instance_ports(h, engine, instances)
    rules = {"vllm_offload": _vllm_offload, "lmcache_mp": _lmcache_mp, "lmcache_inproc": _lmcache_inproc}
    if engine in rules:
        out += rules[engine](h)
    from kvprov.check import tiers  # the tiers' sizes: host memory, storage below DRAM
    return out + tiers.rules(h) + bounds.rules(h)


def _secret_twice(h: HostView) -> list[Problem]:
    """A secret given both as a value and as a file: which one is meant?"""
    return [h.problem(name, f"given twice: as this value and in {file} ({h.get(file)}); keep one of the two")
            for name, file in SECRET_VALUES.items() if h.get(name) and h.get(file)]


def _exposure(h: HostView) -> list[Problem]:
    """An API beyond loopback is closed by default: it needs an API key and the networks of its
    clients (the unit's IPAddressAllow=; vLLM's key does not guard POST /invocations)."""
    host = h.get("kvprov_engine_host")
    if not host or listen_address(host) or host in ("127.0.0.1", "::1"):
        return []
    out = []
    if not (h.get("kvprov_engine_api_key_file") or h.get("kvprov_engine_api_key")):
        out.append(h.problem("kvprov_engine_host", f"the engine listens on {host} without an API key: anyone who "
                                                    "reaches it can use the model and fill the KV cache; set "
                                                    "kvprov_engine_api_key_file (or kvprov_engine_api_key)"))
    if not h.get("kvprov_engine_clients"):
        out.append(h.problem("kvprov_engine_host", f"the engine listens on {host} for any address: name its clients' "
                                                    "networks in kvprov_engine_clients (e.g. [10.0.0.0/8]); vLLM's API "
                                                    "key does not guard every route (POST /invocations serves without "
                                                    "it), the unit's IPAddressAllow= does"))
    return out


def _tls(h: HostView) -> list[Problem]:
    """The engine's TLS certificate and key come together and belong together."""
    cert, key = h.get("kvprov_engine_tls_cert_file"), h.get("kvprov_engine_tls_key_file")
    if bool(cert) != bool(key):
        given, missing = ("kvprov_engine_tls_cert_file", "kvprov_engine_tls_key_file") if cert else \
            ("kvprov_engine_tls_key_file", "kvprov_engine_tls_cert_file")
        return [h.problem(given, f"TLS needs both the certificate and its private key: set {missing} too")]
    why = tls_pair_mismatch(cert, key) if cert else None
    return [h.problem("kvprov_engine_tls_key_file", f'"{key}": {why} ("{cert}", kvprov_engine_tls_cert_file)')] \
        if why else []


def _s3_without_credentials(h: HostView) -> list[Problem]:
    """S3 in use with no credentials file: the AWS SDK's default chain applies (an instance
    role, ~/.aws of the engine user), which may be meant; say so."""
    if h.get("kvprov_engine_s3_credentials_file"):
        return []
    engine = h.get("kvprov_engine")
    obj = (h.get("kvprov_nixl_plugins") or {}).get("obj")
    remote = (h.get("kvprov_lmcache_inproc_config") or {}).get("remote_url")
    if engine == "sglang_hicache" and isinstance(obj, dict) and obj.get("active") is True:
        var, path, what = "kvprov_nixl_plugins", ("obj", "active"), "the active NIXL plugin obj"
    elif engine == "lmcache_inproc" and isinstance(remote, str) and remote.startswith("s3://"):
        var, path, what = "kvprov_lmcache_inproc_config", ("remote_url",), "LMCache's remote_url s3://"
    else:
        return []
    return [h.problem(var, f"{what} talks to S3 and kvprov_engine_s3_credentials_file is not set: the AWS SDK "
                           "then takes credentials from its default chain (an instance role, ~/.aws of the engine "
                           "user); set kvprov_engine_s3_credentials_file unless the hosts have such a role",
                      *path, severity="warning")]


def _other_engines_settings(h: HostView, engine: str) -> list[Problem]:
    """Mixing engines: a variable only another engine reads is set for this host."""
    out = []
    for name in sorted(h.host.vars):
        var = h.host.var(name)
        if var.origin.default or name in DEPRECATED:
            continue
        owner = next((e for e, prefixes in ENGINE_PREFIXES.items() if name.startswith(prefixes)), None)
        if name.startswith("kvprov_vllm_") and not name.startswith("kvprov_vllm_offload_") or name == "kvprov_lmcache_version":
            owner = None if engine in VLLM_ENGINES else "a vLLM engine"
        elif name in ("kvprov_engine_admin_api_key_file", "kvprov_engine_admin_api_key"):  # vLLM has no admin routes
            owner = "sglang_hicache"
        if owner and owner != engine:
            out.append(h.problem(name, f"only engine {owner} reads it, but this host's kvprov_engine is {engine}: "
                                       "it has no effect here; remove it or set it on the groups of that engine",
                                 severity="warning"))
    return out


def _instance_ports(h: HostView, engine: str, instances: list) -> list[Problem]:
    """lmcache_mp's server ports: only for lmcache_mp, and no port used twice on the host;
    a storage_dir for an engine without a KV tier."""
    out, ports = [], []
    name = instances_var(h)
    for i, inst in enumerate(instances):
        if isinstance(inst, dict) and "storage_dir" in inst and engine in TIERLESS_ENGINES:
            out.append(h.problem(name, f"instance {inst.get('name')}: engine {engine} has no KV tier and never "
                                       "reads storage_dir: it has no effect; remove it", i, "storage_dir",
                                 severity="warning"))
        if not isinstance(inst, dict) or not is_int(inst.get("port")):
            continue
        for key in LMCACHE_MP_INSTANCE_KEYS:
            if key in inst and engine != "lmcache_mp":
                out.append(h.problem(name, f"instance {inst.get('name')}: {key} belongs to engine lmcache_mp, but "
                                           f"this host's kvprov_engine is {engine}: one instance runs one engine",
                                     i, key))
            elif engine == "lmcache_mp":
                ports.append((inst.get(key, inst["port"] + (10000 if key == "lmcache_port" else 11000)), i, key, inst))
    used = {inst["port"]: f"the port of instance {inst.get('name')}" for inst in instances
            if isinstance(inst, dict) and is_int(inst.get("port"))}
    for port, i, key, inst in ports:
        if port in used:
            given = "" if key in inst else " (its default: set it)"
            out.append(h.problem(name, f"instance {inst.get('name')}: {key} {port}{given} is already {used[port]}",
                                 i, key))
        used.setdefault(port, f"the {key} of instance {inst.get('name')}")
    return out


def _vllm_offload(h: HostView) -> list[Problem]:
    out = []
    if h.get("kvprov_vllm_offload_cpu_bytes_to_use") == 0:
        out.append(h.problem("kvprov_vllm_offload_cpu_bytes_to_use",
                             "engine vllm_offload needs cpu_bytes_to_use: the bytes of host memory for its CPU tier, "
                             "total over all workers (e.g. 107374182400 for 100 GiB)"))
    block, gpu_block = h.get("kvprov_vllm_offload_block_size"), h.get("kvprov_vllm_block_size")
    if is_int(block) and is_int(gpu_block) and gpu_block > 0 and block % gpu_block:
        out.append(h.problem("kvprov_vllm_offload_block_size",
                             f"{block} is not a multiple of kvprov_vllm_block_size {gpu_block} (vLLM's GPU block): "
                             f"use e.g. {max(gpu_block, block // gpu_block * gpu_block)}"))
    return out


def _lmcache_mp(h: HostView) -> list[Problem]:
    out = []
    if h.get("kvprov_lmcache_mp_transfer_mode") == "lmcache_driven" and h.get("kvprov_engine_require_gpu") is False:
        out.append(h.problem("kvprov_lmcache_mp_transfer_mode",
                             "lmcache_driven makes a CPU vLLM worker hang at start for ever (no handler for "
                             "register_kv_cache_engine_driven_context): use auto"))
    if h.get("kvprov_lmcache_mp_host") not in (None, "127.0.0.1", "::1"):
        out.append(h.problem("kvprov_lmcache_mp_host", "has no effect: LMCache 0.5.6 only logs --host, and kvprov "
                             "binds the server's request channel to a Unix socket only the engine user reaches "
                             "(README, Security)", severity="warning"))
    l2 = h.get("kvprov_lmcache_mp_l2_type")
    shared = namespace.shares("lmcache_mp", h.get)
    if l2 == "fs_native" and h.get("kvprov_storage_profile") in NFS_PROFILES:
        out.append(h.problem("kvprov_lmcache_mp_l2_type", FS_NATIVE_ON_NFS))
    if l2 == "fs_native" and shared and h.get("kvprov_engine_evict") == "never":
        out.append(h.problem("kvprov_engine_evict", "never leaves the shared namespace unbounded: fs_native's own "
                             "eviction is off there (it counts only what its own process stored and would delete "
                             "the files other hosts hit first), so only kvprov's evictor bounds it", severity="warning"))
    if l2 == "fs_native" and not shared and h.get("kvprov_lmcache_mp_l2_size_gb") == 0:
        out.append(h.problem("kvprov_lmcache_mp_l2_size_gb",
                             "0 leaves fs_native without max_capacity_gb and its eviction block: LMCache never "
                             "evicts from L2 and only kvprov's evictor (kvprov_engine_evict) bounds the directory; "
                             "set the L2 capacity in GB", severity="warning"))
    l1 = h.get("kvprov_lmcache_mp_l1_size_gb")
    if l2 in ("nixl_store", "nixl_store_dynamic") and isinstance(l1, (int, float)) and int(l1 * (1 << 30)) % 4096:
        out.append(h.problem("kvprov_lmcache_mp_l1_size_gb",
                             f"{l1} GiB is {int(l1 * (1 << 30))} bytes, not a multiple of LMCache's 4096-byte L1 "
                             f"page: {l2} registers the L1 with NIXL page by page and the server fails at start "
                             "(NIXL_ERR_NOT_FOUND in prepXferDlist); use e.g. "
                             f"{max(round(l1 * 4) / 4, 0.25)}"))
    if l2 != "nixl_store":
        return out
    pool, size = h.get("kvprov_lmcache_mp_nixl_pool_size"), h.get("kvprov_lmcache_mp_nixl_file_size")
    if is_int(size) and size >= 4096 and size % 4096:
        out.append(h.problem("kvprov_lmcache_mp_nixl_file_size",
                             f"{size} is not a multiple of LMCache's 4096-byte L1 page: nixl_store refuses it at "
                             f"start (\"file_size ({size}) must be a multiple of page_size (4096)\"); use "
                             f"{size // 4096 * 4096}"))
    want = h.get("kvprov_lmcache_mp_l2_size_gb")
    if is_int(pool) and is_int(size) and isinstance(want, (int, float)) and pool * size < want * 1e9:
        need = -(-int(want * 1e9) // size)
        out.append(h.problem("kvprov_lmcache_mp_nixl_pool_size",
                             f"pool_size {pool} x file_size {size} = {pool * size / 1e9:.3g} GB is less than "
                             f"kvprov_lmcache_mp_l2_size_gb {want}: stores fail with \"Insufficient NIXL storage "
                             f"capacity\" once it is full; set pool_size to at least {need}"))
    return out


def _lmcache_inproc(h: HostView) -> list[Problem]:
    out = []
    if h.get("kvprov_lmcache_inproc_tier") == "nixl" and h.get("kvprov_lmcache_inproc_max_local_cpu_size") == 0:
        out.append(h.problem("kvprov_lmcache_inproc_max_local_cpu_size",
                             "the nixl tier stages through LMCache's host DRAM pool (nixl_buffer_device cpu): "
                             "LMCache refuses max_local_cpu_size 0 (\"requires max_local_cpu_size > 0\")"))
    extra = h.get("kvprov_lmcache_inproc_config") or {}
    owned = {"local_disk", "max_local_disk_size", "gds_path", "gds_buffer_size", "chunk_size", "local_cpu",
             "max_local_cpu_size", "extra_config", "nixl_buffer_device"}
    if h.get("kvprov_lmcache_inproc_tier") == "fs":
        owned.add("remote_url")
    for key in sorted(set(extra) & owned):
        why = ("kvprov writes it for the fs tier (kvprov_lmcache_inproc_tier: fs): remove it here or choose "
               "another tier" if key == "remote_url" else
               "is set by kvprov's own variables (kvprov_lmcache_inproc_*): remove it here")
        out.append(h.problem("kvprov_lmcache_inproc_config", f"{key} {why}", key))
    return out


# ---- capacity (kvprov-evict, docs/capacity.md)

def _unbounded_waits(h: HostView) -> list[Problem]:
    """A wait on the storage tier with no bound: a hung storage then hangs every request (#37)."""
    if h.get("kvprov_engine") == "sglang_hicache" and h.get("kvprov_sglang_hicache_prefetch_policy") == "wait_complete":
        return [h.problem("kvprov_sglang_hicache_prefetch_policy",
                          "wait_complete waits for the storage tier without a bound: when the storage hangs, every "
                          "request with a stored prefix hangs with it; use timeout (the default: the request runs "
                          "without its stored prefix after kvprov_sglang_hicache_prefetch_timeout_base seconds)",
                          severity="warning")]
    return []


def _evict_marks(h: HostView) -> list[Problem]:
    """The evictor starts at the high mark and stops under the low one: low must be below high."""
    high, low = h.get("kvprov_engine_evict_high_percent"), h.get("kvprov_engine_evict_low_percent")
    if is_int(high) and is_int(low) and 0 < high <= low < 100:  # else: the range rules report
        return [h.problem("kvprov_engine_evict_low_percent",
                          f"{low} is not below kvprov_engine_evict_high_percent {high}: the evictor stops under the "
                          f"low mark once the high one is reached; set it lower, e.g. {max(high - 10, 0)}")]
    return []


VALUE_RULES.update({
    "kvprov_engine_evict_high_percent": int_range(1, 100, note=" (percent of the volume, and of the limit)"),
    "kvprov_engine_evict_low_percent": int_range(0, 99, note=" (percent, below the high mark)"),
    "kvprov_engine_evict_max_bytes": int_range(0, note=" (bytes per storage directory; 0: the volume's marks only)"),
    "kvprov_engine_evict_interval_s": int_range(10, 86400, note=" (seconds between runs)"),
    "kvprov_engine_evict_keep_minutes": int_range(0, 43200, note=" (minutes a file used that recently is never "
                                                              "removed; 0: no guard; at most 30 days)"),
    "kvprov_engine_evict_retire_days": int_range(0, 3650, note=" (days without any host's evictor before an old "
                                                              "namespace is emptied; 0: never)"),
})
