"""kvprov/namespace.py at its edges (#41 item 1: the namespace code under mutation): which tiers
stay per instance, what kvprov_engine_storage_sharing asks, every keying argument and
environment variable docs/cache-safety.md's table names, values as `kvprov check --namespaces` shows them
(`keys`), and names and directories at their edges. Pure functions on plain dicts."""

from __future__ import annotations

import pytest

from kvprov import namespace

BASE = {"kvprov_engine_model_path": "Qwen/Qwen3-8B", "kvprov_engine_model_revision": "0123abc"}


def getter(values: dict):
    return lambda name: values.get(name)


def name(engine: str, **values) -> str:
    return namespace.namespace(engine, getter({**BASE, **values}))


@pytest.mark.parametrize("engine, variable, tier, shared", [
    ("lmcache_inproc", "kvprov_lmcache_inproc_tier", "nixl", False),
    ("lmcache_inproc", "kvprov_lmcache_inproc_tier", "local_disk", False),
    ("lmcache_inproc", "kvprov_lmcache_inproc_tier", "gds", False),
    ("lmcache_inproc", "kvprov_lmcache_inproc_tier", "fs", True),
    ("lmcache_mp", "kvprov_lmcache_mp_l2_type", "nixl_store", False),
    ("lmcache_mp", "kvprov_lmcache_mp_l2_type", "nixl_store_dynamic", False),
    ("lmcache_mp", "kvprov_lmcache_mp_l2_type", "fs_native", True),
])
def test_tiers_that_keep_their_index_in_memory_stay_per_instance(engine, variable, tier, shared):
    get = getter({variable: tier})
    assert (namespace.per_instance_reason(engine, get) is None) is shared
    assert namespace.shares(engine, get) is shared  # a bool, as the role's templates print it


def test_sharing_instance_never_shares_and_namespace_asks_for_it_even_where_it_cannot_be():
    unshareable = {"kvprov_lmcache_mp_l2_type": "nixl_store"}
    assert namespace.shares("lmcache_mp", getter({**unshareable, "kvprov_engine_storage_sharing": "namespace"})) is True
    assert namespace.shares("lmcache_mp", getter({**unshareable, "kvprov_engine_storage_sharing": "auto"})) is False
    assert namespace.shares("vllm_offload", getter({"kvprov_engine_storage_sharing": "instance"})) is False
    assert namespace.shares("vllm_offload", getter({})) is True  # unset: auto
    assert namespace.shares("sglang_hicache", getter({"kvprov_engine_storage_sharing": "namespace"})) is False


@pytest.mark.parametrize("flag", [
    "--model", "--revision", "--code-revision", "--tokenizer", "--tokenizer-revision", "--tokenizer-mode",
    "--hf-config-path", "--hf-overrides", "--trust-remote-code", "--model-impl", "--dtype", "--kv-cache-dtype",
    "--kv-cache-dtype-skip-layers", "--quantization", "-q", "--quantization-config", "--load-format",
    "--max-model-len", "--block-size", "--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp",
    "--decode-context-parallel-size", "-dcp", "--prefill-context-parallel-size", "--cp-kv-cache-interleave-size",
    "--prefix-caching-hash-algo", "--attention-backend", "--attention-config", "--enable-lora", "--lora-modules",
    "--model-path", "--tokenizer-path", "--context-length", "--page-size", "--tp-size",
    "--json-model-override-args", "--lora-paths", "--hicache-mem-layout", "--hicache-io-backend"])
def test_each_argument_that_shapes_the_files_moves_the_namespace(flag):
    """vLLM's and SGLang's arguments that change the KV bytes or names (the parsers' own lists):
    a host given one with another value is in another namespace."""
    a = name("vllm_offload", kvprov_engine_extra_args=[flag, "1"])
    b = name("vllm_offload", kvprov_engine_extra_args=[flag, "2"])
    assert a != b and name("vllm_offload") not in (a, b)
    assert namespace.keys("vllm_offload", getter({"kvprov_engine_extra_args": [flag, "2"]}))[f"arg {flag}"] == "2"


def test_arguments_that_do_not_shape_the_files_leave_the_namespace():
    assert name("vllm_offload", kvprov_engine_extra_args=["--port", "8001", "--max-num-seqs", "8"]) \
        == name("vllm_offload")


@pytest.mark.parametrize("variable", ["VLLM_KV_CACHE_LAYOUT", "VLLM_ATTENTION_BACKEND", "VLLM_MLA_DISABLE",
                                      "VLLM_USE_V2_MODEL_RUNNER", "LMCACHE_CHUNK_SIZE", "SGLANG_HICACHE_FILE_BACKEND"])
