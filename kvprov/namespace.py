"""Where an engine instance's KV tier lives on the volume: a namespace every host shares, or
a directory of its own. Pure functions (no I/O); the engine role names the same directories
through the collection's filters (plugins/filter/namespace.py calls this module), and a unit
test renders both and compares them.

A tier whose files are named by what they hold (a hash of the tokens, the model and the
layout) can be shared: every host and instance that serves one model with one engine and the
same settings uses `<mount>/kv/<engine>/<namespace>-<fingerprint>`, so a prefix one host
computed is served to every other from the volume. The fingerprint hashes everything that
shapes the files' bytes or names (KEYING and the keying arguments and environment): hosts that
differ in any of it never read each other's files, and a change starts a new namespace (#37).
A tier that keeps its index in memory, or whose backend deletes its whole directory, keeps
one directory per instance: `<mount>/<host>/<instance>`; for an engine in KEYING its files go in a
subdirectory named by the same fingerprint and the host's part of the key
(roles/engine/files/kvprov-kv-key.py --key), so a change there starts afresh too.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Callable

# Why a tier cannot be shared (engine, tier) -> reason; a tier not named here can be.
PER_INSTANCE = {
    ("sglang_hicache", None): (
        "SGLang's NIXL storage backend deletes every file in its directory at clear() "
        "(sglang issue #32693, fix proposed in PR #32705), so each instance keeps its own directory"),
    ("lmcache_mp", "nixl_store"): (
        "LMCache's static nixl_store pool keeps its index in memory: another host (or this one after a "
        "restart) cannot find what it stored; use kvprov_lmcache_mp_l2_type fs to share"),
    ("lmcache_mp", "nixl_store_dynamic"): (
        "LMCache's nixl_store_dynamic deletes every *.tmp.* file of its directory at shutdown, the writes in "
        "flight of every other instance using it; use kvprov_lmcache_mp_l2_type fs to share"),
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

# What keys the files of a shared namespace (#37): per engine, the variables whose values shape the
# files' bytes or names. Their values, with the keying engine arguments and environment, are hashed
# into the namespace's name, so hosts differing in any of them never read each other's files, and a
# change (a new dtype, engine version, block size...) starts a new namespace. Kinds say how a value
# is written into the hash: the same value spelled another way (16 / "16", yes / true) hashes alike.
_VLLM_KEYS = {"kvprov_engine_model_path": "str", "kvprov_engine_model_revision": "str",
              "kvprov_engine_hash_seed": "str", "kvprov_vllm_package": "str", "kvprov_vllm_version": "str",
              "kvprov_vllm_block_size": "str", "kvprov_vllm_dtype": "str",
              "kvprov_vllm_tensor_parallel_size": "str", "kvprov_vllm_max_model_len": "str"}
_LMCACHE_KEYS = {**_VLLM_KEYS, "kvprov_lmcache_version": "str"}
KEYING: dict[str, dict[str, str]] = {
    "vllm_offload": {**_VLLM_KEYS, "kvprov_vllm_offload_block_size": "str"},
    "lmcache_mp": {**_LMCACHE_KEYS, "kvprov_lmcache_mp_l2_type": "str", "kvprov_lmcache_mp_nixl_use_direct_io": "bool"},
    "lmcache_inproc": {**_LMCACHE_KEYS, "kvprov_lmcache_inproc_tier": "str", "kvprov_lmcache_inproc_chunk_size": "str",
                       "kvprov_lmcache_inproc_use_direct_io": "bool", "kvprov_lmcache_inproc_config": "json"},
    # per instance (PER_INSTANCE), its directory keyed all the same; SGLang's keys are SHA-256 (no seed),
    # and the NIXL TOML's top-level keys hold use_direct_io
    "sglang_hicache": {"kvprov_engine_model_path": "str", "kvprov_engine_model_revision": "str",
                       "kvprov_sglang_version": "str", "kvprov_sglang_tp_size": "str", "kvprov_sglang_page_size": "str",
                       "kvprov_sglang_hicache_io_backend": "str", "kvprov_sglang_hicache_mem_layout": "str",
                       "kvprov_nixl_backend_options": "json"},
}
# Engine arguments that shape the files' bytes or names (kvprov_engine_extra_args), as vLLM's and
# SGLang's parsers read them (--flag_name is --flag-name; --hf-overrides.x.y sets part of
# --hf-overrides): folded into the namespace's hash with their values.
KEYING_ARGS = frozenset((
    # vLLM 0.33.0 (engine/arg_utils.py)
    "--model", "--revision", "--code-revision", "--tokenizer", "--tokenizer-revision", "--tokenizer-mode",
    "--hf-config-path", "--hf-overrides", "--trust-remote-code", "--model-impl", "--dtype", "--kv-cache-dtype",
    "--kv-cache-dtype-skip-layers", "--quantization", "-q", "--quantization-config", "--load-format",
    "--max-model-len", "--block-size", "--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp",
    "--decode-context-parallel-size", "-dcp", "--prefill-context-parallel-size", "--cp-kv-cache-interleave-size",
    "--prefix-caching-hash-algo", "--attention-backend", "--attention-config", "--enable-lora", "--lora-modules",
    # SGLang 0.5.23 (server_args.py)
    "--model-path", "--tokenizer-path", "--context-length", "--page-size", "--tp-size",
    "--json-model-override-args", "--lora-paths", "--hicache-mem-layout", "--hicache-io-backend"))
# Arguments a shared namespace cannot take: what they hold is not on the command line to key by.
REFUSED_ARGS = {
    "--config": "reads more arguments from a file kvprov cannot see into the namespace's key",
    "--kv-transfer-config": "replaces the KV connector and tier kvprov configures",
}
# Environment variables that shape the files (kvprov_engine_environment): exact names and prefixes.
KEYING_ENV = ("VLLM_KV_CACHE_LAYOUT", "VLLM_ATTENTION_BACKEND", "VLLM_MLA_DISABLE", "VLLM_USE_V2_MODEL_RUNNER")
KEYING_ENV_PREFIXES = ("LMCACHE_", "SGLANG_HICACHE_")
REFUSED_ENV = {"PYTHONHASHSEED": "is kvprov_engine_hash_seed's: set that instead"}
FINGERPRINT_LENGTH = 12  # hex digits of the sha256 of the keys

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
    if sharing == "instance" or engine not in KEYING or (engine, None) in PER_INSTANCE:
        return False
    return sharing == "namespace" or per_instance_reason(engine, get) is None


def default_namespace(model_path: str) -> str:
    """The namespace's readable part for a model: its path or hub id with every run of other
    characters made one '-' (Qwen/Qwen3-8B -> Qwen-Qwen3-8B, /models/tiny -> models-tiny)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", model_path).strip("-.")[:128]


