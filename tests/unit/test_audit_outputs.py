"""audit's outputs, exactly: the Prometheus textfile, the drifted hosts, the before/after
summary of --fix (pure functions on hand-made results)."""

from kvprov import audit
from kvprov.audit import Gauge
from kvprov.validate.result import FAIL, PASS, SKIP, WARN, Result


def r(host: str, check: str, status: str) -> Result:
    return Result(check, check.split(".")[0], status, host=host)


RESULTS = [
    r("gpu1", "mount.options", FAIL), r("gpu1", "file:/etc/a", PASS), r("gpu1", "gds.gpu", SKIP),
    r("gpu1", "file:/etc/b", WARN), r("gpu1", "unit:x", FAIL),
    r('gp"u\\2', "mount.options", PASS),
    r("gpu3", "host.reachable", FAIL),
]


def test_prometheus_textfile_is_exact():
    gauges = [Gauge("kvprov_storage_volume_used_bytes", (("host", "gpu1"), ("mount_point", "/mnt/kv")), 42),
              Gauge("kvprov_engine_storage_dir_files", (("host", "gpu1"), ("instance", "main"),
                                                        ("path", "/mnt/kv/a\nb")), 7)]
    text = audit.to_prom(RESULTS, 1700000000.4, gauges)
    assert text == "\n".join([
        "# HELP kvprov_audit_drift 1 when kvprov audit found this check drifted on this host, else 0.",
        "# TYPE kvprov_audit_drift gauge",
        'kvprov_audit_drift{check="mount.options",host="gpu1"} 1.0',
        'kvprov_audit_drift{check="file:/etc/a",host="gpu1"} 0.0',
        'kvprov_audit_drift{check="file:/etc/b",host="gpu1"} 0.0',
        'kvprov_audit_drift{check="unit:x",host="gpu1"} 1.0',
        'kvprov_audit_drift{check="mount.options",host="gp\\"u\\\\2"} 0.0',
        "# HELP kvprov_audit_drift_count Number of drifted checks on this host.",
        "# TYPE kvprov_audit_drift_count gauge",
        'kvprov_audit_drift_count{host="gpu1"} 2.0',
        'kvprov_audit_drift_count{host="gp\\"u\\\\2"} 0.0',
        'kvprov_audit_drift_count{host="gpu3"} 1.0',
        "# HELP kvprov_audit_warnings Number of audit warnings on this host (e.g. unmanaged files).",
        "# TYPE kvprov_audit_warnings gauge",
        'kvprov_audit_warnings{host="gpu1"} 1.0',
        'kvprov_audit_warnings{host="gp\\"u\\\\2"} 0.0',
        'kvprov_audit_warnings{host="gpu3"} 0.0',
        "# HELP kvprov_audit_up 1 when the host could be audited, else 0.",
        "# TYPE kvprov_audit_up gauge",
        'kvprov_audit_up{host="gpu1"} 1.0',
        'kvprov_audit_up{host="gp\\"u\\\\2"} 1.0',
        'kvprov_audit_up{host="gpu3"} 0.0',
        "# HELP kvprov_audit_last_run_timestamp_seconds When kvprov audit ran.",
        "# TYPE kvprov_audit_last_run_timestamp_seconds gauge",
        "kvprov_audit_last_run_timestamp_seconds 1.7e+09",
        "# HELP kvprov_storage_volume_used_bytes The KV volume's space in use, bytes.",
        "# TYPE kvprov_storage_volume_used_bytes gauge",
        'kvprov_storage_volume_used_bytes{host="gpu1",mount_point="/mnt/kv"} 42.0',
        "# HELP kvprov_engine_storage_dir_files Files in an engine instance's KV directory.",
        "# TYPE kvprov_engine_storage_dir_files gauge",
        'kvprov_engine_storage_dir_files{host="gpu1",instance="main",path="/mnt/kv/a\\nb"} 7.0',
    ]) + "\n"


