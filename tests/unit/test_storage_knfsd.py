"""`kvprov storage check` on a Linux NFS server: the parsers of knfsd's files and commands
on samples in their real format (Debian 12's kernel and nfs-utils, as on the lab's storage
VM), the judgement of a server's state, and the playbook run for real through Ansible on
this machine (which runs no knfsd: each unreadable file is named)."""

from __future__ import annotations

import base64
import dataclasses
import json
from pathlib import Path

import yaml

from kvprov import cli
from kvprov.storage import knfsd, linux
from kvprov.storage.systems import Client, System

# /proc/fs/nfsd/versions with the lab's nfs.conf (vers3=n, vers4.0=n) on Linux 6.1, and an
# older kernel's with every default (no separate 4.0 switch)
VERSIONS_LAB = "-3 +4 -4.0 +4.1 +4.2\n"
VERSIONS_OLD = "-2 +3 +4 +4.1 +4.2\n"
PORTLIST = "rdma 20049\nrdma 20049\ntcp 2049\ntcp 2049\n"
EXPORTFS = (
    "/kv           \t<world>(sync,wdelay,hide,no_subtree_check,pnfs,sec=sys,rw,insecure,no_root_squash,"
    "no_all_squash)\n"
    "/srv/nfs/scratch\\040area\n"
    "\t\t10.99.0.0/16(sync,wdelay,hide,no_subtree_check,sec=sys,ro,secure,root_squash,no_all_squash)\n"
    "/srv/nfs/scratch\\040area\n"
    "\t\tkvlab-gpu1(sync,wdelay,hide,no_subtree_check,sec=sys,rw,secure,no_root_squash,no_all_squash)\n"
)
STATFS = "4096 5242880 4980736 10485760 10485700\n"  # 20 GiB XFS, 19 GiB free; 10 M inodes


def test_versions_with_and_without_a_separate_4_0_switch():
    lab = knfsd.versions(VERSIONS_LAB)
    assert lab == {"3": False, "4": True, "4.0": False, "4.1": True, "4.2": True}
    assert knfsd.version_enabled(lab, "4.1") and not knfsd.version_enabled(lab, "4.0")
    old = knfsd.versions(VERSIONS_OLD)
    assert knfsd.version_enabled(old, "4.0") and knfsd.version_enabled(old, "4.1")
    assert not knfsd.version_enabled(knfsd.versions("+3 -4 +4.1"), "4.1")  # 4.1 needs 4 on


def test_portlist():
    assert knfsd.portlist(PORTLIST) == {("rdma", 20049), ("tcp", 2049)}
    assert knfsd.portlist("tcp 2049\n") == {("tcp", 2049)}


def test_exportfs_v_world_long_paths_and_escapes():
    exports = knfsd.exports(EXPORTFS)
    assert [(e.path, e.client) for e in exports] == [
        ("/kv", "*"), ("/srv/nfs/scratch area", "10.99.0.0/16"), ("/srv/nfs/scratch area", "kvlab-gpu1")]
    assert exports[0].has("pnfs") and exports[0].has("no_root_squash") and exports[1].has("ro")


def test_statfs():
    st = knfsd.statfs(STATFS)
    assert (st.size, st.available, st.files, st.files_free) == (20 * 2**30, 19 * 2**30, 10485760, 10485700)
    assert knfsd.statfs("stat: cannot read file system information for '/kv': No such file\n") is None


# ---------------------------------------------------------------------------- judging a server

SERVER = System(name="kvlab-storage", kind="linux", address="127.0.0.1", data_addresses=["10.99.1.1"])
GPU1 = Client(host="kvlab-gpu1", server="10.99.1.1", export="/kv", rdma=True, port=20049, layout="block",
              idmap_domain="localdomain", address=None)


def good_state(**changes) -> linux.State:
    st = linux.State(versions=VERSIONS_LAB, portlist=PORTLIST, exports=EXPORTFS, statfs={"/kv": STATFS})
    return dataclasses.replace(st, **changes)


def judged(st: linux.State, clients=(GPU1,)) -> dict[str, object]:
    return {r.id: r for r in linux.evaluate(SERVER, st, list(clients))}


def test_the_lab_server_passes():
    results = judged(good_state())
    assert {k: r.status for k, r in results.items()} == {
        "nfs.v4.1": "pass", "nfs.v4.0": "pass", "nfs.rdma": "pass", "export./kv": "pass",
        "export./kv.pnfs": "pass", "export./kv.access": "pass", "volume./kv.space": "pass",
        "volume./kv.inodes": "pass"}
    assert results["volume./kv.space"].found == "file system of /kv: 19.0 GiB of 20.0 GiB free (95.0%)"


def test_rdma_listener_stopped_is_named_with_the_fix():
    r = judged(good_state(portlist="tcp 2049\ntcp 2049\n"))["nfs.rdma"]
    assert r.status == "fail" and "does not listen for RPC/RDMA on 20049" in r.found
    assert "echo 'rdma 20049' > /proc/fs/nfsd/portlist" in r.fix and "rdma-port=20049" in r.fix


