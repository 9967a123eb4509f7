"""mountstats.parse on hand-made text for the edges the lab captures do not reach: a mount
without pNFS, a line the parser cannot read, counters before "per-op statistics", two NFS
mounts in a row."""

from kvprov import mountstats

TWO_MOUNTS = """\
device 10.0.0.1:/a mounted on /mnt/a with fstype nfs4 statvers=1.1
\topts:\trw,vers=4.1,proto=rdma
\tage:\t7
\tnfsv4:\tbm0=0xfdffbfff,sessions,pnfs=not configured
\txprt:\trdma 0 0 1 0 0 22
\tper-op statistics
\t        NULL: 1 1 0 40
\t        LAYOUTGET: 3 3 0 9
device broken line without the words
\topts:\trw,vers=4.0
device 10.0.0.2:/b mounted on /mnt/b with fstype nfs4 statvers=1.1
\topts:\trw,vers=4.2,proto=tcp
\tage:\t9
\tnfsv4:\tbm0=0xfdffbfff,sessions
\txprt:\ttcp 876 1 0
\tper-op statistics
\t        WRITE: 5 5 0 1
\t        GETATTR: oops
"""


def test_each_mount_keeps_its_own_detail_and_only_per_op_counters_are_ops():
    mounts = mountstats.parse(TWO_MOUNTS)
    assert [(m.device, m.mountpoint) for m in mounts] == [("10.0.0.1:/a", "/mnt/a"), ("10.0.0.2:/b", "/mnt/b")]
    a, b = mounts
    # "age: 7" sits before "per-op statistics": a header line, not an operation counter
    assert a.ops == {"NULL": [1, 1, 0, 40], "LAYOUTGET": [3, 3, 0, 9]}
    assert b.ops == {"WRITE": [5, 5, 0, 1]}  # GETATTR's unreadable counters are left out
    assert a.opts == {"rw": "", "vers": "4.1", "proto": "rdma"}
    assert b.opts == {"rw": "", "vers": "4.2", "proto": "tcp"}  # not the broken mount's opts
    assert [(t.protocol, t.fields) for t in a.transports] == [("rdma", ["0", "0", "1", "0", "0", "22"])]
    assert [(t.protocol, t.fields) for t in b.transports] == [("tcp", ["876", "1", "0"])]
    assert b.op_count("LAYOUTGET") == 0 and a.op_count("LAYOUTGET") == 3


def test_pnfs_is_empty_when_not_configured_or_not_reported():
    a, b = mountstats.parse(TWO_MOUNTS)
    assert a.nfsv4["pnfs"] == "not configured" and a.pnfs == ""
    assert "pnfs" not in b.nfsv4 and b.pnfs == ""
    assert mountstats.MountStats("d", "/m", "nfs4", nfsv4={"pnfs": "LAYOUT_NFSV4_1_FILES"}).pnfs == \
        "LAYOUT_NFSV4_1_FILES"
