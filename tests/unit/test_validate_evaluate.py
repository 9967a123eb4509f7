"""The checks of `kvprov validate`, driven by the fixture bundles (tests/fixtures/bundles/README.md)
and by in-memory variants of them (one captured file changed at a time)."""

import json
import os
import re
import shutil
import time

import pytest

from kvprov.errors import EXIT_USAGE, KvprovError
from kvprov.validate import bundle as bf
from kvprov.validate import evaluate as ev
from kvprov.validate.bundle import Bundle
from kvprov.validate.result import CATEGORIES, FAIL, PASS, SKIP, STATUSES, WARN
from tests.conftest import FIXTURES

BUNDLES = FIXTURES / "bundles"
GOOD = ["lab_gpu1", "gpu_a01", "local_c1"]
ALL = sorted(p.name for p in BUNDLES.iterdir() if p.is_dir())


def results(name: str) -> dict[str, ev.Result]:
    return {r.id: r for r in ev.evaluate_bundle(BUNDLES / name)}


def files_of(name: str) -> dict[str, bytes]:
    root = BUNDLES / name
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def run(files: dict) -> dict[str, ev.Result]:
    b = Bundle(files=files)
    return {r.id: r for r in ev.evaluate(b, bf.load_desired(b))}


def edit_json(files: dict, name: str, change) -> dict:
    data = json.loads(files[name])
    change(data)
    files[name] = json.dumps(data).encode()
    return files


def sub(files: dict, name: str, old: str, new: str, count: int = 1) -> dict:
    text = files[name].decode()
    assert old in text, f"{old!r} not in {name}"
    files[name] = text.replace(old, new, count).encode()
    return files


def statuses(rs: dict) -> dict[str, str]:
    return {k: r.status for k, r in rs.items()}


# ---------------------------------------------------------------------------- the good bundles

@pytest.mark.parametrize("name", GOOD)
def test_good_bundles_have_no_failure_and_no_warning(name):
    rs = results(name)
    bad = {k: (r.status, r.found) for k, r in rs.items() if r.status in (FAIL, WARN)}
    assert bad == {}
    assert rs["summary"].status == PASS
    assert re.fullmatch(r"\d+ pass, 0 fail, 0 warn, \d+ skip", rs["summary"].found)


def test_good_lab_host_proves_rdma_and_the_block_layout():
    rs = results("lab_gpu1")
    assert rs["mount.transport"].found == "xprt: rdma (options say proto=rdma)"
    assert rs["mount.pnfs_layout"].found == "pnfs=LAYOUT_BLOCK_VOLUME"
    assert rs["mount.layoutget"].found == "LAYOUTGET 4, GETDEVICEINFO 1, LAYOUTCOMMIT 1"
    assert rs["mount.io_probe"].found == "wrote and read back 4194304 bytes in 0.83 s"
    assert rs["rdma.link"].found == "rxe_data0/1 ACTIVE (data0)"
    assert rs["nixl.backend"].found == "POSIX backend created"
    # no GPU: GDS is skipped with the reason, the service is skipped by its condition
    assert {k: (r.status, r.found) for k, r in rs.items() if k.startswith("gds.")} == {
        k: (SKIP, "no NVIDIA GPU") for k in rs if k.startswith("gds.")}
    assert rs["engine.main.state"].status == PASS
    assert "no GPU: service skipped by its condition" in rs["engine.main.state"].found
    assert rs["engine.main.health"].status == SKIP


def test_good_gpu_host_proves_gds_and_both_instances():
    rs = results("gpu_a01")
    assert statuses(rs) == {**{k: PASS for k in rs}, "mount.local_dir": SKIP, "gds.udev": SKIP,
                            "engine.gpu0-3.cache": SKIP, "engine.gpu4-7.cache": SKIP}
    assert rs["mount.transport"].found.startswith("xprt: rdma, rdma")  # trunked: one line per transport
    assert rs["mount.pnfs_layout"].found == "pnfs=LAYOUT_NFSV4_1_FILES"
    assert rs["gds.cufile_rdma_addrs"].found == "192.168.10.101, 192.168.11.101"
    checks = ("unit", "state", "storage_env", "storage_dir", "health", "cache")
    assert [k for k in rs if k.startswith("engine.")] == [
        f"engine.{i}.{c}" for i in ("gpu0-3", "gpu4-7") for c in checks]
    assert rs["engine.gpu4-7.health"].found == "GET http://127.0.0.1:8001/health: 200"
    assert rs["engine.gpu0-3.cache"].found == ("sglang_hicache exposes no cache counters kvprov reads (or they were "
                                               "not collected: `kvprov audit` does not probe)")


def test_local_profile_skips_nfs_and_rdma():
    rs = results("local_c1")
    for k in ("mount.present", "mount.transport", "mount.layoutget", "mount.unit"):
        assert (rs[k].status, rs[k].found) == (
            SKIP, "storage profile local: /srv/kvcache is a local directory, no NFS mount")
    assert rs["mount.local_dir"].status == PASS and rs["mount.io_probe"].status == PASS
    assert rs["rdma.link"].found == "storage profile local does not use RDMA"
    assert rs["packages.required"].status == SKIP
    assert rs["engine.main.storage_dir"].status == PASS


