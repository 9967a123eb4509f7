"""What the ONTAP and knfsd checks share: export-rule client specs against a GPU node's
address, and which GPU node mounts from which storage system."""

import pytest

from kvprov.storage import access, systems
from kvprov.storage.systems import Client


@pytest.mark.parametrize("spec, address, verdict", [
    ("*", None, True), ("0.0.0.0/0", "10.1.2.3", True), ("<world>", "gpu1", True),
    ("10.1.0.0/16", "10.1.2.3", True), ("10.1.0.0/255.255.0.0", "10.1.2.3", True),
    ("10.2.0.0/16", "10.1.2.3", False), ("10.1.2.3", "10.1.2.3", True), ("10.1.2.4", "10.1.2.3", False),
    ("fd00::/64", "[fd00::21]", True), ("fd00::/64", "10.1.2.3", False),
    ("gpu*.example.com", "gpu07.example.com", True), ("gpu*.example.com", "cpu01.example.com", False),
    ("gpu07.example.com", "10.1.2.3", None),  # a name rule against an address: not resolved here
    ("10.1.0.0/16", "gpu07.example.com", None), ("@gpu_hosts", "10.1.2.3", None), ("10.1.0.0/16", None, None),
])
def test_client_specs(spec, address, verdict):
    assert access.matches(spec, address) is verdict


def client(host, server):
    return Client(host, server, "/kv", True, 20049, "files", "localdomain", None)


def test_assign_by_data_addresses_with_one_catch_all_and_orphans():
    a, b, c = client("gpu1", "10.0.0.11"), client("gpu2", "[fd00::12]"), client("gpu3", "10.9.9.9")
    served, orphans = systems.assign([a, b, c], {"ontap1": ["10.0.0.11", "fd00::12"], "ontap2": ["10.0.1.11"]})
    assert served == {"ontap1": [a, b], "ontap2": []} and orphans == [c]
    served, orphans = systems.assign([a, c], {"ontap1": ["10.0.0.11"], "nfs1": []})
    assert served == {"ontap1": [a], "nfs1": [c]} and orphans == []
    served, orphans = systems.assign([c], {"nfs1": [], "nfs2": []})  # two catch-alls: no guessing
    assert orphans == [c]
