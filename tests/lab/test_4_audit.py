"""Day 2 on the deployed lab: `kvprov audit` and the testinfra checks (kvprov.checks).

A clean lab audits clean and passes the testinfra suite. Then the sabotages are made on
one host: the audit names exactly those drifts on exactly that host (the other host stays
clean), the testinfra suite fails with a readable message for each, and `audit --fix` brings
the host back to a clean audit. Runs after test_2_deploy (kvlab-gpu1 and kvlab-c1 deployed).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from kvprov import lock
from kvprov.lab import topology
from kvprov.lab.ssh import ssh_args
from tests.conftest import ROOT, kvprov
from tests.lab.test_3_validate import GPU1, TOML, UNIT, sh

pytestmark = pytest.mark.lab

C1 = ("10.98.1.2", 22)
HOSTS = "kvlab-gpu1,kvlab-c1"
OLD_NIXL = Path("/var/lib/kvprov/test-wheels/nixl-1.5.0-py3-none-any.whl")  # scripts/install-deps


def audit(lab, tmp_path, *args, limit=HOSTS):
    out = tmp_path / "audit.json"
    r = kvprov("audit", lab["inventory"], "--limit", limit, "--json", str(out), *args, timeout=1200)
    data = json.loads(out.read_text()) if out.exists() else {"hosts": {}}
    return r, {(h, x["id"]): x for h, v in data["hosts"].items() for x in v["results"]}


def drift(results):
    return {k for k, v in results.items() if v["status"] == "fail"}


def run_testinfra(lab, tmp_path, hosts):
    """The testinfra suite as a user runs it, from a directory of their own."""
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "2",
                           "--hosts=" + ",".join(f"ansible://{h}" for h in hosts.split(",")), f"--ansible-inventory={lab['inventory']}",
                           "--pyargs", "kvprov.checks"], capture_output=True, text=True, cwd=tmp_path, timeout=600)


def test_clean_lab_audits_clean_and_passes_testinfra(lab, tmp_path):
    prom = tmp_path / "kvprov.prom"
    r, results = audit(lab, tmp_path, "--prom", str(prom), "--junit", str(tmp_path / "audit.xml"))
    assert r.returncode == 0 and not drift(results), r.stdout[-4000:] + r.stderr[-2000:]
    assert results[("kvlab-gpu1", "mount.transport")]["status"] == "pass"
    assert results[("kvlab-gpu1", f"file:{TOML}")]["status"] == "pass"
    assert results[("kvlab-c1", "venv:/opt/kvprov/nixl:nixl")]["found"] == "nixl 1.5.1"
    assert not [k for k, v in results.items() if v["status"] == "warn"], "no unmanaged kvprov file on a clean lab"
    assert 'kvprov_audit_drift_count{host="kvlab-gpu1"} 0.0' in prom.read_text()
    t = run_testinfra(lab, tmp_path, HOSTS)
    assert t.returncode == 0, t.stdout[-4000:]
    assert "passed" in t.stdout and "failed" not in t.stdout


def awx_audit(lab, limit, *args):
    """awx/audit.yml as an AWX job runs it (the job's Limit as --limit), its custom stats shown:
    ansible-playbook's result, the outcome in the artifacts, and the PLAY RECAP (host -> counts)."""
    env = {**os.environ, "ANSIBLE_SHOW_CUSTOM_STATS": "1", "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_COLLECTIONS_PATH": str(ROOT / ".collections")}
    r = subprocess.run(["ansible-playbook", "-i", lab["inventory"], str(ROOT / "awx/audit.yml"), "--limit", limit,
                        *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    outcome = re.search(r'"kvprov_audit_outcome": "(\w+)"', r.stdout)
    recap = {m[1]: {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m[2])}
             for m in re.finditer(r"^(\S+)\s+: (ok=.*)$", r.stdout.split("PLAY RECAP")[-1], re.M)}
    return r, outcome and outcome[1], recap


def test_the_awx_audit_job_takes_the_limit_and_tells_drift_from_clean(lab):
    """#25, #39 item 6: the job's Limit reaches kvprov (only kvlab-c1 is audited). Clean: the job
    successful, the host ok. Drift: the job still successful (ansible-playbook's 0) with the host
    "changed" and its drifted check listed, the outcome in the artifacts; with the survey's
    kvprov_audit_fail_on_drift the host fails, and so the job."""
    r, outcome, recap = awx_audit(lab, "kvlab-c1")
    assert r.returncode == 0 and outcome == "clean", r.stdout[-3000:]
    assert recap["kvlab-c1"]["changed"] == 0 and recap["kvlab-c1"]["failed"] == 0, r.stdout[-3000:]
    assert '"kvlab-c1"' in r.stdout and '"kvlab-gpu1"' not in r.stdout.split("CUSTOM STATS")[-1]
    sh(C1, f"chmod 0600 {TOML}")
    try:
        r, outcome, recap = awx_audit(lab, "kvlab-c1")
        strict, strict_outcome, strict_recap = awx_audit(lab, "kvlab-c1", "-e", "kvprov_audit_fail_on_drift=yes")
    finally:
        sh(C1, f"chmod 0644 {TOML}")
    assert r.returncode == 0 and outcome == "drift", r.stdout[-3000:]
    assert recap["kvlab-c1"]["changed"] == 1 and recap["kvlab-c1"]["failed"] == 0, r.stdout[-3000:]
    assert "changed: [kvlab-c1]" in r.stdout, r.stdout[-3000:]
    assert f"file:{TOML}: identical content; mode 0600" in r.stdout, r.stdout[-3000:]  # the drifted check listed
    assert strict.returncode == 2 and strict_outcome == "drift", strict.stdout[-3000:]
    assert strict_recap["kvlab-c1"]["failed"] == 1, strict.stdout[-3000:]
    assert "fatal: [kvlab-c1]: FAILED!" in strict.stdout and f"file:{TOML}: identical content" in strict.stdout


def test_the_users_ansible_cfg_is_honoured_unknown_host_keys_refused_and_its_control_path_used(lab, tmp_path):
    """#25: run from a directory with the user's own ansible.cfg (host_key_checking = True, ssh
    args with their ControlPath and known_hosts), kvprov's runs use it: a host whose key is
    unknown is refused (unreachable, exit 3); once its key is known, the audit runs, over the
    user's ControlPath."""
    data = yaml.safe_load(Path(lab["inventory"]).read_text())
    del data["all"]["vars"]["ansible_ssh_common_args"]  # the lab's own "no host key checking"
    inv = tmp_path / "inv.yml"
    inv.write_text(yaml.safe_dump(data, sort_keys=False))
    known, sockets = tmp_path / "known_hosts", Path(tempfile.mkdtemp(prefix="cp", dir="/tmp"))  # a socket's path is short
    known.touch()
    (tmp_path / "ansible.cfg").write_text(
        "[defaults]\nhost_key_checking = True\n[ssh_connection]\n"
        f"ssh_args = -o ControlMaster=auto -o ControlPersist=30s -o ControlPath={sockets}/%C "
        f"-o UserKnownHostsFile={known}\n")

    def user_audit():
        return subprocess.run([sys.executable, "-m", "kvprov", "audit", str(inv), "--limit", "kvlab-c1"],
                              capture_output=True, text=True, cwd=tmp_path, timeout=600)

    try:
        r = user_audit()
        assert r.returncode == 3 and "Host key verification failed" in r.stdout + r.stderr, r.stdout + r.stderr
        assert not list(sockets.iterdir())
        keys = subprocess.run(["ssh-keyscan", "-T", "10", C1[0]], capture_output=True, text=True, timeout=60)
        known.write_text(keys.stdout)
        r = user_audit()
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
        assert list(sockets.iterdir()), "the user's ControlPath was not used"
    finally:
        shutil.rmtree(sockets, ignore_errors=True)


def test_testinfra_over_paramiko_maps_the_host_to_the_inventory(lab, tmp_path):
    """Any testinfra URL: paramiko to the VM's ssh port, matched to kvlab-gpu1 by ansible_host:port."""
    t = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                        f"--hosts=paramiko://root@{GPU1[0]}:{GPU1[1]}", f"--ssh-identity-file={topology.ssh_key_path()}",
                        f"--kvprov-inventory={lab['inventory']}", "--pyargs", "kvprov.checks"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert t.returncode == 0, t.stdout[-4000:]
    assert "9 passed" in t.stdout  # the VM has an NFS mount: no test skips


def _copy_old_nixl():
    if not OLD_NIXL.exists():
        pytest.skip(f"{OLD_NIXL} missing: run scripts/install-deps")
    with OLD_NIXL.open("rb") as fh:
        subprocess.run([*ssh_args(*C1), f"cat > /tmp/{OLD_NIXL.name}"], stdin=fh, check=True, timeout=60)
    return f"/opt/kvprov/nixl/bin/pip install -q --no-deps --no-index /tmp/{OLD_NIXL.name}"


SABOTAGES = {
    # name: (host, ssh address, command (a callable for a prepared one), expected drift ids, testinfra words)
    "toml_hand_edit": ("kvlab-c1", C1, f"sed -i 's/^use_aio = false/use_aio = true/' {TOML}",
                       {f"file:{TOML}"}, ["managed file(s) drifted", "+use_aio = true"]),
    "unit_hand_edit": ("kvlab-c1", C1, f"sed -i 's/^RestartSec=10/RestartSec=1/' {UNIT} && systemctl daemon-reload",
                       {f"file:{UNIT}"}, ["kvprov-sglang-main.service: content differs", "+RestartSec=1"]),
    "service_stopped_and_disabled": ("kvlab-c1", C1, "systemctl disable --now kvprov-sglang-main.service",
                                     {"unit:kvprov-sglang-main.service"},
                                     ["kvprov-sglang-main.service: disabled, want enabled"]),
    "pinned_package_changed": ("kvlab-c1", C1, _copy_old_nixl, {"venv:/opt/kvprov/nixl:nixl"},
                               ["/opt/kvprov/nixl: nixl 1.5.0, want 1.5.1"]),
}  # a mount remounted by hand: test_a_mount_remounted_by_hand_... below


def test_every_sabotage_is_named_exactly_then_fixed(lab, tmp_path):
    """All of SABOTAGES at once on one host (one audit, testinfra and fix for all: each is its own
    drift id and its own testinfra line, so none hides another)."""
    [host] = {h for h, *_ in SABOTAGES.values()}
    for _, address, command, _, _ in SABOTAGES.values():
        sh(address, command() if callable(command) else command)
    want = {(host, i) for _, _, _, ids, _ in SABOTAGES.values() for i in ids}

    r, results = audit(lab, tmp_path)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-2000:]
    assert drift(results) == want, r.stdout[-4000:]
    assert "+use_aio = true" in results[(host, f"file:{TOML}")]["detail"]
    assert "+use_aio = true" in r.stdout, "the table shows the unified diff"

    t = run_testinfra(lab, tmp_path, host)
    assert t.returncode == 1, t.stdout[-3000:]
    for name, (*_, words) in SABOTAGES.items():
        for w in words:
            assert w in t.stdout, f"{name}: {w!r} not in the testinfra output:\n{t.stdout[-4000:]}"

    fix = kvprov("audit", lab["inventory"], "--limit", HOSTS, "--fix", "--allow-remount", timeout=1200)
    assert fix.returncode == 0, fix.stdout[-4000:] + fix.stderr[-3000:]
    assert f"{host}: {len(want)} drifted -> 0 drifted" in fix.stdout
    r, results = audit(lab, tmp_path)
    assert r.returncode == 0 and not drift(results), r.stdout[-4000:]


def test_unreachable_host_is_reported_not_fatal(lab, tmp_path):
    inv = tmp_path / "inventory.yml"
    inv.write_text(Path(lab["inventory"]).read_text().replace("ansible_host: 10.98.2.2", "ansible_host: 10.98.77.2"))
    out = tmp_path / "audit.json"
    r = kvprov("audit", str(inv), "--limit", "kvlab-c1,kvlab-c2", "--json", str(out), "--timeout", "10")
    assert r.returncode == 3, r.stdout[-3000:] + r.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["hosts"]["kvlab-c2"]["results"][0]["id"] == "host.reachable"
    assert data["hosts"]["kvlab-c1"]["ok"] is True


def test_a_mount_remounted_by_hand_with_other_options_and_without_an_extra_one_is_named_and_fixed(lab, tmp_path):
    """A remount by hand with another rsize/wsize that also lost an option of
    kvprov_storage_extra_options the kernel shows (write=eager): audit and the testinfra checks
    name both, `audit --fix --allow-remount` remounts, the host audits clean."""
    from kvprov.lab.inventory import GPU_VM_VARS

    extra = [o for item in GPU_VM_VARS.get("kvprov_storage_extra_options", []) for o in item.split(",")]
    if "write=eager" not in extra:
        pytest.fail("the lab inventory asks for no write=eager: add kvprov_storage_extra_options: [write=eager] "
                    "to GPU_VM_VARS in kvprov/lab/inventory.py (and regenerate inventory/lab.yml)")
    sh(GPU1, "systemctl stop mnt-kvcache.mount && mount -t nfs4 -o "
             "vers=4.1,proto=rdma,port=20049,rsize=131072,wsize=131072,hard,max_connect=16 10.99.1.1:/kv /mnt/kvcache")
    try:
        r, results = audit(lab, tmp_path, limit="kvlab-gpu1")
        assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-2000:]
        assert drift(results) == {("kvlab-gpu1", "mount.options"), ("kvlab-gpu1", "mount.unit")}, r.stdout[-4000:]
        found = results[("kvlab-gpu1", "mount.options")]["found"]
        assert all(w in found for w in ("rsize: live 131072, want 262144", "write: live lazy, want eager")), found
        t = run_testinfra(lab, tmp_path, "kvlab-gpu1")
        assert t.returncode == 1 and "rsize: live 131072, want 262144" in t.stdout, t.stdout[-3000:]

        out = tmp_path / "fixed.json"
        fix = kvprov("audit", lab["inventory"], "--limit", "kvlab-gpu1", "--fix", "--allow-remount",
                     "--json", str(out), timeout=1200)
        assert fix.returncode == 0, fix.stdout[-4000:] + fix.stderr[-3000:]
        assert "kvlab-gpu1: 2 drifted -> 0 drifted" in fix.stdout
    except BaseException:
        sh(GPU1, "umount /mnt/kvcache; systemctl start mnt-kvcache.mount")  # leave the lab as deployed
        raise
    # the audit after the fix (what --json holds) is clean, and the live mount has the option again
    after = {x["id"]: x for x in json.loads(out.read_text())["hosts"]["kvlab-gpu1"]["results"]}
    assert not [i for i, x in after.items() if x["status"] != "pass" and x["status"] != "skip"], after
    assert ",write=eager" in sh(GPU1, "grep ' /mnt/kvcache ' /proc/self/mountinfo")


