"""The collection kvprov.kvprov as a user installs it, against a deployed lab container: built
with ansible-galaxy, installed into a clean directory, and `ansible-playbook
kvprov.kvprov.site --check --diff` run from there (outside the repository, with only that
directory on the collections path) on kvlab-c1, which test_2_deploy deployed and the later
tests restored. It must finish with no failure and report what kvprov's own check mode from
this checkout reports for the host: on the converged host, nothing to change."""

import json
import os
import re
import subprocess

import pytest

from kvprov import __version__ as kvprov_version
from kvprov import lock
from tests.conftest import ROOT, kvprov

pytestmark = pytest.mark.lab

HOST = "kvlab-c1"


def recap(stdout: str) -> dict[str, dict[str, int]]:
    return {m[1]: {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m[2])}
            for m in re.finditer(r"^(\S+)\s+: (ok=.*)$", stdout, re.M)}


def test_site_check_mode_from_the_installed_collection(lab, tmp_path):
    ours = tmp_path / "ours.json"
    r = kvprov("deploy", lab["inventory"], "--check", "--full", "--limit", HOST, "--json", str(ours), timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    reference = json.loads(ours.read_text())["hosts"][HOST]

    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_COLLECTIONS_PATH=str(tmp_path / "collections"), ANSIBLE_NOCOLOR="1")
    tarball = tmp_path / f"kvprov-kvprov-{kvprov_version}.tar.gz"
    for args in (["build", "--output-path", str(tmp_path), str(ROOT)],
                 ["install", "-p", str(tmp_path / "collections"), str(tarball)]):
        g = subprocess.run(["ansible-galaxy", "collection", *args], capture_output=True, text=True, timeout=120,
                           cwd=tmp_path, env=env)
        assert g.returncode == 0, g.stdout + g.stderr
    extra = json.dumps(lock.host_lock_vars(lab["inventory"], "deploy --check"))  # as kvprov deploy passes
    run = subprocess.run(["ansible-playbook", "-i", lab["inventory"], "kvprov.kvprov.site", "--check", "--diff",
                          "--limit", HOST, "-e", extra], capture_output=True, text=True, timeout=600,
                         cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "kvprov.kvprov.preflight : Check this host's kvprov variables" in run.stdout
    stats = recap(run.stdout)[HOST]
    assert stats["failed"] == stats["unreachable"] == 0
    # the same tasks ok, changed and skipped as kvprov's own check mode: on the converged host
    # (kvprov's check mode changes nothing there) the collection's changes nothing either
    assert {k: stats[k] for k in ("ok", "changed", "skipped")} == {k: reference[k] for k in ("ok", "changed", "skipped")}
