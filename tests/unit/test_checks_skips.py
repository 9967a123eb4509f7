"""What validate says for each check it skips on a host with a local KV directory and no
GPU (local_c1): the reason, and no expectation (nothing was expected of it)."""

from kvprov.validate import evaluate as ev
from tests.conftest import FIXTURES

NO_MOUNT = "storage profile local: /srv/kvcache is a local directory, no NFS mount"


def test_every_skip_says_why():
    skips = [(r.id, r.expected, r.found) for r in ev.evaluate_bundle(FIXTURES / "bundles/local_c1")
             if r.status == "skip"]
    assert skips == [
        *[(f"mount.{c}", "", NO_MOUNT) for c in ("present", "source", "options", "nfs_version", "transport",
                                                 "pnfs_layout", "layoutget", "unit", "lookupcache")],
        ("rdma.module", "", "storage profile local does not use RDMA"),
        ("rdma.link", "", "storage profile local does not use RDMA"),
        ("gds.gpu", "an NVIDIA GPU (kvprov_gds_mode: auto)", "no NVIDIA GPU"),
        *[(f"gds.{c}", "", "no NVIDIA GPU") for c in ("nfs", "peerdirect", "platform", "compat_mode", "udev",
                                                      "cufile_mount_table", "cufile_rdma_addrs", "cufile_compat")],
        ("packages.required", "", "storage profile local needs no client package"),
        ("engine.main.health", "HTTP /health on port 8000 answers 200", "service not running (see engine.main.state)"),
        ("engine.main.cache", "the engine's cache counters exposed on /metrics, the KV connector consulted",
         "service not running (see engine.main.state)"),
    ]
