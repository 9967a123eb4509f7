"""rdma.*: rpcrdma loaded (Live) and the RDMA link carrying the mount ACTIVE (storage
profiles over RDMA)."""

from __future__ import annotations

import ipaddress

from kvprov.validate import bundle as bf
from kvprov.validate import parsers
from kvprov.validate.bundle import FileProblem
from kvprov.validate.context import Context, check
from kvprov.validate.result import FAIL, PASS, SKIP, WARN, Result, res, show

# `ip -o addr show`: which interface holds the mount's client address (the collector
# captures it beside `rdma link`; older bundles lack it).
IP_ADDR = bf.IP_ADDR


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
        if name in mods and mods[name] == "Live":
            return res(PASS, expected, f"{name} (Live)")
        if name in mods:
            return res(FAIL, expected, f"{name} is {show(mods[name])}, not Live: it is being loaded or unloaded, "
                                      "and a mount over RDMA fails meanwhile",
                      "wait and collect again; if it stays so, a module load or unload hangs: see `dmesg` and "
                      "`lsmod | grep rdma`, and reboot the host if `modprobe rpcrdma` cannot finish")
    if not mods:
        return res(WARN, expected, "/proc/modules is empty: a kernel without loadable modules (rpcrdma may be "
                                  "built in: look for /sys/module/rpcrdma)", "")
    return res(FAIL, expected, "rpcrdma is not loaded: this kernel cannot mount NFS over RDMA",
              "`modprobe rpcrdma` (kvprov's /etc/modules-load.d/kvprov-rdma.conf loads it at boot: "
              f"{c.deploy('rdma')}). On MOFED/DOCA hosts use NVIDIA's rpcrdma (mlnx-nfsrdma-dkms): the inbox one "
              "fails to load next to DOCA's ib_core, and mount.nfs then says \"incorrect mount option\"")


def _mount_netdev(c: Context) -> tuple[str, str]:
    """The interface holding the mount's client address (mountinfo's clientaddr=), or "" and
    why the capture does not tell."""
    try:
        live = c.live() if c.d.is_nfs else None
    except FileProblem:  # mountinfo unusable: mount.present names it
        live = None
    addr = live["options"].get("clientaddr") if live else None
    if not isinstance(addr, str):
        return "", "the live mount shows no clientaddr="
    if not c.b.exists(IP_ADDR):
        return "", f"the capture has no {IP_ADDR}, the interfaces' addresses"
    try:
        addr = str(ipaddress.ip_address(addr))
    except ValueError:
        return "", f"clientaddr={show(addr)} is not an address"
    netdev = c.parsed(IP_ADDR, parsers.parse_ip_addr).get(addr, "")
    return (netdev, f"the mount's address {addr}") if netdev else ("", f"no interface holds {addr} ({IP_ADDR})")


def _listed(links: list) -> str:
    return ", ".join(f"{show(x.name)} {show(x.state)}" + (f" {show(x.physical_state)}" if x.state != "ACTIVE" else "")
                     + (f" ({show(x.netdev)})" if x.netdev else "") for x in links[:8])


@check("rdma.link")
def rdma_link(c: Context) -> Result:
    skip = _rdma_skip(c)
    if skip:
        return skip
    links = c.parsed(bf.RDMA_LINK, parsers.parse_rdma_link)
    if not links:
        return res(FAIL, "an RDMA link in state ACTIVE", "`rdma link` lists no RDMA device",
                  "install rdma-core and the NIC's driver (mlx5_ib for ConnectX); labs: set "
                  "kvprov_rdma_soft_roce_netdevs")
    netdev, why = _mount_netdev(c)
    carrying = [x for x in links if netdev and x.netdev == netdev]
    fix = ("bring the RDMA port up: cable and switch port, `ibv_devinfo`, `ip link show NETDEV`; "
           "soft-RoCE (labs): `systemctl restart kvprov-soft-roce.service`")
    if carrying:  # judge the port the mount uses, not any port
        expected = f"the RDMA port of {netdev} ({why}) ACTIVE"
        if any(x.state == "ACTIVE" for x in carrying):
            return res(PASS, expected, _listed(carrying))
        others = [x for x in links if x not in carrying]
        return res(FAIL, expected, _listed(carrying) + (f"; other ports: {_listed(others)}" if others else ""), fix)
    if netdev:
        why = f"{netdev} holds {why}, and no RDMA port names it"
    expected = f"every RDMA port ACTIVE (which one carries the mount is not known: {why})"
    down = [x for x in links if x.state != "ACTIVE"]
    if not down:
        return res(PASS, expected, _listed(links))
    if len(down) == len(links):
        return res(FAIL, expected, _listed(links), fix)
    return res(WARN, expected, f"{_listed(links)}: the mount may use a port that is down", fix)
