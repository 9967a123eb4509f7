"""The lab on real hosts: QEMU VMs with kernel NFS over soft-RoCE, nspawn containers."""

import json
import subprocess
from pathlib import Path

import pytest

from kvprov import mountstats
from kvprov.lab import handmount, topology
from kvprov.lab.ssh import ssh
from tests.conftest import LAB_CONTAINERS, kvprov

pytestmark = pytest.mark.lab

GPU1 = ("127.0.0.1", 2221)
STORAGE = ("127.0.0.1", 2220)


def sh(host, command, timeout=120):
    r = ssh(*host, command, timeout=timeout)
    assert r.returncode == 0, f"`{command}` on {host} -> {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def test_every_host_runs_and_answers_ssh(lab):
    names = {h["name"]: h for h in lab["hosts"]}
    assert set(names) == {"kvlab-storage", "kvlab-gpu1", *(f"kvlab-c{i}" for i in range(1, LAB_CONTAINERS + 1))}
    assert all(h["running"] and h["ssh"] for h in lab["hosts"])
    assert Path(lab["inventory"]).read_text().count("kvlab-c1") == 1


def test_second_lab_up_reports_and_does_nothing(lab):
    before = {h["name"]: h["pid"] for h in lab["hosts"]}
    r = kvprov("lab", "up", "--containers", str(LAB_CONTAINERS), check=True)
    assert "already running; nothing to do" in r.stderr
    after = json.loads(kvprov("lab", "status", "--json", check=True).stdout)
    assert {h["name"]: h["pid"] for h in after["hosts"]} == before


def test_storage_vm_serves_nfs41_plus_over_rdma_and_tcp_with_pnfs(lab):
    out = sh(STORAGE, "cat /proc/fs/nfsd/portlist /proc/fs/nfsd/versions; exportfs -v; rdma link")
    assert "rdma 20049" in out and "tcp 2049" in out
    assert "-4.0" in out and "+4.1" in out and "+4.2" in out  # NFSv4.0 disabled
    assert "pnfs" in out
    assert "state ACTIVE" in out


def test_gpu_node_comes_up_unconfigured(lab):
    """Configuring RDMA/NFS is kvprov's job: the lab leaves it to the roles."""
    out = sh(GPU1, "rdma link | wc -l; awk '$3 ~ /^nfs4?$/' /proc/mounts | wc -l; systemctl is-enabled nfs-blkmap || true;"
                   " dpkg-query -W -f '${Status}\\n' nfs-common rdma-core")
    lines = out.split()
    assert lines[0] == "0" and lines[1] == "0" and "disabled" in out
    assert out.count("install ok installed") == 2


def test_nfs_over_rdma_mount_gets_a_pnfs_layout(lab):
    """Mount by hand the way the storage role will, then prove transport and layout."""
    mnt = "/mnt/kvprov-labtest"
    sh(GPU1, handmount.mount_script(mnt, "10.99.1.1"))
    try:
        before = mountstats.find(mountstats.parse(sh(GPU1, "cat /proc/self/mountstats")), mnt)
        sh(GPU1, f"dd if=/dev/urandom of={mnt}/labtest.bin bs=1M count=8 oflag=direct status=none; "
                 f"dd if={mnt}/labtest.bin of=/dev/null bs=1M iflag=direct status=none")
        after = mountstats.find(mountstats.parse(sh(GPU1, "cat /proc/self/mountstats")), mnt)
    finally:
        sh(GPU1, f"rm -f {mnt}/labtest.bin; " + handmount.unmount_script(mnt))
    assert after.opts["proto"] == "rdma" and after.opts["port"] == "20049" and after.opts["vers"] == "4.1"
    assert after.transports and all(t.protocol == "rdma" for t in after.transports)
    assert after.pnfs == "LAYOUT_BLOCK_VOLUME"
    assert after.op_count("LAYOUTGET") > before.op_count("LAYOUTGET") >= 0
    assert after.op_count("LAYOUTGET") > 0


def test_container_boots_systemd_clean(lab):
    c1 = ("10.98.1.2", 22)
    out = ssh(*c1, "systemctl is-system-running; hostname; systemd-detect-virt", timeout=30).stdout.split()
    assert out == ["running", "kvlab-c1", "systemd-nspawn"]


def _lab_leftovers() -> list[str]:
    home = str(topology.lab_home())
    found = []
    for p in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            cmd = p.read_bytes().decode(errors="replace")
        except OSError:
            continue
        if str(topology.run_dir()) in cmd:
            found.append(f"process {p.parent.name}: {cmd[:80]}")
    found += [f"netns {n}" for n in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                                   text=True).stdout.split() if n.startswith("kvlab-")]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    found += [f"link {line.split(':')[1].strip()}" for line in links.splitlines() if ": kvlab-" in line]
    found += [f"mount {line.split()[1]}" for line in Path("/proc/mounts").read_text().splitlines()
              if home in line]
    if topology.run_dir().exists():
        found.append(f"dir {topology.run_dir()}")
    return found


@pytest.mark.lab_teardown
def test_lab_down_leaves_nothing_behind(lab, lab_alone):
    assert _lab_leftovers()  # the lab is up: its processes, namespaces and mounts are visible
    r = kvprov("lab", "down", check=True)
    assert "removed netns kvlab-c1" in r.stdout and "removed netns kvlab-c2" in r.stdout
    assert _lab_leftovers() == []
    # the image cache and key stay, so the next `lab up` is fast
    assert list(topology.cache_dir().glob("image-*/READY")) and topology.ssh_key_path().exists()
    assert "no lab running" in kvprov("lab", "status").stdout
