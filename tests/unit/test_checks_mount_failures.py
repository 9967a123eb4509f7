"""The mount checks' failure paths and exact messages on the GPU host's bundle (gpu_a01:
netapp_pnfs_rdma, files layout) with one captured file or desired.json edited: NFS mounted
as `nfs`, nothing mounted, the wrong source, options and version, the pNFS layout missing or
not expected, the mount unit's odd shapes and /etc/fstab's lines."""

import json

from kvprov.validate import bundle as bf
from kvprov.validate import evaluate as ev
from kvprov.validate.bundle import Bundle
from kvprov.validate.result import FAIL, PASS, SKIP, WARN
from tests.conftest import FIXTURES
from tests.unit.test_validate_context_captures import one_check
from tests.unit.test_validate_engines import EngineBundle

ROOT = FIXTURES / "bundles/gpu_a01"
FILES = {str(p.relative_to(ROOT)): p.read_bytes() for p in ROOT.rglob("*") if p.is_file()}
HOST = "gpu-a01.corp.example.com"
SOURCE = "192.168.10.11:/kvcache_vol1"
UNIT = "mnt-kvcache.mount"
UNIT_FILE = f"files/etc/systemd/system/{UNIT}"
DEPLOY = f"kvprov deploy INVENTORY --limit {HOST} --tags kvcache_mount"
REMOUNT = f"{DEPLOY} --allow-remount"


def edit(files: dict, name: str, *changes) -> dict:
    text = files[name].decode()
    for old, new in changes:
        assert old in text, old
        text = text.replace(old, new)
    return {**files, name: text.encode()}


def storage(**values) -> dict:
    desired = json.loads(FILES["desired.json"])
    desired["storage"].update(values)
    return {**FILES, "desired.json": json.dumps(desired).encode()}


def run(files: dict) -> dict:
    b = Bundle(files=files)
    return {r.id: r for r in ev.evaluate(b, bf.load_desired(b))}


def one(files: dict, check_id: str):
    r = one_check(files, check_id)
    return r.status, r.expected, r.found, r.fix


def mountinfo(*changes) -> dict:
    return edit(FILES, "proc/mountinfo", *changes)


# ---------------------------------------------------------------------------- mount.present, source, options

def test_an_nfs_fstype_mount_is_checked_like_nfs4():
    rs = run(mountinfo((f" - nfs4 {SOURCE}", f" - nfs {SOURCE}")))
    assert (rs["mount.present"].status, rs["mount.present"].found) == (PASS, f"{SOURCE} (nfs)")
    assert (rs["mount.source"].status, rs["mount.source"].found) == (PASS, SOURCE)


def test_a_local_filesystem_on_the_mount_point_skips_the_nfs_checks_with_no_expectation():
    rs = run(mountinfo((f" - nfs4 {SOURCE}", " - ext4 /dev/sdb1")))
    assert (rs["mount.source"].status, rs["mount.source"].expected, rs["mount.source"].found) == (
        SKIP, "", "no NFS mount on /mnt/kvcache (see mount.present)")


def test_nothing_mounted_names_the_fix():
    files = mountinfo(("412 31 0:61 / /mnt/kvcache ", "412 31 0:61 / /mnt/other "),
                      (f" - nfs4 {SOURCE}", " - nfs4 10.0.0.9:/x"))
    assert one(files, "mount.present") == (
        FAIL, f"an NFS mount of {SOURCE} on /mnt/kvcache", "nothing is mounted on /mnt/kvcache",
        f"systemctl start {UNIT} (`journalctl -u {UNIT} -b` says why it failed), or {DEPLOY}")


def test_another_source_is_remounted_from_the_inventory():
    assert one(mountinfo((f" - nfs4 {SOURCE}", " - nfs4 192.168.10.12:/other")), "mount.source") == (
        FAIL, SOURCE, "192.168.10.12:/other is mounted instead",
        f"{REMOUNT} (remounts from the inventory's server and export once nothing uses the mount)")


def test_options_listed_as_mounted_and_the_remount_fix():
    status, expected, found, _ = one(FILES, "mount.options")
    assert status == PASS
    assert expected == ("vers=4.1,proto=rdma,port=20049,rsize=262144,wsize=262144,hard,max_connect=16,write=eager,"
                        "_netdev")
    assert found.startswith("rw,relatime,vers=4.1,rsize=262144,wsize=262144,namlen=255,hard,proto=rdma,")
    status, _, found, fix = one(mountinfo(("max_connect=16,port", "max_connect=4,port")), "mount.options")
    assert (status, fix) == (FAIL, f"{REMOUNT}: NFS transport options change only with an unmount (`mount -o remount` "
                                   "ignores them); stop what uses the mount first")


# ---------------------------------------------------------------------------- mount.nfs_version

VERSION_FIX = (f"set kvprov_storage_nfs_version to 4.1 or 4.2 and remount ({REMOUNT}); disable NFSv4.0 on the SVM "
               "so clients cannot land on it (`vserver nfs modify -vserver SVM -v4.0 disabled`)")


