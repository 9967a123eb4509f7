"""`kvprov storage check` on the lab's storage VM (knfsd over ssh): it passes on the lab;
with knfsd's RDMA listener closed and /kv re-exported without pnfs it fails naming both;
restored, it passes again. Runs on the running lab (after test_6_faults), about 30 s, and
leaves the server as it found it."""

import json
from pathlib import Path

import pytest

from kvprov.lab.ssh import ssh
from tests.conftest import kvprov

pytestmark = pytest.mark.lab

STORAGE = ("127.0.0.1", 2220)
PORTLIST = "/proc/fs/nfsd/portlist"
NFS_CONF = "/etc/nfs.conf.d/kvprov-lab.conf"  # kvprov/lab/guest/nfs.conf


def sh(command: str, timeout: float = 60) -> str:
    r = ssh(*STORAGE, command, timeout=timeout)
    assert r.returncode == 0, f"`{command}` on kvlab-storage -> {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def storage_check(lab, report: Path) -> tuple[int, dict, str]:
    r = kvprov("storage", "check", lab["inventory"], "--json", str(report), timeout=180)
    results = {x["id"]: x for x in json.loads(report.read_text())["hosts"]["kvlab-storage"]["results"]}
    return r.returncode, results, r.stdout + r.stderr


def test_storage_check_passes_then_names_a_closed_rdma_listener_and_an_export_without_pnfs(lab, storage_alone, tmp_path):
    assert "pnfs" in sh("exportfs -v"), "the lab exports /kv with pnfs (kvprov/lab/guest/exports)"
    code, results, out = storage_check(lab, tmp_path / "before.json")
    assert code == 0, out
    assert results["nfs.rdma"]["status"] == "pass" and results["export./kv.pnfs"]["status"] == "pass", out
    assert "kvlab-gpu1 (10.99.1.1:/kv)" in results["storage.clients"]["found"]

    try:
        # knfsd without its RDMA listener (Linux 6.1 refuses "-rdma 20049" in the portlist): the
        # lab's nfs.conf with rdma=n and a restart (the clients reclaim their state afterwards)
        sh(f"sed -i 's/^rdma=y/rdma=n/' {NFS_CONF} && systemctl restart nfs-server && ! grep -q '^rdma' {PORTLIST}")
        sh("sed -i 's/,pnfs)/)/' /etc/exports && exportfs -ra && ! exportfs -v | grep -q pnfs")  # the same, no pnfs
        code, results, out = storage_check(lab, tmp_path / "broken.json")
    finally:
        sh(f"sed -i 's/^rdma=n/rdma=y/' {NFS_CONF} && sed -i 's/insecure)/insecure,pnfs)/' /etc/exports && "
           "systemctl restart nfs-server && exportfs -ra && "
           f"grep -q '^rdma 20049' {PORTLIST}")
    assert code == 1, out
    failed = {k for k, r in results.items() if r["status"] == "fail" and k != "summary"}
    assert failed == {"nfs.rdma", "export./kv.pnfs"}, out
    assert "does not listen for RPC/RDMA on 20049" in results["nfs.rdma"]["found"]
    assert results["export./kv.pnfs"]["found"] == "exported without pnfs to *"
    assert "kvlab-storage  nfs.rdma" in out and "FAIL" in out

    code, results, out = storage_check(lab, tmp_path / "after.json")
    assert code == 0, out
