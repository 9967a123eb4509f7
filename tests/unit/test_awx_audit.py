"""The AWX audit job template (awx/audit.yml) as AWX runs it, with ansible-playbook here: the
job's status and host summary tell drift from failure (#39, item 6). A host in sync is ok, a
drifted host "changed" (the job successful; failed with the survey's
kvprov_audit_fail_on_drift), a host not audited failed with the reason, and an audit that
could not run fails the job on the "Run kvprov audit" task, before any host gets a status.

Real runs of `kvprov audit`, no lab: a GPU node on a closed port of this machine (not audited,
exit 3); this machine itself as a GPU node over Ansible's local connection (nothing of kvprov
deployed here: real drift, exit 1); an inventory with an error (exit 2). Also as a "Check" job
(--check), where the template used to fail in its own tasks (`object of type 'dict' has no
attribute 'path'`: check mode skipped the temporary directory and the audit). A clean audit
needs a deployed host (the lab: tests/lab/test_4_audit.py); here the per-host tasks
(awx/tasks/audit-report.yml) get it from reports kvprov's own code writes of captured bundles
(test_each_host_gets_the_status_of_its_audit_in_the_report)."""

import json
import os
import pwd
import re
import subprocess
import sys

import pytest
import yaml

from kvprov import audit
from kvprov.validate import bundle as bf
from kvprov.validate import report
from kvprov.validate.bundle import Bundle
from tests.conftest import FIXTURES, ROOT

CLOSED = {"ansible_host": "127.0.0.1", "ansible_port": 9, "ansible_user": "root"}  # nothing listens: unreachable
THIS_MACHINE = {"ansible_connection": "local", "ansible_become": False}  # read as it is, no sudo
RUN_TASK = "TASK [Run kvprov audit]"
HOST_TASK = "TASK [The audit of this host"


def env_for(tmp_path) -> dict:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")},
            "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_STDOUT_CALLBACK": "default", "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
            "KVPROV_RUNS_DIR": str(tmp_path / "runs"), "XDG_STATE_HOME": str(tmp_path / "state")}


def job(tmp_path, hosts: dict, *args: str, **group_vars) -> subprocess.CompletedProcess:
    inv = tmp_path / "inventory.yml"
    inv.write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_python_interpreter": sys.executable},
        "children": {"gpu_nodes": {
            "vars": {"kvprov_storage_profile": "local", "kvprov_storage_pnfs_layout": "none", **group_vars},
            "hosts": hosts}}}}))
    return subprocess.run(["ansible-playbook", "-i", str(inv), str(ROOT / "awx/audit.yml"), "-v", *args],
                          capture_output=True, text=True, env=env_for(tmp_path), cwd=tmp_path, timeout=600)


