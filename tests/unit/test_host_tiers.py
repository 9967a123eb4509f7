"""The tiers' sizes (kvprov/check/tiers.py): the host-DRAM tiers x TP x instances against the
host's memory (an error with the arithmetic), and a storage tier smaller than the DRAM tier
it backs (a warning). On one host's effective values as the preflight checks them, on
inventory/example.yml through `kvprov check`, and through the preflight role itself: a real
ansible-playbook --check on local hosts, which reads this machine's /proc/meminfo."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

from kvprov import check, inventory
from kvprov.check import tiers
from tests.conftest import ROOT

SPECS = check.read_specs(inventory.roles_dir())
DEFAULTS = inventory.read_role_defaults(inventory.roles_dir())
TWO = [{"name": "gpu0-3", "port": 8000, "cuda_visible_devices": "0,1,2,3"},
       {"name": "gpu4-7", "port": 8001, "cuda_visible_devices": "4,5,6,7"}]
BASE = {"kvprov_storage_server": "10.0.0.5", "kvprov_engine_install": True, "kvprov_engine_instances": TWO,
        "kvprov_engine_uid": 2001, "kvprov_engine_model_revision": "0123abc"}


def problems(severity: str = "error", **values) -> dict[str, str]:
    """{variable: message} of host gpu1's problems of that severity, as the preflight finds them."""
    host = check.host_from_values("gpu1", {**BASE, **values}, DEFAULTS)
    return {p.variable: p.message for p in check.check_host_values(host, SPECS) if p.severity == severity}


# ---------------------------------------------------------------------------- host memory

def test_rack_b_asks_for_more_dram_than_the_host_has_and_says_how():
    found = problems(kvprov_sglang_hicache_size=200, kvprov_sglang_tp_size=4, kvprov_host_memory_mb=1048576)
    assert found == {"kvprov_sglang_hicache_size": (
        "the host-DRAM tiers need 1600.0 GB but the host has 1099.5 GB (kvprov_host_memory_mb 1048576): per "
        "instance --hicache-size 200 GB x --tp-size 4 (per TP rank) = 800.0 GB, x 2 instance(s) (gpu0-3, gpu4-7) "
        "= 1600.0 GB; lower kvprov_sglang_hicache_size or the instances, or the engine is killed for memory "
        "(or never starts)")}


def test_what_fits_passes_and_an_unknown_memory_or_a_config_only_host_is_not_judged():
    # 100 GB x 4 x 2 = 800 GB on a 1 TiB host
    assert problems(kvprov_sglang_hicache_size=100, kvprov_sglang_tp_size=4, kvprov_host_memory_mb=1048576) == {}
    big = {"kvprov_sglang_hicache_size": 200, "kvprov_sglang_tp_size": 4}
    assert problems(**big) == {}                                   # kvprov check: no memory known
    assert problems(**big, kvprov_host_memory_mb=1024, kvprov_engine_install=False) == {}


@pytest.mark.parametrize("values, variable, arithmetic", [
    ({"kvprov_engine": "vllm_offload", "kvprov_vllm_offload_cpu_bytes_to_use": 107374182400},
     "kvprov_vllm_offload_cpu_bytes_to_use", "cpu_bytes_to_use 107374182400 (all workers, in /dev/shm) = 107.4 GB"),
    ({"kvprov_engine": "lmcache_mp", "kvprov_lmcache_mp_l1_size_gb": 100},
     "kvprov_lmcache_mp_l1_size_gb", "--l1-size-gb 100 GiB (one server) = 107.4 GB"),
    ({"kvprov_engine": "lmcache_inproc", "kvprov_lmcache_inproc_max_local_cpu_size": 100.0,
      "kvprov_vllm_tensor_parallel_size": 4},
     "kvprov_lmcache_inproc_max_local_cpu_size",
     "max_local_cpu_size 100 GiB x --tensor-parallel-size 4 (per worker) = 429.5 GB"),
])
def test_each_engines_host_tier(values, variable, arithmetic):
    msg = problems(**values, kvprov_host_memory_mb=131072)[variable]  # 128 GiB
    assert f"per instance {arithmetic}, x 2 instance(s)" in msg and "the host has 137.4 GB" in msg


