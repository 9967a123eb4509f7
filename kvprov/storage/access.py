"""What ONTAP and knfsd checks share (pure): whether an export rule's client spec covers a
GPU node, the access result over all GPU nodes of an export, and free space and inodes
against the inventory's thresholds."""

from __future__ import annotations

import fnmatch
import ipaddress
from typing import Callable

from kvprov.storage.systems import Client, System
from kvprov.validate.result import FAIL, PASS, WARN, Result

CATEGORY = "storage"
EVERYONE = ("*", "<world>", "0.0.0.0/0", "::/0", "0/0")


def result(system: System | str, id_: str, status: str, expected: str = "", found: str = "", fix: str = "",
           detail: str = "") -> Result:
    host = system if isinstance(system, str) else system.name
    return Result(id_, CATEGORY, status, expected, found, fix, host, detail)


def matches(spec: str, address: str | None) -> bool | None:
    """Whether a client spec (an address, a CIDR network or address/netmask, a host name or
    wildcard, * or 0.0.0.0/0) covers `address`; None when it cannot be told (a netgroup, or
    a name against an address)."""
    spec = spec.strip()
    if spec.lower() in EVERYONE:
        return True
    if address is None or spec.startswith("@"):
        return None
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        ip = None
    try:
        net = ipaddress.ip_network(spec.strip("[]"), strict=False)
    except ValueError:
        net = None
    if net is not None:
        return (ip in net) if ip is not None and ip.version == net.version else (None if ip is None else False)
    if ip is not None:
        return None  # a host name rule: the controller does not resolve names
    return fnmatch.fnmatch(address.lower(), spec.lower())


def access_result(system: System, export: str, clients: list[Client],
                  verdict: Callable[[Client], tuple[bool | None, str]], fix: str) -> Result:
    """One result for an export over its clients. `verdict(client)` says whether the rule
    that applies to the client grants what deploy needs (None: cannot tell) and why."""
    bad, unknown, good = [], [], []
    for c in clients:
        ok, why = verdict(c)
        (good if ok else unknown if ok is None else bad).append(f"{c.host} ({c.address or 'address unknown'}): {why}")
    expected = f"every GPU node that mounts {export} may read, write and act as root (no root squash)"
    if bad:
        return result(system, f"export.{export}.access", FAIL, expected, "; ".join(bad), fix)
    if unknown:
        return result(system, f"export.{export}.access", WARN, expected, "; ".join(unknown),
                      "set kvprov_storage_client_address on those GPU nodes (the address the storage sees them "
                      "mount from), or check the rule by hand")
    return result(system, f"export.{export}.access", PASS, expected, "; ".join(good))


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def capacity(system: System, export: str, size: int | None, available: int | None, files: int | None,
             files_free: int | None, what: str) -> list[Result]:
    """volume.<export>.space and .inodes against kvprov_storage_min_free_percent and
    kvprov_storage_min_free_inodes_percent. `what` names the volume or file system."""
    out = []
    for kind, total, free, limit, var, unit in (
            ("space", size, available, system.min_free_percent, "kvprov_storage_min_free_percent", _gib),
            ("inodes", files, files_free, system.min_free_inodes_percent, "kvprov_storage_min_free_inodes_percent",
             lambda n: f"{int(n)} inodes")):
        id_ = f"volume.{export}.{kind}"
        expected = f"at least {limit:g}% of its {kind} free ({var})"
        if total is None or free is None:
            out.append(result(system, id_, WARN, expected, f"{what}: the {kind} figures were not reported", ""))
            continue
        if total <= 0:  # e.g. a file system without an inode limit
            out.append(result(system, id_, PASS, expected, f"{what}: no {kind} limit reported"))
            continue
        pct = 100.0 * free / total
        found = f"{what}: {unit(free)} of {unit(total)} free ({pct:.1f}%)"
        if pct < limit:
            fix = (f"grow the volume or delete data on it (engines without eviction fill it until their writes "
                   f"fail), or lower {var} if this is expected")
            out.append(result(system, id_, FAIL, expected, found, fix))
        else:
            out.append(result(system, id_, PASS, expected, found))
    return out
