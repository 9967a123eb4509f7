"""The captured-file parsers on the lines that are not what they look for: short or garbled
mountinfo, /proc/modules, `rdma link` and `ip -o addr` lines, `systemctl show` and unit-file
oddities (keys before a section, comments with '=', a trailing continuation), `gdscheck -p`
banners."""

import pytest

from kvprov.validate import parsers
from kvprov.validate.parsers import ParseError, RdmaLink

NFS = "36 25 0:52 / /mnt/kvcache rw,relatime shared:1 - nfs4 10.0.0.1:/vol rw,vers=4.1"


# ---------------------------------------------------------------------------- mountinfo

def test_a_mountinfo_line_needs_fstype_and_source_after_the_dash():
    short = "36 25 0:52 / /mnt/kvcache rw - nfs4"
    assert parsers.mounts_in(f"{short}\n36 25 0:52 / /mnt/b rw - nfs4 srv:/b\n{NFS}") == [
        ("/mnt/b", "nfs4", "srv:/b"), ("/mnt/kvcache", "nfs4", "10.0.0.1:/vol")]
    with pytest.raises(ParseError, match="^no mountinfo line"):
        parsers.parse_mountinfo(short, "/mnt/kvcache")


# ---------------------------------------------------------------------------- /proc/modules

def test_proc_modules_keeps_only_well_formed_lines():
    text = ("nfs 532480 1 - Live 0x0000000000000000\n"
            "rpcrdma 1 0 - Loading\n"  # exactly five words
            "garbage words that are not a module\n"
            "bad x 0 - Live 0x0\n"  # size not a number
            "bad/name 1 0 - Live 0x0\n"
            "short\n")
    assert parsers.parse_modules(text) == {"nfs": "Live", "rpcrdma": "Loading"}
    with pytest.raises(ParseError):
        parsers.parse_modules("rpcrdma 1 0 -\n")


# ---------------------------------------------------------------------------- rdma link, ip addr

def test_rdma_link_lines_missing_attributes_and_repeated_keys():
    text = ("link mlx5_0/1 subnet_prefix fe80::/64 lid 7 sm_lid 1 lmc 0 state ACTIVE physical_state LINK_UP\n"
            "link rxe0/1\n"
            "link\n"
            "dev mlx5_1 state ACTIVE\n"
            "link rxe1/1 state DOWN state ACTIVE netdev data1 netdev data9\n")
    assert parsers.parse_rdma_link(text) == [
        RdmaLink("mlx5_0/1", "ACTIVE", "LINK_UP", ""), RdmaLink("rxe0/1", "", "", ""),
        RdmaLink("rxe1/1", "DOWN", "", "data1")]
    with pytest.raises(ParseError):
        parsers.parse_rdma_link("link\nlink mlx5_0 state ACTIVE\n")


def test_ip_addr_lines_inet6_vlan_names_and_garbage():
    text = ("1: lo\n"
            "2: data0 inet 10.99.1.2/24\n"
            "3: data0 inet notanaddress/24 scope global data0\n"
            "4: vlan10@data0 inet6 fd00::2/64 scope global\n"
            "not a line of ip -o addr at all\n"
            "5: data1 link/ether 00:11:22:33:44:55 brd ff:ff:ff:ff:ff:ff\n")
    assert parsers.parse_ip_addr(text) == {"10.99.1.2": "data0", "fd00::2": "vlan10"}


# ---------------------------------------------------------------------------- systemd

def test_systemctl_show_ignores_lines_without_a_key():
    assert parsers.parse_systemctl_show("Garbage\nActiveState=active\nlower=x\n") == {"ActiveState": "active"}


def test_unit_file_comments_keys_outside_a_section_and_odd_lines():
    text = ("Stray=before any section\n"
            "[Unit]\n"
            "# Environment=FOO=1\n"
            "; After=commented.target\n"
            "X-Kvprov=vendor key\n"
            "no equals sign here\n"
            "[Service]\n"
            "ExecStart=/bin/echo [a]\n")
    assert parsers.parse_unit(text) == {"Unit": [("X-Kvprov", "vendor key")],
                                        "Service": [("ExecStart", "/bin/echo [a]")]}


def test_unit_file_ending_in_a_continuation_keeps_the_line():
    assert parsers.parse_unit("[Service]\nExecStart=/bin/a\\\n  --flag \\") == {
        "Service": [("ExecStart", "/bin/a --flag")]}
    assert parsers.parse_unit("[Service]\nUser=x\nno equals \\") == {"Service": [("User", "x")]}
    with pytest.raises(ParseError, match="no \\[Section\\]"):
        parsers.parse_unit("ExecStart=/bin/a \\")


# ---------------------------------------------------------------------------- gdscheck -p

def test_gdscheck_platform_line_dashes_and_banners():
    g = parsers.parse_gdscheck(" ==== ENV: x ====\n --NFS  :  Supported\n Platform verification succeeded\n")
    assert g.entries == {"nfs": "Supported"}
    assert g.platform_verified is True and g.errors == []
    g = parsers.parse_gdscheck(" NFS : Supported\n Platform verification error, see the log\n")
    assert g.platform_verified is False and g.errors == ["Platform verification error, see the log"]
    assert parsers.parse_gdscheck(" NFS : Unsupported\n").platform_verified is None


def test_gdscheck_needs_an_nfs_or_a_properties_line():
    assert parsers.parse_gdscheck("NFS : Supported\n").nfs == "Supported"
    assert parsers.parse_gdscheck("properties.use_compat_mode : false\n").use_compat_mode is False
    with pytest.raises(ParseError, match="^no `NFS : ...`"):
        parsers.parse_gdscheck("NFS\nsomething : else\n")


def test_gdscheck_a_succeeded_line_is_no_error_and_keys_keep_their_letters():
    g = parsers.parse_gdscheck(" NFS : Supported\n Platform verification succeeded (0 errors)\n XGMI : Unsupported\n")
    assert g.errors == [] and g.platform_verified is True
    assert g.get("XGMI") == "Unsupported"
