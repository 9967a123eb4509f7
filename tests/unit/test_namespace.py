"""The shared tier: one namespace per engine and model on the volume where the engine's files
are named by what they hold, one directory per instance where they are not (kvprov/namespace.py,
the engine role's vars, kvprov check's fleet rule)."""

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from kvprov import check, namespace
from kvprov.validate import parsers
from tests.unit.test_check_fleet import NFS, fleet, found

ROOT = Path(__file__).resolve().parents[2]
VLLM = {**NFS, "kvprov_engine": "vllm_offload", "kvprov_vllm_offload_cpu_bytes_to_use": 10**9,
        "kvprov_engine_model_path": "Qwen/Qwen3-8B", "kvprov_engine_model_revision": "0123abc", "kvprov_engine_uid": 2001}
FP = "-[0-9a-f]{12}"  # a namespace's fingerprint


def dirs_of(values: dict) -> list[str]:
    view = check.HostView(check.host_from_values("h1", values, check.inventory.read_role_defaults(
        check.inventory.roles_dir())), check.read_specs(check.inventory.roles_dir()))
    return [d.path for d in check.storage_dirs(view)]


@pytest.mark.parametrize("values, expected", [
    (VLLM, "/mnt/kvcache/kv/vllm_offload/Qwen-Qwen3-8B"),
    ({**VLLM, "kvprov_engine_namespace": "team-a"}, "/mnt/kvcache/kv/vllm_offload/team-a"),
    ({**VLLM, "kvprov_engine_storage_sharing": "instance"}, "/mnt/kvcache/h1/main"),
    ({**NFS, "kvprov_engine": "lmcache_mp"}, "/mnt/kvcache/kv/lmcache_mp/Qwen-Qwen3-8B"),  # fs
    ({**NFS, "kvprov_engine": "lmcache_mp", "kvprov_lmcache_mp_l2_type": "nixl_store"}, "/mnt/kvcache/h1/main"),
    ({**NFS, "kvprov_engine": "lmcache_inproc"}, "/mnt/kvcache/kv/lmcache_inproc/Qwen-Qwen3-8B"),  # fs
    ({**NFS, "kvprov_engine": "lmcache_inproc", "kvprov_lmcache_inproc_tier": "nixl"}, "/mnt/kvcache/h1/main"),
    ({**NFS, "kvprov_engine": "lmcache_mp", "kvprov_lmcache_mp_l2_type": "nixl_store_dynamic"},
     "/mnt/kvcache/h1/main"),  # its shutdown deletes every *.tmp.* file of the directory
    (NFS, "/mnt/kvcache/h1/main"),  # SGLang's NIXL backend: clear() deletes its directory
])
def test_where_each_engine_keeps_its_tier(values, expected):
    [got] = dirs_of(values)
    assert re.fullmatch(re.escape(expected) + (FP if "/kv/" in expected else ""), got), got


COMBOS = [{"kvprov_engine": "vllm_offload", "kvprov_vllm_offload_cpu_bytes_to_use": 10**9},
          {"kvprov_engine": "vllm_offload", "kvprov_vllm_offload_cpu_bytes_to_use": 10**9,
           "kvprov_engine_storage_sharing": "instance"},
          {"kvprov_engine": "vllm_offload", "kvprov_vllm_offload_cpu_bytes_to_use": 10**9,
           "kvprov_engine_namespace": "team-a"},
          *({"kvprov_engine": "lmcache_mp", "kvprov_lmcache_mp_l2_type": t, "kvprov_lmcache_mp_nixl_pool_size": 2000,
             "kvprov_engine_namespace": f"l2-{t}"}  # the L2 type keys the files: a namespace each
            for t in ("fs", "nixl_store", "nixl_store_dynamic")),
          {"kvprov_engine": "lmcache_mp", "kvprov_lmcache_mp_l2_type": "fs_native", "kvprov_storage_profile": "local",
           "kvprov_storage_pnfs_layout": "none"},  # refused on NFS (kvprov/check/engines.py)
          *({"kvprov_engine": "lmcache_inproc", "kvprov_lmcache_inproc_tier": t} for t in ("fs", "nixl", "local_disk")),
          {"kvprov_engine": "sglang_hicache"},
          # keying values as a user may spell them, and keying arguments and environment (kvprov/namespace.py)
          {"kvprov_engine": "lmcache_inproc", "kvprov_lmcache_inproc_use_direct_io": "yes", "kvprov_vllm_block_size": "16",
           "kvprov_engine_extra_args": ["--kv_cache_dtype=fp8", "--hf-overrides.rope_scaling", '{"factor": 4}'],
           "kvprov_engine_environment": {"LMCACHE_SAVE_CHUNK_META": "False", "NCCL_DEBUG": "INFO"},
           "kvprov_lmcache_inproc_config": {"pre_caching_hash_algorithm": "sha256_cbor", "lookup_timeout_ms": 2000}}]