# Every kind of drift the audit knows that a container host can have (a GPU VM's mount kinds:
# the test above; a pinned version: SABOTAGES; a restart owed needs an installed engine: unit tests).
def every_kind(lab) -> dict:
    # the lock an interrupted deploy of this controller and inventory leaves (the next one takes it over)
    owner = lock.host_lock_vars(lab["inventory"], "deploy")["kvprov_lock_owner"]
    held = json.dumps({"owner": owner, "command": "kvprov deploy", "run_id": "interrupted", "since": "test"})
    return {
        f"file:{TOML}": f"sed -i 's/^use_aio = false/use_aio = true/' {TOML}",
        f"file:{UNIT}": f"chmod 0600 {UNIT}",
        "unit:kvprov-sglang-main.service": "systemctl disable kvprov-sglang-main.service",
        "dir:/var/lib/kvprov-engine/main": "chmod 0755 /var/lib/kvprov-engine/main",
        "user:kvprov-engine": "usermod -s /bin/sh kvprov-engine",
        "lock": f"mkdir -p -m 0700 /run/kvprov && printf '%s' '{held}' > /run/kvprov/deploy.lock",
    }


def test_deploy_converges_only_the_drifted_host_and_then_the_audit_is_clean_and_a_full_run_changes_nothing(
        lab, tmp_path):
    """deploy's audit-first path on every kind of drift at once: the host with drift is
    converged, the clean one is not run; then the audit is clean and `deploy --full` changes
    nothing (what the audit calls clean needs no change)."""
    kinds = every_kind(lab)
    sh(C1, " && ".join(kinds.values()))
    r, results = audit(lab, tmp_path)
    assert drift(results) == {("kvlab-c1", i) for i in kinds}, r.stdout[-4000:]

    out = tmp_path / "deploy.json"
    d = kvprov("deploy", lab["inventory"], "--limit", HOSTS, "--json", str(out), timeout=1200)
    assert d.returncode == 0, d.stdout[-4000:] + d.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["clean"] == ["kvlab-gpu1"] and result["hosts"]["kvlab-c1"]["changed"] > 0, result["hosts"]
    assert "1 clean, 1 to converge: kvlab-c1" in d.stderr and "took over the lock" in d.stderr

    r, results = audit(lab, tmp_path)
    assert r.returncode == 0 and not drift(results), r.stdout[-4000:]
    full = kvprov("deploy", lab["inventory"], "--limit", "kvlab-c1", "--full", "--json", str(out), timeout=1200)
    assert full.returncode == 0, full.stdout[-4000:] + full.stderr[-3000:]
    assert json.loads(out.read_text())["hosts"]["kvlab-c1"]["changed"] == 0