def test_every_host_gets_the_same_checks_in_the_same_order():
    lab, gpu = list(results("lab_gpu1")), list(results("gpu_a01"))
    assert [k for k in lab if not k.startswith("engine.")] == [k for k in gpu if not k.startswith("engine.")]
    assert lab[-1] == "summary"
    assert all(r.host == "kvlab-gpu1" for r in ev.evaluate_bundle(BUNDLES / "lab_gpu1"))


@pytest.mark.parametrize("name", ALL)
def test_every_failure_says_what_was_expected_and_how_to_fix_it(name):
    for r in results(name).values():
        assert r.status in STATUSES and r.category in CATEGORIES
        if r.status == FAIL:
            assert r.expected and r.found and r.fix, r


# ---------------------------------------------------------------------------- the broken bundles

def test_tcp_fallback():
    rs = results("lab_tcp_fallback")
    t = rs["mount.transport"]
    assert t.status == FAIL
    assert "xprt: tcp" in t.found and "fell back to TCP" in t.found and "GPUDirect Storage cannot use it" in t.found
    assert "rpcrdma" in t.fix and "systemctl restart mnt-kvcache.mount" in t.fix
    assert rs["mount.options"].found == "proto: live tcp, want rdma; port: live 2049, want 20049"
    assert rs["rdma.module"].status == FAIL and "modprobe rpcrdma" in rs["rdma.module"].fix
    # persistence: kvprov's unit says rdma, the live mount is tcp (the fstab line won)
    assert rs["mount.unit"].status == FAIL and "live vs unit: proto: live tcp, want rdma" in rs["mount.unit"].found
    assert rs["summary"].status == FAIL


def test_no_layout():
    rs = results("lab_no_layout")
    assert rs["mount.pnfs_layout"].status == FAIL
    assert rs["mount.pnfs_layout"].found.startswith("pnfs=not configured: the client negotiated no pNFS layout driver")
    assert "nfs-blkmap" in rs["mount.pnfs_layout"].fix  # the lab serves the block layout
    assert rs["mount.layoutget"].status == FAIL
    assert rs["mount.layoutget"].found.startswith("LAYOUTGET 0 after a successful")
    assert rs["mount.transport"].status == PASS


def test_hung_mount():
    rs = results("lab_hung_mount")
    assert rs["mount.io_probe"].status == FAIL
    assert rs["mount.io_probe"].found == ("the storage does not answer (no answer within 30 s); the KV tier is "
                                          "degraded: the engines serve without it until the server answers again")
    assert "10.99.1.1" in rs["mount.io_probe"].fix
    lg = rs["mount.layoutget"]
    assert lg.status == FAIL and lg.found == ("the layout counters prove nothing: the I/O probe did not complete "
                                              "(the storage does not answer (no answer within 30 s); the KV tier is "
                                              "degraded: the engines serve without it until the server answers again)")
    assert rs["engine.main.storage_dir"].status == FAIL and "stat timed out" in rs["engine.main.storage_dir"].found
    assert rs["bundle.collect"].status == WARN and "io_probe.json: timed out after 30 s" in rs["bundle.collect"].found


def test_toml_without_active_flag():
    r = results("lab_toml_no_active")["nixl.active_plugin"]
    assert r.status == FAIL and "crashes at its first start (UnboundLocalError)" in r.found
    assert r.fix == ("kvprov deploy INVENTORY --limit kvlab-gpu1 --tags nixl (writes active = true, a TOML boolean, "
                     "in [plugin.posix] only)")


def test_storage_dir_on_tmp():
    r = results("lab_storage_tmp")["engine.main.storage_env"]
    assert r.status == FAIL
    assert "/tmp/hicache_storage (SGLANG_HICACHE_NIXL_BACKEND_STORAGE_DIR, systemctl show)" in r.found
    assert "on local /tmp" in r.found
    assert r.expected == ("the sglang_hicache storage directory /mnt/kvcache/kvlab-gpu1/main "
                          "(on the KV mount /mnt/kvcache)")


def test_garbage_gives_one_clear_problem_per_check():
    rs = results("lab_garbage")
    found = {k: r.found for k, r in rs.items() if r.status == FAIL}
    assert "proc/mountinfo ends mid-line: a truncated capture" in found["mount.present"]
    assert found["mount.io_probe"].startswith("io_probe.json: not valid JSON")
    assert found["nixl.import"] == "nixl_probe.json: JSON nested too deeply to read (hostile or corrupt)"
    assert found["nixl.config"].startswith("files/etc/kvprov/nixl_backend_config.toml: unusable: not valid TOML")
    assert found["gds.gpu"] == "gpu.json: 'present' must be bool, is no"
    assert found["engine.main.storage_dir"] == "storage_dirs.json: must hold a JSON object, holds list"
    assert found["rdma.link"] == "rdma_link.txt: unusable: no `link DEV/PORT state ...` line"
    assert found["packages.required"].endswith("the file is empty")
    assert rs["mount.transport"].status == SKIP  # nothing to judge without the mount
    assert rs["rdma.module"].status == PASS  # proc/modules itself is fine