def test_the_engine_roles_storage_dirs_are_kvprov_checks(tmp_path):
    """One source of truth: the storage directory the engine role derives in Jinja (the desired
    state deploy writes) is the one kvprov/namespace.py gives check, for every engine and tier."""
    import yaml

    from kvprov import desired

    hosts = {f"h{i}": {**combo, "kvprov_engine_model_path": "/models/Qwen3-8B"} for i, combo in enumerate(COMBOS)}
    inv = tmp_path / "inv.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"vars": {"kvprov_storage_server": "10.0.0.5",
                                                                                "kvprov_engine_uid": 2001},
                                                                       "hosts": hosts}}}}))
    states = desired.load(str(inv), None)
    for name, values in hosts.items():
        jinja = [i["storage_dir"] for i in states[name]["engine"]["instances"]]
        view = check.HostView(check.host_from_values(name, {"kvprov_storage_server": "10.0.0.5", **values,
                                                            "kvprov_engine_uid": 2001},
                                                     check.inventory.read_role_defaults(
            check.inventory.roles_dir())), check.read_specs(check.inventory.roles_dir()))
        assert jinja == [d.path for d in check.storage_dirs(view)], (name, values)


def argument(unit: Path, flag: str) -> str | None:
    """The value of FLAG in a rendered unit's ExecStart=, as systemd would pass it."""
    argv = parsers.exec_argv(parsers.unit_value(parsers.parse_unit(unit.read_text()), "Service", "ExecStart"), False)
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_the_engine_role_renders_the_namespace_kvprov_check_computes(tmp_path):
    """The example fleet: both vLLM offloading hosts and all their instances write one namespace,
    LMCache MP and in-process each theirs, SGLang a directory per instance; the Jinja of the
    engine role and kvprov/namespace.py agree."""
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "kvprov", "render", str(ROOT / "inventory/example.yml"), "--out",
                        str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    def key_namespace(unit: Path) -> str:
        """The namespace the unit's kvprov-kv-key keys (its ExecStart names ${KVPROV_KV_DIR}, the
        host's subdirectory of it: tests/unit/test_kv_key.py)."""
        [line] = [x for x in unit.read_text().splitlines() if x.startswith("ExecStartPre=") and "kvprov-kv-key" in x]
        return shlex.split(line.partition("=")[2])[-2]

    roots = {}
    for unit in out.glob("*/etc/systemd/system/kvprov-vllm-*.service"):
        config = argument(unit, "--kv-transfer-config")
        for tier in json.loads(config).get("kv_connector_extra_config", {}).get("secondary_tiers", []) if config else []:
            assert tier["root_dir"] == "${KVPROV_KV_DIR}", tier
            roots.setdefault(key_namespace(unit), set()).add(unit.parts[-5])
    [(root, hosts)] = roots.items()
    assert hosts == {"gpu-c01.corp.example.com", "gpu-c00.corp.example.com"}
    assert re.fullmatch("/mnt/kvcache/kv/vllm_offload/models-Qwen3-8B" + FP, root), root
    [mp] = out.glob("gpu-c02*/etc/systemd/system/kvprov-lmcache-gpu0-3.service")
    adapter = json.loads(argument(mp, "--l2-adapter"))["adapter_params"]["inner"]  # inside kvprov's fail-open one
    assert adapter["type"] == "fs" and adapter["base_path"] == "${KVPROV_KV_DIR}", adapter
    assert re.fullmatch("/mnt/kvcache/kv/lmcache_mp/models-Qwen3-8B" + FP, key_namespace(mp))
    inproc = (out / "gpu-c03.corp.example.com/etc/kvprov/lmcache-gpu0-3.yaml").read_text()
    assert re.search("fs://localhost:0/mnt/kvcache/kv/lmcache_inproc/models-Qwen3-8B" + FP, inproc), inproc
    sglang = (out / "gpu-a01.corp.example.com/etc/systemd/system/kvprov-sglang-gpu0-3.service").read_text()
    # SGLang: its own directory, keyed by kvprov-kv-key --key <the same fingerprint of its own table row>
    assert "SGLANG_HICACHE_NIXL_BACKEND_STORAGE_DIR=/mnt/kvcache/gpu-a01.corp.example.com/gpu0-3\n" in sglang
    assert re.search(" --key models-Qwen3-8B" + FP + " .* /mnt/kvcache/gpu-a01.corp.example.com/gpu0-3 ", sglang), sglang
    # one evictor for the namespace both instances of gpu-c01 share
    assert [p.name for p in out.glob("gpu-c01*/etc/systemd/system/kvprov-evict-*.service")] == [
        "kvprov-evict-gpu0-3.service"]


