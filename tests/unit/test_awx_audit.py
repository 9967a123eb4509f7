"""The AWX audit job template (awx/audit.yml) as AWX runs it, with ansible-playbook here: also as a
"Check" job (--check), where it used to fail in its own tasks (`object of type 'dict' has no
attribute 'path'`: check mode skipped the temporary directory and the audit). The audit is
read-only, so a Check job runs it as well; its outcome is the job's status either way. The GPU
node is a closed port on this machine: the audit cannot reach it, so the outcome is
`not_audited` (exit 3), and the job fails saying so."""

import json
import os
import subprocess
import sys

import pytest
import yaml

from tests.conftest import ROOT


@pytest.mark.parametrize("check", [False, True], ids=["run", "check"])
def test_the_audit_job_runs_the_audit_and_fails_on_a_host_not_audited(tmp_path, check):
    inv = tmp_path / "inventory.yml"
    inv.write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_python_interpreter": sys.executable},
        "children": {"gpu_nodes": {
            "vars": {"kvprov_storage_profile": "local", "kvprov_storage_pnfs_layout": "none"},
            "hosts": {"gpu1": {"ansible_host": "127.0.0.1", "ansible_port": 9, "ansible_user": "root"}}}}}}))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")},
           "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_STDOUT_CALLBACK": "default", "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
           "KVPROV_RUNS_DIR": str(tmp_path / "runs"), "XDG_STATE_HOME": str(tmp_path / "state")}
    r = subprocess.run(["ansible-playbook", "-i", str(inv), str(ROOT / "awx/audit.yml"), "-v",
                        *(["--check"] if check else [])],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 2, out[-4000:]  # the job fails...
    assert "a host could not be audited" in out, out[-4000:]  # ...saying why, not in its own tasks
    assert "has no attribute" not in out and "undefined" not in out.lower(), out[-4000:]
    stats = [json.loads(line.split("=> ", 1)[1]) for line in r.stdout.splitlines()
             if "kvprov_audit_outcome" in line and "=> {" in line]
    assert stats and stats[-1]["ansible_stats"]["data"]["kvprov_audit_outcome"] == "not_audited", out[-4000:]
    assert not list(tmp_path.glob("kvprov-audit-*"))  # the private directory removed
