"""The roles' preflight (roles/preflight): `kvprov check`'s own rules, run by a real
ansible-playbook on each host's resolved values -- one rule set, not two.

One check-mode run of a play that holds only the preflight role covers every case: each
host of the inventory below carries the lab's values and one bad value. The hosts are
local (connection: local) and the preflight contacts none of them anyway.
"""

import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

from kvprov import check
from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-playbook not installed")

_LAB = yaml.safe_load((ROOT / "inventory/lab.yml").read_text())["all"]["children"]["gpu_nodes"]["children"]["lab_gpu_vms"]
LAB_VALUES = {k: v for k, v in {**_LAB["vars"], **_LAB["hosts"]["kvlab-gpu1"]}.items() if k.startswith("kvprov_")}

# host -> (its one bad value, the variable both must name)
BAD = {
    "newline": ({"kvprov_engine_instances": [{"name": "main", "port": 8000,
                                              "cuda_visible_devices": "0\nExecStartPre=+/bin/sh -c id"}]},
                "kvprov_engine_instances"),
    "dotted-key": ({"kvprov_nixl_backend_options": {"plugin.gds_mt.active": True}}, "kvprov_nixl_backend_options"),
    "root-user": ({"kvprov_engine_user": "root"}, "kvprov_engine_user"),
    "dotdot": ({"kvprov_storage_mount_point": "/mnt/../etc"}, "kvprov_storage_mount_point"),
    "option-space": ({"kvprov_storage_extra_options": ["hard,noac dirsync"]}, "kvprov_storage_extra_options"),
    # more of kvprov check's rule kinds: spec type, a range, a shell word, a host rule, a storage dir
    "not-an-int": ({"kvprov_storage_rsize": "1048576 bytes"}, "kvprov_storage_rsize"),
    "utilization": ({"kvprov_vllm_gpu_memory_utilization": 1.5}, "kvprov_vllm_gpu_memory_utilization"),
    "netdev": ({"kvprov_rdma_soft_roce_netdevs": ["data0;reboot"]}, "kvprov_rdma_soft_roce_netdevs"),
    "two-active": ({"kvprov_nixl_plugins": {"posix": {"active": True}, "gds_mt": {"active": True}}},
                   "kvprov_nixl_plugins"),
    "nconnect-trunking": ({"kvprov_storage_nconnect": 4, "kvprov_storage_trunking": "max_connect"},
                          "kvprov_storage_nconnect"),
    "dir-off-mount": ({"kvprov_engine_instances": [{"name": "main", "port": 8000, "storage_dir": "/var/tmp/kv"}]},
                      "kvprov_engine_instances"),
    "page-size": ({"kvprov_sglang_page_size": 1, "kvprov_bench_model_layers": 1}, "kvprov_sglang_page_size"),
}
# kvprov check leaves a Jinja value unjudged; the preflight renders it first.
TEMPLATED = {"base_dir": "/mnt/kvcache/..", "kvprov_bench_dir": "{{ base_dir }}/bench"}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(ansible-playbook's result, the preflight's result per host, the inventory file)."""
    tmp = tmp_path_factory.mktemp("preflight")
    hosts = {"good": {}, "templated": TEMPLATED, **{h: values for h, (values, _) in BAD.items()}}
    inv = tmp / "inventory.yml"
    inv.write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": "/usr/bin/python3"},
        "children": {"gpu_nodes": {"vars": LAB_VALUES, "hosts": hosts}}}}))
    play = tmp / "play.yml"
    play.write_text("- name: Preflight only\n  hosts: gpu_nodes\n  gather_facts: false\n  roles: [preflight]\n")
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
           "ANSIBLE_STDOUT_CALLBACK": "default", "ANSIBLE_CALLBACK_RESULT_FORMAT": "json", "ANSIBLE_NOCOLOR": "1"}
    r = subprocess.run(["ansible-playbook", "-v", "-i", str(inv), str(play), "--check"], capture_output=True,
                       text=True, env=env, cwd=tmp, timeout=300)
    # -v: each host's result as one JSON object, `ok: [HOST] => {...}` or `fatal: [HOST]: FAILED! => {...}`
    results = {m[1]: json.loads(m[2]) for m in re.finditer(r"^(?:ok|fatal): \[(\S+)\](?:: FAILED!)? => (\{.*\})$",
                                                           r.stdout, re.M)}
    assert sorted(results) == sorted(hosts), r.stdout[-4000:] + r.stderr[-2000:]
    return r, results, inv


def recap(stdout: str) -> dict[str, dict[str, int]]:
    return {m[1]: {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m[2])}
            for m in re.finditer(r"^(\S+)\s+: (ok=.*)$", stdout, re.M)}


def flagged(result: dict, severity: str = "error") -> set[str]:
    return {p["variable"] for p in result["kvprov_problems"] if p["severity"] == severity}


def test_good_values_pass_unchanged(run):
    r, results, _ = run
    good = recap(r.stdout)["good"]
    # the role's argument spec (kvprov_host_memory_mb) and the check; the host's memory is not
    # read on a config-only host (the lab's values), nothing to convert, and no kvprov_host_facts to
    # compare (nor facts gathered): five tasks skipped
    assert (good["ok"], good["changed"], good["failed"], good["skipped"]) == (2, 0, 0, 5), r.stdout + r.stderr
    assert not flagged(results["good"]), results["good"]


@pytest.mark.parametrize("host", BAD)
def test_bad_value_fails_naming_host_and_variable(run, host):
    r, results, inv = run
    assert recap(r.stdout)[host]["failed"] == 1 and recap(r.stdout)[host]["changed"] == 0
    variable = BAD[host][1]
    assert variable in flagged(results[host])
    lines = results[host]["msg"].splitlines()
    assert any(line.startswith(f"host {host}: {variable}: ") for line in lines), lines
    assert f"kvprov check {inv}" in lines[-1]


def test_a_template_is_judged_by_its_value(run):
    _, results, _ = run
    assert flagged(results["templated"]) == {"kvprov_bench_dir"}
    assert "/mnt/kvcache/../bench" in results["templated"]["msg"]


def test_check_and_the_preflight_flag_the_same_variables(run):
    """Every host's errors and warnings: kvprov check (from the inventory file) and the
    preflight (from what Ansible resolved) name the same variables."""
    _, results, inv = run
    problems = check.run(str(inv))[1]
    for host in ["good", *BAD]:
        for severity in ("error", "warning"):
            by_check = {p.variable for p in problems if p.host == host and p.severity == severity}
            assert by_check == flagged(results[host], severity), (host, severity)
