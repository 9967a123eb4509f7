"""`kvprov audit`'s checks on captured bundles (pure): each drift named exactly, reports."""

import json
import re

import pytest

from kvprov import audit
from kvprov.validate import bundle as bf
from kvprov.validate import report
from kvprov.validate.bundle import Bundle
from tests.conftest import FIXTURES

TOML = "/etc/kvprov/nixl_backend_config.toml"
UNIT = "kvprov-sglang-main.service"


def files_of(name: str) -> dict[str, str]:
    root = FIXTURES / "bundles" / name
    return {str(p.relative_to(root)): p.read_text() for p in root.rglob("*") if p.is_file()}


def run(files: dict[str, str]):
    b = Bundle(files=files)
    return {r.id: r for r in audit.audit(b, bf.load_desired(b))}


def failed(results):
    return {i for i, r in results.items() if r.status == "fail"}


@pytest.mark.parametrize("bundle", ["lab_gpu1", "local_c1"])
def test_a_deployed_host_has_no_drift(bundle):
    results = run(files_of(bundle))
    assert not failed(results), {i: r.found for i, r in results.items() if r.status == "fail"}
    assert not [i for i, r in results.items() if r.status == "warn"]
    assert results["file:/etc/cufile.json"].status == "skip"  # written on GPU hosts only


def test_nfs_host_covers_every_concern():
    results = run(files_of("lab_gpu1"))
    assert {"mount.options", "mount.transport", "mount.unit", f"file:{TOML}", f"unit:{UNIT}",
            "unit:mnt-kvcache.mount", "package:rdma-core", "venv:/opt/kvprov/nixl:nixl-cu12",
            "storage_dir:main", "extra:/etc/kvprov"} <= set(results)
    assert results["venv:/opt/kvprov/nixl:nixl-cu12"].found == "nixl-cu12 1.5.1"


def test_hand_edited_file_shows_a_unified_diff():
    files = files_of("lab_gpu1")
    files["files" + TOML] = files["files" + TOML].replace("use_aio = false", "use_aio = true")
    results = run(files)
    assert failed(results) == {f"file:{TOML}"}
    r = results[f"file:{TOML}"]
    assert r.found == "2 line(s) differ"
    assert "-use_aio = false\n+use_aio = true" in r.detail
    assert r.detail.startswith(f"--- {TOML} (desired)\n+++ {TOML} (live)")
    assert r.fix == "kvprov deploy INVENTORY --limit kvlab-gpu1 --tags nixl"
    table = report.format_table(list(results.values()), everything=False)
    assert "+use_aio = true" in table and "mount.options" not in table


def test_missing_managed_file_is_drift():
    files = files_of("local_c1")
    del files["files" + TOML]
    r = run(files)[f"file:{TOML}"]
    assert r.status == "fail" and "is not on the host" in r.found


def test_unmanaged_kvprov_files_are_warnings():
    files = files_of("lab_gpu1")
    dirs = json.loads(files[audit.MANAGED_DIRS])
    dirs["/etc/systemd/system"] += ["kvprov-sglang-old.service", "ssh.service"]
    dirs["/etc/kvprov"] += ["nixl_backend_config.toml.bak"]
    files[audit.MANAGED_DIRS] = json.dumps(dirs)
    results = run(files)
    assert not failed(results)
    assert results["extra:/etc/systemd/system"].status == "warn"
    assert results["extra:/etc/systemd/system"].found == "unmanaged: /etc/systemd/system/kvprov-sglang-old.service"
    assert results["extra:/etc/kvprov"].found == "unmanaged: /etc/kvprov/nixl_backend_config.toml.bak"


def _set_unit(files, unit, **props):
    name = bf.systemctl_file(unit)
    text = files[name]
    for k, v in props.items():
        text = re.sub(rf"^{k}=.*$", f"{k}={v}", text, flags=re.M)
    files[name] = text


def test_disabled_unit_and_pending_reload_are_drift():
    files = files_of("lab_gpu1")
    _set_unit(files, UNIT, UnitFileState="disabled")
    _set_unit(files, "mnt-kvcache.mount", NeedDaemonReload="yes")
    results = run(files)
    assert failed(results) == {f"unit:{UNIT}", "unit:mnt-kvcache.mount"}
    assert results[f"unit:{UNIT}"].found == "UnitFileState=disabled"
    assert "NeedDaemonReload=yes" in results["unit:mnt-kvcache.mount"].found