def test_hostile_copy_symlinks_fifo_and_huge_files(tmp_path):
    b = tmp_path / "kvlab-gpu1"
    shutil.copytree(BUNDLES / "lab_gpu1", b)
    (b / "proc/modules").unlink()
    os.symlink("/proc/modules", b / "proc/modules")  # would read this machine's modules
    shutil.rmtree(b / "files/etc/kvprov")
    os.symlink("/etc", b / "files/etc/kvprov")
    (b / "systemctl/kvprov-sglang-main.service.txt").unlink()
    os.mkfifo(b / "systemctl/kvprov-sglang-main.service.txt")
    os.truncate(b / "proc/mountstats", 1 << 30)
    start = time.monotonic()
    rs = {r.id: r for r in ev.evaluate_bundle(b)}
    assert time.monotonic() - start < 10
    assert "is a symlink (to '/proc/modules')" in rs["rdma.module"].found
    assert "files/etc/kvprov is a symlink (to '/etc')" in rs["nixl.active_plugin"].found
    assert "not a regular file" in rs["engine.main.state"].found
    assert "more than the 64 MiB limit" in rs["mount.transport"].found
    assert rs["mount.present"].status == PASS  # mountinfo is fine


# ---------------------------------------------------------------------------- one file changed at a time

def test_mountstats_binary_or_without_the_mount():
    files = files_of("lab_gpu1")
    files[bf.MOUNTSTATS] = b"device \x00\x01\x02 junk"
    rs = run(files)
    assert rs["mount.transport"].status == FAIL and "binary data" in rs["mount.transport"].found
    files[bf.MOUNTSTATS] = b"device /dev/vda mounted on / with fstype ext4\n"
    assert "has no entry for /mnt/kvcache" in run(files)["mount.pnfs_layout"].found


def test_nothing_mounted_then_dependent_checks_skip():
    files = files_of("lab_gpu1")
    sub(files, bf.MOUNTINFO, " /mnt/kvcache ", " /mnt/elsewhere ")
    rs = run(files)
    assert rs["mount.present"].found == "nothing is mounted on /mnt/kvcache; 10.99.1.1:/kv is mounted on /mnt/elsewhere"
    assert "systemctl start mnt-kvcache.mount" in rs["mount.present"].fix
    for k in ("mount.source", "mount.options", "mount.nfs_version", "mount.transport", "mount.layoutget"):
        assert rs[k].status == SKIP and "see mount.present" in rs[k].found


def test_local_disk_mounted_on_the_mount_point():
    files = files_of("lab_gpu1")
    sub(files, bf.MOUNTINFO, "- nfs4 10.99.1.1:/kv", "- ext4 /dev/vdc")
    r = run(files)["mount.present"]
    assert r.status == FAIL and r.found.startswith("ext4 /dev/vdc is mounted on /mnt/kvcache, not NFS")


def test_wrong_source_and_nfs_v40():
    files = files_of("lab_gpu1")
    sub(files, bf.MOUNTINFO, "10.99.1.1:/kv rw,vers=4.1", "10.99.1.1:/old rw,vers=4.0")
    rs = run(files)
    assert rs["mount.source"].found == "10.99.1.1:/old is mounted instead"
    assert rs["mount.nfs_version"].status == FAIL and rs["mount.nfs_version"].found.startswith("vers=4.0: no sessions")
    assert "vers: live 4.0, want 4.1" in rs["mount.options"].found


def test_trunked_mount_with_one_tcp_transport_fails():
    files = files_of("gpu_a01")
    text = files[bf.MOUNTSTATS].decode()
    files[bf.MOUNTSTATS] = re.sub(r"\txprt:\trdma ([^\n]*)\n(\txprt:\t)rdma", r"\txprt:\trdma \1\n\2tcp", text).encode()
    r = run(files)["mount.transport"]
    assert r.status == FAIL and r.found.startswith("xprt: rdma, tcp")


def test_hung_probe_without_timeout_flag_reports_the_error():
    files = edit_json(files_of("lab_gpu1"), bf.IO_PROBE,
                      lambda d: d.update(ok=False, error="[Errno 13] Permission denied"))
    del files[bf.MOUNTSTATS]  # the probe's failure is the reason, whatever else is missing
    rs = run(files)
    assert rs["mount.io_probe"].found == "the write/read failed: [Errno 13] Permission denied"
    assert "export-policy" in rs["mount.io_probe"].fix
    assert rs["mount.layoutget"].found.endswith("(the write/read failed: [Errno 13] Permission denied)")


def test_io_probe_wrong_shape():
    files = edit_json(files_of("lab_gpu1"), bf.IO_PROBE, lambda d: d.pop("ok"))
    assert run(files)["mount.io_probe"].found == "io_probe.json: has no 'ok'"


def test_mount_unit_missing_disabled_or_different():
    files = files_of("lab_gpu1")
    missing = dict(files)
    del missing["files/etc/systemd/system/mnt-kvcache.mount"]
    r = run(missing)["mount.unit"]
    assert r.status == FAIL and "/etc/systemd/system/mnt-kvcache.mount is not on the host" in r.found
    assert r.fix == "kvprov deploy INVENTORY --limit kvlab-gpu1 --tags kvcache_mount"
    disabled = sub(dict(files), "systemctl/mnt-kvcache.mount.txt", "UnitFileState=enabled", "UnitFileState=disabled")
    assert "UnitFileState=disabled: not mounted at boot" in run(disabled)["mount.unit"].found
    drift = sub(dict(files), "files/etc/systemd/system/mnt-kvcache.mount", "rsize=262144", "rsize=131072")
    found = run(drift)["mount.unit"].found
    assert "unit vs inventory: rsize: unit has 131072, want 262144" in found
    assert "live vs unit: rsize: live 262144, want 131072" in found


