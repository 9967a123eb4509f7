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
    assert access.matches("10.0.0.0/8", "10.0.0.1X") is None  # a name, though it holds an address
    assert access.matches("10.0.0.0/8X", "10.0.0.1") is None  # a host name rule, not a network


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


def gpu(**values):
    from kvprov import check, inventory

    return check.host_from_values("gpu1", values, inventory.read_role_defaults(inventory.roles_dir()))


def test_a_gpu_node_as_an_nfs_client():
    rdma = systems.client_of(gpu(kvprov_storage_profile="netapp_pnfs_rdma", kvprov_storage_server="10.0.0.5",
                                 kvprov_storage_export="/kv", ansible_host="10.0.1.2", kvprov_storage_nfs_port=0))
    assert (rdma.host, rdma.server, rdma.export, rdma.rdma, rdma.port, rdma.address) == (
        "gpu1", "10.0.0.5", "/kv", True, systems.RDMA_PORT, "10.0.1.2")
    tcp = systems.client_of(gpu(kvprov_storage_profile="nfs_tcp", kvprov_storage_server="s",
                                kvprov_storage_export="/kv", kvprov_storage_nfs_port=0))
    assert (tcp.rdma, tcp.port, tcp.address) == (False, 2049, "gpu1")  # no ansible_host: the name
    given = systems.client_of(gpu(kvprov_storage_profile="nfs_tcp", kvprov_storage_nfs_port=2050,
                                  kvprov_storage_pnfs_layout="files", kvprov_storage_idmap_domain="example.com"))
    assert (given.port, given.layout, given.idmap_domain) == (2050, "files", "example.com")
    bare = systems.client_of(gpu(kvprov_storage_profile="nfs_tcp", kvprov_storage_server=None,
                                 kvprov_storage_export=None, kvprov_storage_nfs_port=None,
                                 kvprov_storage_pnfs_layout=None, kvprov_storage_idmap_domain=None))
    assert (bare.server, bare.export, bare.port, bare.layout, bare.idmap_domain) == ("", "", 2049, "none", "")
    assert systems.client_of(gpu(kvprov_storage_profile="local")) is None
    for loopback in ("127.0.0.1", "::1", "[::1]"):
        assert systems.client_address(gpu(ansible_host=loopback)) is None
    assert systems.client_address(gpu(ansible_host="[fd00::2]")) == "[fd00::2]"
    assert systems.client_address(gpu(ansible_host="127.0.0.1X")) == "127.0.0.1X"  # a name, not the loopback
    assert systems.client_address(gpu(ansible_host="127.0.0.1", kvprov_storage_client_address="10.9.0.2")) == \
        "10.9.0.2"


def test_a_storage_system_from_its_values():
    from kvprov import check, inventory

    defaults = inventory.read_role_defaults(inventory.roles_dir())
    bare = systems.system_of(check.host_from_values("nfs1", {}, defaults))
    assert bare == systems.System("nfs1", "", "nfs1")  # every field its default
    given = systems.system_of(check.host_from_values("ontap1", {
        "ansible_host": "10.0.0.9", "kvprov_storage_system": "ontap", "kvprov_storage_svm": "svm1",
        "kvprov_storage_credentials_file": "/root/c", "kvprov_storage_ca_bundle": "/root/ca.pem",
        "kvprov_storage_validate_certs": False, "kvprov_storage_api_port": 8443, "kvprov_storage_api_timeout": 5,
        "kvprov_storage_data_addresses": ["10.0.0.10"], "kvprov_storage_min_free_percent": 5,
        "kvprov_storage_min_free_inodes_percent": 7}, defaults))
    assert given == systems.System("ontap1", "ontap", "10.0.0.9", "svm1", "/root/c", "/root/ca.pem", False, 8443, 5,
                                   ["10.0.0.10"], 5.0, 7.0)
    none = systems.system_of(check.host_from_values("nfs2", {
        "kvprov_storage_system": None, "kvprov_storage_svm": None, "kvprov_storage_credentials_file": None,
        "kvprov_storage_ca_bundle": None, "kvprov_storage_data_addresses": None}, defaults))
    assert (none.kind, none.svm, none.credentials_file, none.ca_bundle, none.data_addresses) == ("", "", "", "", [])


def test_a_server_is_matched_by_its_address_and_nothing_near_it():
    a, b = client("gpu1", "nfsX"), client("gpu2", "[FD00::12]")
    served, orphans = systems.assign([a, b], {"nfs": ["nfs", "fd00::12"]})
    assert served == {"nfs": [b]} and orphans == [a]