def test_changed_pin_and_missing_package():
    files = files_of("lab_gpu1")
    venvs = json.loads(files[audit.VENVS])
    venvs["/opt/kvprov/nixl"]["nixl"] = "1.5.0"
    files[audit.VENVS] = json.dumps(venvs)
    files[bf.PACKAGES] = "\n".join(line for line in files[bf.PACKAGES].splitlines()
                                   if not line.startswith("ibverbs-providers\t")) + "\n"
    results = run(files)
    assert failed(results) == {"venv:/opt/kvprov/nixl:nixl", "package:ibverbs-providers"}
    assert results["venv:/opt/kvprov/nixl:nixl"].found == "nixl 1.5.0 in /opt/kvprov/nixl"
    assert results["venv:/opt/kvprov/nixl:nixl"].expected == "nixl==1.5.1"


def test_remount_with_other_options_is_mount_drift():
    files = files_of("lab_gpu1")
    files[bf.MOUNTINFO] = files[bf.MOUNTINFO].replace("rsize=262144,wsize=262144", "rsize=131072,wsize=131072")
    results = run(files)
    assert failed(results) == {"mount.options", "mount.unit"}
    assert "rsize: live 131072, want 262144" in results["mount.options"].found


def test_garbage_capture_fails_that_check_only():
    files = files_of("lab_gpu1")
    files[audit.VENVS] = "{not json"
    files[audit.MANAGED_DIRS] = json.dumps({"/etc/kvprov": {"error": "Permission denied"}})
    results = run(files)
    assert {"venv:/opt/kvprov/nixl:nixl", "extra:/etc/kvprov"} <= failed(results)
    assert "Permission denied" in results["extra:/etc/kvprov"].found
    assert results[f"file:{TOML}"].status == "pass"


def test_prometheus_textfile_and_exit_codes():
    files = files_of("lab_gpu1")
    files["files" + TOML] += "# hand edit\n"
    results = audit.audit(Bundle(files=files), bf.load_desired(Bundle(files=files)))
    results.append(audit.unreachable_result('gpu-"b"', "unreachable: ssh: connect to host timed out"))
    text = audit.to_prom(results, 1764460800)
    assert f'kvprov_audit_drift{{check="file:{TOML}",host="kvlab-gpu1"}} 1.0' in text
    assert 'kvprov_audit_drift{check="mount.options",host="kvlab-gpu1"} 0.0' in text
    assert 'kvprov_audit_drift_count{host="kvlab-gpu1"} 1.0' in text
    assert 'kvprov_audit_up{host="gpu-\\"b\\""} 0.0' in text and 'kvprov_audit_up{host="kvlab-gpu1"} 1.0' in text
    assert "kvprov_audit_last_run_timestamp_seconds 1.7644608e+09\n" in text
    for line in text.splitlines():  # every sample line is NAME{LABELS} VALUE
        assert line.startswith("#") or re.fullmatch(r'kvprov_audit_\w+(\{.*\})? [\d.e+]+', line), line
    assert audit.drifted(results) == ["kvlab-gpu1"]
    assert audit._exit_code(results) == 3
    assert audit._exit_code(results[:-1]) == 1


def test_before_after_summary():
    before = audit.audit(*(lambda b: (b, bf.load_desired(b)))(Bundle(files={**files_of("local_c1"), "files" + TOML: ""})))
    after = audit.audit(*(lambda b: (b, bf.load_desired(b)))(Bundle(files=files_of("local_c1"))))
    text = audit.format_before_after(before, after, ["kvlab-c1"])
    assert f"kvlab-c1: 1 drifted -> 0 drifted; fixed: file:{TOML}" in text


def test_audit_cli_refuses_allow_remount_without_fix(tmp_path):
    from tests.conftest import ROOT, kvprov

    r = kvprov("audit", str(ROOT / "inventory/lab.yml"), "--allow-remount")
    assert r.returncode == 2 and "--allow-remount goes with --fix" in r.stderr


def test_testinfra_hosts_map_to_inventory_hosts():
    from kvprov.checks.plugin import _inventory_name
    from tests.conftest import ROOT

    inv = str(ROOT / "inventory/lab.yml")
    assert _inventory_name(inv, "kvlab-gpu1", None) == "kvlab-gpu1"  # ansible://kvlab-gpu1
    assert _inventory_name(inv, "127.0.0.1", 2221) == "kvlab-gpu1"  # paramiko://root@127.0.0.1:2221
    assert _inventory_name(inv, "127.0.0.1", 2999) is None


