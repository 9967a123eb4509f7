"""The AWX deploy job template (awx/deploy.yml) as AWX runs it, with ansible-playbook here: kvprov
check's rules over the whole inventory first, then the site playbook. An inventory with an error
only the fleet rules see (one storage directory given to instances of two hosts on one NFS
volume: the per-host preflight cannot see it) fails the job with kvprov's message before any
host is contacted; a clean one goes on to the site playbook, which then meets the GPU nodes
(closed ports on this machine: unreachable)."""

import os
import subprocess
import sys

import pytest
import yaml

from tests.conftest import ROOT


def job(tmp_path, instances: list[dict], *args: str) -> subprocess.CompletedProcess:
    inv = tmp_path / "inventory.yml"
    inv.write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_python_interpreter": sys.executable},
        "children": {"gpu_nodes": {
            "vars": {"kvprov_storage_server": "10.0.0.5", "kvprov_engine_instances": instances},
            "hosts": {h: {"ansible_host": "127.0.0.1", "ansible_port": 9, "ansible_user": "root"}
                      for h in ("gpu1", "gpu2")}}}}}))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")},
           "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "KVPROV_RUNS_DIR": str(tmp_path / "runs"), "XDG_STATE_HOME": str(tmp_path / "state")}
    return subprocess.run(["ansible-playbook", "-i", str(inv), str(ROOT / "awx/deploy.yml"), *args],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)


@pytest.mark.parametrize("args", [[], ["--check", "--limit", "gpu2"]], ids=["run", "check of one host"])
def test_a_fleet_error_stops_the_deploy_job_before_any_host_is_contacted(tmp_path, args):
    """Also as a Check job limited to one host: the fleet rules still compare it with every other."""
    r = job(tmp_path, [{"name": "main", "port": 8000, "storage_dir": "/mnt/kvcache/same"}], *args)
    out = r.stdout + r.stderr
    assert r.returncode == 2, out[-4000:]
    assert "kvprov check found errors in the inventory; nothing was deployed" in out, out[-4000:]
    assert "host gpu2: kvprov_engine_instances: instance main: storage dir /mnt/kvcache/same is also host gpu1" in out
    assert "UNREACHABLE" not in out and "Take the host's deploy lock" not in out, out[-4000:]


def test_a_clean_inventory_goes_on_to_the_site_playbook(tmp_path):
    r = job(tmp_path, [{"name": "main", "port": 8000}], "--limit", "gpu1")
    out = r.stdout + r.stderr
    assert "1 host(s) checked, 0 error(s)" in out, out[-4000:]
    assert "UNREACHABLE" in out and "gpu2" not in r.stdout.split("PLAY [Deploy")[-1], out[-4000:]  # the limit holds
    assert r.returncode == 4, out[-4000:]


def test_the_inner_check_reads_a_vaulted_inventory_with_the_credentials_password(tmp_path):
    """#39: the site playbook gets the job's Vault credential; the inner kvprov check gets the
    password from kvprov_vault_password (awx/credential-type-vault.yml), as a root-only file."""
    from tests.unit.test_awx_audit import VAULT_PASSWORD, vaulted_job

    (tmp_path / "without").mkdir()
    r = vaulted_job(tmp_path / "without", "awx/deploy.yml")
    out = r.stdout + r.stderr
    assert r.returncode == 2 and "nothing was deployed" in out and "cannot decrypt a vault-encrypted value" in out, out[-4000:]
    (tmp_path / "with").mkdir()
    r = vaulted_job(tmp_path / "with", "awx/deploy.yml", "-e", f"kvprov_vault_password={VAULT_PASSWORD}")
    out = r.stdout + r.stderr
    assert "1 host(s) checked, 0 error(s)" in out and "UNREACHABLE" in out, out[-4000:]  # on to the site playbook
    assert VAULT_PASSWORD not in r.stdout.split("PLAY [Deploy")[0]
    assert not list((tmp_path / "with").glob("kvprov-deploy-*"))
