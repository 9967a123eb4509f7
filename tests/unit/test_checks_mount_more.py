"""mount.layoutget's fix per layout type, mount.local_dir's failures and mount.unit's
UnitFileState, on the fixture bundles with one captured file edited."""

import json

from kvprov.validate import bundle as bf
from kvprov.validate import evaluate as ev
from kvprov.validate.bundle import Bundle
from kvprov.validate.result import FAIL, PASS
from tests.conftest import FIXTURES


def files_of(name: str) -> dict:
    root = FIXTURES / "bundles" / name
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def check(files: dict, check_id: str):
    b = Bundle(files=files)
    [r] = [r for r in ev.evaluate(b, bf.load_desired(b)) if r.id == check_id]
    return r.status, r.found, r.fix


def test_no_layoutget_with_the_files_layout_points_at_the_svm():
    files = files_of("gpu_a01")
    stats = files["proc/mountstats"].decode()
    files["proc/mountstats"] = stats.replace("LAYOUTGET: 12 12 0", "LAYOUTGET: 0 0 0").encode()
    assert check(files, "mount.layoutget") == (
        FAIL, "LAYOUTGET 0 after a successful write and read: the server handed out no layout, so the data went "
              "through the metadata server",
        "check every data LIF of the SVM reachable from this host, pNFS enabled on the SVM; ONTAP: "
        "`statistics show -object nfsv4_1 -counter layoutget_total`")


def test_no_layoutget_with_the_block_layout_points_at_blkmapd():
    assert check(files_of("lab_no_layout"), "mount.layoutget")[2] == (
        "check blkmapd (nfs-blkmap.service) running and the shared block device visible (`lsblk`)")


def local_dir(**entry):
    files = files_of("local_c1")
    data = json.loads(files["storage_dirs.json"])
    data["mount_point"].update(entry)
    files["storage_dirs.json"] = json.dumps(data).encode()
    return check(files, "mount.local_dir")


def test_local_dir_missing_not_a_directory_or_unreadable():
    fix = "kvprov deploy INVENTORY --limit kvlab-c1 --tags kvcache_mount"
    assert local_dir() == (PASS, "/srv/kvcache on overlay overlay", "")
    assert local_dir(exists=False, is_dir=False) == (FAIL, "/srv/kvcache is missing", fix)
    assert local_dir(exists=True, is_dir=False) == (FAIL, "/srv/kvcache is not a directory", fix)
    assert local_dir(exists=False, is_dir=True) == (FAIL, "/srv/kvcache is missing", fix)
    status, found, _ = local_dir(error="Permission denied")
    assert (status, found) == (FAIL, "the collector could not stat it: Permission denied")
    assert local_dir(fstype=None, device=None)[:2] == (PASS, "/srv/kvcache on null null")


def test_local_dir_without_fstype_or_device_shows_placeholders():
    files = files_of("local_c1")
    data = json.loads(files["storage_dirs.json"])
    del data["mount_point"]["fstype"], data["mount_point"]["device"]
    files["storage_dirs.json"] = json.dumps(data).encode()
    assert check(files, "mount.local_dir")[:2] == (PASS, "/srv/kvcache on ? ")


def test_a_mount_unit_not_enabled_fails_naming_its_state():
    files = files_of("gpu_a01")
    name = next(n for n in files if n.startswith("systemctl/") and n.endswith(".mount.txt"))
    text = files[name].decode()
    assert "UnitFileState=enabled" in text
    for state, shown in (("disabled", "disabled"), ("", "unknown")):
        files[name] = text.replace("UnitFileState=enabled", f"UnitFileState={state}").encode()
        status, found, fix = check(files, "mount.unit")
        assert status == FAIL
        assert found == f"UnitFileState={shown}: not mounted at boot (`systemctl enable mnt-kvcache.mount`)"
        assert fix == ("kvprov deploy INVENTORY --limit gpu-a01.corp.example.com --tags kvcache_mount "
                       "(add --allow-remount when the live mount differs)")


def test_missing_client_packages_are_named_with_the_roles_that_install_them():
    files = files_of("gpu_a01")
    text = files["packages.txt"].decode()
    assert check(files, "packages.required") == (
        PASS, "nfs-common 1:2.6.1-1ubuntu1.2, rdma-core 2404mlnx51-1.2404066", "")
    files["packages.txt"] = "\n".join(line for line in text.splitlines()
                                      if not line.startswith(("nfs-common", "rdma-core"))).encode()
    assert check(files, "packages.required") == (
        FAIL, "not installed: nfs-common or nfs-utils, rdma-core",
        "kvprov deploy INVENTORY --limit gpu-a01.corp.example.com --tags kvcache_mount,rdma")
