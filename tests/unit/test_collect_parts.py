"""The collector's pure helpers at their edges: which mount holds a path (from mountinfo
text), the fstab lines it keeps and what it hides in them, and an engine's --api-key in a
captured command line."""

from kvprov.validate import bundle as bf

collector = bf.collector

MOUNTINFO = (
    "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
    "30 22 0:45 / /mnt/kv rw - nfs4 10.0.0.1:/kv rw,vers=4.1\n"
    "31 30 0:46 / /mnt/kv/inner rw - xfs /dev/sdb rw\n"
    "32 22 0:47 / /mnt/kv\\040cache rw shared:1 - tmpfs tmpfs rw\n"
    "33 22 0:48 / /mnt/kvx rw - tmpfs tmpfs rw\n"
    "garbage line without a separator\n"
    "1 2 3 - nfs4 x\n"  # the separator too early
    "40 22 0:49 / /mnt/short rw -\n"  # too few fields after it
)


def test_the_mount_holding_a_path():
    assert collector.mount_of("/mnt/kv/main", MOUNTINFO) == {"mount": "/mnt/kv", "fstype": "nfs4",
                                                             "device": "10.0.0.1:/kv", "dev": "0:45"}
    assert collector.mount_of("/mnt/kv", MOUNTINFO)["dev"] == "0:45"
    assert collector.mount_of("/mnt/kv/inner/x", MOUNTINFO) == {"mount": "/mnt/kv/inner", "fstype": "xfs",
                                                                "device": "/dev/sdb", "dev": "0:46"}
    assert collector.mount_of("/mnt/kv cache/a", MOUNTINFO)["fstype"] == "tmpfs"  # optional fields before -
    assert collector.mount_of("/mnt/kvx", MOUNTINFO)["dev"] == "0:48"  # /mnt/kv is no prefix of /mnt/kvx
    assert collector.mount_of("/mnt/short", MOUNTINFO)["mount"] == "/"
    assert collector.mount_of("/x", "") == {"mount": None, "fstype": None, "device": None, "dev": None}
    # the same mount point twice (over-mounted): the later line, the one on top
    twice = MOUNTINFO + "50 30 0:60 / /mnt/kv rw - nfs4 10.0.0.2:/kv rw\n"
    assert collector.mount_of("/mnt/kv/main", twice)["device"] == "10.0.0.2:/kv"


def test_fstab_edges():
    text = ("# comment /mnt/kv nfs4\n"
            "#10.0.0.1:/kv /mnt/kv nfs4 password=x 0 0\n"
            "short line\n"
            "10.0.0.1:/kv /mnt/kv nfs4\n"  # no options
            "nas:/a /a nfs user=bob%pw,username=al%pw2,user=carol,uid=5,sec=krb5p 0 0\n"
            "srv:/kv /elsewhere xfs rw 0 0\n"  # the export's source elsewhere: kept
            "https://u:p@h/ /dav davfs rw 0 0\n"
            "/dev/sdb /data ext4 rw,token 0 0\n")
    assert collector.fstab_lines(text, "/mnt/kv", "srv:/kv") == (
        "10.0.0.1:/kv /mnt/kv nfs4\n"
        "nas:/a /a nfs user=***,username=***,user=carol,uid=5,sec=krb5p 0 0\n"
        "srv:/kv /elsewhere xfs rw 0 0\n")
    assert collector.fstab_lines("h://u:pw@s/x /mnt/kv fuse rw 0 0\n", "/mnt/kv", "") == "h://u:***@s/x /mnt/kv fuse rw 0 0\n"
    assert collector.fstab_lines("a /mnt/k\\101v nfs4 rw\n", "/mnt/kAv", "") == "a /mnt/k\\101v nfs4 rw\n"
    assert collector._unescape("a\\040b\\134c\\08") == "a b\\c\\08"


def test_api_key_at_the_end_of_a_command_line():
    assert collector.redact(["x", "--api-key"]) == ["x", "--api-key"]
    assert collector.redact(["--api-key", "k", "--api-key", "k2"]) == ["--api-key", "<redacted>", "--api-key",
                                                                      "<redacted>"]
    assert collector.redact(["--api-keys", "k"]) == ["--api-keys", "k"]


def test_a_mountinfo_line_at_its_smallest_is_read():
    five = "9 1 0:9 / /mnt/five - tmpfs tmpfs rw\n"  # no options field before the separator
    assert collector.mount_of("/mnt/five/x", five)["mount"] == "/mnt/five"
    short = "40 22 0:49 / /mnt/x rw - tmpfs tmpfs\n"  # nothing after the source
    assert collector.mount_of("/mnt/x", short) == {"mount": "/mnt/x", "fstype": "tmpfs", "device": "tmpfs",
                                                   "dev": "0:49"}


def test_a_captured_file_is_cut_at_one_mib(tmp_path):
    big = tmp_path / "big"
    big.write_bytes(b"a" * ((1 << 20) + 10))
    assert len(collector.read(str(big))) == 1 << 20 and len(collector.read(str(big), 5)) == 5