def test_nfs_version_below_4_1_or_not_shown_fails():
    expected = "NFS 4.1 or later (sessions and pNFS)"
    assert one(mountinfo(("rw,vers=4.1,", "rw,vers=4.0,")), "mount.nfs_version") == (
        FAIL, expected, "vers=4.0: no sessions, no pNFS layouts", VERSION_FIX)
    assert one(mountinfo(("rw,vers=4.1,", "rw,")), "mount.nfs_version") == (
        FAIL, expected, "the live options have no vers=", VERSION_FIX)


# ---------------------------------------------------------------------------- mount.pnfs_layout, layoutget

LAYOUT_FIX = ("enable pNFS on the SVM (`vserver nfs modify -vserver SVM -v4.1-pnfs enabled`; referrals off), load "
              f"`nfs_layout_nfsv41_files`, then remount (`systemctl restart {UNIT}`)")


def mountstats(*changes) -> dict:
    return edit(FILES, "proc/mountstats", *changes)


def test_no_layout_expected_skips_both_layout_checks():
    rs = run(storage(pnfs_layout="none"))
    for check_id in ("mount.pnfs_layout", "mount.layoutget"):
        assert (rs[check_id].status, rs[check_id].expected, rs[check_id].found) == (
            SKIP, "", "kvprov_storage_pnfs_layout is none: no layout expected")


def test_no_pnfs_negotiated_or_no_nfsv4_line_points_at_the_svm():
    expected = "pnfs=LAYOUT_NFSV4_1_FILES (kvprov_storage_pnfs_layout: files)"
    found = ": the client negotiated no pNFS layout driver, so every byte goes through the one metadata server"
    assert one(mountstats(("pnfs=LAYOUT_NFSV4_1_FILES,", "")), "mount.pnfs_layout") == (
        FAIL, expected, f"pnfs=absent{found}", LAYOUT_FIX)
    assert one(mountstats(("pnfs=LAYOUT_NFSV4_1_FILES", "pnfs=not configured")), "mount.pnfs_layout") == (
        FAIL, expected, f"pnfs=not configured{found}", LAYOUT_FIX)
    text = FILES["proc/mountstats"].decode()
    line = next(x for x in text.splitlines(keepends=True) if x.strip().startswith("nfsv4:"))
    assert one(mountstats((line, "")), "mount.pnfs_layout") == (
        FAIL, expected, "no nfsv4: line for the mount in mountstats: NFS below 4.1, or a truncated capture",
        LAYOUT_FIX)


# ---------------------------------------------------------------------------- mount.unit

def unit(*changes, files=None):
    return one(edit(files or FILES, UNIT_FILE, *changes), "mount.unit")


def test_unit_passes_showing_what_options_and_the_unit_file_state():
    options = "vers=4.1,proto=rdma,port=20049,rsize=262144,wsize=262144,hard,max_connect=16,write=eager,_netdev"
    status, _, found, _ = one(FILES, "mount.unit")
    assert (status, found) == (PASS, f"What={SOURCE} Options={options} UnitFileState=enabled")
    # without `systemctl show` of the unit, "enabled at boot" is not proven: never a pass by absence (#41)
    files = {k: v for k, v in FILES.items() if k != f"systemctl/{UNIT}.txt"}
    assert one(files, "mount.unit")[:3:2] == (FAIL, f"systemctl/{UNIT}.txt: missing from the bundle")


def test_unit_that_is_no_unit_file_fails():
    text = FILES[UNIT_FILE].decode()
    status, _, found, fix = one({**FILES, UNIT_FILE: b"just text\n"}, "mount.unit")
    assert (status, found, fix) == (FAIL, f"{UNIT}: no [Section] of a systemd unit", DEPLOY)
    assert "[Mount]" in text


def test_unit_mounting_elsewhere_or_without_where_fails():
    status, _, found, fix = unit(("Where=/mnt/kvcache", "Where=/mnt/other"))
    assert (status, found.split("; ")[0], fix) == (
        FAIL, "Where=/mnt/other", f"{DEPLOY} (add --allow-remount when the live mount differs)")
    assert unit(("Where=/mnt/kvcache\n", ""))[2].split("; ")[0] == "Where="


def test_unit_not_enabled_at_boot():
    files = edit(FILES, f"systemctl/{UNIT}.txt", ("UnitFileState=enabled\n", "UnitFileState=\n"))
    status, _, found, _ = one(files, "mount.unit")
    assert (status, found) == (FAIL, f"UnitFileState=unknown: not mounted at boot (`systemctl enable {UNIT}`)")
    files = edit(FILES, f"systemctl/{UNIT}.txt", ("UnitFileState=enabled\n", ""))
    assert one(files, "mount.unit")[2] == f"UnitFileState=unknown: not mounted at boot (`systemctl enable {UNIT}`)"


def fstab(text: str | None):
    name = "files/etc/fstab"
    files = {k: v for k, v in FILES.items() if k != name}
    if text is not None:
        files[name] = text.encode()
    status, _, found, fix = one(files, "mount.unit")
    return status, found.partition("; ")[2], fix