def test_an_engine_without_a_host_tier_is_not_judged():
    assert problems(kvprov_engine="vllm_baseline", kvprov_host_memory_mb=1) == {}
    assert "kvprov_host_memory_mb" in problems(kvprov_host_memory_mb=-1)


# ---------------------------------------------------------------------------- storage below DRAM

def test_lmcache_in_process_nixl_pool_a_tenth_of_its_dram_warns():
    # the example's rack C host: 256 chunks x 1024 tokens of Qwen3-8B per worker vs 100 GiB per worker
    found = problems("warning", kvprov_engine="lmcache_inproc", kvprov_lmcache_inproc_tier="nixl",
                     kvprov_lmcache_inproc_chunk_size=1024, kvprov_lmcache_inproc_max_local_cpu_size=100.0,
                     kvprov_lmcache_inproc_nixl_pool_size=256, kvprov_vllm_tensor_parallel_size=4)
    msg = found["kvprov_lmcache_inproc_nixl_pool_size"]
    # 1024 x 36 layers x 2 x 8/4 heads x 128 x 2 bytes = 37748736 bytes a chunk, x 256 x 4 workers
    assert msg.startswith("the storage tier (nixl_pool_size 256 x 37748736 bytes a chunk x 4 worker(s) = 38.7 GB "
                          "an instance) is smaller than the DRAM tier it backs (max_local_cpu_size 100 GiB x "
                          "--tensor-parallel-size 4 (per worker) = 429.5 GB)")
    assert "at most 9% of it" in msg


@pytest.mark.parametrize("values, variable", [
    ({"kvprov_engine": "lmcache_mp", "kvprov_lmcache_mp_l1_size_gb": 100, "kvprov_lmcache_mp_l2_type": "fs_native",
      "kvprov_lmcache_mp_l2_size_gb": 50, "kvprov_engine_storage_sharing": "instance", "kvprov_storage_profile": "local",
      "kvprov_storage_pnfs_layout": "none"}, "kvprov_lmcache_mp_l2_size_gb"),
    ({"kvprov_engine": "lmcache_mp", "kvprov_lmcache_mp_l1_size_gb": 20, "kvprov_lmcache_mp_l2_type": "nixl_store",
      "kvprov_lmcache_mp_nixl_pool_size": 64, "kvprov_lmcache_mp_nixl_file_size": 67108864,
      "kvprov_lmcache_mp_l2_size_gb": 4}, "kvprov_lmcache_mp_nixl_pool_size"),
    ({"kvprov_engine": "lmcache_inproc", "kvprov_lmcache_inproc_tier": "local_disk",
      "kvprov_lmcache_inproc_max_local_cpu_size": 50.0, "kvprov_lmcache_inproc_max_local_disk_size": 20.0},
     "kvprov_lmcache_inproc_max_local_disk_size"),
    ({"kvprov_sglang_hicache_size": 100, "kvprov_engine_evict": "always",
      "kvprov_engine_evict_max_bytes": 50 * 10 ** 9}, "kvprov_engine_evict_max_bytes"),
])
def test_a_storage_tier_smaller_than_its_dram_tier_warns(values, variable):
    assert variable in problems("warning", **values)
    assert not problems(**values)  # a warning, not an error


def test_a_storage_tier_at_least_as_large_or_unbounded_says_nothing():
    for values in ({"kvprov_engine": "lmcache_mp", "kvprov_lmcache_mp_l1_size_gb": 20,
                    "kvprov_lmcache_mp_l2_type": "fs_native", "kvprov_lmcache_mp_l2_size_gb": 100},
                   {"kvprov_engine": "lmcache_mp", "kvprov_lmcache_mp_l1_size_gb": 20,
                    "kvprov_lmcache_mp_l2_type": "fs_native", "kvprov_lmcache_mp_l2_size_gb": 0},
                   {"kvprov_sglang_hicache_size": 100},  # SGLang's NIXL tier: the volume bounds it
                   {"kvprov_sglang_hicache_size": 100, "kvprov_engine_evict": "never",
                    "kvprov_engine_evict_max_bytes": 10 ** 9}):
        found = problems("warning", **values)
        assert not any("smaller than the DRAM tier" in m for m in found.values()), (values, found)


