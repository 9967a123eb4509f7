"""packages.required on the fixture bundles with packages.txt or the storage profile edited:
nfs-common or nfs-utils, rdma-core only for RDMA, nothing for a local directory."""

import json

from kvprov.validate.result import FAIL, PASS, SKIP
from tests.unit.test_validate_context_captures import GPU_HOST, LOCAL, results


def packages(text: str, transport: str = "rdma"):
    desired = json.loads(GPU_HOST["desired.json"])
    desired["storage"]["transport"] = transport
    r = results({**GPU_HOST, "packages.txt": text.encode(), "desired.json": json.dumps(desired).encode()})[
        "packages.required"]
    return r.status, r.expected, r.found, r.fix


def test_nfs_and_rdma_packages_named_with_their_versions():
    assert packages("nfs-utils\t2.5.4\nrdma-core\t50.0\n") == (
        PASS, "installed: nfs-common or nfs-utils, rdma-core", "nfs-utils 2.5.4, rdma-core 50.0", "")


def test_rdma_core_missing_fails_naming_both_roles():
    assert packages("nfs-common\t1:2.6.1\n") == (
        FAIL, "installed: nfs-common or nfs-utils, rdma-core", "not installed: rdma-core",
        "kvprov deploy INVENTORY --limit gpu-a01.corp.example.com --tags kvcache_mount,rdma")


def test_tcp_needs_no_rdma_core_and_a_local_directory_no_package():
    assert packages("nfs-common\t1:2.6.1\n", transport="tcp")[:3] == (
        PASS, "installed: nfs-common or nfs-utils", "nfs-common 1:2.6.1")
    r = results(LOCAL)["packages.required"]
    assert (r.status, r.expected, r.found) == (SKIP, "", "storage profile local needs no client package")
