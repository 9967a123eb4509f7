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


@pytest.mark.parametrize("spec", ["*", "<world>", "0.0.0.0/0", "::/0", "0/0", " 0/0 "])
def test_everyone_covers_even_an_address_that_cannot_be_told(spec):
    assert access.matches(spec, None) is True and access.matches(spec, "fd00::1") is True
    assert access.matches(spec, "gpu1.example.com") is True


def test_client_specs_at_their_edges():
    assert access.matches("@gpu_hosts", "gpu1") is None  # a netgroup, whatever the address
    assert access.matches("10.1.2.3/16", "10.1.9.9") is True  # host bits set: the network it lies in
    assert access.matches("10.1.2.3/16", "10.2.0.1") is False


def test_a_result_of_the_storage_category_and_its_defaults():
    from kvprov.validate.result import PASS, Result

    assert access.result("nfs1", "x.y", PASS) == Result("x.y", "storage", PASS, "", "", "", "nfs1", "")
    assert access.result(systems.System("ontap1", "ontap", "a"), "x.y", PASS, "e", "f", "fix", "d") == Result(
        "x.y", "storage", PASS, "e", "f", "fix", "ontap1", "d")


def test_a_volume_of_a_single_inode_is_a_limit():
    s = systems.System("nfs1", "linux", "a")
    space, inodes = access.capacity(s, "/kv", 100, 50, 1, 1, "/kv")
    assert (inodes.status, inodes.found) == ("pass", "/kv: 1 inodes of 1 inodes free (100.0%)")
    assert access.capacity(s, "/kv", 100, 50, 1, 0, "/kv")[1].status == "fail"
    assert access.capacity(s, "/kv", 100, 50, 0, 0, "/kv")[1].found == "/kv: no inodes limit reported"