def test_kvprov_check_names_the_file_and_line_and_the_example_holds_its_dram(tmp_path):
    example = ROOT / "inventory/example.yml"
    _, found = check.run(str(example))
    assert not [p for p in found if "smaller than the DRAM tier" in p.message]
    # the example as the review found it: a NIXL pool of 256 chunks a worker, a tenth of its 100 GiB DRAM tier
    text = re.sub(r"kvprov_lmcache_inproc_tier: fs .*", "kvprov_lmcache_inproc_tier: nixl\n"
                  "                kvprov_lmcache_inproc_nixl_pool_size: 256", example.read_text())
    (tmp_path / "example.yml").write_text(text)
    _, found = check.run(str(tmp_path / "example.yml"))
    [p] = [p for p in found if "smaller than the DRAM tier" in p.message]
    assert (p.host, p.variable, p.severity) == ("gpu-c03.corp.example.com", "kvprov_lmcache_inproc_nixl_pool_size",
                                                "warning")
    assert p.file == str(tmp_path / "example.yml")
    assert text.splitlines()[p.line - 1].strip() == "kvprov_lmcache_inproc_nixl_pool_size: 256"


# ---------------------------------------------------------------------------- the preflight role

def meminfo_mb() -> int:
    text = open("/proc/meminfo").read()
    return int(re.search(r"MemTotal:\s+(\d+) kB", text)[1]) // 1024


@pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-playbook not installed")
def test_the_preflight_reads_the_hosts_memory_and_fails_with_the_arithmetic(tmp_path):
    mb = meminfo_mb()
    too_big = mb // 1000 + 2  # GB per TP rank: more than this machine has, with TP 1 and one instance
    one = [{"name": "main", "port": 8000}]
    common = {"kvprov_storage_server": "10.0.0.5", "kvprov_engine_instances": one, "kvprov_sglang_tp_size": 1}
    hosts = {
        "read": {"kvprov_engine_install": True, "kvprov_sglang_hicache_size": too_big},
        "fits": {"kvprov_engine_install": True, "kvprov_sglang_hicache_size": 1},
        "given": {"kvprov_engine_install": True, "kvprov_sglang_hicache_size": 2, "kvprov_host_memory_mb": 1024},
        "config-only": {"kvprov_engine_install": False, "kvprov_sglang_hicache_size": too_big},
    }
    inv = tmp_path / "inventory.yml"
    inv.write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": "/usr/bin/python3"},
        "children": {"gpu_nodes": {"vars": common, "hosts": hosts}}}}))
    play = tmp_path / "play.yml"
    play.write_text("- name: Preflight only\n  hosts: gpu_nodes\n  gather_facts: false\n  roles: [preflight]\n")
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
           "ANSIBLE_STDOUT_CALLBACK": "default", "ANSIBLE_CALLBACK_RESULT_FORMAT": "json", "ANSIBLE_NOCOLOR": "1"}
    r = subprocess.run(["ansible-playbook", "-v", "-i", str(inv), str(play), "--check"], capture_output=True,
                       text=True, env=env, cwd=tmp_path, timeout=300)
    # the check's own result is each host's last `ok:`/`fatal:` line
    results = {m[1]: json.loads(m[2]) for m in re.finditer(r"^(?:ok|fatal): \[(\S+)\](?:: FAILED!)? => (\{.*\})$",
                                                           r.stdout, re.M)}
    assert sorted(results) == sorted(hosts), r.stdout[-3000:] + r.stderr[-2000:]
    recap = {m[1]: dict(re.findall(r"(\w+)=(\d+)", m[2])) for m in re.finditer(r"^(\S+)\s+: (ok=.*)$", r.stdout, re.M)}
    assert {h: recap[h]["failed"] for h in hosts} == {"read": "1", "fits": "0", "given": "1", "config-only": "0"}
    read = results["read"]
    assert (f"host read: kvprov_sglang_hicache_size: the host-DRAM tiers need {too_big:.1f} GB but the host has "
            f"{mb * 2 ** 20 / 1e9:.1f} GB (kvprov_host_memory_mb {mb}): per instance --hicache-size {too_big} GB "
            f"x --tp-size 1 (per TP rank) = {too_big:.1f} GB, x 1 instance(s) (main)") in read["msg"]
    assert "(kvprov_host_memory_mb 1024)" in results["given"]["msg"]
    assert not results["fits"]["kvprov_problems"] and not results["config-only"]["kvprov_problems"]
    # config-only: its memory unread, nothing to convert, no kvprov_host_facts to compare
    assert {recap[h]["changed"] for h in hosts} == {"0"} and recap["config-only"]["skipped"] == "5"
    assert recap["given"]["skipped"] == "2" and recap["read"]["skipped"] == "0"  # given: nothing to read


