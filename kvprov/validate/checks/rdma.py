"""rdma.*: rpcrdma loaded and an ACTIVE RDMA link (storage profiles over RDMA)."""

from __future__ import annotations

from kvprov.validate import bundle as bf
from kvprov.validate import parsers
from kvprov.validate.context import Context, check
from kvprov.validate.result import FAIL, PASS, SKIP, WARN, Result, res, show


def _rdma_skip(c: Context) -> Result | None:
    if c.d.transport != "rdma":
        return res(SKIP, "", f"storage profile {c.d.profile} does not use RDMA")
    return None


@check("rdma.module")
def rdma_module(c: Context) -> Result:
    skip = _rdma_skip(c)
    if skip:
        return skip
    expected = "rpcrdma loaded (NFS over RDMA)"
    mods = c.parsed(bf.MODULES, parsers.parse_modules)
    for name in ("rpcrdma", "xprtrdma"):
        if name in mods:
            return res(PASS, expected, f"{name} ({show(mods[name])})")
    if not mods:
        return res(WARN, expected, "/proc/modules is empty: a kernel without loadable modules (rpcrdma may be "
                                  "built in: look for /sys/module/rpcrdma)", "")
    return res(FAIL, expected, "rpcrdma is not loaded: this kernel cannot mount NFS over RDMA",
              "`modprobe rpcrdma` (kvprov's /etc/modules-load.d/kvprov-rdma.conf loads it at boot: "
              f"{c.deploy('rdma')}). On MOFED/DOCA hosts use NVIDIA's rpcrdma (mlnx-nfsrdma-dkms): the inbox one "
              "fails to load next to DOCA's ib_core, and mount.nfs then says \"incorrect mount option\"")


@check("rdma.link")
def rdma_link(c: Context) -> Result:
    skip = _rdma_skip(c)
    if skip:
        return skip
    expected = "at least one RDMA link in state ACTIVE"
    links = c.parsed(bf.RDMA_LINK, parsers.parse_rdma_link)
    active = [link for link in links if link.state == "ACTIVE"]
    if active:
        return res(PASS, expected, ", ".join(f"{show(x.name)} ACTIVE" + (f" ({show(x.netdev)})" if x.netdev else "")
                                            for x in active))
    if links:
        return res(FAIL, expected, "; ".join(f"{show(x.name)} {show(x.state)} {show(x.physical_state)}"
                                            for x in links[:8]),
                  "bring the RDMA port up: cable and switch port, `ibv_devinfo`, `ip link show NETDEV`; "
                  "soft-RoCE (labs): `systemctl restart kvprov-soft-roce.service`")
    return res(FAIL, expected, "`rdma link` lists no RDMA device",
              "install rdma-core and the NIC's driver (mlx5_ib for ConnectX); labs: set "
              "kvprov_rdma_soft_roce_netdevs")
