"""audit's capacity gauges (the figures of storage_dirs.json's usage) and the files
`audit --junit/--prom` writes."""

import argparse
import os
import re
import stat

from kvprov import audit
from kvprov.audit import Gauge
from kvprov.validate.result import FAIL, PASS, Result
from tests.unit.test_checks_capacity import DIR, GIB, VOL, bundle

VOLUME = (("host", "kvlab-c1"), ("mount_point", "/srv/kvcache"))
INSTANCE = (("host", "kvlab-c1"), ("instance", "main"), ("path", "/srv/kvcache/kvlab-c1/main"))


def test_audit_exports_only_the_measured_figures_as_gauges():
    b, d = bundle(VOL, {**DIR, "complete": False})
    assert audit.capacity_gauges(b, d) == [
        Gauge("kvprov_storage_volume_size_bytes", VOLUME, 1000 * GIB),
        Gauge("kvprov_storage_volume_used_bytes", VOLUME, 960 * GIB),
        Gauge("kvprov_storage_volume_inodes", VOLUME, 1000), Gauge("kvprov_storage_volume_inodes_used", VOLUME, 10),
        Gauge("kvprov_engine_storage_dir_bytes", INSTANCE, 5 * 2 ** 20),
        Gauge("kvprov_engine_storage_dir_files", INSTANCE, 3),
        Gauge("kvprov_engine_storage_dir_complete", INSTANCE, 0)]
    b, d = bundle({"size_bytes": -1, "used_bytes": True, "inodes": 5}, {"bytes": 1, "complete": "yes"})
    assert audit.capacity_gauges(b, d) == [Gauge("kvprov_storage_volume_inodes", VOLUME, 5),
                                           Gauge("kvprov_engine_storage_dir_bytes", INSTANCE, 1)]
    b, d = bundle("garbage", None)
    assert audit.capacity_gauges(b, d) == []
    assert audit.capacity_gauges(*bundle()) == []


def test_a_zero_figure_is_a_measurement_too():
    """An empty directory, a filesystem that counts no inodes: 0 is exported, not left out."""
    b, d = bundle({**VOL, "inodes": 0, "inodes_used": 0}, {"bytes": 0, "files": 0, "complete": True})
    assert [(g.name, g.value) for g in audit.capacity_gauges(b, d)] == [
        ("kvprov_storage_volume_size_bytes", 1000 * GIB), ("kvprov_storage_volume_used_bytes", 960 * GIB),
        ("kvprov_storage_volume_inodes", 0), ("kvprov_storage_volume_inodes_used", 0),
        ("kvprov_engine_storage_dir_bytes", 0), ("kvprov_engine_storage_dir_files", 0),
        ("kvprov_engine_storage_dir_complete", 1)]


def test_the_report_files_and_the_table_of_drift(tmp_path, capsys):
    results = [Result("mount.options", "mount", FAIL, "vers=4.2", "vers=4.1", host="gpu1"),
               Result("unit:x.service", "unit", PASS, "enabled", "enabled", host="gpu1")]
    gauges = [Gauge("kvprov_storage_volume_used_bytes", (("host", "gpu1"), ("mount_point", "/mnt/kv")), 42)]
    args = argparse.Namespace(json=None, junit=str(tmp_path / "audit.xml"), prom=str(tmp_path / "audit.prom"),
                              verbose=False)
    audit._outputs(args, results, gauges)
    prom = tmp_path / "audit.prom"
    assert re.sub(r"_seconds [\d.e+]+\n", "_seconds 0.0\n", prom.read_text()) == audit.to_prom(results, 0, gauges)
    assert stat.S_IMODE(os.stat(prom).st_mode) == 0o644  # node_exporter reads it
    assert '<testsuites name="kvprov audit" tests="2" failures="1"' in (tmp_path / "audit.xml").read_text()
    table = capsys.readouterr().out
    assert "mount.options" in table and "unit:x.service" not in table  # drift only, without --verbose
    args.prom = None
    audit._outputs(args, results, gauges)
    assert sorted(os.listdir(tmp_path)) == ["audit.prom", "audit.xml"]