# ---------------------------------------------------------------------------- the tiers' sizes at their edges

def view(**values):
    from kvprov.check.host import HostView

    return HostView(check.host_from_values("gpu1", values, DEFAULTS), SPECS)


def dram(**values) -> float | None:
    t = tiers.host_tier(view(**values))
    return None if t is None else t.bytes


def storage(**values) -> tuple | None:
    t = tiers.storage_tier(view(**values))
    return None if t is None else t[:2]


def test_a_host_tier_needs_a_positive_size_and_tp():
    sg = {"kvprov_engine": "sglang_hicache", "kvprov_sglang_hicache_size": 10}
    assert dram(**sg, kvprov_sglang_tp_size=2) == 20 * tiers.GB
    assert dram(**sg, kvprov_sglang_tp_size=0) is None and dram(**sg, kvprov_sglang_tp_size=-1) is None
    assert dram(kvprov_engine="sglang_hicache", kvprov_sglang_hicache_size=-1) is None
    vo = {"kvprov_engine": "vllm_offload"}
    assert dram(**vo, kvprov_vllm_offload_cpu_bytes_to_use=1) == 1.0
    assert dram(**vo, kvprov_vllm_offload_cpu_bytes_to_use=0) is None
    assert dram(**vo, kvprov_vllm_offload_cpu_bytes_to_use=-1) is None
    assert dram(kvprov_engine="lmcache_mp", kvprov_lmcache_mp_l1_size_gb=0.5) == 0.5 * tiers.GIB
    li = {"kvprov_engine": "lmcache_inproc", "kvprov_lmcache_inproc_max_local_cpu_size": 2.0}
    assert dram(**li, kvprov_vllm_tensor_parallel_size=2) == 4 * tiers.GIB
    for tp in (0, -1, "two"):
        assert dram(**li, kvprov_vllm_tensor_parallel_size=tp) is None
    assert dram(kvprov_engine="lmcache_inproc", kvprov_lmcache_inproc_max_local_cpu_size=-1.0) is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        tiers.host_tier(view(**vo, kvprov_vllm_offload_cpu_bytes_to_use=1)).bytes = 2.0


def test_memory_at_its_edges():
    one = {"kvprov_engine": "vllm_offload", "kvprov_engine_instances": [{"port": 8000}]}
    assert tiers.host_memory(view(**one, kvprov_vllm_offload_cpu_bytes_to_use=1 << 20, kvprov_host_memory_mb=1)) == []
    found = tiers.host_memory(view(**one, kvprov_vllm_offload_cpu_bytes_to_use=(1 << 20) + 1, kvprov_host_memory_mb=1))
    assert [p.variable for p in found] == ["kvprov_vllm_offload_cpu_bytes_to_use"]
    assert "x 1 instance(s) (?)" in found[0].message  # an instance without a name


