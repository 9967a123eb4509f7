"""gds.*: GPUDirect Storage: the GPU, `gdscheck -p` (NFS, PeerDirect, platform, compat
mode), udev for local block devices, and cufile.json (mount table, RDMA addresses,
compat mode). Skipped on hosts without a GPU or with kvprov_gds_mode: disabled."""

from __future__ import annotations

import json
from typing import Any

from kvprov.validate import bundle as bf
from kvprov.validate import parsers
from kvprov.validate.context import Context, check
from kvprov.validate.result import FAIL, PASS, SKIP, WARN, Result, res, show


def _gds_skip(c: Context) -> Result | None:
    if c.d.gds_mode == "disabled":
        return res(SKIP, "", "kvprov_gds_mode is disabled")
    if not c.gpu().present:
        return res(SKIP, "", "no NVIDIA GPU")
    return None


def _gds_nfs_skip(c: Context) -> Result | None:
    skip = _gds_skip(c)
    if skip is None and c.d.transport != "rdma":
        skip = res(SKIP, "", f"GDS reads NFS only over RDMA; storage profile {c.d.profile} goes through cuFile's "
                            "POSIX path")
    return skip


@check("gds.gpu")
def gds_gpu(c: Context) -> Result:
    if c.d.gds_mode == "disabled":
        return res(SKIP, "", "kvprov_gds_mode is disabled")
    gpu = c.gpu()
    expected = f"an NVIDIA GPU (kvprov_gds_mode: {c.d.gds_mode})"
    if gpu.present:
        count = f"{gpu.count} GPU(s), " if gpu.count is not None else ""
        return res(PASS, expected, f"{count}NVIDIA driver {show(gpu.driver or '?')}")
    if c.d.gds_mode == "required":
        return res(FAIL, expected, "no NVIDIA GPU (/proc/driver/nvidia/gpus is missing: no GPU, or no driver)",
                  "check the NVIDIA driver (`nvidia-smi`), or set kvprov_gds_mode: auto for hosts without a GPU")
    return res(SKIP, expected, "no NVIDIA GPU")


@check("gds.nfs")
def gds_nfs(c: Context) -> Result:
    skip = _gds_nfs_skip(c)
    if skip:
        return skip
    expected = "gdscheck -p: NFS : Supported (or nvfs)"
    g = c.parsed(bf.GDSCHECK, parsers.parse_gdscheck)
    if g.nfs_supported:
        return res(PASS, expected, f"NFS : {show(g.nfs)}")
    found = f"NFS : {show(g.nfs)}" if g.nfs is not None else "gdscheck -p printed no NFS line"
    if g.errors:
        found += f" ({show(g.errors[0], 120)})"
    return res(FAIL, expected, found,
              "GDS over NFS/RDMA needs the nvidia-fs driver (`nvidia-gds`; /proc/driver/nvidia-fs/version) and "
              "NVIDIA's rpcrdma: MOFED >= 5.1, or DOCA-OFED with mlnx-nfsrdma-dkms (never both)")


@check("gds.peerdirect")
def gds_peerdirect(c: Context) -> Result:
    skip = _gds_nfs_skip(c)
    if skip:
        return skip
    expected = "gdscheck -p: Mellanox PeerDirect : Enabled"
    g = c.parsed(bf.GDSCHECK, parsers.parse_gdscheck)
    if str(g.peerdirect).lower() == "enabled":
        return res(PASS, expected, "Mellanox PeerDirect : Enabled")
    return res(FAIL, expected, f"Mellanox PeerDirect : {show(g.peerdirect or 'not shown')}",
              "load GPU peer memory for the RDMA NIC (`modprobe nvidia-peermem`; MOFED/DOCA provide it): without "
              "it the NIC cannot reach GPU memory")


