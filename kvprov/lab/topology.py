"""The lab's fixed, documented layout: names, addresses, ports and paths.

Pure data and functions (no I/O), so the lab, its inventory, the tests and docs/lab.md
all derive from one place.

  kvlab-storage   QEMU VM, stands in for the NetApp: knfsd, pNFS block layout, soft-RoCE
                  ssh 127.0.0.1:2220; data link i: 10.99.<i>.1/24
  kvlab-gpu<i>    QEMU VM, a GPU node without a GPU (i = 1..clients)
                  ssh 127.0.0.1:222<i>; data link i: 10.99.<i>.2/24
                  data link = point-to-point Ethernet over a loopback socket 127.0.0.1:4000<i>
  kvlab-c<j>      systemd-nspawn container (j = 1..containers), network namespace kvlab-c<j>
                  10.98.<j>.2/24, the controller side of its veth is 10.98.<j>.1/24
                  read-only: the engine wheelhouse at /srv/kvlab/wheels, the lab's models
                  (tiny-qwen3) at /srv/kvlab/models
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

MAX_CLIENTS = 8
MAX_CONTAINERS = 200

STORAGE_NAME = "kvlab-storage"
SSH_PORT_BASE = 2220  # storage VM; GPU-node VM i gets SSH_PORT_BASE + i
LINK_PORT_BASE = 40000  # data link i listens on 127.0.0.1:LINK_PORT_BASE + i
EXPORT_PATH = "/kv"  # the storage VM's pNFS export (XFS on the shared disk)
RDMA_PORT = 20049
NFS_TCP_PORT = 2049
SHARED_DISK_GIB = 8

STORAGE_MEM_MIB = 1536
CLIENT_MEM_MIB = 2048

# The engine lab (vLLM CPU + LMCache in containers), both filled by scripts/install-deps.
ENGINE_WHEELHOUSE = Path("/var/lib/kvprov/wheelhouse-engines")  # offline wheels for the engines
ENGINE_VENV = Path("/var/lib/kvprov/engine-venv")  # the controller's copy: builds the tiny model
TINY_MODEL = "tiny-qwen3"  # <lab home>/models/<this>, built by kvprov.lab.model
# Where a container sees them, read-only (systemd-nspawn --bind-ro; nothing is copied).
CONTAINER_WHEELS = "/srv/kvlab/wheels"
CONTAINER_MODELS = "/srv/kvlab/models"


def lab_home() -> Path:
    """Where the lab keeps its key, image cache and runtime files."""
    return Path(os.environ.get("KVPROV_LAB_HOME", "/var/lib/kvprov/lab"))


def ssh_key_path() -> Path:
    return lab_home() / "id_ed25519"


def run_dir() -> Path:
    return lab_home() / "run"


def cache_dir() -> Path:
    return lab_home() / "cache"


def models_dir() -> Path:
    return lab_home() / "models"


def container_binds() -> list[tuple[Path, str]]:
    """(controller path, container path) pairs every lab container gets read-only."""
    return [(ENGINE_WHEELHOUSE, CONTAINER_WHEELS), (models_dir(), CONTAINER_MODELS)]


CONTAINER_KV = "/srv/kvcache"  # the containers' KV directory (the `local` storage profile's mount point)


def shared_kv_dir() -> Path:
    """The one directory every lab container has at CONTAINER_KV, read-write: a volume all of them
    share, as a NetApp volume is shared by every GPU host (the host kernel has no NFS client, so
    the containers cannot mount the storage VM's export; the NFS half is proven on the VMs). In the
    run directory: each `lab up` starts it empty, `lab down` removes it with the rest of the lab."""
    return run_dir() / "shared-kv"


@dataclass(frozen=True)
class Nic:
    mac: str
    name: str
    cidr: str
    gateway: str = ""

    def kernel_arg(self) -> str:
        spec = ",".join([self.mac, self.name, self.cidr] + ([self.gateway] if self.gateway else []))
        return f"kvprov.nic={spec}"


@dataclass(frozen=True)
class Vm:
    name: str
    role: str  # "storage" or "client"
    ssh_port: int
    mem_mib: int
    nics: tuple[Nic, ...]
    # (netdev option string) per data NIC, in the same order as nics[1:]
    links: tuple[str, ...] = field(default=())

    @property
    def data_ips(self) -> list[str]:
        return [n.cidr.split("/")[0] for n in self.nics[1:]]

    def kernel_cmdline(self) -> str:
        args = ["console=ttyS0", "root=/dev/vda", "rw", "quiet", "panic=-1",
                f"systemd.hostname={self.name}", f"kvprov.role={self.role}"]
        args += [n.kernel_arg() for n in self.nics]
        return " ".join(args)


@dataclass(frozen=True)
class Container:
    name: str
    index: int

    @property
    def netns(self) -> str:
        return self.name

    @property
    def veth(self) -> str:
        return f"kvlab-c{self.index}"[:15]

    @property
    def host_ip(self) -> str:
        return f"10.98.{self.index}.1"

    @property
    def ip(self) -> str:
        return f"10.98.{self.index}.2"


@dataclass(frozen=True)
class Topology:
    clients: int = 1
    containers: int = 0

    def __post_init__(self):
        if not 1 <= self.clients <= MAX_CLIENTS:
            raise ValueError(f"--clients must be between 1 and {MAX_CLIENTS}, got {self.clients}")
        if not 0 <= self.containers <= MAX_CONTAINERS:
            raise ValueError(f"--containers must be between 0 and {MAX_CONTAINERS}, got {self.containers}")

    @staticmethod
    def _mgmt_nic(vm_index: int) -> Nic:
        # slirp user networking: the guest is always 10.0.2.15, gateway .2, DNS .3
        return Nic(f"52:54:00:4b:00:{vm_index:02x}", "mgmt0", "10.0.2.15/24", "10.0.2.2")

    @property
    def storage(self) -> Vm:
        nics = [self._mgmt_nic(0)]
        links = []
        for i in range(1, self.clients + 1):
            nics.append(Nic(f"52:54:00:4b:{i:02x}:01", f"data{i}", f"10.99.{i}.1/24"))
            links.append(f"listen=127.0.0.1:{LINK_PORT_BASE + i}")
        return Vm(STORAGE_NAME, "storage", SSH_PORT_BASE, STORAGE_MEM_MIB, tuple(nics), tuple(links))

    @property
    def clients_vms(self) -> list[Vm]:
        vms = []
        for i in range(1, self.clients + 1):
            nics = (self._mgmt_nic(i), Nic(f"52:54:00:4b:{i:02x}:02", "data0", f"10.99.{i}.2/24"))
            vms.append(Vm(f"kvlab-gpu{i}", "client", SSH_PORT_BASE + i, CLIENT_MEM_MIB, nics,
                          (f"connect=127.0.0.1:{LINK_PORT_BASE + i}",)))
        return vms

    @property
    def vms(self) -> list[Vm]:
        return [self.storage, *self.clients_vms]

    @property
    def container_hosts(self) -> list[Container]:
        return [Container(f"kvlab-c{j}", j) for j in range(1, self.containers + 1)]

    def storage_address_for(self, client_index: int) -> str:
        """The storage VM's address on the data link of GPU-node VM `client_index`."""
        return f"10.99.{client_index}.1"

    def tcp_ports(self) -> list[int]:
        """Loopback TCP ports the lab binds; all must be free before `lab up`."""
        return [vm.ssh_port for vm in self.vms] + [LINK_PORT_BASE + i for i in range(1, self.clients + 1)]
