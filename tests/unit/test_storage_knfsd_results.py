"""The knfsd check's results whole (every field), for each way a server can be, and the
parsers' edges: what a knfsd server says that is not what kvprov needs must never pass."""

import dataclasses

from kvprov.storage import knfsd, linux
from kvprov.validate.result import Result
from tests.unit.test_storage_knfsd import GPU1, SERVER, STATFS, good_state, judged

V = "/proc/fs/nfsd/versions: "


def r(id_, status, expected, found, fix=""):
    return Result(id_, "storage", status, expected, found, fix, "kvlab-storage")


def test_versions_results_whole():
    on = judged(good_state(versions="+3 +4 +4.0 +4.1 +4.2\n"))
    assert on["nfs.v4.1"] == r("nfs.v4.1", "pass", "NFS 4.1 served (the GPU nodes mount vers=4.1)",
                               V + "+3 +4 +4.0 +4.1 +4.2")
    assert on["nfs.v4.0"] == r("nfs.v4.0", "warn", "NFS 4.0 off (a client that does not pin vers= silently gets "
                               "4.0: no pNFS, no sessions)", V + "+3 +4 +4.0 +4.1 +4.2",
                               "vers4.0=n in [nfsd] of /etc/nfs.conf, then systemctl restart nfs-server")
    off = judged(good_state(versions="+3 +4 -4.0 -4.1 +4.2\n"))
    assert off["nfs.v4.1"] == r("nfs.v4.1", "fail", "NFS 4.1 served (the GPU nodes mount vers=4.1)",
                                V + "+3 +4 -4.0 -4.1 +4.2",
                                "vers4=y and vers4.1=y in [nfsd] of /etc/nfs.conf, then systemctl restart nfs-server")
    assert off["nfs.v4.0"].status == "pass" and off["nfs.v4.0"].fix == ""
    assert judged(good_state(versions="-4 +4.1"))["nfs.v4.1"].status == "fail"  # 4.1 needs 4 on


def test_rdma_results_whole():
    assert judged(good_state())["nfs.rdma"] == r(
        "nfs.rdma", "pass", "rdma 20049 in /proc/fs/nfsd/portlist (the GPU nodes mount proto=rdma)",
        "/proc/fs/nfsd/portlist: rdma 20049, tcp 2049")
    empty = judged(good_state(portlist=""))["nfs.rdma"]
    assert empty.found == "/proc/fs/nfsd/portlist: empty: knfsd does not listen for RPC/RDMA on 20049"
    other = dataclasses.replace(GPU1, host="gpu2", port=20050)
    two = judged(good_state(), [GPU1, other])["nfs.rdma"]
    assert two.expected == "rdma 20049, rdma 20050 in /proc/fs/nfsd/portlist (the GPU nodes mount proto=rdma)"
    assert two.found.endswith("knfsd does not listen for RPC/RDMA on 20050") and "'rdma 20050'" in two.fix
    tcp = dataclasses.replace(GPU1, rdma=False)
    assert "nfs.rdma" not in judged(good_state(portlist=None), [tcp])


