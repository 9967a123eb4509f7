"""Parser tests on mountstats captured from the lab's GPU-node VM (kernel 6.1) and on
hand-made variants for what the lab cannot produce (NFSv4.0, trunked transports)."""

from kvprov import mountstats
from tests.conftest import FIXTURES

CAPTURES = FIXTURES / "mountstats"


def test_rdma_mount_with_block_layout_after_write():
    mounts = mountstats.parse((CAPTURES / "lab_rdma_pnfs_block_after_write.txt").read_text())
    m = mountstats.find(mounts, "/mnt/kvcache")
    assert m.device == "10.99.1.1:/kv" and m.fstype == "nfs4"
    assert m.opts["proto"] == "rdma" and m.opts["port"] == "20049" and m.opts["vers"] == "4.1"
    assert [t.protocol for t in m.transports] == ["rdma"]
    assert m.pnfs == "LAYOUT_BLOCK_VOLUME"
    assert m.op_count("LAYOUTGET") == 4
    assert m.op_count("WRITE") == 0  # the data went to the shared disk, not through the server


def test_layout_counters_are_zero_before_io_and_tcp_is_told_apart():
    mounts = mountstats.parse((CAPTURES / "lab_rdma_and_tcp_before_io.txt").read_text())
    rdma, tcp = mountstats.find(mounts, "/mnt/kvcache"), mountstats.find(mounts, "/mnt/tcp")
    assert rdma.op_count("LAYOUTGET") == 0
    assert [t.protocol for t in tcp.transports] == ["tcp"]
    assert tcp.opts["vers"] == "4.2" and tcp.opts["proto"] == "tcp"
    assert mountstats.find(mounts, "/").fstype == "ext4"
    assert mountstats.find(mounts, "/").transports == []
    assert mountstats.find(mounts, "/nowhere") is None


V40_AND_TRUNKED = """\
device srv:/a mounted on /mnt/v40 with fstype nfs4 statvers=1.1
\topts:\trw,vers=4.0,rsize=1048576,wsize=1048576,proto=tcp,port=2049
\tnfsv4:\tbm0=0xfdffbfff,bm1=0xf9be3e,bm2=0x0,acl=0x3,pnfs=not configured
\txprt:\ttcp 0 0 1 0 0 5 5 0 5 0 2 0 0
\tper-op statistics
\t        NULL: 1 1 0 44 24 0 0 0 0
\t        READ: 0 0 0 0 0 0 0 0 0
device lif1:/kv mounted on /mnt/trunk with fstype nfs4 statvers=1.1
\topts:\trw,vers=4.1,proto=rdma,port=20049,max_connect=16
\tnfsv4:\tbm0=0xfdffbfff,sessions,pnfs=LAYOUT_NFSV4_1_FILES,lease_time=90
\txprt:\trdma 0 0 1 0 0 9 9 0 9 0 0 0
\txprt:\ttcp 0 0 1 0 0 3 3 0 3 0 2 0 0
\tper-op statistics
\t   LAYOUTGET: 7 7 0 1 1 0 0 0 0
device lif1:/kv mounted on /mnt/trunk with fstype nfs4 statvers=1.1
\topts:\trw,vers=4.2,proto=rdma,port=20049
\txprt:\trdma 0 0 1 0 0 1 1 0 1 0 0 0
"""


def test_v40_has_no_layout():
    m = mountstats.find(mountstats.parse(V40_AND_TRUNKED), "/mnt/v40")
    assert m.opts["vers"] == "4.0"
    assert m.pnfs == ""
    assert m.op_count("LAYOUTGET") == 0
    assert m.op_count("NULL") == 1


def test_every_xprt_line_is_kept_and_the_topmost_mount_wins():
    mounts = mountstats.parse(V40_AND_TRUNKED)
    first = [m for m in mounts if m.mountpoint == "/mnt/trunk"][0]
    assert [t.protocol for t in first.transports] == ["rdma", "tcp"]
    assert first.pnfs == "LAYOUT_NFSV4_1_FILES" and first.op_count("LAYOUTGET") == 7
    assert mountstats.find(mounts, "/mnt/trunk").opts["vers"] == "4.2"


def test_garbage_does_not_crash():
    assert mountstats.parse("device\n\txprt:\n\topts:\tx\n\x00\xff junk\ndevice a mounted on") == []
    assert mountstats.parse("device a mounted on /x fstype nfs4\n\topts:\trw\n") == []  # no "with"


def test_mount_points_with_escaped_characters_are_unescaped():
    """The kernel writes a space in a mount point as \\040 in mountstats, as in mountinfo."""
    from kvprov import mountstats

    text = "device 10.0.0.5:/kv\\040vol mounted on /mnt/kv\\040cache with fstype nfs4 statvers=1.1\n"
    [m] = mountstats.parse(text)
    assert (m.device, m.mountpoint) == ("10.0.0.5:/kv vol", "/mnt/kv cache")
    assert mountstats.find([m], "/mnt/kv cache") is m
