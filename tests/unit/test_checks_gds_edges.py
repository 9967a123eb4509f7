"""gds.* on gpu_a01 at the edges: GDS disabled or over TCP (skips without an expectation), the GPU
capture without a count or driver, gdscheck output missing the compat-mode or NFS lines, compat
mode allowed by the inventory, and gds.udev's block-device rules."""

import json

from kvprov.validate import bundle as bf
from kvprov.validate import evaluate as ev
from kvprov.validate.bundle import Bundle
from kvprov.validate.result import FAIL, PASS, SKIP, WARN
from tests.unit.test_checks_gds import FILES, run


def with_json(name: str, **entry) -> dict:
    """The gds results of gpu_a01 with the JSON capture `name` updated (None values dropped)."""
    data = json.loads(FILES[name])
    data.update(entry)
    b = Bundle(files={**FILES, name: json.dumps({k: v for k, v in data.items() if v is not None}).encode()})
    return {r.id: r for r in ev.evaluate(b, bf.load_desired(b))}


def gdscheck_without(*prefixes):
    def edit(text):
        return "".join(line for line in text.splitlines(keepends=True) if not line.strip().startswith(prefixes))
    return edit


def test_disabled_or_tcp_skips_with_no_expectation():
    def disabled(d):
        d["gds"]["mode"] = "disabled"

    def tcp(d):
        d["storage"]["transport"] = "tcp"

    rs = run(desired=disabled)
    for check_id in ("gds.gpu", "gds.nfs", "gds.platform"):
        assert (rs[check_id].status, rs[check_id].expected, rs[check_id].found) == (
            SKIP, "", "kvprov_gds_mode is disabled")
    r = run(desired=tcp)["gds.nfs"]
    assert (r.status, r.expected) == (SKIP, "")
    assert r.found.startswith("GDS reads NFS only over RDMA; storage profile netapp_pnfs_rdma goes through")


def test_gpu_shows_the_count_and_driver_when_captured():
    assert run()["gds.gpu"].found == "8 GPU(s), NVIDIA driver 550.90.07"
    assert with_json("gpu.json", gpus=None, driver=None)["gds.gpu"].found == "NVIDIA driver ?"


def test_compat_mode_not_shown_at_all_is_a_warning():
    r = run(gdscheck=gdscheck_without("properties.use_compat_mode", "NFS "))["gds.compat_mode"]
    assert (r.status, r.found) == (WARN, "gdscheck -p shows neither properties.use_compat_mode nor an NFS line")


def test_compat_mode_judged_from_whichever_line_is_there():
    r = run(gdscheck=gdscheck_without("NFS "))["gds.compat_mode"]
    assert (r.status, r.found) == (PASS, "properties.use_compat_mode : false")
    r = run(gdscheck=gdscheck_without("properties.use_compat_mode"))["gds.compat_mode"]
    assert (r.status, r.found) == (PASS, "properties.use_compat_mode : false")


def test_compat_mode_allowed_by_the_inventory_is_only_a_warning():
    def allow(d):
        d["gds"]["allow_compat_mode"] = True

    r = run(desired=allow, gdscheck=lambda t: t.replace("use_compat_mode : false", "use_compat_mode : true"))[
        "gds.compat_mode"]
    assert (r.status, r.expected) == (WARN, "compat mode allowed (kvprov_gds_allow_compat_mode: true)")
    assert run()["gds.compat_mode"].expected == "no compat mode (kvprov_gds_allow_compat_mode: false)"


def udev(**entry):
    r = with_json("udev.json", **entry)["gds.udev"]
    return r.status, r.expected, r.found


EXPECTED = "udev's record of the block device under the KV tier (cuFile reads its volume attributes)"


def test_udev_skips_nfs_and_needs_a_block_device():
    assert udev(fstype="nfs") == (SKIP, "", "NFS: cuFile finds it through cufile.json's mount table, not udev")
    for dev, shown in ((None, "null"), ("0:45", "0:45"), ("x:1", "x:1")):
        assert udev(fstype="tmpfs", dev=dev, device="tmpfs") == (
            FAIL, EXPECTED, f"/mnt/kvcache is on tmpfs (device {shown}), no block device: cuFile cannot register "
                            "files there")


def test_udev_record_of_a_block_device():
    block = {"fstype": "xfs", "dev": "8:0", "device": "/dev/sda", "record": "/run/udev/data/b8:0"}
    assert udev(**block, exists=True) == (PASS, EXPECTED, "/run/udev/data/b8:0 for xfs /dev/sda")
    status, _, found = udev(**block, exists=False)
    assert (status, found.split(": cuFile")[0]) == (FAIL, "/run/udev/data/b8:0 is missing")
    assert "cannot read the volume attributes of xfs /dev/sda and registers no file" in found


def test_platform_line_missing_is_a_warning_to_collect_again():
    r = run(gdscheck=gdscheck_without("Platform verification"))["gds.platform"]
    assert (r.status, r.found, r.fix) == (WARN, "no platform verification line (truncated output?)", bf.RECOLLECT)


def test_mount_table_entry_addresses_must_be_a_list_of_strings():
    for addrs in ("192.168.10.101", [1, 2]):
        def edit(d, addrs=addrs):
            d["fs"]["nfs"]["mount_table"]["/mnt/kvcache"]["rdma_dev_addr_list"] = addrs

        r = run(cufile=edit)["gds.cufile_mount_table"]
        assert r.status == FAIL
        assert r.found == (f"fs.nfs.mount_table[/mnt/kvcache] is {{\"rdma_dev_addr_list\": {json.dumps(addrs)}}}: "
                           'cuFile accepts only {"rdma_dev_addr_list": ["IP", ...]} and fails with "json type '
                           'mismatch" otherwise')


def test_no_gpu_fails_where_gds_is_required_and_skips_the_rest_without_expectation():
    rs = with_json("gpu.json", present=False, gpus=None, driver=None)
    assert (rs["gds.gpu"].status, rs["gds.gpu"].found, rs["gds.gpu"].fix) == (
        FAIL, "no NVIDIA GPU (/proc/driver/nvidia/gpus is missing: no GPU, or no driver)",
        "check the NVIDIA driver (`nvidia-smi`), or set kvprov_gds_mode: auto for hosts without a GPU")
    assert (rs["gds.nfs"].status, rs["gds.nfs"].expected, rs["gds.nfs"].found) == (SKIP, "", "no NVIDIA GPU")
