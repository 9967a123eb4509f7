"""kvprov check: the rules of the storage systems' inventory (`kvprov storage check`: the
NetApp cluster, its credentials and data addresses) (pure)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvprov import inventory
from kvprov.check.host import HostView
from kvprov.check.values import Finding, VALUE_RULES, VarSpec, _problem, absolute_path, address, addresses, int_range
from kvprov.inventory import Inventory, Problem


# The variables of the storage systems (group kv_storage, read by `kvprov storage check`;
# their defaults: kvprov/storage/systems.py; docs/storage-check.md), and a GPU node's own
# address as the storage's export rules see it.
STORAGE_SPECS: dict[str, VarSpec] = {s.name: s for s in (
    VarSpec("kvprov_storage_system", inventory.STORAGE_GROUP, choices=("ontap", "linux")),
    VarSpec("kvprov_storage_svm", inventory.STORAGE_GROUP),
    VarSpec("kvprov_storage_credentials_file", inventory.STORAGE_GROUP, "path"),
    VarSpec("kvprov_storage_ca_bundle", inventory.STORAGE_GROUP, "path"),
    VarSpec("kvprov_storage_validate_certs", inventory.STORAGE_GROUP, "bool"),
    VarSpec("kvprov_storage_api_port", inventory.STORAGE_GROUP, "int"),
    VarSpec("kvprov_storage_api_timeout", inventory.STORAGE_GROUP, "int"),
    VarSpec("kvprov_storage_data_addresses", inventory.STORAGE_GROUP, "list", "str"),
    VarSpec("kvprov_storage_min_free_percent", inventory.STORAGE_GROUP, "float"),
    VarSpec("kvprov_storage_min_free_inodes_percent", inventory.STORAGE_GROUP, "float"),
    VarSpec("kvprov_storage_client_address", inventory.TARGET_GROUP),
)}


def storage_credentials_file(value: str) -> list[Finding]:
    """The ONTAP credentials file: root-only, username= and password= lines (never printed)."""
    from kvprov.storage import credentials

    if not value:
        return []
    try:
        credentials.read(value)
    except credentials.CredentialsError as e:
        return [Finding(str(e))]
    return []


def controller_file(value: str) -> list[Finding]:
    if not value:
        return []
    return absolute_path(value) or ([] if Path(value).is_file() else
                                    [Finding(f'"{value}" is not a file on this controller')])


def percent(value: Any) -> list[Finding]:
    return [] if 0 <= value < 100 else [Finding(f"must be a percentage from 0 to under 100, got {value}")]


VALUE_RULES.update({
    "kvprov_storage_credentials_file": storage_credentials_file,
    "kvprov_storage_ca_bundle": controller_file,
    "kvprov_storage_api_port": int_range(1, 65535),
    "kvprov_storage_api_timeout": int_range(1, note=" (seconds per request)"),
    "kvprov_storage_data_addresses": addresses,
    "kvprov_storage_min_free_percent": percent,
    "kvprov_storage_min_free_inodes_percent": percent,
    "kvprov_storage_client_address": address,
})


def storage_rules(inv: Inventory, specs: dict[str, VarSpec]) -> list[Problem]:
    """What each storage system needs, and storage-system variables set where they do nothing."""
    out: list[Problem] = []
    for host in inv.storage_hosts:
        h = HostView(host, specs)
        kind = h.get("kvprov_storage_system")
        if host.var("kvprov_storage_system") is None:
            out.append(h.problem("kvprov_storage_system", "not set: say what this storage system is, ontap "
                                                          "(checked over its REST API) or linux (knfsd, over ssh)"))
        elif kind == "ontap":
            for name, what in (("kvprov_storage_svm", "the SVM that serves the KV-cache export"),
                               ("kvprov_storage_credentials_file", "a root-only file on this controller with "
                                                                   "username= and password= lines")):
                if not h.get(name):
                    out.append(h.problem(name, f"not set, but an ONTAP system needs it: {what}"))
            if h.get("kvprov_storage_validate_certs") is False:
                out.append(h.problem("kvprov_storage_validate_certs", "the cluster's certificate is not verified "
                                     "(anyone on the path can read the password): give the CA that signed it in "
                                     "kvprov_storage_ca_bundle instead", severity="warning"))
        elif kind == "linux":
            out += [h.problem(name, "has no meaning for a Linux server (reached over ssh)", severity="warning")
                    for name in ("kvprov_storage_svm", "kvprov_storage_credentials_file") if h.get(name)]
    storage_groups = set(_descendants(inv.groups, inventory.STORAGE_GROUP))
    storage_hosts = {h.name for h in inv.storage_hosts}
    for s in inv.settings:
        name = s.var.name
        if name not in STORAGE_SPECS or s.group == "all":
            continue
        on_storage = s.host in storage_hosts if s.host else s.group in storage_groups
        gpu_side = name == "kvprov_storage_client_address"
        if on_storage == gpu_side:
            where = ("the GPU nodes (group gpu_nodes)" if gpu_side
                     else f"the storage systems (group {inventory.STORAGE_GROUP})")
            out.append(_problem(s, Finding(f"a variable of {where}: it has no effect here", severity="warning")))
    return out


def _descendants(groups: dict, name: str) -> list[str]:
    if name not in groups:
        return []
    return [name, *(d for child in groups[name].children for d in _descendants(groups, child))]
