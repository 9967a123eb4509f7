"""gds.* on the GPU host's bundle (gpu_a01) with cufile.json or gdscheck edited: what each
check finds and the fix it names (the gds role, on that host)."""

import json

from kvprov.validate import bundle as bf
from kvprov.validate import evaluate as ev
from kvprov.validate.bundle import Bundle
from kvprov.validate.result import FAIL, PASS, SKIP, WARN
from tests.conftest import FIXTURES

ROOT = FIXTURES / "bundles/gpu_a01"
FILES = {str(p.relative_to(ROOT)): p.read_bytes() for p in ROOT.rglob("*") if p.is_file()}
FIX = "kvprov deploy INVENTORY --limit gpu-a01.corp.example.com --tags gds"


def run(cufile=None, gdscheck=None, desired=None) -> dict:
    files = dict(FILES)
    for name, change in (("cufile.json", cufile), ("desired.json", desired)):
        if change:
            data = json.loads(files[name])
            change(data)
            files[name] = json.dumps(data).encode()
    if gdscheck:
        files["gdscheck.txt"] = gdscheck(files["gdscheck.txt"].decode()).encode()
    b = Bundle(files=files)
    return {r.id: r for r in ev.evaluate(b, bf.load_desired(b)) if r.id.startswith("gds.")}


def found_and_fix(r) -> tuple:
    return r.status, r.found, r.fix


def test_the_good_gpu_host_passes_every_gds_check():
    rs = run()
    assert {k: r.status for k, r in rs.items()} == {
        "gds.gpu": PASS, "gds.nfs": PASS, "gds.peerdirect": PASS, "gds.platform": PASS, "gds.compat_mode": PASS,
        "gds.udev": SKIP, "gds.cufile_mount_table": PASS, "gds.cufile_rdma_addrs": PASS, "gds.cufile_compat": PASS}
    assert rs["gds.cufile_compat"].found == "false"
    assert rs["gds.cufile_rdma_addrs"].found == "192.168.10.101, 192.168.11.101"
    assert rs["gds.udev"].found == "NFS: cuFile finds it through cufile.json's mount table, not udev"


def test_compat_mode_allowed_live_but_forbidden_by_the_inventory_fails():
    def allow(d):
        d["properties"]["allow_compat_mode"] = True

    assert found_and_fix(run(cufile=allow)["gds.cufile_compat"]) == (FAIL, "true", FIX)


def test_compat_mode_missing_or_not_a_boolean():
    def drop(d):
        del d["properties"]["allow_compat_mode"]

    def text(d):
        d["properties"]["allow_compat_mode"] = "false"

    assert found_and_fix(run(cufile=drop)["gds.cufile_compat"]) == (
        FAIL, "not set: cuFile's default is true, so GDS may silently fall back to POSIX", FIX)
    assert found_and_fix(run(cufile=text)["gds.cufile_compat"]) == (FAIL, '"false", not a JSON boolean', FIX)

    def allowed(d):
        d["gds"]["allow_compat_mode"] = True

    r = run(cufile=drop, desired=allowed)["gds.cufile_compat"]
    assert (r.status, r.found) == (PASS, "not set (cuFile's default: true)")


def test_mount_table_problems_name_the_gds_role():
    def no_entry(d):
        d["fs"]["nfs"]["mount_table"] = {"/other": {"rdma_dev_addr_list": []}}

    def bad_entry(d):
        d["fs"]["nfs"]["mount_table"]["/mnt/kvcache"]["extra"] = 1

    def no_table(d):
        del d["fs"]["nfs"]

    assert found_and_fix(run(cufile=no_entry)["gds.cufile_mount_table"]) == (
        FAIL, "fs.nfs.mount_table has no entry for /mnt/kvcache (entries: /other)", FIX)
    r = run(cufile=bad_entry)["gds.cufile_mount_table"]
    assert (r.status, r.fix) == (FAIL, FIX)
    assert r.found.startswith("fs.nfs.mount_table[/mnt/kvcache] is {") and "json type mismatch" in r.found
    assert found_and_fix(run(cufile=no_table)["gds.cufile_mount_table"]) == (
        FAIL, "fs.nfs.mount_table is missing or not an object", FIX)


def test_rdma_addresses_must_match_in_properties_and_the_mount_table():
    def one(d):
        d["properties"]["rdma_dev_addr_list"] = ["192.168.10.101"]
        d["fs"]["nfs"]["mount_table"]["/mnt/kvcache"]["rdma_dev_addr_list"] = ["192.168.11.101"]

    assert found_and_fix(run(cufile=one)["gds.cufile_rdma_addrs"]) == (
        FAIL, 'properties.rdma_dev_addr_list is ["192.168.10.101"]; '
              'mount_table[/mnt/kvcache].rdma_dev_addr_list is ["192.168.11.101"]', FIX)

    def none(d):
        d["gds"]["rdma_dev_addr_list"] = []

    def empty(d):
        d["properties"]["rdma_dev_addr_list"] = []
        d["fs"]["nfs"]["mount_table"]["/mnt/kvcache"]["rdma_dev_addr_list"] = []

    r = run(cufile=empty, desired=none)["gds.cufile_rdma_addrs"]
    assert (r.status, r.found) == (WARN, "the list is empty: cuFile has no RDMA NIC address to use for NFS")


def test_gdscheck_compat_mode_on_fails_naming_the_cufile_path_and_the_role():
    r = run(gdscheck=lambda t: t.replace("properties.use_compat_mode : false",
                                         "properties.use_compat_mode : true"))["gds.compat_mode"]
    assert r.status == FAIL
    assert r.found == ("properties.use_compat_mode : true: cuFile may fall back to POSIX I/O through the page cache "
                       "without any error")
    assert f"properties.allow_compat_mode in /etc/cufile.json ({FIX})" in r.fix


def test_gds_disabled_skips_and_says_why():
    def disabled(d):
        d["gds"]["mode"] = "disabled"

    rs = run(desired=disabled)
    assert {r.status for r in rs.values()} == {SKIP}
    assert rs["gds.gpu"].found == rs["gds.cufile_compat"].found == "kvprov_gds_mode is disabled"


def test_a_failed_platform_verification_names_its_first_three_errors():
    def fail(text):
        return text.replace("Platform verification succeeded", "Platform verification error") + \
            "".join(f" error {i}: broken\n" for i in range(5))

    r = run(gdscheck=fail)["gds.platform"]
    assert r.status == FAIL
    assert r.found == "Platform verification error; error 0: broken; error 1: broken"


def test_a_mount_table_without_the_mount_point_lists_five_entries_at_most():
    def many(d):
        d["fs"]["nfs"]["mount_table"] = {f"/m{i}": {"rdma_dev_addr_list": []} for i in range(7)}

    assert run(cufile=many)["gds.cufile_mount_table"].found == (
        "fs.nfs.mount_table has no entry for /mnt/kvcache (entries: /m0, /m1, /m2, /m3, /m4)")
