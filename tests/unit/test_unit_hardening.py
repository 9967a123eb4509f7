"""Every service unit kvprov renders (all four engines, their servers, soft-RoCE, /dev/shm) is hardened:
`systemd-analyze security --offline=true` rates its exposure at most 2.0 (#38; 1.8 at most today), and
`systemd-analyze verify` accepts it. The lab proves the hardened unit really serves
(tests/lab/test_5_engine.py: vLLM CPU + LMCache MP run under these units)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests import systemd_verify
from tests.conftest import ROOT, kvprov

MAX_EXPOSURE = 2.0
NOT_INSTALLED_HERE = [
    *(yaml.safe_load((ROOT / f"roles/{role}/defaults/main.yml").read_text())[f"kvprov_{var}_venv"] + f"/bin/{exe}"
      for role, var in (("sglang_hicache", "sglang"), ("vllm", "vllm")) for exe in ("python3", var)),
    *(yaml.safe_load((ROOT / "roles/engine/vars/main.yml").read_text())[f"_kvprov_engine_{script}_script"]
      for script in ("evict", "key"))]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("render")
    for inv in ("inventory/example.yml", "inventory/lab-engine.yml", "inventory/lab.yml"):
        kvprov("render", str(ROOT / inv), "--out", str(out), check=True)
    return out


@pytest.fixture(scope="module")
def units(rendered) -> list[Path]:
    found = sorted(rendered.glob("*/etc/systemd/system/*.service"))
    assert {p.stem.split("-")[1] for p in found} == {"sglang", "vllm", "lmcache", "soft", "shm", "evict"}
    return found


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze on this machine")
def test_every_service_unit_is_rated_at_most_2_0(units):
    scores = {}
    for unit in units:
        r = subprocess.run(["systemd-analyze", "security", "--offline=true", unit.name], cwd=unit.parent,
                           capture_output=True, text=True, timeout=60)
        m = re.search(r"Overall exposure level for \S+: (\d+\.\d)", r.stdout)
        assert m, r.stdout[-2000:] + r.stderr[-2000:]
        scores[f"{unit.parent.parent.parent.parent.name}/{unit.name}"] = float(m.group(1))
    assert max(scores.values()) <= MAX_EXPOSURE, scores


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze on this machine")
def test_every_unit_verifies(rendered, units):
    mounts = sorted(rendered.glob("*/etc/systemd/system/*.mount"))
    assert mounts, "the lab and example inventories mount the KV tier"
    for unit in units + mounts:
        r = subprocess.run(["systemd-analyze", "verify", unit.name], cwd=unit.parent, capture_output=True,
                           text=True, timeout=60)
        # rendered here, not deployed: what deploy installs (the engines' venvs, the evictor) is absent
        problems = systemd_verify.complaints(r.stdout + r.stderr, NOT_INSTALLED_HERE)
        assert not problems, f"{unit}: {problems}"


def test_the_api_key_reaches_no_rendered_file(tmp_path):
    """With kvprov_engine_api_key_file the units read a root-only EnvironmentFile; the key
    itself is in no rendered file (deploy writes it apart, with no_log)."""
    key = tmp_path / "key"
    key.write_text("sk-kvprov-secret-42\n")
    key.chmod(0o600)
    inv = tmp_path / "inv.yml"
    inv.write_text("all:\n  children:\n    gpu_nodes:\n      vars:\n        kvprov_storage_profile: local\n"
                   "        kvprov_storage_pnfs_layout: none\n        kvprov_engine_model_revision: 0123abc\n"
                   f"        kvprov_engine_api_key_file: {key}\n        kvprov_engine_host: 0.0.0.0\n        kvprov_engine_clients: [10.0.0.0/8]\n"
                   "      hosts:\n        s1:\n        m1:\n          kvprov_engine: lmcache_mp\n")
    r = kvprov("render", str(inv), "--out", str(tmp_path / "out"))
    assert r.returncode == 0, r.stdout + r.stderr
    files = [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert files and not any("sk-kvprov-secret-42" in p.read_text() for p in files)
    sglang = (tmp_path / "out/s1/etc/systemd/system/kvprov-sglang-main.service").read_text()
    # SGLang's key: a systemd credential read with --config (in no command line nor environment)
    assert "LoadCredential=sglang-api-key.yaml:/etc/kvprov/secrets/sglang-api-key.yaml" in sglang
    assert "--config %d/sglang-api-key.yaml" in sglang and "--api-key" not in sglang
    # its only environment file: kvprov-kv-key's keyed directory, no secret
    assert [l for l in sglang.splitlines() if l.startswith("EnvironmentFile=")] == [
        "EnvironmentFile=-/run/kvprov-kv/kvprov-sglang-main/kv.env"]
    vllm = (tmp_path / "out/m1/etc/systemd/system/kvprov-vllm-main.service").read_text()
    server = (tmp_path / "out/m1/etc/systemd/system/kvprov-lmcache-main.service").read_text()
    assert "EnvironmentFile=/etc/kvprov/secrets/engine.env" in vllm and "/etc/kvprov/secrets/engine.env" not in server
