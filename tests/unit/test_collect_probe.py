"""The collector's I/O probe runs as root on a shared volume: it writes only a randomly named
file of its own inside a root-owned 0700 directory of its host, never through a link."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("kvprov_collect", ROOT / "playbooks/library/kvprov_collect.py")
collector = importlib.util.module_from_spec(spec)
spec.loader.exec_module(collector)

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="the probe is root's: it checks its directory is root's")


def probe(mount, host="h1"):
    return subprocess.run([sys.executable, "-c", collector.IO_PROBE, str(mount), host, "65536"],
                          capture_output=True, text=True, timeout=60)


@ROOT_ONLY
def test_probe_writes_reads_and_removes_only_its_own_file(tmp_path):
    r = probe(tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["ok"] is True and out["path"].startswith(f"{tmp_path}/.kvprov-h1/probe-")
    d = tmp_path / ".kvprov-h1"
    assert list(d.iterdir()) == [] and d.stat().st_mode & 0o777 == 0o700
    assert json.loads(probe(tmp_path).stdout)["path"] != out["path"]  # a new random name every time


@ROOT_ONLY
def test_a_link_planted_where_the_probe_writes_is_refused(tmp_path):
    victim = tmp_path / "elsewhere"
    victim.mkdir()
    (victim / "precious").write_text("keep")
    mount = tmp_path / "mnt"
    mount.mkdir()
    (mount / ".kvprov-h1").symlink_to(victim)
    r = probe(mount)
    assert r.returncode != 0 and "is not a root-owned 0700 directory (a link or someone else's)" in r.stderr
    assert sorted(p.name for p in victim.iterdir()) == ["precious"] and (victim / "precious").read_text() == "keep"


@ROOT_ONLY
def test_someone_elses_directory_is_refused(tmp_path):
    d = tmp_path / ".kvprov-h1"
    d.mkdir(mode=0o700)
    os.chown(d, 65534, 65534)
    r = probe(tmp_path)
    assert r.returncode != 0 and "refusing to write there" in r.stderr
    assert list(d.iterdir()) == []


def test_captured_command_lines_carry_no_api_key():
    assert collector.redact(["python3", "-m", "sglang.launch_server", "--api-key", "sk-1", "--port", "8000"]) == [
        "python3", "-m", "sglang.launch_server", "--api-key", "<redacted>", "--port", "8000"]
    assert collector.redact(["x", "--api-key=sk-1"]) == ["x", "--api-key=<redacted>"]