def test_each_environment_variable_that_shapes_the_files_moves_the_namespace(variable):
    a = name("vllm_offload", kvprov_engine_environment={variable: "A"})
    b = name("vllm_offload", kvprov_engine_environment={variable: "B"})
    assert a != b and name("vllm_offload") not in (a, b)
    assert namespace.keying_env({variable: "A", "NCCL_DEBUG": "INFO"}) == {variable: "A"}


def test_the_same_arguments_in_another_order_are_one_namespace():
    a = name("vllm_offload", kvprov_engine_extra_args=["--dtype", "half", "--block-size", "16"],
             kvprov_engine_environment={"VLLM_MLA_DISABLE": "1", "LMCACHE_X": "2"})
    b = name("vllm_offload", kvprov_engine_extra_args=["--block-size", "16", "--dtype", "half"],
             kvprov_engine_environment={"LMCACHE_X": "2", "VLLM_MLA_DISABLE": "1"})
    assert a == b


def test_an_unset_keying_value_reads_as_an_empty_one():
    assert name("vllm_offload", kvprov_vllm_dtype=None) == name("vllm_offload", kvprov_vllm_dtype="")
    assert namespace.keys("vllm_offload", getter({}))["kvprov_vllm_dtype"] == ""


def test_keys_show_each_value_as_hashed_and_name_the_engine():
    """What `kvprov check --namespaces` shows per namespace: a boolean as true/false however it is
    spelled, a word that is no boolean as given, a JSON value compact with its keys sorted."""
    get = getter({"kvprov_lmcache_inproc_use_direct_io": "yes",
                  "kvprov_lmcache_inproc_config": {"b": [1, 2], "a": {"y": 1, "x": None}}})
    keyed = namespace.keys("lmcache_inproc", get)
    assert keyed["engine"] == "lmcache_inproc"
    assert keyed["kvprov_lmcache_inproc_use_direct_io"] == "true"
    assert keyed["kvprov_lmcache_inproc_config"] == '{"a":{"x":null,"y":1},"b":[1,2]}'
    spelled = {v: namespace.keys("lmcache_mp", getter({"kvprov_lmcache_mp_nixl_use_direct_io": v}))
               ["kvprov_lmcache_mp_nixl_use_direct_io"] for v in (True, "on", 1, False, "no", 0, "maybe", 2)}
    assert spelled == {True: "true", "on": "true", 1: "true", False: "false", "no": "false", 0: "false",
                       "maybe": "maybe", 2: "2"}
    assert name("lmcache_mp", kvprov_lmcache_mp_nixl_use_direct_io="maybe") \
        != name("lmcache_mp", kvprov_lmcache_mp_nixl_use_direct_io=False)


def test_a_json_value_is_one_namespace_whatever_its_key_order():
    a = name("lmcache_inproc", kvprov_lmcache_inproc_config={"a": 1, "b": 2})
    assert a == name("lmcache_inproc", kvprov_lmcache_inproc_config={"b": 2, "a": 1})
    assert a != name("lmcache_inproc", kvprov_lmcache_inproc_config={"a": 1, "b": 3})


@pytest.mark.parametrize("model, expected", [
    ("Qwen/Qwen3-8B", "Qwen-Qwen3-8B"), ("/models/tiny", "models-tiny"), (".cache/m.", "cache-m"),
    ("XLM/XLNet-X", "XLM-XLNet-X"), ("-a b-", "a-b")])
def test_the_default_namespace_trims_dots_and_dashes_only(model, expected):
    assert namespace.default_namespace(model) == expected


@pytest.mark.parametrize("dirname, expected", [
    ("Qwen-Qwen3-8B-0123456789ab", ("Qwen-Qwen3-8B", "0123456789ab")),
    ("my-model", ("my-model", "")), ("model", ("model", "")), ("-0123456789ab", ("-0123456789ab", "")),
    ("m-0123456789AB", ("m-0123456789AB", ""))])
def test_split_finds_a_fingerprint_only_where_there_is_one(dirname, expected):
    assert namespace.split(dirname) == expected


def test_directories_keep_a_mount_ending_in_any_character_but_a_slash():
    assert namespace.namespace_dir("/vol/X/", "vllm_offload", "n-0123456789ab") == "/vol/X/kv/vllm_offload/n-0123456789ab"
    assert namespace.namespace_dir("/vol/X", "e", "n") == "/vol/X/kv/e/n"
    assert namespace.instance_dir("/vol/X//", "h1", "main") == "/vol/X/h1/main"
    assert namespace.instance_dir("/vol/X", "h1", "main") == "/vol/X/h1/main"
