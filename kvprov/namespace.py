"""Where an engine instance's KV tier lives on the volume: a namespace every host shares, or
a directory of its own. Pure functions (no I/O); the engine role derives the same paths in
Jinja (roles/engine/vars/main.yml), and a unit test renders both and compares them.

A tier whose files are named by what they hold (a hash of the tokens, the model and the
layout) can be shared: every host and instance that serves one model with one engine uses
`<mount>/kv/<engine>/<namespace>`, so a prefix one host computed is served to every other
from the volume. A tier that keeps its index in memory, or whose backend deletes its whole
directory, keeps one directory per instance: `<mount>/<host>/<instance>`.
"""

from __future__ import annotations

import re
from typing import Any, Callable

# Why a tier cannot be shared (engine, tier) -> reason; a tier not named here can be.
PER_INSTANCE = {
    ("sglang_hicache", None): (
        "SGLang's NIXL storage backend deletes every file in its directory at clear() "
        "(sglang issue #32693, fix proposed in PR #32705), so each instance keeps its own directory"),
    ("lmcache_mp", "nixl_store"): (
        "LMCache's static nixl_store pool keeps its index in memory: another host (or this one after a "
        "restart) cannot find what it stored; use kvprov_lmcache_mp_l2_type fs_native to share"),
    ("lmcache_mp", "nixl_store_dynamic"): (
        "LMCache's nixl_store_dynamic deletes every *.tmp.* file of its directory at shutdown, the writes in "
        "flight of every other instance using it; use kvprov_lmcache_mp_l2_type fs_native to share"),
    ("lmcache_inproc", "nixl"): (
        "LMCache's in-process nixl pool keeps its index in memory: nothing it stored can be found by "
        "another host; use kvprov_lmcache_inproc_tier fs to share"),
    ("lmcache_inproc", "local_disk"): (
        "LMCache's local_disk tier starts with an empty index at every start: it never reads files "
        "another host wrote; use kvprov_lmcache_inproc_tier fs to share"),
    ("lmcache_inproc", "gds"): (
        "LMCache's gds tier keeps its index in memory: another host cannot find what it stored; "
        "use kvprov_lmcache_inproc_tier fs to share"),
}

# The variable that names an engine's tier, where it has several.
TIER_VARIABLE = {"lmcache_mp": "kvprov_lmcache_mp_l2_type", "lmcache_inproc": "kvprov_lmcache_inproc_tier"}

# What names the files of a shared namespace besides the namespace itself: hosts that share one
# must agree on each (kvprov check's fleet rule). Variables an engine does not read are left out.
_VLLM_KEYS = ("kvprov_engine_model_path", "kvprov_engine_hash_seed", "kvprov_vllm_package", "kvprov_vllm_version",
              "kvprov_vllm_block_size", "kvprov_vllm_dtype")
_LMCACHE_KEYS = _VLLM_KEYS + ("kvprov_lmcache_version", "kvprov_vllm_tensor_parallel_size")
KEYING = {
    "vllm_offload": _VLLM_KEYS + ("kvprov_vllm_offload_block_size",),
    "lmcache_mp": _LMCACHE_KEYS + ("kvprov_lmcache_mp_l2_type", "kvprov_lmcache_mp_chunk_size",
                                   "kvprov_lmcache_mp_nixl_use_direct_io"),
    "lmcache_inproc": _LMCACHE_KEYS + ("kvprov_lmcache_inproc_tier", "kvprov_lmcache_inproc_chunk_size"),
}
# Engine arguments that key the files (kvprov_engine_extra_args), compared as given.
KEYING_ARGS = ("--kv-cache-dtype", "--prefix-caching-hash-algo", "--hf-overrides", "--revision",
               "--tokenizer", "--quantization")

NAMESPACE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def tier(engine: str, get: Callable[[str], Any]) -> str | None:
    variable = TIER_VARIABLE.get(engine)
    return get(variable) if variable else None


def per_instance_reason(engine: str, get: Callable[[str], Any]) -> str | None:
    """Why this engine's tier must stay per instance, or None when it can be shared."""
    return PER_INSTANCE.get((engine, tier(engine, get)))


def shares(engine: str, get: Callable[[str], Any]) -> bool:
    """Whether the host's instances use the engine's shared namespace (kvprov_engine_storage_sharing:
    auto shares what can be shared; namespace asks for it, refused by check where it cannot be)."""
    sharing = get("kvprov_engine_storage_sharing") or "auto"
    if sharing == "instance" or engine not in KEYING:
        return False
    return sharing == "namespace" or per_instance_reason(engine, get) is None


def default_namespace(model_path: str) -> str:
    """The namespace of a model: its path or hub id with every run of other characters made one
    '-' (Qwen/Qwen3-8B -> Qwen-Qwen3-8B, /models/tiny -> models-tiny)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", model_path).strip("-.")[:128]


def namespace(get: Callable[[str], Any]) -> str:
    return get("kvprov_engine_namespace") or default_namespace(str(get("kvprov_engine_model_path") or ""))


def namespace_dir(mount: str, engine: str, name: str) -> str:
    return f"{mount.rstrip('/')}/kv/{engine}/{name}"


def instance_dir(mount: str, host: str, instance: str) -> str:
    return f"{mount.rstrip('/')}/{host}/{instance}"


def keying_args(extra_args: Any) -> dict[str, str]:
    """The file-keying flags among an engine's extra arguments ("--flag value" or "--flag=value")."""
    if not isinstance(extra_args, list):
        return {}
    out: dict[str, str] = {}
    words = [str(w) for w in extra_args]
    for i, word in enumerate(words):
        flag, eq, value = word.partition("=")
        if flag in KEYING_ARGS:
            out[flag] = value if eq else (words[i + 1] if i + 1 < len(words) else "")
    return out
