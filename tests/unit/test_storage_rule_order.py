"""The storage check's judgement where a slip turns a fail into a pass: which export rule
applies to a GPU node (knfsd takes the most specific one, whatever its place in
/etc/exports), what each rule's options grant (rw, no_root_squash, no all_squash), and free
space and inodes each against its own threshold (a review planted these bugs; none of the
other tests caught them)."""

from __future__ import annotations

import dataclasses

import pytest

from kvprov.storage import access, linux
from kvprov.storage.systems import Client, System

SERVER = System(name="nfs1", kind="linux", address="10.0.0.1")
GPU = Client(host="gpu1", server="10.0.0.1", export="/kv", rdma=False, port=2049, layout="none",
             idmap_domain="", address="10.99.1.5")
GOOD = "rw,no_root_squash,no_all_squash"


def access_of(rules: list[tuple[str, str]], client: Client = GPU) -> tuple[str, str]:
    exports = "".join(f"/kv\t{spec}({opts})\n" for spec, opts in rules)
    st = linux.State(versions="+4 +4.1", portlist="", exports=exports, statfs={})
    r = {x.id: x for x in linux.evaluate(SERVER, st, [client])}["export./kv.access"]
    return r.status, r.found


@pytest.mark.parametrize("first, second", [
    (("*", GOOD), ("10.99.1.5", "ro,root_squash")),  # the host's own rule, though listed after the world's
    (("*", GOOD), ("10.99.0.0/16", "ro,root_squash")),  # a network before the world
    (("10.99.0.0/16", GOOD), ("10.99.1.5", "rw,root_squash")),  # a host before its network
    (("gpu*", GOOD), ("10.99.1.5", "rw,no_root_squash,all_squash")),  # an address before a wildcard
])
def test_the_most_specific_rule_applies_in_either_order(first, second):
    for rules in ([first, second], [second, first]):
        status, found = access_of(rules)
        assert status == "fail", rules
        assert found.startswith(f"gpu1 (10.99.1.5): {second[0]}({second[1]}) lacks "), found


def test_a_broader_good_rule_does_not_rescue_and_a_narrower_good_one_wins():
    assert access_of([("10.99.1.5", GOOD), ("*", "ro,root_squash")]) == ("pass", "gpu1 (10.99.1.5): 10.99.1.5")
    assert access_of([("*", "ro"), ("10.99.0.0/16", GOOD)]) == ("pass", "gpu1 (10.99.1.5): 10.99.0.0/16")
    # a rule that does not cover the node is passed over for the next one
    assert access_of([("10.99.1.6", "ro"), ("10.98.0.0/16", "ro"), ("*", GOOD)]) == ("pass", "gpu1 (10.99.1.5): *")


@pytest.mark.parametrize("options, lacks", [
    ("ro,no_root_squash", "rw"),
    ("no_root_squash", "rw"),  # knfsd exports read-only unless told rw
    ("rw,root_squash", "no_root_squash"),
    ("rw", "no_root_squash"),  # root_squash is knfsd's default
    ("rw,no_root_squash,all_squash", "no all_squash"),
    ("ro,root_squash,all_squash", "rw, no_root_squash, no all_squash"),
])
def test_each_option_deploy_needs(options, lacks):
    assert access_of([("*", options)]) == ("fail", f"gpu1 (10.99.1.5): *({options}) lacks {lacks}")


def test_a_rule_that_may_apply_stops_the_search_and_the_address_unknown():
    status, found = access_of([("@gpu_hosts", "ro"), ("*", GOOD)])  # a netgroup is not resolved here
    assert (status, found) == ("warn", "gpu1 (10.99.1.5): @gpu_hosts may apply")
    status, found = access_of([("gpu?", GOOD), ("*", "ro")], dataclasses.replace(GPU, address="gpu1"))
    assert (status, found) == ("pass", "gpu1 (gpu1): gpu?")  # a wildcard (?) before the world
    status, found = access_of([("10.99.1.5", GOOD)], dataclasses.replace(GPU, address=None))
    assert (status, found) == ("warn", "gpu1 (address unknown): 10.99.1.5 may apply")
    assert access_of([("10.98.0.0/16", GOOD)]) == ("fail", "gpu1 (10.99.1.5): no entry of the export matches it")


def judged(space: tuple[int, int], inodes: tuple[int, int], min_space: float, min_inodes: float) -> dict:
    system = dataclasses.replace(SERVER, min_free_percent=min_space, min_free_inodes_percent=min_inodes)
    return {r.id.rsplit(".", 1)[1]: (r.status, r.expected) for r in
            access.capacity(system, "/kv", space[0], space[1], inodes[0], inodes[1], "fs")}


def test_space_and_inodes_each_against_its_own_threshold():
    # 30 % of the space and 30 % of the inodes free: only the threshold above 30 fails
    assert judged((100, 30), (1000, 300), 40, 20) == {
        "space": ("fail", "at least 40% of its space free (kvprov_storage_min_free_percent)"),
        "inodes": ("pass", "at least 20% of its inodes free (kvprov_storage_min_free_inodes_percent)")}
    assert judged((100, 30), (1000, 300), 20, 40) == {
        "space": ("pass", "at least 20% of its space free (kvprov_storage_min_free_percent)"),
        "inodes": ("fail", "at least 40% of its inodes free (kvprov_storage_min_free_inodes_percent)")}
    # each figure against its own total: 50 % of the space free, 5 % of the inodes
    assert {k: s for k, (s, _) in judged((100, 50), (1000, 50), 10, 10).items()} == {"space": "pass", "inodes": "fail"}
    assert {k: s for k, (s, _) in judged((1000, 50), (100, 50), 10, 10).items()} == {"space": "fail", "inodes": "pass"}
    # exactly at the threshold passes
    assert {k: s for k, (s, _) in judged((100, 25), (1000, 250), 25, 25).items()} == {"space": "pass", "inodes": "pass"}


def test_capacity_texts_and_figures_not_reported():
    system = dataclasses.replace(SERVER, min_free_percent=10, min_free_inodes_percent=10)
    space, inodes = access.capacity(system, "/kv", 2 * 2**30, 2**29, 0, 0, "fs of /kv")
    assert (space.id, space.status, space.found) == ("volume./kv.space", "pass", "fs of /kv: 0.5 GiB of 2.0 GiB free "
                                                                                "(25.0%)")
    assert (inodes.id, inodes.status, inodes.found) == ("volume./kv.inodes", "pass", "fs of /kv: no inodes limit "
                                                                                    "reported")
    _, inodes = access.capacity(system, "/kv", 100, 50, 1000, 50, "fs")
    assert inodes.status == "fail" and inodes.found == "fs: 50 inodes of 1000 inodes free (5.0%)"
    assert "kvprov_storage_min_free_inodes_percent" in inodes.fix and inodes.host == "nfs1"
    assert inodes.category == "storage"
    space, inodes = access.capacity(system, "/kv", None, 5, 10, None, "fs")
    assert (space.status, space.found, inodes.status, inodes.found) == (
        "warn", "fs: the space figures were not reported", "warn", "fs: the inodes figures were not reported")