def recap(stdout: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP: host -> {"ok": n, "changed": n, "failed": n, ...}."""
    tail = stdout.split("PLAY RECAP", 1)[1]
    return {m[1]: {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m[2])}
            for m in re.finditer(r"^(\S+)\s+: (.*)$", tail, re.M)}


def outcome(stdout: str) -> str:
    stats = [json.loads(line.split("=> ", 1)[1]) for line in stdout.splitlines()
             if "kvprov_audit_outcome" in line and "=> {" in line]
    assert stats, stdout[-4000:]
    return stats[-1]["ansible_stats"]["data"]["kvprov_audit_outcome"]


def task_output(stdout: str, name: str) -> str:
    """What the task of that name printed (up to the next task or the recap)."""
    return re.split(r"^(?:TASK|PLAY RECAP) ", stdout.split(name, 1)[1], flags=re.M)[0]


def no_drift_here():
    try:
        pwd.getpwnam("kvprov-engine")
    except KeyError:
        return
    pytest.skip("this machine has kvprov's engine user: it may be a deployed node, not a sure drift")


@pytest.mark.parametrize("check", [False, True], ids=["run", "check"])
def test_a_host_not_audited_fails_with_the_reason(tmp_path, check):
    r = job(tmp_path, {"gpu1": CLOSED}, *(["--check"] if check else []))
    out = r.stdout + r.stderr
    assert r.returncode == 2, out[-4000:]  # the job fails...
    assert "fatal:" not in task_output(r.stdout, RUN_TASK), out[-4000:]  # ...not on the audit, which ran
    host = task_output(r.stdout, HOST_TASK)  # ...but on the host, saying why
    assert "fatal: [gpu1]: FAILED!" in host and "not audited: unreachable" in host and "port 9" in host, host
    assert recap(r.stdout)["gpu1"]["failed"] == 1 and recap(r.stdout)["gpu1"]["changed"] == 0
    assert "has no attribute" not in out and "undefined" not in out.lower(), out[-4000:]
    assert outcome(r.stdout) == "not_audited"
    assert not list(tmp_path.glob("kvprov-audit-*"))  # the private directory removed


@pytest.mark.parametrize("args", [[], ["--check"], ["-e", "kvprov_audit_fail_on_drift=yes"]],
                         ids=["run", "check", "fail_on_drift"])
def test_a_drifted_host_is_changed_and_the_job_successful_unless_drift_should_fail_it(tmp_path, args):
    """Real drift: this machine, audited as a GPU node, has none of what deploy writes."""
    no_drift_here()
    r = job(tmp_path, {"gpu1": THIS_MACHINE}, *args)
    out = r.stdout + r.stderr
    assert outcome(r.stdout) == "drift", out[-4000:]
    assert "fatal:" not in task_output(r.stdout, RUN_TASK), out[-4000:]
    host = task_output(r.stdout, HOST_TASK)
    assert "drift: " in host and "user:kvprov-engine: no such user" in host, host  # the drifted checks listed
    if "kvprov_audit_fail_on_drift=yes" in args:
        assert r.returncode == 2, out[-4000:]
        assert "fatal: [gpu1]: FAILED!" in host and "(kvprov_audit_fail_on_drift: the host fails)" in host, host
        assert recap(r.stdout)["gpu1"]["failed"] == 1
    else:
        assert r.returncode == 0, out[-4000:]  # the job successful
        assert "changed: [gpu1]" in host, host
        assert recap(r.stdout)["gpu1"]["changed"] == 1 and recap(r.stdout)["gpu1"]["failed"] == 0
    assert not list(tmp_path.glob("kvprov-audit-*"))


def test_drift_and_a_host_not_audited_each_on_its_own_host(tmp_path):
    no_drift_here()
    r = job(tmp_path, {"gpu1": THIS_MACHINE, "gpu2": CLOSED})
    assert r.returncode == 2 and outcome(r.stdout) == "not_audited", r.stdout[-4000:]
    assert recap(r.stdout)["gpu1"]["changed"] == 1 and recap(r.stdout)["gpu1"]["failed"] == 0
    assert recap(r.stdout)["gpu2"]["failed"] == 1


@pytest.mark.parametrize("check", [False, True], ids=["run", "check"])
def test_an_audit_that_cannot_run_fails_the_job_on_the_run_task(tmp_path, check):
    """An inventory error: kvprov audit exits 2 before contacting any host."""
    r = job(tmp_path, {"gpu1": CLOSED}, *(["--check"] if check else []), kvprov_storage_profile="bogus")
    out = r.stdout + r.stderr
    assert r.returncode == 2, out[-4000:]
    run = task_output(r.stdout, RUN_TASK)
    assert "fatal: [gpu1 -> localhost]: FAILED!" in run and '"rc": 2' in run, run
    assert "kvprov_storage_profile: must be one of" in run, run  # kvprov's own message
    assert HOST_TASK not in r.stdout  # no host got a status
    assert outcome(r.stdout) == "error"
    assert not list(tmp_path.glob("kvprov-audit-*"))


def bundle_results(host: str, fixture: str, edit=None) -> list:
    root = FIXTURES / "bundles" / fixture
    files = {str(p.relative_to(root)): p.read_text() for p in root.rglob("*") if p.is_file()}
    if edit:
        edit(files)
    b = Bundle(files=files)
    results = audit.audit(b, bf.load_desired(b))
    for r in results:
        r.host = host
    return results


def hand_edit(files):
    key = "files/etc/kvprov/nixl_backend_config.toml"
    files[key] = files[key].replace("use_aio = false", "use_aio = true")


def unmanaged_file(files):
    dirs = json.loads(files[audit.MANAGED_DIRS])
    dirs["/etc/kvprov"] += ["nixl_backend_config.toml.bak"]
    files[audit.MANAGED_DIRS] = json.dumps(dirs)


@pytest.mark.parametrize("fail_on_drift", ["no", "yes"])
def test_each_host_gets_the_status_of_its_audit_in_the_report(tmp_path, fail_on_drift):
    """The per-host tasks alone (awx/tasks/audit-report.yml, imported by a playbook of this test),
    fed one report that kvprov's own code writes (kvprov.audit.audit and report.format_json, as
    `kvprov audit --json` does) from bundles captured on lab hosts: one in sync, one in sync with
    an unmanaged file (a warning), one hand-edited (drift), one unreachable, and a host of the play
    that the report does not name."""
    results = (bundle_results("clean", "lab_gpu1") + bundle_results("warned", "lab_gpu1", unmanaged_file)
               + bundle_results("drifted", "lab_gpu1", hand_edit)
               + [audit.unreachable_result("down", "unreachable: ssh: connect to host 10.0.0.9 port 22: "
                                                   "Connection timed out")])
    (tmp_path / "vars.json").write_text(json.dumps({"_kvprov_audit_report": json.loads(report.format_json(results)),
                                                    "kvprov_audit_fail_on_drift": fail_on_drift}))
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{
        "name": "Per-host status", "hosts": "all", "gather_facts": False,
        "tasks": [{"ansible.builtin.import_tasks": str(ROOT / "awx/tasks/audit-report.yml")}]}]))
    hosts = ("clean", "warned", "drifted", "down", "missing")
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {
        h: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable} for h in hosts}}}))
    r = subprocess.run(["ansible-playbook", "-i", "hosts.yml", "play.yml", "-e", "@vars.json"],
                       capture_output=True, text=True, env=env_for(tmp_path), cwd=tmp_path, timeout=300)
    out, summary = r.stdout + r.stderr, recap(r.stdout)
    assert r.returncode == 2, out[-4000:]  # a host failed
    for host in ("clean", "warned"):
        assert (summary[host]["ok"], summary[host]["changed"], summary[host]["failed"]) == (1, 0, 0), out[-4000:]
    assert "ok: [clean]" in out and "in sync: " in out
    assert "warning: extra:/etc/kvprov: unmanaged: /etc/kvprov/nixl_backend_config.toml.bak" in out
    assert "file:/etc/kvprov/nixl_backend_config.toml: 2 line(s) differ" in out
    if fail_on_drift == "yes":
        assert summary["drifted"]["failed"] == 1 and "fatal: [drifted]: FAILED!" in out
    else:
        assert summary["drifted"]["changed"] == 1 and summary["drifted"]["failed"] == 0 and "changed: [drifted]" in out
    assert summary["down"]["failed"] == 1 and "not audited: unreachable: ssh: connect to host 10.0.0.9" in out
    assert summary["missing"]["failed"] == 1 and "not audited: no entry for this host in the report" in out


VAULT_PASSWORD = "kvprov-awx-vault-pw"


def vaulted_job(tmp_path, playbook: str, *args: str) -> subprocess.CompletedProcess:
    """A job template on an inventory whose group variables are vault-encrypted, the outer
    ansible-playbook given the password as AWX gives it the job's Vault credential."""
    from ansible.parsing.vault import VaultLib, VaultSecret

    lock = VaultLib([("default", VaultSecret(VAULT_PASSWORD.encode()))])
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars/gpu_nodes.yml").write_text(lock.encrypt(
        "kvprov_storage_profile: local\nkvprov_storage_pnfs_layout: none\nkvprov_storage_server: 10.0.0.5\n").decode())
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_python_interpreter": sys.executable},
        "children": {"gpu_nodes": {"hosts": {"gpu1": CLOSED}}}}}))
    (tmp_path / "outer-pw").write_text(VAULT_PASSWORD + "\n")
    return subprocess.run(["ansible-playbook", "-i", str(tmp_path / "inventory.yml"), str(ROOT / playbook), "-v",
                           "--vault-password-file", str(tmp_path / "outer-pw"), *args],
                          capture_output=True, text=True, env=env_for(tmp_path), cwd=tmp_path, timeout=600)