def test_fstab_lines_that_mount_the_kv_mount_point_too():
    fix = f"remove that line from /etc/fstab: kvprov manages the mount as {UNIT}"
    assert fstab(f"{SOURCE} /mnt/kvcache\n") == (WARN, f"/etc/fstab also mounts {SOURCE} on /mnt/kvcache", fix)
    assert fstab(f"#{SOURCE} /mnt/kvcache nfs4 defaults 0 0\n/dev/sda1 /\n") == (PASS, "", "")
    assert fstab(None) == (PASS, "", "")


def test_unit_without_what_or_options_is_compared_as_empty():
    assert unit((f"What={SOURCE}\n", ""))[2] == f"unit vs inventory: source: unit has , want {SOURCE}"
    options = next(x for x in FILES[UNIT_FILE].decode().splitlines(keepends=True) if x.startswith("Options="))
    assert unit((options, ""))[2] == (
        "unit vs inventory: vers: unit has absent, want 4.1; unit vs inventory: proto: unit has absent, want rdma; "
        "unit vs inventory: port: unit has 2049, want 20049; unit vs inventory: rsize: unit has absent, want 262144; "
        "unit vs inventory: wsize: unit has absent, want 262144; unit vs inventory: hard: unit has absent, want hard; "
        "unit vs inventory: max_connect: unit has 1, want 16; unit vs inventory: write: unit has lazy, want eager")


def test_unit_file_missing_names_the_kvcache_mount_role():
    files = {k: v for k, v in FILES.items() if k != UNIT_FILE}
    status, _, found, fix = one(files, "mount.unit")
    assert (status, fix) == (FAIL, DEPLOY)
    assert found == f"{UNIT_FILE}: /etc/systemd/system/{UNIT} is not on the host (not in the bundle)"


# ---------------------------------------------------------------------------- mount.io_probe, transport

def test_io_probe_without_size_or_time_names_the_probe_file():
    files = {**FILES, "io_probe.json": b'{"ok": true}'}
    assert one(files, "mount.io_probe")[2] == "wrote and read back the probe file"
    files = {**FILES, "io_probe.json": b'{"ok": true, "bytes": 4096, "seconds": 0.5}'}
    assert one(files, "mount.io_probe")[2] == "wrote and read back 4096 bytes in 0.50 s"


def test_a_soft_mount_that_gave_up_names_the_degraded_tier_and_that_it_comes_back_by_itself():
    files = {**FILES, "io_probe.json": b'{"ok": false, "error": "OSError: [Errno 5] Input/output error"}'}
    status, _, found, fix = one(files, "mount.io_probe")
    assert status == FAIL and "the KV tier is degraded" in found
    assert fix.startswith("bring the storage back") and "with no restart" in fix
    files = {**FILES, "io_probe.json": b'{"ok": false, "error": "OSError: [Errno 13] Permission denied"}'}
    assert one(files, "mount.io_probe")[3].startswith("check permissions and space")


def test_transport_of_a_tcp_profile_mounted_over_rdma_is_remounted_from_the_inventory():
    files = storage(transport="tcp")
    status, expected, found, fix = one(files, "mount.transport")
    assert (status, expected, fix) == (FAIL, "every xprt: line of the mount is tcp", REMOUNT)
    assert found == "xprt: rdma, rdma (options say proto=rdma): not the transport of storage profile netapp_pnfs_rdma"
    files = edit(files, "proc/mountstats", (",proto=rdma,", ","))
    assert one(files, "mount.transport")[2].startswith("xprt: rdma, rdma (options say proto=?)")


def test_a_local_directory_skips_the_nfs_checks_expecting_nothing():
    root = FIXTURES / "bundles/local_c1"
    rs = run({str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()})
    for check_id in ("mount.present", "mount.unit", "mount.lookupcache"):
        assert (rs[check_id].status, rs[check_id].expected) == (SKIP, "")


def test_lookupcache_skips_an_engine_without_kv_files_on_the_mount(tmp_path):
    r = EngineBundle(tmp_path, "vllm_baseline").results()["mount.lookupcache"]
    assert (r.status, r.expected, r.found) == (SKIP, "", "engine vllm_baseline keeps no KV files on /mnt/kvcache")


def test_unit_without_options_where_the_inventory_asks_none_shows_them_empty():
    options = next(x for x in FILES[UNIT_FILE].decode().splitlines(keepends=True) if x.startswith("Options="))
    files = edit(storage(options=[]), UNIT_FILE, (options, ""))
    status, _, found, _ = one(files, "mount.unit")
    assert (status, found) == (PASS, f"What={SOURCE} Options= UnitFileState=enabled")


def test_local_directory_without_a_device_shows_it_empty():
    root = FIXTURES / "bundles/local_c1"
    files = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    data = json.loads(files["storage_dirs.json"])
    del data["mount_point"]["device"]
    files["storage_dirs.json"] = json.dumps(data).encode()
    assert one(files, "mount.local_dir")[2] == "/srv/kvcache on overlay "


def test_local_dir_skips_an_nfs_profile_expecting_nothing():
    assert one(FILES, "mount.local_dir") == (SKIP, "", "storage profile netapp_pnfs_rdma: see mount.present", "")