def test_every_gauge_name_has_its_help_line_and_no_family_is_empty():
    names = [f"kvprov_storage_volume_{k}" for k, _ in audit.VOLUME_GAUGES] + \
            [f"kvprov_engine_storage_dir_{k}" for k, _ in audit.DIR_GAUGES]
    assert names == ["kvprov_storage_volume_size_bytes", "kvprov_storage_volume_used_bytes",
                     "kvprov_storage_volume_inodes", "kvprov_storage_volume_inodes_used",
                     "kvprov_engine_storage_dir_bytes", "kvprov_engine_storage_dir_files",
                     "kvprov_engine_storage_dir_complete"]
    lines = audit.to_prom([], 0, [Gauge(n, (("host", "h"),), i) for i, n in enumerate(names)]).splitlines()
    assert [line for line in lines if line.startswith("kvprov_st") or line.startswith("kvprov_en")] == [
        f'{n}{{host="h"}} {i}.0' for i, n in enumerate(names)]
    assert sum(line.startswith("# TYPE kvprov_st") or line.startswith("# TYPE kvprov_en") for line in lines) == len(names)
    assert not any("kvprov_storage" in line or "kvprov_engine" in line for line in audit.to_prom([], 0).splitlines())


def test_drifted_hosts_are_the_reachable_ones_with_a_failure():
    assert audit.drifted(RESULTS) == ["gpu1"]
    assert audit.drifted([r("a", "x", WARN), r("b", "y", PASS)]) == []


def test_before_after_names_what_was_fixed_and_what_is_left():
    before = [r("gpu1", "a", FAIL), r("gpu1", "b", FAIL), r("gpu2", "a", FAIL), r("gpu2", "c", PASS)]
    after = [r("gpu1", "a", PASS), r("gpu1", "b", FAIL), r("gpu2", "a", PASS), r("gpu3", "z", WARN)]
    assert audit.format_before_after(before, after, ["gpu1", "gpu2", "gpu3"]).split("\n") == [
        "",
        "audit --fix: before -> after",
        "gpu1: 2 drifted -> 1 drifted; fixed: a; still drifted: b",
        "gpu2: 1 drifted -> 0 drifted; fixed: a",
        "gpu3: 0 drifted -> 0 drifted",
    ]


def test_unreachable_result_names_the_host_and_the_fix():
    res = audit.unreachable_result("gpu9", "ssh: connect refused")
    assert (res.id, res.category, res.status, res.host, res.found) == (
        "host.reachable", "host", FAIL, "gpu9", "ssh: connect refused")
    assert res.fix.startswith("check ssh to the host")


def toml_drift(live: str):
    from kvprov.validate import bundle as bf
    from kvprov.validate.bundle import Bundle
    from tests.conftest import FIXTURES

    root = FIXTURES / "bundles/local_c1"
    files = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    files["files/etc/kvprov/nixl_backend_config.toml"] = live.encode()
    b = Bundle(files=files)
    [r] = [r for r in audit.audit(b, bf.load_desired(b)) if r.id == "file:/etc/kvprov/nixl_backend_config.toml"]
    return r


HEADER = ["--- /etc/kvprov/nixl_backend_config.toml (desired)", "+++ /etc/kvprov/nixl_backend_config.toml (live)"]


def test_a_long_diff_shows_its_first_60_lines_and_counts_the_rest():
    r = toml_drift("".join(f"x{i} = 1\n" for i in range(70)))  # the 9 desired lines replaced by 70
    assert (r.status, r.found, r.fix) == (FAIL, "79 line(s) differ", "kvprov deploy INVENTORY --limit kvlab-c1 --tags nixl")
    lines = r.detail.split("\n")
    assert lines[:3] == HEADER + ["@@ -1,9 +1,70 @@"] and len(lines) == 61
    assert lines[-2:] == ["+x47 = 1", "... 22 more diff lines"]