def test_fstab_line_for_the_mount_point_is_a_warning():
    files = files_of("lab_gpu1")
    files["files/etc/fstab"] += b"10.99.1.1:/kv /mnt/kvcache nfs4 vers=4.1 0 0\n"
    r = run(files)["mount.unit"]
    assert r.status == WARN and "/etc/fstab also mounts 10.99.1.1:/kv on /mnt/kvcache" in r.found


def test_rdma_links_down_or_absent_and_modules_empty():
    files = files_of("lab_gpu1")
    files[bf.RDMA_LINK] = b"link rxe_data0/1 state DOWN physical_state DISABLED netdev data0\n"
    assert run(files)["rdma.link"].found == "rxe_data0/1 DOWN DISABLED (data0)"
    files[bf.RDMA_LINK] = b""
    assert run(files)["rdma.link"].found == "`rdma link` lists no RDMA device"
    files[bf.MODULES] = b""
    assert run(files)["rdma.module"].status == WARN  # a kernel without modules: rpcrdma may be built in


def test_gds_required_on_a_host_without_gpu():
    files = edit_json(files_of("lab_gpu1"), bf.DESIRED, lambda d: d["gds"].update(mode="required"))
    rs = run(files)
    assert rs["gds.gpu"].status == FAIL and "kvprov_gds_mode: auto" in rs["gds.gpu"].fix
    assert rs["gds.nfs"].status == SKIP  # the one failure says it; the rest cannot be judged


def test_gds_disabled_skips_everything_gds():
    files = edit_json(files_of("gpu_a01"), bf.DESIRED, lambda d: d["gds"].update(mode="disabled"))
    rs = run(files)
    assert {r.found for k, r in rs.items() if k.startswith("gds.")} == {"kvprov_gds_mode is disabled"}


GDS_COMPAT = [("properties.use_compat_mode : false", "properties.use_compat_mode : true"),
              ("NFS                : Supported", "NFS                : nvfs, compat")]


def test_gds_needs_the_udev_record_of_a_local_block_device():
    """cuFile registers no file on a local filesystem whose block device udev has no record of
    (the GDS failure of containers without /run/udev); NFS goes through the mount table."""
    def local(exists, udev_dir=True):
        return edit_json(files_of("gpu_a01"), bf.UDEV, lambda d: d.update(
            fstype="xfs", device="/dev/nvme1n1", dev="259:1", record="/run/udev/data/b259:1", exists=exists,
            udev_dir=udev_dir))
    assert results("gpu_a01")["gds.udev"].status == SKIP  # NFS over RDMA
    r = run(local(False, udev_dir=False))["gds.udev"]
    assert r.status == FAIL and r.found.startswith("no /run/udev/data at all")
    assert "cuFile error 5027" in r.found and "/run/udev" in r.fix
    r = run(local(False))["gds.udev"]
    assert r.status == FAIL and r.found.startswith("/run/udev/data/b259:1 is missing")
    assert run(local(True))["gds.udev"].status == PASS
    r = run(edit_json(files_of("gpu_a01"), bf.UDEV, lambda d: d.update(fstype="tmpfs", dev="0:24")))["gds.udev"]
    assert r.status == FAIL and "no block device" in r.found
    assert results("lab_gpu1")["gds.udev"].found == "no NVIDIA GPU"


@pytest.mark.parametrize("old, new", GDS_COMPAT)
def test_gds_compat_mode_fails_unless_allowed(old, new):
    files = sub(files_of("gpu_a01"), bf.GDSCHECK, old, new)
    r = run(files)["gds.compat_mode"]
    assert r.status == FAIL and "fall back to POSIX I/O" in r.found and "CUFILE_FORCE_COMPAT_MODE" in r.fix
    allowed = edit_json(files, bf.DESIRED, lambda d: d["gds"].update(allow_compat_mode=True))
    assert run(allowed)["gds.compat_mode"].status == WARN


def test_gds_nfs_unsupported_and_peerdirect_disabled():
    files = sub(files_of("gpu_a01"), bf.GDSCHECK, "NFS                : Supported", "NFS                : Unsupported")
    sub(files, bf.GDSCHECK, "--Mellanox PeerDirect : Enabled", "--Mellanox PeerDirect : Disabled")
    sub(files, bf.GDSCHECK, "Platform verification succeeded", "Platform verification error : IOMMU is enabled")
    rs = run(files)
    assert rs["gds.nfs"].found == "NFS : Unsupported (Platform verification error : IOMMU is enabled)"
    assert "mlnx-nfsrdma-dkms" in rs["gds.nfs"].fix
    assert rs["gds.peerdirect"].found == "Mellanox PeerDirect : Disabled"
    assert rs["gds.platform"].status == FAIL and "IOMMU" in rs["gds.platform"].found


def test_gdscheck_missing_on_a_gpu_host():
    files = files_of("gpu_a01")
    del files[bf.GDSCHECK]
    edit_json(files, bf.COLLECT, lambda d: d["errors"].update({"gdscheck.txt": "gdscheck: command not found"}))
    rs = run(files)
    assert rs["gds.nfs"].found == ("gdscheck.txt: missing from the bundle (the collector said: gdscheck: command "
                                   "not found)")
    assert rs["bundle.collect"].status == WARN


