"""validate's parsers on the edges the fixture captures do not reach: a bad line between good
ones, a unit file with continuations and comments, a package without a version, gdscheck
output that is not gdscheck's."""

import pytest

from kvprov.validate import parsers
from kvprov.validate.parsers import ParseError


def test_mounts_in_skips_a_line_it_cannot_read_and_goes_on():
    text = ("22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
            "23 22 0:5 / /broken rw shared:2 -\n"
            "24 22 0:50 / /mnt/kv\\040x rw - nfs4 10.0.0.1:/kv rw,vers=4.1\n")
    assert parsers.mounts_in(text) == [("/", "ext4", "/dev/vda"), ("/mnt/kv x", "nfs4", "10.0.0.1:/kv")]


def test_rdma_link_skips_lines_that_are_not_links():
    text = ("garbage\n"
            "link rxe0/1 state ACTIVE physical_state LINK_UP netdev data0\n"
            "link nodev state DOWN\n"
            "link mlx5_1/1 state DOWN physical_state DISABLED netdev ens2\n")
    assert [(l.name, l.state, l.physical_state, l.netdev) for l in parsers.parse_rdma_link(text)] == [
        ("rxe0/1", "ACTIVE", "LINK_UP", "data0"), ("mlx5_1/1", "DOWN", "DISABLED", "ens2")]


def test_unit_file_continuations_and_comments():
    text = ("# a comment\n; another\n[Unit]\nDescription=x\n\n[Service]\n"
            "ExecStart=/bin/a \\\n  --b \\\n  --c\nUser=u\n")
    assert parsers.parse_unit(text) == {"Unit": [("Description", "x")],
                                        "Service": [("ExecStart", "/bin/a  --b  --c"), ("User", "u")]}  # as systemd joins them


def test_packages_without_a_version_and_with_an_arch():
    assert parsers.parse_packages("nfs-common\t1:2.6\nrdma-core\nlibc6:amd64\t2.39\n") == {
        "nfs-common": "1:2.6", "rdma-core": "", "libc6": "2.39"}
    with pytest.raises(ParseError) as e:
        parsers.parse_packages("")
    assert str(e.value) == "no `NAME VERSION` line: the file is empty"
    with pytest.raises(ParseError) as e:
        parsers.parse_packages("!!!\n")
    assert str(e.value) == "no `NAME VERSION` line"


def test_gdscheck_output_that_is_not_gdschecks_says_what_it_said():
    with pytest.raises(ParseError) as e:
        parsers.parse_gdscheck("gdscheck: error while loading shared libraries: libcufile.so.0\n")
    assert str(e.value) == ("no `NFS : ...` or `properties.*` line: not the output of `gdscheck -p` (it says: "
                            "gdscheck: error while loading shared libraries: libcufile.so.0)")
    with pytest.raises(ParseError) as e:
        parsers.parse_gdscheck("hello\n")
    assert str(e.value) == "no `NFS : ...` or `properties.*` line: not the output of `gdscheck -p`"
