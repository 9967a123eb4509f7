"""packages.*: the OS packages the storage profile needs (nfs-common, rdma-core)."""

from __future__ import annotations

from kvprov.validate import bundle as bf
from kvprov.validate import parsers
from kvprov.validate.context import Context, check
from kvprov.validate.result import FAIL, PASS, SKIP, Result, res, show


@check("packages.required")
def packages_required(c: Context) -> Result:
    need: list[tuple[str, ...]] = []
    if c.d.is_nfs:
        need.append(("nfs-common", "nfs-utils"))
    if c.d.transport == "rdma":
        need.append(("rdma-core",))
    if not need:
        return res(SKIP, "", "storage profile local needs no client package")
    expected = "installed: " + ", ".join(" or ".join(alts) for alts in need)
    pkgs = c.parsed(bf.PACKAGES, parsers.parse_packages)
    missing = [" or ".join(alts) for alts in need if not any(a in pkgs for a in alts)]
    if missing:
        return res(FAIL, expected, "not installed: " + ", ".join(missing), c.deploy("kvcache_mount,rdma"))
    return res(PASS, expected, ", ".join(f"{a} {show(pkgs[a], 40)}" for alts in need for a in alts if a in pkgs))