@check("gds.platform")
def gds_platform(c: Context) -> Result:
    skip = _gds_skip(c)
    if skip:
        return skip
    expected = "gdscheck -p: Platform verification succeeded"
    g = c.parsed(bf.GDSCHECK, parsers.parse_gdscheck)
    if g.platform_verified:
        return res(PASS, expected, "Platform verification succeeded")
    if g.platform_verified is None:
        return res(WARN, expected, "no platform verification line (truncated output?)", bf.RECOLLECT)
    return res(FAIL, expected, show("; ".join(g.errors[:3]) or "platform verification failed", 300),
              "run `gdscheck -p` on the host and fix what it lists (IOMMU on, driver not loaded, ...)")


@check("gds.compat_mode")
def gds_compat_mode(c: Context) -> Result:
    skip = _gds_skip(c)
    if skip:
        return skip
    allow = c.d.allow_compat_mode
    expected = "no compat mode (kvprov_gds_allow_compat_mode: false)" if not allow else \
        "compat mode allowed (kvprov_gds_allow_compat_mode: true)"
    g = c.parsed(bf.GDSCHECK, parsers.parse_gdscheck)
    signs = []
    if g.use_compat_mode:
        signs.append("properties.use_compat_mode : true")
    if g.nfs_in_compat:
        signs.append(f"NFS : {show(g.nfs)}")
    if not signs:
        if g.use_compat_mode is None and not g.nfs:
            return res(WARN, expected, "gdscheck -p shows neither properties.use_compat_mode nor an NFS line",
                      bf.RECOLLECT)
        return res(PASS, expected, "properties.use_compat_mode : false")
    found = ", ".join(signs) + ": cuFile may fall back to POSIX I/O through the page cache without any error"
    if allow:
        return res(WARN, expected, found, "set kvprov_gds_allow_compat_mode: false once GDS works, so a broken GDS "
                                         "path fails loudly")
    return res(FAIL, expected, found,
              f"the live cuFile setting differs from the inventory: check properties.allow_compat_mode in "
              f"{c.d.cufile_path} ({c.deploy('gds')}) and CUFILE_ALLOW_COMPAT_MODE / CUFILE_FORCE_COMPAT_MODE / "
              "CUFILE_ENV_PATH_JSON in the service environment; `NFS : nvfs, compat` means nvidia-fs cannot serve "
              "this mount (see gds.nfs)")


def _mount_table_entry(c: Context) -> tuple[Any, str]:
    """cufile.json's fs.nfs.mount_table[mount point] and a problem ("" when well shaped)."""
    cf = c.cufile()
    fs = cf.get("fs")
    nfs = fs.get("nfs") if isinstance(fs, dict) else None
    table = nfs.get("mount_table") if isinstance(nfs, dict) else None
    if not isinstance(table, dict):
        return None, "fs.nfs.mount_table is missing or not an object"
    mp = c.d.mount_point
    if mp not in table:
        keys = ", ".join(show(k, 60) for k in list(table)[:5]) or "none"
        return None, f"fs.nfs.mount_table has no entry for {mp} (entries: {keys})"
    entry = table[mp]
    if not isinstance(entry, dict) or set(entry) != {"rdma_dev_addr_list"} or \
            not isinstance(entry["rdma_dev_addr_list"], list) or \
            not all(isinstance(a, str) for a in entry["rdma_dev_addr_list"]):
        return entry, (f"fs.nfs.mount_table[{mp}] is {show(entry, 100)}: cuFile accepts only "
                       '{"rdma_dev_addr_list": ["IP", ...]} and fails with "json type mismatch" otherwise')
    return entry, ""