def test_export_results_whole():
    res = judged(good_state())
    world = "*(sync,wdelay,hide,no_subtree_check,pnfs,sec=sys,rw,insecure,no_root_squash,no_all_squash)"
    assert res["export./kv"] == r("export./kv", "pass", "/kv exported", world)
    assert res["export./kv.pnfs"] == r("export./kv.pnfs", "pass", "the pnfs export option (the GPU nodes expect "
                                       "block layouts)", "pnfs on every entry")
    assert res["export./kv.access"].found == "kvlab-gpu1 (address unknown): *"
    assert res["volume./kv.inodes"] == r("volume./kv.inodes", "pass", "at least 10% of its inodes free "
                                         "(kvprov_storage_min_free_inodes_percent)",
                                         "file system of /kv: 10485700 inodes of 10485760 inodes free (100.0%)")
    two = good_state(exports="/kv/\t10.0.0.0/8(pnfs,rw,no_root_squash)\n/kv\t*(rw,no_root_squash)\n")
    assert judged(two)["export./kv"].found == "10.0.0.0/8(pnfs,rw,no_root_squash); *(rw,no_root_squash)"
    assert judged(two)["export./kv.pnfs"].found == "exported without pnfs to *"
    files = dataclasses.replace(GPU1, layout="files")
    assert judged(two, [files, GPU1])["export./kv.pnfs"].expected == (
        "the pnfs export option (the GPU nodes expect block/files layouts)")
    missing = judged(good_state(exports=""))["export./kv"]
    assert missing == r("export./kv", "fail", "/kv exported (mounted by kvlab-gpu1)",
                        "exportfs -v lists no /kv (exports: none)", "add /kv to /etc/exports and run exportfs -ra")
    unread = judged(dataclasses.replace(good_state(exports=None), errors={"exports": "exportfs -v failed"}))
    assert unread["export./kv"] == r("export./kv", "fail", "/kv exported", "exportfs -v failed",
                                     "install nfs-utils / nfs-kernel-server and start the NFS server")


def test_statfs_not_read_warns_naming_why():
    res = judged(good_state(statfs={}, errors={"statfs /kv": "stat: no such file"}))
    for kind in ("space", "inodes"):
        assert res[f"volume./kv.{kind}"] == r(f"volume./kv.{kind}", "warn", "its free space and inodes known",
                                              "stat: no such file")
    assert judged(good_state(statfs={"/kv": "garbage"}))["volume./kv.space"].found == "no statfs of /kv"


def test_state_of_names_what_could_not_be_read():
    st = linux.state_of({"ansible_facts": {"kvprov_storage_state": {
        "versions": {"content": "!!!not base64"}, "portlist": {},
        "exports": {"rc": 1, "stderr": "exportfs:\n  no\tsuch", "msg": "x"},
        "statfs": [{"item": "/a", "rc": 2, "msg": "no  stat"}]}}})
    assert (st.versions, st.portlist, st.exports, st.statfs) == (None, None, None, {})
    assert st.errors == {"versions": "cannot read /proc/fs/nfsd/versions: no content",
                         "portlist": "cannot read /proc/fs/nfsd/portlist: no content",
                         "exports": "exportfs -v failed (rc 1): exportfs: no such", "statfs /a": "no stat"}
    st = linux.state_of({"ansible_facts": {"kvprov_storage_state": {"exports": {"rc": 0, "stdout": None},
                                                                    "portlist": {"msg": "gone  away"}}}})
    assert st.exports == "" and st.errors["portlist"] == "cannot read /proc/fs/nfsd/portlist: gone away"
    assert "exports" not in st.errors
    st = linux.state_of({})
    assert st.errors["exports"] == "exportfs -v failed (rc None): None"


def test_parsers_edges():
    assert knfsd.versions("+4 -4.0 +4.1 x4 +a 4.2 +4.2.1 -3") == {"4": True, "4.0": False, "4.1": True, "3": False}
    assert knfsd.version_enabled({"4": True}, "4.0") is True and knfsd.version_enabled({"4": True}, "4.1") is False
    assert knfsd.version_enabled({}, "4.1") is False and knfsd.version_enabled({"4": False, "4.1": True}, "4.1") is False
    assert knfsd.portlist("rdma 20049\ntcp x\nudp\nrdma 20049 extra\n tcp  2049 \n") == {("rdma", 20049),
                                                                                        ("tcp", 2049)}
    text = ("/a\t*(rw)\n\n/very/long/path/here\n\t\t10.0.0.0/8(ro,,sync)\n  gpu1(rw)\n"
            "/b\tnot-a-client\n\t<world>(rw)\n/c\n")
    assert knfsd.exports(text) == [knfsd.Export("/a", "*", ("rw",)),
                                   knfsd.Export("/very/long/path/here", "10.0.0.0/8", ("ro", "sync")),
                                   knfsd.Export("/very/long/path/here", "gpu1", ("rw",)),
                                   knfsd.Export("/b", "*", ("rw",))]
    assert knfsd.exports("\t*(rw)\n") == []  # a client line before any path
    assert knfsd.statfs(STATFS) == knfsd.StatFs(4096 * 5242880, 4096 * 4980736, 10485760, 10485700)
    assert knfsd.statfs("1 2 3 4") is None and knfsd.statfs("1 2 3 4 x") is None


