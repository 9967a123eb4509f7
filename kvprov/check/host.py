"""kvprov check: a host's effective values (HostView) and the rules that span several of them
for its KV mount (profile, protocol, trunking), its acceptance test and its address (pure)."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import replace
from typing import Any

from kvprov import sinks
from kvprov.check.values import (DEPRECATED, NFS_PROFILES, PROFILE_PROTOS, VarSpec, absolute_path, is_int,
                                 is_template, parse_mount_options, spec_findings, typed)
from kvprov.inventory import Host, Problem


class HostView:
    """A target host's effective values, each usable only if it has its spec's type."""

    def __init__(self, host: Host, specs: dict[str, VarSpec]):
        self.host, self.specs = host, specs

    def get(self, name: str) -> Any:
        """The value, or None when it is missing, a template, or of the wrong type."""
        var = self.host.var(name)
        if var is None or is_template(var.value):
            return None
        spec = self.specs.get(DEPRECATED.get(name, name))
        if spec is None:
            return var.value
        var = replace(var, value=typed(var.value, spec))  # as Ansible's argument spec converts it
        return None if spec_findings(var, spec) else var.value

    def location(self, name: str, *path: str | int) -> tuple[str, int]:
        """Where the variable is set, or where the host is declared when it is a role default."""
        var = self.host.var(name)
        if var is None or var.origin.default:
            return self.host.origin.file, self.host.origin.line
        return var.origin.file, var.line_of(*path)

    def problem(self, name: str, message: str, *path: str | int, severity: str = "error") -> Problem:
        file, line = self.location(name, *path)
        return Problem(file, line, self.host.name, name, message, severity)


def mount_rules(h: HostView) -> list[Problem]:
    """The KV mount's settings that only make sense together, the acceptance test's file size,
    and the address kvprov reaches the host at."""
    profile = h.get("kvprov_storage_profile")
    out: list[Problem] = []
    if profile in NFS_PROFILES:
        out += _nfs_server_and_export(h, profile)
        out += _protocol(h, profile)
        out += _nconnect_and_trunking(h)
        out += _local_locks(h)
    out += _bench_file_size(h)
    out += _ansible_host(h)
    if profile == "local" and h.get("kvprov_storage_pnfs_layout") not in (None, "none"):
        out.append(h.problem("kvprov_storage_pnfs_layout",
                             f"{h.get('kvprov_storage_pnfs_layout')} has no meaning for profile local "
                             "(no NFS): set kvprov_storage_pnfs_layout: none", severity="warning"))
    return out


def _ansible_host(h: HostView) -> list[Problem]:
    """ansible_host (or, without it, the host's name) is an address or a DNS name: loadtest and
    validate build URLs from it (and send the API key there), so a port, path or query in it
    would send the key elsewhere, and ssh would take one starting with - as an option."""
    var = h.host.var("ansible_host")
    value = var.value if var else h.host.name
    if not isinstance(value, str) or is_template(value):
        return []
    try:
        ipaddress.ip_address(value.removeprefix("[").removesuffix("]"))
        return []
    except ValueError:
        pass
    if re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,252}", value):
        return []
    if var is None:
        return [h.problem("inventory_hostname", f'the host name "{sinks.shown(value)}" is what kvprov connects to '
                                                "(no ansible_host), but it is not an address or a DNS name (letters, "
                                                "digits, _ . -, not starting with -, which ssh would take as an "
                                                "option); set ansible_host")]
    return [h.problem("ansible_host", f'"{sinks.shown(value)}" is not an address or a DNS name (a port goes in '
                                      "ansible_port): kvprov builds URLs from it and sends the engine's API key there")]


def _bench_file_size(h: HostView) -> list[Problem]:
    """The acceptance test writes KV-page-shaped files with O_DIRECT: their size (the model
    geometry, the page size, the TP size and the HiCache layout) must be a multiple of 4096."""
    names = ("kvprov_bench_model_layers", "kvprov_sglang_page_size", "kvprov_bench_model_kv_heads",
             "kvprov_sglang_tp_size", "kvprov_bench_model_head_dim", "kvprov_bench_kv_dtype_bytes")
    layers, page, heads, tp, head_dim, dtype = (h.get(n) for n in names)
    layout = h.get("kvprov_sglang_hicache_mem_layout")
    if not all(is_int(v) and v > 0 for v in (layers, page, heads, tp, head_dim, dtype)) or not isinstance(layout, str):
        return []
    size = layers * page * max(1, heads // tp) * head_dim * dtype * (1 if layout.startswith("page_first") else 2)
    if size % 4096 == 0:
        return []
    return [h.problem("kvprov_sglang_page_size",
                      f"the acceptance test's KV files would be {size} bytes (layers x page size x KV heads per TP "
                      "rank x head dim x dtype bytes, x2 unless the layout is page_first*), not a multiple of 4096 "
                      "as O_DIRECT needs: check the kvprov_bench_model_* geometry against the model's config.json, "
                      "or use a larger power-of-two page size (e.g. 256)")]


def _nfs_server_and_export(h: HostView, profile: str) -> list[Problem]:
    out = []
    server = h.get("kvprov_storage_server")
    if isinstance(server, str) and not server.strip():
        unset = " (not set in the inventory)" if h.host.is_default("kvprov_storage_server") else ""
        out.append(h.problem("kvprov_storage_server",
                             f"empty{unset}, but profile {profile} mounts NFS: set it to the NFS server "
                             "(the NetApp data LIF's IP address or DNS name)"))
    export = h.get("kvprov_storage_export")
    if isinstance(export, str) and not export.startswith("/"):
        out.append(h.problem("kvprov_storage_export",
                             f'"{export}" is not an absolute path: the junction path starts with / (e.g. /kvcache)'))
    elif isinstance(export, str) and absolute_path(export):  # it lands in the mount unit's What=
        out.append(h.problem("kvprov_storage_export", absolute_path(export)[0].message))
    return out


def _options(h: HostView) -> list[tuple[str, str | None, int]]:
    items = h.get("kvprov_storage_extra_options") or []
    return parse_mount_options([v for v in items if not is_template(v)])  # h.get: a list of strings


def _protocol(h: HostView, profile: str) -> list[Problem]:
    """proto= belongs to the profile; the kvcache_mount role rejects it in the extra options."""
    out = []
    own, ipv6 = PROFILE_PROTOS[profile]
    other = "nfs_tcp" if profile == "netapp_pnfs_rdma" else "netapp_pnfs_rdma"
    for key, val, i in _options(h):
        if key != "proto":
            continue
        if val == own:
            msg = f'"proto={val}" is already set by profile {profile}: remove it from the extra options'
        elif val == ipv6:
            msg = (f'"proto={val}" (IPv6) cannot be given here: the kvcache_mount role sets proto={own} '
                   "itself and rejects proto= in the extra options")
        elif val in PROFILE_PROTOS[other]:
            msg = (f'"proto={val}" contradicts profile {profile} (proto={own}): remove it, or set '
                   f"kvprov_storage_profile: {other}")
        else:
            msg = f'"proto={val}" contradicts profile {profile} (proto={own}): remove it'
        out.append(h.problem("kvprov_storage_extra_options", msg, i))
    return out


def _local_locks(h: HostView) -> list[Problem]:
    """The KV volume is shared: its evictors take turns through an fcntl lock that the server must
    hold (roles/engine/files/kvprov-evict.py), so locks kept on the client only are refused (#37)."""
    return [h.problem("kvprov_storage_extra_options",
                      f'"{key if val is None else f"{key}={val}"}" keeps locks on this host only, but the KV volume is '
                      "shared: the evictor's lease (an fcntl lock on the namespace) would no longer keep two hosts' "
                      "evictors apart; remove it", i)
            for key, val, i in _options(h) if key == "nolock" or (key == "local_lock" and val != "none")]


def _nconnect_and_trunking(h: HostView) -> list[Problem]:
    """nconnect and session trunking exclude each other; the extra options must not bypass
    or duplicate the variables (the role adds nconnect=/max_connect=/trunkdiscovery itself)."""
    out = []
    nconnect, trunking = h.get("kvprov_storage_nconnect"), h.get("kvprov_storage_trunking")
    if nconnect is None or trunking is None:
        return out
    # What the role puts on the mount: auto = none with nconnect, else max_connect/trunkdiscovery by OS.
    role_trunking = ("none" if nconnect > 0 else "max_connect or trunkdiscovery") if trunking == "auto" else trunking
    extra = {key: (val, i) for key, val, i in _options(h) if key in ("nconnect", "max_connect", "trunkdiscovery")}
    var = "kvprov_storage_extra_options"
    if "nconnect" in extra:
        val, i = extra["nconnect"]
        if nconnect > 0:
            out.append(h.problem(var, f'"nconnect={val}" conflicts with kvprov_storage_nconnect: {nconnect} '
                                      "(the mount would get both): remove it from the extra options", i))
        elif role_trunking != "none":
            out.append(h.problem(var, f'"nconnect={val}" is combined with session trunking '
                                      f"(kvprov_storage_trunking: {trunking} gives {role_trunking}): set "
                                      f"kvprov_storage_nconnect: {val} instead (auto trunking then turns off)", i))
    for key in ("max_connect", "trunkdiscovery"):
        if key in extra and role_trunking != "none":
            val, i = extra[key]
            option = key if val is None else f"{key}={val}"
            fix = f"kvprov_storage_trunking: {key}" + (f" and kvprov_storage_max_connect: {val}" if val else "")
            out.append(h.problem(var, f'"{option}" conflicts with kvprov_storage_trunking: {trunking} (the '
                                      f"role adds {role_trunking} itself): set {fix} instead", i))
    explicit = trunking in ("max_connect", "trunkdiscovery")
    extra_trunking = [k for k in ("max_connect", "trunkdiscovery") if k in extra]
    if nconnect > 0 and (explicit or extra_trunking):
        how = (f"kvprov_storage_trunking: {trunking}" if explicit
               else f'"{extra_trunking[0]}" in kvprov_storage_extra_options')
        out.append(h.problem("kvprov_storage_nconnect",
                             f"nconnect {nconnect} together with session trunking ({how}): use one or the "
                             "other (NetApp: with both, only the metadata server benefits); set "
                             "kvprov_storage_trunking: none to keep nconnect, or kvprov_storage_nconnect: 0"))
    return out


def instances_var(h: HostView) -> str:
    """The instance list's variable in effect: the old name when the inventory sets it."""
    return "kvprov_sglang_instances" if h.host.var("kvprov_sglang_instances") else "kvprov_engine_instances"