def test_a_diff_of_exactly_60_lines_is_shown_whole():
    r = toml_drift("".join(f"x{i} = 1\n" for i in range(48)))  # 2 + 1 + 9 + 48 diff lines
    lines = r.detail.split("\n")
    assert r.found == "57 line(s) differ" and len(lines) == 60 and lines[-1] == "+x47 = 1"


def test_a_live_file_without_its_last_newline_still_shows_one_diff_line_per_line():
    r = toml_drift("a = 1")
    lines = r.detail.split("\n")
    assert lines[:3] == HEADER + ["@@ -1,9 +1 @@"] and lines[-1] == "+a = 1" and len(lines) == 13
    assert r.found == "10 line(s) differ"


def test_one_changed_setting_is_shown_with_one_line_of_context():
    from tests.conftest import FIXTURES

    desired = (FIXTURES / "bundles/local_c1/files/etc/kvprov/nixl_backend_config.toml").read_text()
    r = toml_drift(desired.replace("use_aio = false", "use_aio = true"))
    assert r.found == "2 line(s) differ"
    assert r.detail.split("\n") == HEADER + ["@@ -8,2 +8,2 @@", " active = true", "-use_aio = false", "+use_aio = true"]


def audited(edit) -> dict:
    from kvprov.validate import bundle as bf
    from kvprov.validate.bundle import Bundle
    from tests.conftest import FIXTURES

    root = FIXTURES / "bundles/local_c1"
    files = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    edit(files)
    b = Bundle(files=files)
    return {r.id: (r.status, r.found, r.fix) for r in audit.audit(b, bf.load_desired(b))}


DEPLOY = "kvprov deploy INVENTORY --limit kvlab-c1 --tags "


def test_a_missing_package_or_distribution_names_the_install_tag():
    import json

    def edit(files):
        files["packages.txt"] = b"\n".join(l for l in files["packages.txt"].split(b"\n")
                                           if not l.startswith(b"python3-venv"))
        venvs = json.loads(files["venvs.json"])
        del venvs["/opt/kvprov/nixl"]["numpy"]
        venvs["/opt/kvprov/nixl"]["nixl"] = "1.4.0"
        files["venvs.json"] = json.dumps(venvs).encode()

    rs = audited(edit)
    assert rs["package:python3-venv"] == (FAIL, "not installed", DEPLOY + "install")
    assert rs["venv:/opt/kvprov/nixl:numpy"] == (FAIL, "not installed in /opt/kvprov/nixl", DEPLOY + "install")
    assert rs["venv:/opt/kvprov/nixl:nixl"] == (FAIL, "nixl 1.4.0 in /opt/kvprov/nixl",
                                                DEPLOY + "install (reinstalls the pinned version)")


def test_a_unit_systemd_cannot_use_names_the_configure_tag():
    unit = "systemctl/kvprov-sglang-main.service.txt"

    def load_state(value):
        def edit(files):
            text = files[unit].decode()
            assert "LoadState=loaded" in text
            files[unit] = text.replace("LoadState=loaded", f"LoadState={value}").encode()
        return edit

    assert audited(load_state("not-found"))["unit:kvprov-sglang-main.service"] == (
        FAIL, "not found: the unit file is gone", DEPLOY + "configure")
    assert audited(load_state("bad-setting"))["unit:kvprov-sglang-main.service"] == (
        FAIL, "LoadState=bad-setting: systemd cannot use the unit file "
              "(`systemd-analyze verify kvprov-sglang-main.service`)", DEPLOY + "configure")


def test_an_unreadable_directory_listing_says_so():
    import json

    def edit(files):
        listing = json.loads(files["managed_dirs.json"])
        listing["/etc/kvprov"] = {}
        files["managed_dirs.json"] = json.dumps(listing).encode()

    status, found, _ = audited(edit)["extra:/etc/kvprov"]
    assert status == FAIL and found.endswith("managed_dirs.json: /etc/kvprov: unreadable")