@check("gds.udev")
def gds_udev(c: Context) -> Result:
    skip = _gds_skip(c)
    if skip:
        return skip
    data = c.b.json_object(bf.UDEV)
    fstype, dev, record = data.get("fstype"), data.get("dev"), data.get("record")
    if fstype in ("nfs", "nfs4"):
        return res(SKIP, "", "NFS: cuFile finds it through cufile.json's mount table, not udev")
    expected = "udev's record of the block device under the KV tier (cuFile reads its volume attributes)"
    if not isinstance(dev, str) or not dev.split(":")[0].isdigit() or dev.split(":")[0] == "0":
        return res(FAIL, expected, f"{c.d.mount_point} is on {show(fstype)} (device {show(dev)}), no block device: "
                                   "cuFile cannot register files there", "put the KV tier on NFS or a block device")
    if data.get("exists") is not True:
        where = "no /run/udev/data at all (no udevd, or a container without /run/udev)" \
            if data.get("udev_dir") is False else f"{show(record)} is missing"
        return res(FAIL, expected, f"{where}: cuFile cannot read the volume attributes of {show(fstype)} "
                                   f"{show(data.get('device'))} and registers no file (NIXL GDS/GDS_MT fail with "
                                   "NIXL_ERR_BACKEND, cuFile error 5027), even in compat mode",
                   "run systemd-udevd on the host (`udevadm trigger`), or bind-mount the host's /run/udev "
                   "read-only into the container")
    return res(PASS, expected, f"{show(record)} for {show(fstype)} {show(data.get('device'))}")


@check("gds.cufile_mount_table")
def gds_cufile_mount_table(c: Context) -> Result:
    skip = _gds_nfs_skip(c)
    if skip:
        return skip
    expected = f'fs.nfs.mount_table = {{"{c.d.mount_point}": {{"rdma_dev_addr_list": [...]}}}}'
    entry, problem = _mount_table_entry(c)
    if problem:
        return res(FAIL, expected, problem, c.deploy("gds"))
    return res(PASS, expected, f"{c.d.mount_point}: {show(entry, 120)}")


@check("gds.cufile_rdma_addrs")
def gds_cufile_rdma_addrs(c: Context) -> Result:
    skip = _gds_nfs_skip(c)
    if skip:
        return skip
    want = sorted(c.d.rdma_dev_addr_list)
    expected = f"rdma_dev_addr_list {want} in properties and in the mount table"
    cf = c.cufile()
    props = cf.get("properties") if isinstance(cf.get("properties"), dict) else {}
    problems = []
    live = props.get("rdma_dev_addr_list")
    if not isinstance(live, list) or sorted(map(str, live)) != want:
        problems.append(f"properties.rdma_dev_addr_list is {show(live, 100)}")
    entry, problem = _mount_table_entry(c)
    if not problem and sorted(entry["rdma_dev_addr_list"]) != want:
        problems.append(f"mount_table[{c.d.mount_point}].rdma_dev_addr_list is {show(entry['rdma_dev_addr_list'])}")
    if problems:
        return res(FAIL, expected, "; ".join(problems), c.deploy("gds"))
    if not want:
        return res(WARN, expected, "the list is empty: cuFile has no RDMA NIC address to use for NFS",
                  "set kvprov_gds_rdma_dev_addr_list to the host's RDMA NIC addresses")
    return res(PASS, expected, ", ".join(want))


@check("gds.cufile_compat")
def gds_cufile_compat(c: Context) -> Result:
    skip = _gds_skip(c)
    if skip:
        return skip
    want = c.d.allow_compat_mode
    expected = f"properties.allow_compat_mode: {json.dumps(want)} (a JSON boolean)"
    cf = c.cufile()
    props = cf.get("properties") if isinstance(cf.get("properties"), dict) else {}
    if "allow_compat_mode" not in props:
        if want:
            return res(PASS, expected, "not set (cuFile's default: true)")
        return res(FAIL, expected, "not set: cuFile's default is true, so GDS may silently fall back to POSIX",
                  c.deploy("gds"))
    value = props["allow_compat_mode"]
    if not isinstance(value, bool):
        return res(FAIL, expected, f"{show(json.dumps(value), 40)}, not a JSON boolean", c.deploy("gds"))
    if value != want:
        return res(FAIL, expected, json.dumps(value), c.deploy("gds"))
    return res(PASS, expected, json.dumps(value))
