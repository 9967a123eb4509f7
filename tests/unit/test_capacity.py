"""Capacity (docs/capacity.md) outside the evictor itself: the collector's usage probe on real
directories, validate's engine.<i>.storage_dir with the captured figures, the audit's gauges, and the
evictor's units as `kvprov render` writes them from the inventory."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kvprov import audit
from kvprov.validate import bundle as bf
from kvprov.validate import evaluate as ev
from kvprov.validate.result import PASS, WARN
from tests.conftest import FIXTURES, ROOT, kvprov

_spec = importlib.util.spec_from_file_location("kvprov_collect", ROOT / "plugins/modules/kvprov_collect.py")
col = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(col)

LAB = FIXTURES / "bundles" / "lab_gpu1"
DIR = "/mnt/kvcache/kvlab-gpu1/main"
GIB = 1 << 30


def probe(budget: float, *paths: str) -> dict:
    r = subprocess.run([sys.executable, "-c", col.USAGE_PROBE, str(budget), *paths], capture_output=True, text=True,
                       timeout=60, check=True)
    return json.loads(r.stdout)


# ---------------------------------------------------------------------------- the collector's probe

def test_the_usage_probe_measures_the_volume_and_the_directory_without_following_links(tmp_path):
    d, outside = tmp_path / "inst", tmp_path / "outside"
    (d / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "big").write_bytes(b"\1" * (1 << 20))
    (d / "a").write_bytes(b"\1" * 8192)
    (d / "sub" / "b").write_bytes(b"\1" * 8192)
    (d / "link").symlink_to(outside, target_is_directory=True)
    (d / "flink").symlink_to(outside / "big")
    out = probe(10, str(tmp_path), str(d))
    vol, got = out[str(tmp_path)], out[str(d)]
    st = os.statvfs(tmp_path)
    assert vol["size_bytes"] > vol["used_bytes"] > 0 and vol["inodes"] == st.f_files
    expected = sum(p.lstat().st_blocks * 512 for p in (d / "a", d / "sub" / "b", d / "link", d / "flink"))
    assert got == {"bytes": expected, "files": 4, "unreadable": 0, "complete": True}
    assert got["bytes"] < 1 << 20  # the linked 1 MiB file is not counted


def test_the_usage_probe_gives_partial_figures_when_its_time_is_up(tmp_path):
    d = tmp_path / "inst"
    d.mkdir()
    for i in range(3):
        (d / f"f{i}").write_bytes(b"x")
    assert probe(0, str(tmp_path), str(d))[str(d)]["complete"] is False


def test_the_usage_probe_refuses_a_directory_that_is_a_link(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "inst").symlink_to(tmp_path / "real", target_is_directory=True)
    assert "error" in probe(10, str(tmp_path), str(tmp_path / "inst"))[str(tmp_path / "inst")]


# ---------------------------------------------------------------------------- validate and audit

def bundle_with(tmp_path: Path, volume: dict | None, directory: dict | None) -> Path:
    root = tmp_path / "b"
    shutil.copytree(LAB, root)
    data = json.loads((root / bf.STORAGE_DIRS).read_text())
    if volume is not None:
        data["mount_point"]["usage"] = volume
    if directory is not None:
        data["instances"]["main"]["usage"] = directory
    (root / bf.STORAGE_DIRS).write_text(json.dumps(data))
    return root


def capacity(root: Path):
    return {r.id: r for r in ev.evaluate_bundle(root)}["engine.main.storage_dir"]


VOLUME = {"size_bytes": 100 * GIB, "used_bytes": 40 * GIB, "avail_bytes": 60 * GIB, "inodes": 1000,
          "inodes_used": 100}
DIRECTORY = {"bytes": 3 * GIB, "files": 1234, "unreadable": 0, "complete": True}


def test_capacity_reports_the_volume_and_the_directory(tmp_path):
    r = capacity(bundle_with(tmp_path, VOLUME, DIRECTORY))
    assert r.status == PASS
    assert r.found.endswith(f"; volume 40.0% of 100.0 GiB used, inodes 10.0% of 1000; directory 3.0 GiB in 1234 files")


@pytest.mark.parametrize("change, what", [({"used_bytes": 96 * GIB}, "space 96.0%"), ({"inodes_used": 990}, "inodes 99.0%")])
def test_a_nearly_full_volume_is_a_warning_naming_the_evictor(tmp_path, change, what):
    r = capacity(bundle_with(tmp_path, {**VOLUME, **change}, DIRECTORY))
    assert r.status == WARN and what in r.fix and "journalctl -u kvprov-evict-main.service" in r.fix


def test_a_walk_out_of_time_and_an_unmeasured_volume_are_said(tmp_path):
    r = capacity(bundle_with(tmp_path, {"error": "timed out after 30s (hung mount?)"}, {**DIRECTORY, "complete": False}))
    assert r.status == WARN
    assert "so far (the walk ran out of time)" in r.found and "could not measure the volume: timed out" in r.found


def test_an_older_bundle_without_figures_is_judged_as_before(tmp_path):
    r = capacity(bundle_with(tmp_path, None, None))
    assert r.status == PASS and "volume" not in r.found


def test_the_audit_exports_the_figures_as_gauges(tmp_path):
    b = bf.Bundle(bundle_with(tmp_path, VOLUME, {**DIRECTORY, "complete": False}))
    gauges = audit.capacity_gauges(b, bf.load_desired(b))
    text = audit.to_prom([], 1764460800, gauges)
    # as Prometheus reads it (large values come as Go floats: 4.294967296e+10)
    from prometheus_client.parser import text_string_to_metric_families
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    volume = (("host", "kvlab-gpu1"), ("mount_point", "/mnt/kvcache"))
    assert samples[("kvprov_storage_volume_used_bytes", volume)] == 40 * GIB
    assert samples[("kvprov_storage_volume_inodes_used", volume)] == 100
    labels = (("host", "kvlab-gpu1"), ("instance", "main"), ("path", DIR))
    assert samples[("kvprov_engine_storage_dir_bytes", labels)] == 3 * GIB
    assert samples[("kvprov_engine_storage_dir_files", labels)] == 1234
    assert samples[("kvprov_engine_storage_dir_complete", labels)] == 0
    assert "# TYPE kvprov_engine_storage_dir_bytes gauge" in text


# ---------------------------------------------------------------------------- the evictor's units, rendered

UNITS = "etc/systemd/system"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    """inventory/example.yml as it is, and the lab engine inventory with two instances and a limit."""
    out = tmp_path_factory.mktemp("render")
    kvprov("render", str(ROOT / "inventory/example.yml"), "--out", str(out), check=True)
    inv = yaml.safe_load((ROOT / "inventory/lab-engine.yml").read_text())
    group = inv["all"]["children"]["gpu_nodes"]["children"]["lab_engine"]["vars"]
    group.update(kvprov_engine_evict_max_bytes=GIB, kvprov_engine_evict_interval_s=60,
                 kvprov_engine_storage_sharing="instance",  # a directory per instance, an evictor each
                 kvprov_engine_instances=[{"name": "main", "port": 8000}, {"name": "b", "port": 8001}])
    path = tmp_path_factory.mktemp("inv") / "lab-engine.yml"
    path.write_text(yaml.safe_dump(inv))
    kvprov("render", str(path), "--out", str(out), check=True)
    return out


def evictor_files(host: Path) -> list[str]:
    return sorted(str(p.relative_to(host)) for p in host.rglob("*evict*"))


def test_the_evictor_goes_where_the_tier_never_deletes(rendered):
    # vllm_offload's fs tier, LMCache MP's fs_native L2, the in-process fs tier: one evictor per
    # namespace on each host (two instances of gpu-c01 share one; the lease lets one host at a time work)
    for host in ("gpu-c01", "gpu-c00", "gpu-c02", "gpu-c03"):
        assert evictor_files(rendered / f"{host}.corp.example.com") == [
            f"{UNITS}/kvprov-evict-gpu0-3.service", f"{UNITS}/kvprov-evict-gpu0-3.timer",
            "usr/local/sbin/kvprov-evict"], host
    assert evictor_files(rendered / "gpu-a01.corp.example.com") == []  # SGLang: its own L3 cleaner
    assert evictor_files(rendered / "gpu-c04.corp.example.com") == []  # no tier


def test_each_instance_gets_its_own_evictor_with_its_marks(rendered):
    host = rendered / "kvlab-c1"
    assert (host / "usr/local/sbin/kvprov-evict").read_bytes() == (ROOT / "roles/engine/files/kvprov-evict.py").read_bytes()
    for name in ("main", "b"):
        unit = (host / UNITS / f"kvprov-evict-{name}.service").read_text()
        assert (f"ExecStart=/usr/local/sbin/kvprov-evict --high-percent 85 --low-percent 70 --max-bytes {GIB} "
                f"--keep-minutes 60 /srv/kvcache/kvlab-c1/{name}\n") in unit
        assert "User=kvprov-engine\n" in unit and f"ReadWritePaths=/srv/kvcache/kvlab-c1/{name}\n" in unit
        timer = (host / UNITS / f"kvprov-evict-{name}.timer").read_text()
        assert f"Unit=kvprov-evict-{name}.service\n" in timer and "OnUnitInactiveSec=60s\n" in timer


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze on this machine")
def test_the_evictor_unit_is_hardened_and_verifies(rendered):
    units = rendered / "kvlab-c1" / UNITS
    r = subprocess.run(["systemd-analyze", "security", "--offline=true", "kvprov-evict-main.service"], cwd=units,
                       capture_output=True, text=True, timeout=60)
    level = float(r.stdout.rsplit("Overall exposure level for kvprov-evict-main.service: ", 1)[1].split()[0])
    assert level <= 1.0, r.stdout[-2000:]
    r = subprocess.run(["systemd-analyze", "verify", "kvprov-evict-main.service", "kvprov-evict-main.timer"],
                       cwd=units, capture_output=True, text=True, timeout=60)
    assert [line for line in r.stderr.splitlines() if "is not executable" not in line] == []