def test_rule_specificity():
    assert [linux._specificity(c) for c in ("gpu1", "10.0.0.1", "10.0.0.0/8", "@ng", "gpu*", "gpu?", "*")] == [
        1, 1, 2, 2, 2, 2, 3]


def test_unread_files_name_the_reason_or_nothing():
    st = linux.State(errors={"versions": "cannot read v", "portlist": "cannot read p"})
    res = judged(st)
    assert res["nfs.v4.1"] == r("nfs.v4.1", "fail", "NFS 4.1 served", "cannot read v",
                                "start the NFS server (systemctl start nfs-server)")
    assert res["nfs.rdma"] == r("nfs.rdma", "fail", "rdma 20049 in /proc/fs/nfsd/portlist (the GPU nodes mount "
                                "proto=rdma)", "cannot read p", "start the NFS server (systemctl start nfs-server)")
    bare = judged(linux.State())
    assert (bare["nfs.v4.1"].found, bare["nfs.rdma"].found, bare["export./kv"].found) == ("", "", "")


def test_state_of_text_that_is_not_utf8_and_a_statfs_without_output():
    import base64

    st = linux.state_of({"ansible_facts": {"kvprov_storage_state": {
        "versions": {"content": base64.b64encode(b"+4 +4.1 \xff").decode()},
        "exports": {"rc": 2, "msg": "exportfs  missing"},
        "statfs": [{"item": "/kv", "rc": 0, "stdout": None}]}}})
    assert st.versions == "+4 +4.1 \ufffd" and st.statfs == {"/kv": ""}
    assert st.errors["exports"] == "exportfs -v failed (rc 2): exportfs missing"


def test_contradictory_options_and_frozen_records():
    assert judged(good_state(exports="/kv\t*(pnfs,rw,ro,no_root_squash)\n"))["export./kv.access"].status == "fail"
    assert judged(good_state(exports="/kv\t*(pnfs,rw,no_root_squash,root_squash)\n"))[
        "export./kv.access"].status == "fail"
    assert len({knfsd.Export("/a", "*", ("rw",)), knfsd.Export("/a", "*", ("rw",))}) == 1
    assert hash(knfsd.StatFs(1, 2, 3, 4)) == hash(knfsd.StatFs(1, 2, 3, 4))
    assert knfsd.versions("X4 +4.1") == {"4.1": True} and knfsd.version_enabled({}, "4.0") is False
    assert knfsd.exports("/a\t*(rw) trailing\n") == []


def test_capacity_goes_on_to_inodes_after_a_volume_without_a_size():
    from kvprov.storage import access

    system = dataclasses.replace(SERVER, min_free_percent=10, min_free_inodes_percent=10)
    space, inodes = access.capacity(system, "/kv", 0, 0, 100, 5, "fs")
    assert (space.status, space.found, inodes.status) == ("pass", "fs: no space limit reported", "fail")
    warn = access.capacity(system, "/kv", None, None, 100, 50, "fs")[0]
    assert (warn.status, warn.fix) == ("warn", "")


def test_an_export_is_found_by_its_path_trailing_slash_or_not():
    exports = "/kvX/\t<world>(sync,wdelay,hide,no_subtree_check,pnfs,sec=sys,rw,insecure,no_root_squash)\n"
    client = dataclasses.replace(GPU1, export="/kvX")
    st = good_state(exports=exports, statfs={"/kvX": STATFS})
    assert judged(st, [client])["export./kvX"].status == "pass"
    other = dataclasses.replace(GPU1, export="/kv")
    assert judged(st, [other])["export./kv"].found == "exportfs -v lists no /kv (exports: /kvX/)"