def test_the_inner_audit_reads_a_vaulted_inventory_with_the_credentials_password(tmp_path):
    """#39: AWX's Vault credential reaches only the outer ansible-playbook; the inner kvprov audit
    gets the password from kvprov_vault_password, the extra variable of awx/credential-type-vault.yml."""
    assert yaml.safe_load((ROOT / "awx/credential-type-vault.yml").read_text())["injectors"] == {
        "extra_vars": {"kvprov_vault_password": "{{ vault_password }}"}}
    (tmp_path / "without").mkdir()
    without = vaulted_job(tmp_path / "without", "awx/audit.yml")
    run = task_output(without.stdout, RUN_TASK)
    assert without.returncode == 2 and "cannot decrypt a vault-encrypted value" in run, without.stdout[-4000:]
    assert outcome(without.stdout) == "error"
    (tmp_path / "with").mkdir()
    r = vaulted_job(tmp_path / "with", "awx/audit.yml", "-e", f"kvprov_vault_password={VAULT_PASSWORD}")
    assert outcome(r.stdout) == "not_audited", r.stdout[-4000:]  # the inventory read; the host on a closed port
    assert "not audited: unreachable" in task_output(r.stdout, HOST_TASK)
    assert VAULT_PASSWORD not in task_output(r.stdout, "TASK [The Vault password") + task_output(r.stdout, RUN_TASK)
    assert not list((tmp_path / "with").glob("kvprov-audit-*"))
