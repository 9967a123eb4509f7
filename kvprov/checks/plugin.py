"""pytest plugin (entry point `pytest11: kvprov`) behind kvprov.checks: the desired state
of the host under test, computed once per pytest process from the inventory.

- `--hosts='ansible://gpu_nodes' --ansible-inventory=INV`: hosts and connections
  (ssh, or paramiko where the inventory says `ansible_connection: paramiko`) from INV.
- `--hosts='paramiko://root@10.0.0.5' --kvprov-inventory=INV` (or ssh://): any testinfra
  connection; the host is matched to INV by inventory name, else by ansible_host (and
  ansible_port when the URL gives a port).
"""

from __future__ import annotations

import pytest

from kvprov import desired, inventory
from kvprov.validate.bundle import Desired

_cache: dict[str, dict[str, dict]] = {}  # inventory path -> {host: desired state}
_hosts: dict[str, list] = {}  # inventory path -> its hosts (kvprov.inventory)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("kvprov").addoption(
        "--kvprov-inventory", dest="kvprov_inventory", metavar="INVENTORY",
        help="the kvprov inventory giving the desired state (default: --ansible-inventory)")
    parser.getgroup("kvprov").addoption(
        "--kvprov-timeout", dest="kvprov_timeout", type=int, default=30, metavar="SECONDS",
        help="limit for each probe that touches the KV mount (a hard NFS mount whose server is gone "
             "would block it forever; default 30)")


def _inventory(config: pytest.Config) -> str:
    path = config.getoption("kvprov_inventory", None) or config.getoption("ansible_inventory", None)
    if not path:
        raise pytest.UsageError("kvprov.checks need the inventory: --ansible-inventory=INVENTORY "
                                "(with --hosts=ansible://gpu_nodes) or --kvprov-inventory=INVENTORY")
    return path


def _inventory_name(path: str, name: str, port: int | None) -> str | None:
    """The inventory host a testinfra host spec means: by name, else by ansible_host[:port]."""
    if path not in _hosts:
        _hosts[path] = inventory.load(path).hosts
    hosts = _hosts[path]
    if any(h.name == name for h in hosts):
        return name
    for h in hosts:
        if h.value("ansible_host") == name and (port is None or int(h.value("ansible_port") or 22) == port):
            return h.name
    return None


@pytest.fixture
def kvprov_timeout(request) -> int:
    """Seconds each probe of the KV mount may take (--kvprov-timeout)."""
    return request.config.getoption("kvprov_timeout")


@pytest.fixture
def kvprov_desired(host, request) -> Desired:
    """The desired state of the host under test (kvprov.desired), as a Desired."""
    path = _inventory(request.config)
    if path not in _cache:
        _cache[path] = desired.load(path)
    spec = host.backend.host
    name = spec if isinstance(spec, str) else spec.name
    port = None if isinstance(spec, str) or not spec.port else int(spec.port)
    inv_name = _inventory_name(path, name, port)
    if inv_name not in _cache[path]:
        pytest.fail(f"{name}: not a gpu_nodes host of {path} (hosts: {', '.join(_cache[path])})", pytrace=False)
    return Desired.from_dict(_cache[path][inv_name])