def _canonical(value: Any, kind: str) -> str:
    """A value as the hash sees it: the same value however it is spelled in YAML."""
    if value is None:
        return ""
    if kind == "bool":
        from ansible.module_utils.parsing.convert_bool import boolean

        try:
            return "true" if boolean(value, strict=True) else "false"
        except TypeError:
            return str(value)
    if kind == "json":
        return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return str(value)


def _words(extra_args: Any) -> list[str]:
    return [str(w) for w in extra_args] if isinstance(extra_args, list) else []


def _flag(word: str) -> str | None:
    """The flag a word sets, as the engines' parsers read it: --flag_name=x -> --flag-name."""
    if not word.startswith("-") or re.fullmatch(r"-[0-9.]+", word):
        return None
    flag = word.partition("=")[0]
    if not flag.startswith("--"):
        return flag
    root, dot, rest = flag.partition(".")  # --hf-overrides.rope_scaling: a JSON key after the dot
    return "--" + root[2:].replace("_", "-") + dot + rest


def keying_args(extra_args: Any) -> dict[str, str]:
    """The file-keying arguments among an engine's extra arguments: {flag: value} in the order
    given ("--flag value", "--flag=value", --flag_name, --hf-overrides.rope.factor; a flag without
    a value: ""). A flag given twice keeps its last value, as the parsers do."""
    out: dict[str, str] = {}
    words = _words(extra_args)
    for i, word in enumerate(words):
        flag = _flag(word)
        if flag is None or flag.split(".")[0] not in KEYING_ARGS:
            continue
        if "=" in word:
            value = word.partition("=")[2]
        else:
            nxt = words[i + 1] if i + 1 < len(words) else ""
            value = "" if _flag(nxt) is not None else nxt
        out[flag] = value
    return out


def refused_args(extra_args: Any) -> list[tuple[str, str]]:
    """(flag, why) for each extra argument a shared namespace cannot take."""
    return [(f, REFUSED_ARGS[f.split(".")[0]]) for f in map(_flag, _words(extra_args))
            if f and f.split(".")[0] in REFUSED_ARGS]


def keying_env(environment: Any) -> dict[str, str]:
    """The file-keying variables of an engine's extra environment: {name: value}."""
    if not isinstance(environment, dict):
        return {}
    return {str(k): str(v) for k, v in environment.items()
            if str(k) in KEYING_ENV or str(k).startswith(KEYING_ENV_PREFIXES)}


def keys(engine: str, get: Callable[[str], Any]) -> dict[str, str]:
    """Everything that keys a shared namespace's files for a host: {what: value as hashed}."""
    out = {"engine": engine}
    for name, kind in KEYING.get(engine, {}).items():
        out[name] = _canonical(get(name), kind)
    out.update({f"arg {flag}": value for flag, value in keying_args(get("kvprov_engine_extra_args")).items()})
    out.update({f"env {name}": value for name, value in keying_env(get("kvprov_engine_environment")).items()})
    return out


def fingerprint(keyed: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(keyed, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[
        :FINGERPRINT_LENGTH]


def namespace(engine: str, get: Callable[[str], Any]) -> str:
    """A shared namespace's directory name: its readable part (kvprov_engine_namespace, else the
    model's name) and the fingerprint of everything that keys its files
    (Qwen-Qwen3-8B-3f2a9c0b1d4e)."""
    base = get("kvprov_engine_namespace") or default_namespace(_canonical(get("kvprov_engine_model_path"), "str"))
    return f"{base}-{fingerprint(keys(engine, get))}"


def split(name: str) -> tuple[str, str]:
    """(readable part, fingerprint) of a namespace's directory name; fingerprint "" if it has none."""
    base, _, fp = name.rpartition("-")
    return (base, fp) if re.fullmatch(f"[0-9a-f]{{{FINGERPRINT_LENGTH}}}", fp) and base else (name, "")


def is_hub_id(model_path: str) -> bool:
    """A model given as a Hugging Face hub id (org/name), not a path on the host."""
    return not model_path.startswith("/")


def pinned_revision(get: Callable[[str], Any]) -> str:
    """The model revision the engine loads: kvprov_engine_model_revision, or --revision among the
    extra arguments (the parser's last word wins); "" when unpinned."""
    return keying_args(get("kvprov_engine_extra_args")).get("--revision") or str(get("kvprov_engine_model_revision") or "")


def namespace_dir(mount: str, engine: str, name: str) -> str:
    return f"{mount.rstrip('/')}/kv/{engine}/{name}"


def instance_dir(mount: str, host: str, instance: str) -> str:
    return f"{mount.rstrip('/')}/{host}/{instance}"