@pytest.mark.parametrize("path, want, live", [
    ("/etc/kvprov/lmcache-main.yaml", "chunk_size: 256\naws_secret_access_key: OLD-S3-SECRET\n",
     "chunk_size: 256\naws_secret_access_key: NEW-S3-SECRET\n"),
    ("/etc/kvprov/secrets/engine.env", "VLLM_API_KEY=OLD-S3-SECRET\nOTHER=1\n", "VLLM_API_KEY=NEW-S3-SECRET\nOTHER=1\n"),
])
def test_a_secret_never_reaches_a_diff_or_report_but_the_difference_does(path, want, live):
    files = files_of("lab_gpu1")
    desired = json.loads(files["desired.json"])
    desired["files"][path] = {"mode": "0600", "role": "engine", "content": want}
    files["desired.json"], files["files" + path] = json.dumps(desired), live
    results = run(files)
    r = results[f"file:{path}"]
    assert (r.status, r.found) == ("fail", "2 line(s) differ (secret values redacted)")
    assert "S3-SECRET" not in r.detail and r.detail.startswith(f"--- {path} (desired)")
    assert [line[1:].split()[-1] for line in r.detail.splitlines()[2:] if line[:1] in "+-"] == ["<redacted>"] * 2
    rs = list(results.values())
    out = report.format_table(rs) + report.format_json(rs) + report.to_junit(rs)
    assert "S3-SECRET" not in out and "<redacted>" in out


# ---------------------------------------------------------------------------- a GPU host (issue 14)

GPU_UNIT = "kvprov-sglang-gpu0-3.service"


def gpu_files() -> dict[str, str]:
    """gpu_a01 (a GPU host: the gds role's cufile.json is managed there) as audit captures it. Its
    packages.txt was captured for validate and lists only the MOFED and NFS packages: the
    packages the roles install on top are added here."""
    files = files_of("gpu_a01")
    files[bf.PACKAGES] += "ibverbs-providers\t2404mlnx51\npython3-packaging\t21.3-1\nbuild-essential\t12.9ubuntu3\n" \
                          "libssl-dev\t3.0.2-0ubuntu1.18\n"
    return files


def test_a_deployed_gpu_host_has_no_drift_and_audits_the_gds_files():
    results = run(gpu_files())
    assert not failed(results), {i: r.found for i, r in results.items() if r.status == "fail"}
    assert not [i for i, r in results.items() if r.status == "warn"]
    assert results["file:/etc/cufile.json"].status == "pass"  # not skipped: the host has a GPU
    assert {f"unit:{GPU_UNIT}", "venv:/opt/kvprov/sglang:sglang", "storage_dir:gpu4-7"} <= set(results)


def test_drifted_cufile_json_on_a_gpu_host_is_drift_with_its_diff():
    files = gpu_files()
    files["files/etc/cufile.json"] = files["files/etc/cufile.json"].replace('"allow_compat_mode": false',
                                                                            '"allow_compat_mode": true')
    results = run(files)
    assert failed(results) == {"file:/etc/cufile.json"}
    r = results["file:/etc/cufile.json"]
    assert r.found == "2 line(s) differ" and '+    "allow_compat_mode": true,' in r.detail
    assert r.fix == "kvprov deploy INVENTORY --limit gpu-a01.corp.example.com --tags gds"
    del files["files/etc/cufile.json"]
    assert run(files)["file:/etc/cufile.json"].status == "fail"  # gone from a GPU host: drift too


def test_an_enabled_unit_that_should_run_but_is_stopped_is_drift():
    files = gpu_files()
    _set_unit(files, GPU_UNIT, ActiveState="inactive", SubState="dead")
    results = run(files)
    assert failed(results) == {f"unit:{GPU_UNIT}"}
    r = results[f"unit:{GPU_UNIT}"]
    assert (r.expected, r.found) == ("enabled, active", "ActiveState=inactive SubState=dead")


@pytest.mark.parametrize("load, found", [
    ("not-found", "not found: the unit file is gone"),
    ("bad-setting", f"LoadState=bad-setting: systemd cannot use the unit file (`systemd-analyze verify {GPU_UNIT}`)"),
    ("masked", f"LoadState=masked: systemd cannot use the unit file (`systemd-analyze verify {GPU_UNIT}`)"),
])
def test_a_unit_systemd_cannot_load_is_drift(load, found):
    files = gpu_files()
    _set_unit(files, GPU_UNIT, LoadState=load)
    r = run(files)[f"unit:{GPU_UNIT}"]
    assert (r.status, r.found) == ("fail", found)


@pytest.mark.parametrize("state", ["enabled-runtime", "static", "generated", "linked", "disabled"])
def test_only_enabled_counts_as_started_at_boot(state):
    """One definition for audit, validate's mount.unit and the testinfra checks (parsers.enabled_at_boot)."""
    files = gpu_files()
    _set_unit(files, GPU_UNIT, UnitFileState=state)
    _set_unit(files, "mnt-kvcache.mount", UnitFileState=state)
    results = run(files)
    assert failed(results) == {f"unit:{GPU_UNIT}", "unit:mnt-kvcache.mount", "mount.unit"}
    assert results[f"unit:{GPU_UNIT}"].found == f"UnitFileState={state}"