def test_cufile_mount_table_shape_addresses_and_compat():
    def bad_shape(d):
        d["fs"]["nfs"]["mount_table"]["/mnt/kvcache"] = ["192.168.10.101"]
    files = edit_json(files_of("gpu_a01"), bf.CUFILE, bad_shape)
    assert "json type mismatch" in run(files)["gds.cufile_mount_table"].found

    files = edit_json(files_of("gpu_a01"), bf.CUFILE,
                      lambda d: d["properties"].update(rdma_dev_addr_list=["10.0.0.1"], allow_compat_mode="false"))
    rs = run(files)
    assert rs["gds.cufile_rdma_addrs"].found == 'properties.rdma_dev_addr_list is ["10.0.0.1"]'
    assert rs["gds.cufile_compat"].found == '"false", not a JSON boolean'

    files = edit_json(files_of("gpu_a01"), bf.CUFILE, lambda d: d["properties"].pop("allow_compat_mode"))
    assert run(files)["gds.cufile_compat"].found.startswith("not set: cuFile's default is true")

    files = edit_json(files_of("gpu_a01"), bf.CUFILE, lambda d: d["fs"]["nfs"]["mount_table"].clear())
    assert "no entry for /mnt/kvcache (entries: none)" in run(files)["gds.cufile_mount_table"].found


def test_cufile_with_comments_is_read():
    files = files_of("gpu_a01")
    files[bf.CUFILE] = b"// kvprov\n" + files[bf.CUFILE].replace(b'"logging": {', b'"logging": { // log\n')
    assert statuses(run(files))["gds.cufile_mount_table"] == PASS


def test_nixl_import_and_backend_failures():
    files = edit_json(files_of("gpu_a01"), bf.NIXL_PROBE,
                      lambda d: d.update(backend_ok=False, error="GDS_MT: cuFileDriverOpen failed (5030)"))
    r = run(files)["nixl.backend"]
    assert r.found == "creating GDS_MT failed: GDS_MT: cuFileDriverOpen failed (5030)"
    assert "posix plugin on hosts without a GPU" in r.fix
    files = edit_json(files_of("lab_gpu1"), bf.NIXL_PROBE,
                      lambda d: d.update(import_ok=False, error="ModuleNotFoundError: No module named 'nixl'"))
    rs = run(files)
    assert rs["nixl.import"].found == "import failed: ModuleNotFoundError: No module named 'nixl'"
    assert "/opt/kvprov/nixl/bin/python3 -c 'import nixl'" in rs["nixl.import"].fix
    assert rs["nixl.backend"].status == SKIP


TOML = "files/etc/kvprov/nixl_backend_config.toml"


@pytest.mark.parametrize("old, new, fragment", [
    ("\nactive = true", '\nactive = "true"', 'active = "true" is a string, not a boolean'),
    ("use_aio = false", "use_aio = false\n\n[plugin.gds_mt]\nactive = true", "2 active tables (posix, gds_mt)"),
    ("[plugin.posix]", "[plugin.gds_mt]", "[plugin.gds_mt] is active, the inventory says posix"),
    ("[plugin.posix]\nactive = true\nuse_aio = false", "", "no [plugin.<name>] table"),
])
def test_nixl_toml_active_plugin(old, new, fragment):
    r = run(sub(files_of("lab_gpu1"), TOML, old, new))["nixl.active_plugin"]
    assert r.status == FAIL and fragment in r.found


def test_nixl_toml_options_must_be_booleans():
    files = sub(files_of("lab_gpu1"), TOML, "[plugin.posix]", 'use_direct_io = "false"\nl3_cleaner_enabled = true\n\n'
                                                              "[plugin.posix]")
    r = run(files)["nixl.options"]
    assert r.status == FAIL and 'use_direct_io = "false" is not a boolean' in r.found and "bool()" in r.found
    good = sub(files_of("gpu_a01"), TOML, "use_direct_io = true", "use_direct_io = true\nl3_cleaner_enabled = false")
    assert run(good)["nixl.options"].found == "use_direct_io = true, l3_cleaner_enabled = false"


def test_nixl_relative_config_path():
    files = edit_json(files_of("lab_gpu1"), bf.DESIRED, lambda d: d["nixl"].update(config_path="nixl.toml"))
    rs = run(files)
    assert rs["nixl.config"].status == FAIL and "is relative" in rs["nixl.config"].found
    assert rs["nixl.active_plugin"].status == SKIP


def test_engine_failed_or_restarting_without_gpu():
    files = sub(files_of("lab_gpu1"), "systemctl/kvprov-sglang-main.service.txt", "ActiveState=inactive",
                "ActiveState=failed")
    r = run(files)["engine.main.state"]
    assert r.status == FAIL and "failed or in a restart loop" in r.found and "journalctl -u kvprov-sglang-main" in r.fix
    files = sub(files_of("lab_gpu1"), "systemctl/kvprov-sglang-main.service.txt", "NRestarts=0", "NRestarts=3")
    assert run(files)["engine.main.state"].status == FAIL


def test_engine_never_started_without_gpu_is_a_skip():
    files = sub(files_of("lab_gpu1"), "systemctl/kvprov-sglang-main.service.txt",
                "ConditionTimestamp=Sun 2026-11-29 22:48:03 UTC", "ConditionTimestamp=")
    r = run(files)["engine.main.state"]
    assert r.status == SKIP and r.found.endswith("no GPU: not started")