def test_hosts_that_differ_in_a_keying_value_are_in_different_namespaces_and_check_names_it():
    problems = found(fleet({"a": VLLM, "b": {**VLLM, "kvprov_vllm_offload_block_size": 32},
                            "c": {**VLLM, "kvprov_engine_namespace": "other", "kvprov_vllm_block_size": 32}}))
    [p] = problems
    assert re.fullmatch(
        "warning b kvprov_engine_namespace: /mnt/kvcache/kv/vllm_offload/Qwen-Qwen3-8B-[0-9a-f]{12} is not host a's "
        "namespace /mnt/kvcache/kv/vllm_offload/Qwen-Qwen3-8B-[0-9a-f]{12} on 10.0.0.5:/kvcache, though both serve "
        "Qwen-Qwen3-8B with vllm_offload: kvprov_vllm_offload_block_size '32' \\(host a: '256'\\); the engine writes "
        "different bytes or names for these, so the hosts share no KV; make them equal to share", p), p
    a, b, c = (dirs_of(v)[0] for v in (VLLM, {**VLLM, "kvprov_vllm_offload_block_size": 32},
                                       {**VLLM, "kvprov_engine_namespace": "other"}))
    assert len({a, b, c}) == 3 and c.startswith("/mnt/kvcache/kv/vllm_offload/other-")


def test_keying_engine_arguments_split_namespaces_and_the_owner_must_agree_within_one():
    a = {**VLLM, "kvprov_engine_extra_args": ["--kv-cache-dtype", "fp8"]}
    b = {**VLLM, "kvprov_engine_extra_args": ["--kv_cache_dtype=auto"]}
    [p] = found(fleet({"a": a, "b": b}))
    assert p.startswith("warning b kvprov_engine_namespace") and "arg --kv-cache-dtype 'auto' (host a: 'fp8')" in p
    [p] = found(fleet({"a": a, "b": {**a, "kvprov_engine_uid": 2002}}))
    assert p.startswith("error b kvprov_engine_uid: 2002 differs from host a's 2001") and "uid owns" in p
    # the same settings: no finding; one host's own two instances: nothing to compare
    assert found(fleet({"a": a, "b": {**a}})) == []


def test_an_unshareable_tier_cannot_be_asked_to_share():
    [p] = found(fleet({"a": {**NFS, "kvprov_engine_storage_sharing": "namespace"}}))
    assert p.startswith("error a kvprov_engine_storage_sharing: namespace: this engine's tier cannot be shared: "
                        "SGLang's NIXL storage backend deletes every file")
    [p] = found(fleet({"a": {**NFS, "kvprov_engine": "lmcache_mp", "kvprov_lmcache_mp_l2_type": "nixl_store",
                             "kvprov_lmcache_mp_nixl_pool_size": 2000, "kvprov_engine_storage_sharing": "namespace"}}))
    assert "keeps its index in memory" in p


def test_one_directory_given_to_two_engines_or_to_an_unshareable_tier_is_refused():
    shared = [{"name": "main", "port": 8000, "storage_dir": "/mnt/kvcache/shared"}]
    mp = {**NFS, "kvprov_engine": "lmcache_mp", "kvprov_engine_instances": shared}
    [p] = found(fleet({"a": {**VLLM, "kvprov_engine_instances": shared}, "b": mp}))
    assert "name their files differently" in p
    pool = {"kvprov_lmcache_mp_l2_type": "nixl_store", "kvprov_lmcache_mp_nixl_pool_size": 2000}
    [p] = found(fleet({"a": mp, "b": {**mp, **pool}}))
    assert "is also host a instance main's storage dir" in p and "keeps its index in memory" in p
    assert found(fleet({"a": mp, "b": mp})) == []  # a namespace the user named: shared


@pytest.mark.parametrize("value", ["/mnt/kvcache/ --high-percent 1", "/mnt/kvcache/a b", "/mnt/kvcache/$x"])
def test_a_storage_dir_is_a_plain_path(value):
    [p] = found(fleet({"a": {**NFS, "kvprov_engine_instances": [{"name": "m", "port": 8000, "storage_dir": value}]}}))
    assert "may hold only letters, digits and _ . / -" in p


@pytest.mark.parametrize("value", ["../x", "a/b", ".hidden", "x" * 129, "a b"])
def test_a_namespace_is_one_plain_directory_name(value):
    [p] = found(fleet({"a": {**VLLM, "kvprov_engine_namespace": value}}))
    assert "is not a namespace name" in p


def test_the_default_namespace_is_the_model_path_made_a_name():
    assert namespace.default_namespace("Qwen/Qwen3-8B") == "Qwen-Qwen3-8B"
    assert namespace.default_namespace("/models/tiny") == "models-tiny"
    assert namespace.default_namespace("/srv/m odel//x.") == "srv-m-odel-x"
