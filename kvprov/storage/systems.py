"""The inventory's storage systems (group kv_storage) and the GPU nodes that mount from
each (pure: an Inventory in, dataclasses out).

Which GPU node mounts through which storage system: a GPU node of an NFS profile mounts
`kvprov_storage_server:kvprov_storage_export`; it belongs to the storage system whose
`kvprov_storage_data_addresses` hold that server address. A system that lists no address
takes what no other system claims: on ONTAP the addresses of its SVM's data LIFs (read from
the cluster), on Linux every such node when it is the only system without addresses.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

from kvprov.inventory import Host, Inventory

NFS_PROFILES = ("netapp_pnfs_rdma", "nfs_tcp")
RDMA_PORT = 20049  # the profile's port when kvprov_storage_nfs_port is 0

# The storage systems' own variables and their defaults (kvprov.check holds their rules).
DEFAULTS: dict[str, Any] = {
    "kvprov_storage_system": "",  # ontap | linux (required)
    "kvprov_storage_svm": "",  # ontap: the SVM serving the export (required)
    "kvprov_storage_credentials_file": "",  # ontap: controller file, username=/password= lines, root-only
    "kvprov_storage_ca_bundle": "",  # ontap: CA file that signed the cluster's certificate ("": system CAs)
    "kvprov_storage_validate_certs": True,  # ontap: verify the cluster's certificate
    "kvprov_storage_api_port": 443,  # ontap: HTTPS port of the management address
    "kvprov_storage_api_timeout": 30,  # ontap: seconds per request
    "kvprov_storage_data_addresses": [],  # the addresses GPU nodes mount it through (kvprov_storage_server)
    "kvprov_storage_min_free_percent": 10,  # of the volume's space
    "kvprov_storage_min_free_inodes_percent": 10,  # of the volume's inodes
}
# A GPU node's address as the storage sees it (export rules): default ansible_host.
CLIENT_ADDRESS = "kvprov_storage_client_address"


@dataclass(frozen=True)
class Client:
    """A GPU node that mounts NFS, as the storage check needs it."""

    host: str
    server: str  # kvprov_storage_server
    export: str  # kvprov_storage_export
    rdma: bool  # profile netapp_pnfs_rdma
    port: int  # the NFS port it mounts (RDMA: 20049 unless set)
    layout: str  # kvprov_storage_pnfs_layout: files | block | none
    idmap_domain: str  # kvprov_storage_idmap_domain
    address: str | None  # what export rules see: None when it cannot be told (a loopback ansible_host)


@dataclass
class System:
    """A storage system of group kv_storage."""

    name: str
    kind: str  # ontap | linux
    address: str  # the management address (ONTAP) / ssh target: ansible_host, else the name
    svm: str = ""
    credentials_file: str = ""
    ca_bundle: str = ""
    validate_certs: bool = True
    api_port: int = 443
    api_timeout: int = 30
    data_addresses: list[str] = field(default_factory=list)
    min_free_percent: float = 10
    min_free_inodes_percent: float = 10


def _value(host: Host, name: str) -> Any:
    return host.value(name, DEFAULTS.get(name))


def system_of(host: Host) -> System:
    return System(
        name=host.name, kind=str(_value(host, "kvprov_storage_system") or ""),
        address=str(host.value("ansible_host") or host.name),
        svm=str(_value(host, "kvprov_storage_svm") or ""),
        credentials_file=str(_value(host, "kvprov_storage_credentials_file") or ""),
        ca_bundle=str(_value(host, "kvprov_storage_ca_bundle") or ""),
        validate_certs=bool(_value(host, "kvprov_storage_validate_certs")),
        api_port=int(_value(host, "kvprov_storage_api_port")),
        api_timeout=int(_value(host, "kvprov_storage_api_timeout")),
        data_addresses=[str(a) for a in _value(host, "kvprov_storage_data_addresses") or []],
        min_free_percent=float(_value(host, "kvprov_storage_min_free_percent")),
        min_free_inodes_percent=float(_value(host, "kvprov_storage_min_free_inodes_percent")))


def client_address(host: Host) -> str | None:
    """kvprov_storage_client_address, else ansible_host, else the host's name; None for a
    loopback address (a port-forwarded lab VM): the storage never sees a client there."""
    address = str(host.value(CLIENT_ADDRESS) or host.value("ansible_host") or host.name)
    try:
        return None if ipaddress.ip_address(address.strip("[]")).is_loopback else address
    except ValueError:
        return address


def client_of(host: Host) -> Client | None:
    """The GPU node as an NFS client, None when it mounts no NFS (profile local)."""
    profile = host.value("kvprov_storage_profile")
    if profile not in NFS_PROFILES:
        return None
    rdma = profile == "netapp_pnfs_rdma"
    port = host.value("kvprov_storage_nfs_port") or 0
    return Client(host=host.name, server=str(host.value("kvprov_storage_server") or ""),
                  export=str(host.value("kvprov_storage_export") or ""), rdma=rdma,
                  port=int(port) or (RDMA_PORT if rdma else 2049),
                  layout=str(host.value("kvprov_storage_pnfs_layout") or "none"),
                  idmap_domain=str(host.value("kvprov_storage_idmap_domain") or ""),
                  address=client_address(host))


def systems(inv: Inventory) -> list[System]:
    return [system_of(h) for h in inv.storage_hosts]


def clients(inv: Inventory) -> list[Client]:
    return [c for c in map(client_of, inv.hosts) if c is not None]


def assign(clients_: list[Client], addresses: dict[str, list[str]]) -> tuple[dict[str, list[Client]], list[Client]]:
    """Which clients mount from which system: ({system: [clients]}, clients of none).

    `addresses`: each system's data addresses (its kvprov_storage_data_addresses, or for ONTAP
    without them its LIF addresses). A client belongs to the system listing its server; the
    clients no system lists go to the one system with no addresses, if there is exactly one."""
    by_system: dict[str, list[Client]] = {name: [] for name in addresses}
    catch_all = [name for name, addrs in addresses.items() if not addrs]
    orphans = []
    for c in clients_:
        owner = next((name for name, addrs in addresses.items() if _same(c.server, addrs)), None)
        if owner is None and len(catch_all) == 1:
            owner = catch_all[0]
        if owner is None:
            orphans.append(c)
        else:
            by_system[owner].append(c)
    return by_system, orphans


def _same(server: str, addresses: list[str]) -> bool:
    return server.strip("[]").lower() in {a.strip("[]").lower() for a in addresses}