def test_engine_on_gpu_host_not_running_restarted_or_unhealthy():
    name = "systemctl/kvprov-sglang-gpu0-3.service.txt"
    files = sub(files_of("gpu_a01"), name, "ActiveState=active", "ActiveState=inactive")
    rs = run(files)
    assert rs["engine.gpu0-3.state"].status == FAIL and "not running" in rs["engine.gpu0-3.state"].found
    assert rs["engine.gpu0-3.health"].status == SKIP
    files = sub(files_of("gpu_a01"), name, "NRestarts=0", "NRestarts=2")
    assert run(files)["engine.gpu0-3.state"].status == WARN
    files = edit_json(files_of("gpu_a01"), bf.HEALTH,
                      lambda d: d["gpu4-7"].update(ok=False, status=None, error="connection refused"))
    r = run(files)["engine.gpu4-7.health"]
    assert r.found == "GET http://127.0.0.1:8001/health: connection refused"


def test_engine_unit_problems():
    files = sub(files_of("lab_gpu1"), "systemctl/kvprov-sglang-main.service.txt", "UnitFileState=enabled",
                "UnitFileState=disabled")
    sub(files, "systemctl/kvprov-sglang-main.service.txt", "NeedDaemonReload=no", "NeedDaemonReload=yes")
    r = run(files)["engine.main.unit"]
    assert r.status == FAIL and "UnitFileState=disabled: not started at boot" in r.found and "daemon-reload" in r.found
    # what systemd runs (systemctl show) is judged, not only the file: a relative TOML path
    files = sub(files_of("lab_gpu1"), "systemctl/kvprov-sglang-main.service.txt",
                "@/etc/kvprov/nixl_backend_config.toml", "@nixl_backend_config.toml")
    r = run(files)["engine.main.unit"]
    assert (r.status, r.found) == (FAIL, "ExecStart does not pass --hicache-storage-backend-extra-config "
                                         "@/etc/kvprov/nixl_backend_config.toml (systemctl show)")
    assert r.fix == "kvprov deploy INVENTORY --limit kvlab-gpu1 --tags engine"
    # without ExecStart in `systemctl show`, the unit file's line is judged
    files = sub(files_of("lab_gpu1"), "files/etc/systemd/system/kvprov-sglang-main.service",
                "@/etc/kvprov/nixl_backend_config.toml", "@nixl_backend_config.toml")
    files["systemctl/kvprov-sglang-main.service.txt"] = b"".join(
        line for line in files["systemctl/kvprov-sglang-main.service.txt"].splitlines(keepends=True)
        if not line.startswith(b"ExecStart="))
    assert run(files)["engine.main.unit"].found == ("ExecStart does not pass --hicache-storage-backend-extra-config "
                                                    "@/etc/kvprov/nixl_backend_config.toml (the unit file)")


def test_storage_env_unset_shared_or_off_mount():
    name = "systemctl/kvprov-sglang-main.service.txt"
    unset = sub(files_of("lab_gpu1"), name, "SGLANG_HICACHE_NIXL_BACKEND_STORAGE_DIR=/mnt/kvcache/kvlab-gpu1/main ", "")
    r = run(unset)["engine.main.storage_env"]
    assert r.status == FAIL
    assert r.found.startswith("no storage directory is set (SGLANG_HICACHE_NIXL_BACKEND_STORAGE_DIR, systemctl "
                              "show): SGLang silently falls back to /tmp/hicache_storage")
    dup = sub(files_of("lab_gpu1"), name, "=/mnt/kvcache/kvlab-gpu1/main ",
              "=/mnt/kvcache/kvlab-gpu1/main,/mnt/kvcache/kvlab-gpu1/main ")
    assert "listed twice: SGLang refuses to start" in run(dup)["engine.main.storage_env"].found
    local = sub(files_of("lab_gpu1"), name, "=/mnt/kvcache/kvlab-gpu1/main ", "=/var/lib/sglang/kv ")
    assert "not under the KV mount /mnt/kvcache: local disk" in run(local)["engine.main.storage_env"].found
    shared = sub(files_of("gpu_a01"), "systemctl/kvprov-sglang-gpu4-7.service.txt", "/gpu4-7 ", "/gpu0-3 ")
    assert "the directory of instance gpu0-3" in run(shared)["engine.gpu4-7.storage_env"].found


def test_storage_env_from_the_unit_file_when_systemctl_is_missing():
    files = files_of("lab_storage_tmp")
    del files["systemctl/kvprov-sglang-main.service.txt"]
    r = run(files)["engine.main.storage_env"]
    assert r.status == FAIL
    assert r.found.startswith("/tmp/hicache_storage (SGLANG_HICACHE_NIXL_BACKEND_STORAGE_DIR, the unit file): ")


def test_storage_dir_missing_unwritable_or_off_the_mount():
    def change(**kw):
        return run(edit_json(files_of("lab_gpu1"), bf.STORAGE_DIRS, lambda d: d["instances"]["main"].update(kw)))
    assert change(exists=False)["engine.main.storage_dir"].found == "/mnt/kvcache/kvlab-gpu1/main does not exist"
    r = change(writable_by_service_user=False, owner="root", group="root")["engine.main.storage_dir"]
    assert "(root:root 0750) is not writable by sglang" in r.found and "chown sglang:sglang" in r.fix
    r = change(is_on_kv_mount=False, fstype="ext4", device="/dev/vda", mount="/")["engine.main.storage_dir"]
    assert "is on ext4 /dev/vda (mounted on /), not on the KV mount" in r.found