def test_export_without_pnfs_fails_for_block_layout_clients_only():
    st = good_state(exports=EXPORTFS.replace("pnfs,", ""))
    r = judged(st)["export./kv.pnfs"]
    assert r.status == "fail" and r.found == "exported without pnfs to *" and "exportfs -ra" in r.fix
    assert "export./kv.pnfs" not in judged(st, [dataclasses.replace(GPU1, layout="none")])


def test_versions_4_1_off_fails_and_4_0_on_warns():
    assert judged(good_state(versions="+3 +4 -4.1 -4.2\n"))["nfs.v4.1"].status == "fail"
    assert judged(good_state(versions=VERSIONS_OLD))["nfs.v4.0"].status == "warn"


def test_export_access_root_squash_a_host_left_out_and_an_unknown_address():
    squashed = good_state(exports=EXPORTFS.replace("no_root_squash", "root_squash", 1))
    r = judged(squashed)["export./kv.access"]
    assert r.status == "fail" and "lacks no_root_squash" in r.found and "kvlab-gpu1" in r.found
    subnet = good_state(exports="/kv\t10.99.2.0/24(sync,pnfs,sec=sys,rw,no_root_squash)\n")
    outside = dataclasses.replace(GPU1, address="10.99.1.2")
    r = judged(subnet, [outside])["export./kv.access"]
    assert r.status == "fail" and "no entry of the export matches it" in r.found
    r = judged(subnet)["export./kv.access"]  # the lab VM's ansible_host is 127.0.0.1: address unknown
    assert r.status == "warn" and "kvprov_storage_client_address" in r.fix


def test_export_missing_full_volume_and_unreadable_files():
    r = judged(good_state(exports=EXPORTFS.split("/srv")[0].replace("/kv ", "/data")))["export./kv"]
    assert r.status == "fail" and "exportfs -v lists no /kv (exports: /data)" in r.found
    full = judged(good_state(statfs={"/kv": "4096 5242880 52428 10485760 10485700\n"}))["volume./kv.space"]
    assert full.status == "fail" and "(1.0%)" in full.found
    st = linux.State(errors={"versions": "cannot read /proc/fs/nfsd/versions: file not found",
                             "portlist": "cannot read /proc/fs/nfsd/portlist: file not found",
                             "exports": "exportfs -v failed: no such command"})
    results = judged(st)
    assert {k: r.status for k, r in results.items()} == {"nfs.v4.1": "fail", "nfs.rdma": "fail", "export./kv": "fail"}
    assert "nfs-server" in results["nfs.v4.1"].fix


def test_state_from_the_capture_task():
    captured = {"ansible_facts": {"kvprov_storage_state": {
        "versions": {"content": base64.b64encode(VERSIONS_LAB.encode()).decode(), "encoding": "base64"},
        "portlist": {"failed": True, "msg": "file not found: /proc/fs/nfsd/portlist"},
        "exports": {"rc": 0, "stdout": EXPORTFS, "stderr": ""},
        "statfs": [{"item": "/kv", "rc": 0, "stdout": STATFS},
                   {"item": "/gone", "rc": 1, "stdout": "", "stderr": "stat: cannot read file system information"}]}}}
    st = linux.state_of(captured)
    assert st.versions == VERSIONS_LAB and st.portlist is None and st.exports == EXPORTFS
    assert st.statfs == {"/kv": STATFS}
    assert st.errors == {"portlist": "cannot read /proc/fs/nfsd/portlist: file not found: /proc/fs/nfsd/portlist",
                         "statfs /gone": "stat: cannot read file system information"}


def test_the_playbook_reads_a_real_host_and_names_what_it_cannot_read(tmp_path, capsys):
    """Through Ansible for real (a local connection): this machine runs no knfsd."""
    export = tmp_path / "kv"
    export.mkdir()
    inv = tmp_path / "inventory.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {
        "gpu_nodes": {"hosts": {"gpu1": {"ansible_host": "10.99.1.2", "kvprov_storage_server": "10.99.1.1",
                                         "kvprov_storage_export": str(export)}}},
        "kv_storage": {"hosts": {"nfs1": {"ansible_connection": "local", "kvprov_storage_system": "linux",
                                          "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}}}}}))
    out = tmp_path / "r.json"
    code = cli.main(["storage", "check", str(inv), "--json", str(out)])
    printed = capsys.readouterr()
    results = {r["id"]: r for r in json.loads(out.read_text())["hosts"]["nfs1"]["results"]}
    assert code == 1, printed
    if Path("/proc/fs/nfsd/versions").exists():  # a machine that runs knfsd: its versions are read
        assert "/proc/fs/nfsd/versions: " in results["nfs.v4.1"]["found"]
    else:
        assert results["nfs.v4.1"]["status"] == "fail"
        assert "cannot read /proc/fs/nfsd/versions" in results["nfs.v4.1"]["found"]
    assert results["storage.clients"]["found"] == f"gpu1 (10.99.1.1:{export})"
    assert results[f"export.{export}"]["status"] == "fail"