def test_an_lmcache_mp_nixl_store_pool_bounds_the_storage_tier_only_when_it_is_whole():
    mp = {"kvprov_engine": "lmcache_mp", "kvprov_lmcache_mp_l2_type": "nixl_store", "kvprov_lmcache_mp_l2_size_gb": 1}
    l2 = ("kvprov_lmcache_mp_l2_size_gb", 1.0 * tiers.GB)
    pool = "kvprov_lmcache_mp_nixl_pool_size"
    assert storage(**mp, kvprov_lmcache_mp_nixl_pool_size=1, kvprov_lmcache_mp_nixl_file_size=2 * 10 ** 9) == (
        pool, 2.0 * tiers.GB)
    assert storage(**mp, kvprov_lmcache_mp_nixl_pool_size=2 * 10 ** 9, kvprov_lmcache_mp_nixl_file_size=1) == (
        pool, 2.0 * tiers.GB)
    assert storage(**mp, kvprov_lmcache_mp_nixl_pool_size=1, kvprov_lmcache_mp_nixl_file_size=10 ** 9) == (
        pool, 1.0 * tiers.GB)  # exactly the L2 size: the pool holds it
    assert storage(**mp, kvprov_lmcache_mp_nixl_pool_size=1, kvprov_lmcache_mp_nixl_file_size=10 ** 9 - 1) is None
    for p, size in ((0, 10 ** 9), (-1, 10 ** 9), (1, 0), (1, -1)):  # no pool known: the L2 size
        assert storage(**mp, kvprov_lmcache_mp_nixl_pool_size=p, kvprov_lmcache_mp_nixl_file_size=size) == l2


def test_lmcache_in_process_storage_tiers_per_worker():
    disk = {"kvprov_engine": "lmcache_inproc", "kvprov_lmcache_inproc_tier": "local_disk",
            "kvprov_lmcache_inproc_max_local_disk_size": 10.0}
    assert storage(**disk, kvprov_vllm_tensor_parallel_size=2) == ("kvprov_lmcache_inproc_max_local_disk_size",
                                                                   20.0 * tiers.GB)
    for tp in (0, -2, 1):
        assert storage(**disk, kvprov_vllm_tensor_parallel_size=tp)[1] == 10.0 * tiers.GB
    geometry = {"kvprov_lmcache_inproc_chunk_size": 256, "kvprov_bench_model_layers": 36,
                "kvprov_bench_model_kv_heads": 8, "kvprov_bench_model_head_dim": 128, "kvprov_bench_kv_dtype_bytes": 1}
    nixl = {"kvprov_engine": "lmcache_inproc", "kvprov_lmcache_inproc_tier": "nixl", **geometry,
            "kvprov_vllm_tensor_parallel_size": 8}
    chunk = 256 * 36 * 2 * 1 * 128 * 1  # 8 KV heads over 8 workers: one each
    assert storage(**nixl, kvprov_lmcache_inproc_nixl_pool_size=1) == ("kvprov_lmcache_inproc_nixl_pool_size",
                                                                       float(chunk * 8))
    for p in (0, -1):  # no pool: the eviction bound, if any
        assert storage(**nixl, kvprov_lmcache_inproc_nixl_pool_size=p) is None
        assert storage(**nixl, kvprov_lmcache_inproc_nixl_pool_size=p, kvprov_engine_evict_max_bytes=1) == (
            "kvprov_engine_evict_max_bytes", 1.0)
    assert storage(**{**nixl, "kvprov_bench_model_layers": -1}, kvprov_lmcache_inproc_nixl_pool_size=64) is None
    assert storage(kvprov_engine="vllm_offload", kvprov_engine_evict_max_bytes=0) is None


def test_a_storage_tier_exactly_as_large_as_its_dram_tier_says_nothing():
    vo = {"kvprov_engine": "vllm_offload", "kvprov_vllm_offload_cpu_bytes_to_use": 10 ** 9}
    assert tiers.storage_below_dram(view(**vo, kvprov_engine_evict_max_bytes=10 ** 9)) == []
    assert [p.severity for p in tiers.storage_below_dram(view(**vo, kvprov_engine_evict_max_bytes=10 ** 9 - 1))] == [
        "warning"]


def test_the_old_instance_list_is_the_one_counted_where_the_inventory_sets_it():
    three = [{"name": f"i{n}", "port": 8000 + n} for n in range(3)]
    host = check.host_from_values("gpu1", {"kvprov_storage_server": "10.0.0.5", "kvprov_engine_install": True,
                                           "kvprov_sglang_instances": three, "kvprov_sglang_hicache_size": 100,
                                           "kvprov_host_memory_mb": 1024}, DEFAULTS)
    [p] = [p for p in check.check_host_values(host, SPECS) if p.variable == "kvprov_sglang_hicache_size"]
    assert "x 3 instance(s) (i0, i1, i2)" in p.message