def test_storage_dir_on_mount_judged_from_mountinfo_without_the_flag():
    files = edit_json(files_of("lab_gpu1"), bf.STORAGE_DIRS, lambda d: d["instances"]["main"].pop("is_on_kv_mount"))
    assert run(files)["engine.main.storage_dir"].status == PASS
    sub(files, bf.MOUNTINFO, " /mnt/kvcache ", " /mnt/other ")
    assert run(files)["engine.main.storage_dir"].status == FAIL


def test_packages_missing():
    files = sub(files_of("lab_gpu1"), bf.PACKAGES, "rdma-core\t44.0-2\n", "")
    assert run(files)["packages.required"].found == "not installed: rdma-core"


def test_hostile_desired_names_do_not_escape_the_bundle():
    def change(d):
        d["engine"]["instances"][0]["unit"] = "../../../etc/passwd"
        d["engine"]["instances"][0]["units"] = ["../../../etc/passwd"]
        d["nixl"]["config_path"] = "/../../../etc/passwd"
    rs = run(edit_json(files_of("lab_gpu1"), bf.DESIRED, change))
    assert "not a systemd unit name" in rs["engine.main.unit"].found
    assert "files/etc/passwd" in rs["nixl.config"].found  # normalised inside the bundle: simply missing


def test_no_instances():
    rs = run(edit_json(files_of("lab_gpu1"), bf.DESIRED, lambda d: d["engine"].update(instances=[])))
    assert rs["engine.instances"].status == SKIP and not any(k.startswith("engine.main") for k in rs)


def test_text_from_files_is_escaped_and_capped():
    files = edit_json(files_of("lab_gpu1"), bf.NIXL_PROBE,
                      lambda d: d.update(import_ok=False, error="\x1b[2J" + "x" * 5000))
    found = run(files)["nixl.import"].found
    assert "\x1b" not in found and "\\x1b[2J" in found and len(found) < 400


def test_evaluate_bundle_usage_errors(tmp_path):
    with pytest.raises(KvprovError, match="no such bundle directory") as e:
        ev.evaluate_bundle(tmp_path / "nope")
    assert e.value.exit_code == EXIT_USAGE
    with pytest.raises(KvprovError, match="desired.json: missing from the bundle") as e:
        ev.evaluate_bundle(tmp_path)
    assert e.value.exit_code == EXIT_USAGE


def test_summary_counts():
    s = results("lab_tcp_fallback")["summary"]
    assert (s.status, s.found) == (FAIL, "19 pass, 4 fail, 0 warn, 12 skip")


def test_engine_state_without_gpu_json_when_not_installed():
    files = files_of("lab_gpu1")
    del files[bf.GPU]
    rs = run(files)
    assert rs["engine.main.state"].status == PASS  # install: false decides alone
    assert "kvprov_engine_install is false" in rs["engine.main.state"].found
    assert rs["gds.gpu"].found == "gpu.json: missing from the bundle"


def test_nfs_tcp_profile():
    files = files_of("lab_tcp_fallback")

    def tcp(d):
        d["storage"].update(profile="nfs_tcp", transport="tcp")
        d["storage"]["options"] = [o.replace("rdma", "tcp").replace("20049", "2049") for o in d["storage"]["options"]]
    edit_json(files, bf.DESIRED, tcp)
    sub(files, "files/etc/systemd/system/mnt-kvcache.mount", "proto=rdma,port=20049", "proto=tcp,port=2049")
    files["files/etc/fstab"] = b"/dev/vda / ext4 errors=remount-ro 0 1\n"
    rs = run(files)
    assert {k: r.status for k, r in rs.items() if r.status in (FAIL, WARN)} == {}
    assert rs["mount.transport"].found == "xprt: tcp (options say proto=tcp)"
    assert rs["rdma.module"].found == "storage profile nfs_tcp does not use RDMA"
    assert rs["packages.required"].expected == "installed: nfs-common or nfs-utils"


def test_collect_json_missing_or_for_another_host_is_a_warning():
    files = files_of("lab_gpu1")
    edit_json(files, bf.COLLECT, lambda d: d.update(host="kvlab-gpu2"))
    r = run(files)["bundle.collect"]
    assert r.status == WARN and "collect.json names host kvlab-gpu2, desired.json kvlab-gpu1" in r.found
    del files[bf.COLLECT]
    r = run(files)["bundle.collect"]
    assert r.status == WARN and r.found == "collect.json: missing from the bundle"
    assert run(files)["summary"].status == PASS


# ---------------------------------------------------------------------------- failure paths (issue 14)

def test_rpcrdma_must_be_live_not_loading_or_unloading():
    files = files_of("lab_gpu1")
    assert run(files)["rdma.module"].found == "rpcrdma (Live)"
    for state in ("Loading", "Unloading"):
        text = files_of("lab_gpu1")[bf.MODULES].decode()
        line = next(x for x in text.splitlines() if x.startswith("rpcrdma "))
        r = run(sub(files_of("lab_gpu1"), bf.MODULES, line, line.replace(" Live ", f" {state} ")))["rdma.module"]
        assert r.status == FAIL and r.found.startswith(f"rpcrdma is {state}, not Live")


