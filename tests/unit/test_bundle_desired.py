"""bundle.desired (validate --bundle --inventory): what desired_differences and desired_check
say when a capture's desired.json and the inventory's disagree, on a real bundle's
desired.json edited by hand."""

import copy
import json

from kvprov.validate.bundle import Desired
from kvprov.validate.checks.bundle import desired_check, desired_differences
from kvprov.validate.result import FAIL, PASS
from tests.conftest import FIXTURES

BASE = json.loads((FIXTURES / "bundles/local_c1/desired.json").read_text())


def desired(files: dict | None = None, **changes) -> Desired:
    data = copy.deepcopy(BASE)
    data["files"].update(files or {})
    for dotted, value in changes.items():
        *path, last = dotted.split("__")
        node = data
        for step in path:
            node = node[step]
        if value is ...:
            del node[last]
        else:
            node[last] = value
    return Desired.from_dict(data)


def test_identical_desired_states_do_not_differ():
    assert desired_differences(desired(), desired()) == []
    result = desired_check(desired(), None, desired(), "inventory/x.yml")
    assert (result.id, result.category, result.status, result.found) == (
        "bundle.desired", "bundle", PASS, "desired.json agrees with inventory/x.yml")


def test_each_kind_of_difference_has_its_line():
    cufile = "/etc/cufile.json"
    bundle = desired({cufile: dict(BASE["files"][cufile], content="{}")}, storage__profile="nfs_tcp",
                     storage__options=["hard", "nconnect=4"], gds__rdma_dev_addr_list=["10.0.0.1"])
    inventory = desired(storage__options=["hard", "proto=rdma"], gds__rdma_dev_addr_list=[])
    assert desired_differences(bundle, inventory) == [
        "gds.rdma_dev_addr_list nothing else (inventory) vs 10.0.0.1 (bundle)",
        "storage.options proto=rdma (inventory) vs nconnect=4 (bundle)",
        "storage.profile local (inventory) vs nfs_tcp (bundle)",
        f"files.{cufile}: content differs",
    ]


def test_lists_with_the_same_items_show_both_whole():
    assert desired_differences(desired(storage__options=["a", "b"]), desired(storage__options=["b", "a"])) == [
        'storage.options ["b", "a"] (inventory) vs ["a", "b"] (bundle)']
    assert desired_differences(desired(storage__options=["a", "a"]), desired(storage__options=["a"])) == [
        'storage.options ["a"] (inventory) vs ["a", "a"] (bundle)']


def test_a_key_on_one_side_only_is_named_with_its_side():
    bundle = desired({"/etc/extra.conf": {"mode": "0644", "role": "gds", "content": "x"}})
    inventory = desired({"/etc/other.conf": {"mode": "0600", "role": "nixl", "content": "y"}})
    lines = desired_differences(bundle, inventory)
    assert lines == [
        "files./etc/extra.conf.content only in the bundle", "files./etc/extra.conf.mode only in the bundle",
        "files./etc/extra.conf.role only in the bundle",
        "files./etc/other.conf.content only in the inventory", "files./etc/other.conf.mode only in the inventory",
        "files./etc/other.conf.role only in the inventory"]


def test_desired_check_lists_eight_differences_then_counts_the_rest():
    bundle = desired()
    inventory = desired({f"/etc/f{i}": {"mode": "0644", "role": "gds", "content": "x"} for i in range(10)})
    result = desired_check(bundle, None, inventory, "INV")
    assert result.status == FAIL and result.category == "bundle"
    listed = [f"files./etc/f{i}.{k} only in the inventory" for i in range(10) for k in ("content", "mode", "role")]
    assert result.found == "desired.json disagrees with INV: " + "; ".join(listed[:8]) + "; and 22 more"
    result = desired_check(bundle, None, desired(storage__profile="nfs_tcp"), "INV")
    assert result.found == "desired.json disagrees with INV: storage.profile nfs_tcp (inventory) vs local (bundle)"
    assert result.fix.startswith("the checks below use INV's desired state")


def test_an_unusable_desired_json_fails_naming_the_problem():
    result = desired_check(None, ValueError("format 9 is newer than this kvprov"), desired(), "INV")
    assert (result.id, result.category, result.status) == ("bundle.desired", "bundle", FAIL)
    assert result.found == "the bundle's desired.json is unusable (format 9 is newer than this kvprov)"


def test_exactly_eight_differences_are_all_listed():
    inventory = desired({f"/etc/f{i}": {"mode": "0644", "role": "gds", "content": "x"} for i in range(2)},
                        storage__profile="nfs_tcp", storage__export="/other")
    result = desired_check(desired(), None, inventory, "INV")
    assert len(desired_differences(desired(), inventory)) == 8
    assert not result.found.endswith("more") and result.found.count(";") == 7