def test_rdma_link_judges_the_port_that_carries_the_mount():
    files = files_of("gpu_a01")  # the mount's clientaddr 192.168.10.101 is on ens1f0np0 (ip_addr.txt)
    r = run(files)["rdma.link"]
    assert r.status == PASS and r.found == "mlx5_0/1 ACTIVE (ens1f0np0)"
    assert r.expected == "the RDMA port of ens1f0np0 (the mount's address 192.168.10.101) ACTIVE"
    # that port down while the others are ACTIVE: any ACTIVE port used to pass
    sub(files, bf.RDMA_LINK, "mlx5_0/1 state ACTIVE physical_state LINK_UP", "mlx5_0/1 state DOWN physical_state DISABLED")
    r = run(files)["rdma.link"]
    assert r.status == FAIL and r.found.startswith("mlx5_0/1 DOWN DISABLED (ens1f0np0); other ports: mlx5_1/1 ACTIVE")


def test_rdma_link_without_the_address_map_passes_only_when_every_port_is_active():
    files = files_of("gpu_a01")
    del files["ip_addr.txt"]  # a bundle of an older collector: which port carries the mount is unknown
    r = run(files)["rdma.link"]
    assert r.status == WARN and "the mount may use a port that is down" in r.found
    assert r.expected.endswith("the capture has no ip_addr.txt, the interfaces' addresses)")
    sub(files, bf.RDMA_LINK, "mlx5_2/1 state DOWN physical_state DISABLED", "mlx5_2/1 state ACTIVE physical_state LINK_UP")
    assert run(files)["rdma.link"].status == PASS
    files[bf.RDMA_LINK] = b"link mlx5_0/1 state DOWN physical_state DISABLED netdev ens1f0np0\n"
    assert run(files)["rdma.link"].status == FAIL
    files = sub(files_of("gpu_a01"), "ip_addr.txt", "192.168.10.101/24", "192.168.10.109/24")
    assert run(files)["rdma.link"].expected.endswith("no interface holds 192.168.10.101 (ip_addr.txt))")


def test_an_unreadable_fstab_is_not_no_duplicate():
    files = files_of("lab_gpu1")
    files["files/etc/fstab"] = b"\x00\x01binary"
    r = run(files)["mount.unit"]
    assert r.status == WARN
    assert "/etc/fstab could not be checked for a second mount of /mnt/kvcache: holds binary data" in r.found
    del files["files/etc/fstab"]  # no fstab on the host, and the collector said nothing: nothing to check
    assert run(files)["mount.unit"].status == PASS
    files = edit_json(files, bf.COLLECT, lambda d: d.setdefault("errors", {}).update(
        {"files/etc/fstab": "[Errno 13] Permission denied: '/etc/fstab'"}))
    r = run(files)["mount.unit"]
    assert r.status == WARN and "(the collector said: [Errno 13] Permission denied" in r.found


def test_pnfs_layout_of_the_wrong_type_fails():
    files = sub(files_of("gpu_a01"), bf.MOUNTSTATS, "pnfs=LAYOUT_NFSV4_1_FILES", "pnfs=LAYOUT_BLOCK_VOLUME")
    r = run(files)["mount.pnfs_layout"]
    assert r.status == FAIL and r.found == "pnfs=LAYOUT_BLOCK_VOLUME"
    assert r.expected == "pnfs=LAYOUT_NFSV4_1_FILES (kvprov_storage_pnfs_layout: files)"
    files = edit_json(files_of("lab_gpu1"), bf.DESIRED, lambda d: d["storage"].update(pnfs_layout="files"))
    assert run(files)["mount.pnfs_layout"].found == "pnfs=LAYOUT_BLOCK_VOLUME"
    assert run(files)["mount.pnfs_layout"].status == FAIL


def test_cufile_allowing_compat_mode_fails_when_the_inventory_forbids_it():
    files = edit_json(files_of("gpu_a01"), bf.CUFILE, lambda d: d["properties"].update(allow_compat_mode=True))
    r = run(files)["gds.cufile_compat"]
    assert (r.status, r.found) == (FAIL, "true")
    assert r.expected == "properties.allow_compat_mode: false (a JSON boolean)"
    allowed = edit_json(files, bf.DESIRED, lambda d: d["gds"].update(allow_compat_mode=True))
    assert run(allowed)["gds.cufile_compat"].status == PASS
    forbidden = edit_json(files_of("gpu_a01"), bf.DESIRED, lambda d: d["gds"].update(allow_compat_mode=True))
    assert run(forbidden)["gds.cufile_compat"].found == "false"  # cufile.json forbids what the inventory allows
    assert run(forbidden)["gds.cufile_compat"].status == FAIL


def test_a_mount_that_lost_an_extra_option_fails_and_an_unasked_one_warns():
    files = sub(files_of("gpu_a01"), bf.MOUNTINFO, ",local_lock=none,write=eager,", ",local_lock=none,")
    r = run(files)["mount.options"]
    assert r.status == FAIL and r.found == "write: live lazy, want eager"
    assert run(files)["mount.unit"].found.startswith("live vs unit: write: live lazy, want eager")
    files = sub(files_of("gpu_a01"), bf.MOUNTINFO, ",local_lock=none,", ",local_lock=none,nconnect=4,")
    r = run(files)["mount.options"]
    assert r.status == WARN and r.found.endswith("; nconnect=4: live, but not among the desired options")
    assert "kvprov_storage_extra_options" in r.fix
