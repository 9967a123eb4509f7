"""The kernel's spelling of every mount option kvprov compares (kvprov_mount_state's tables),
option by option: asking for what the live mount shows is no difference and no warning;
asking for something else is a difference that names the live value."""

from kvprov.validate.parsers import mount_state as ms

# mountinfo of an NFS 4.1 mount as the kernel shows it: the per-mount flags, then the super options
SUPER = ("rw,vers=4.1,rsize=262144,wsize=262144,namlen=255,hard,proto=tcp,port=20049,timeo=600,retrans=2,sec=sys,"
         "clientaddr=10.99.1.2,local_lock=none,addr=10.99.1.1")


def mount(extra: str = "", per_mount: str = "rw,relatime", super_: str = SUPER) -> dict:
    line = f"61 22 0:52 / /mnt/kvcache {per_mount} shared:33 - nfs4 10.99.1.1:/kv {super_}{extra}\n"
    return ms.parse_mountinfo(line, "/mnt/kvcache")


def compare(live: dict, option: str) -> tuple[list, list]:
    return ms.differences(live, "", [option]), ms.warnings(live, [option])


USERSPACE = ["_netdev", "auto", "noauto", "nofail", "defaults", "user", "nouser", "users", "owner", "group", "bg",
             "fg", "retry=2", "sloppy", "comment=systemd.automount", "x-systemd.mount-timeout=30"]


def test_options_only_userspace_reads_are_neither_compared_nor_warned_about():
    for option in USERSPACE:
        assert compare(mount(), option) == ([], []), option


# (flag, the spelling that asks for the kernel's default, per-mount flag?) for the flags the kernel shows while set
FLAGS = [("nocto", "cto", False), ("nolock", "lock", False), ("noacl", "acl", False),
         ("nordirplus", "rdirplus", False), ("nosharecache", "sharecache", False), ("noresvport", "resvport", False),
         ("trunkdiscovery", "notrunkdiscovery", False), ("fsc", "nofsc", False), ("migration", "nomigration", False),
         ("softreval", "nosoftreval", False), ("posix", "noposix", False), ("sync", "async", False),
         ("dirsync", None, False), ("lazytime", "nolazytime", False), ("nosuid", "suid", True),
         ("nodev", "dev", True), ("noexec", "exec", True), ("nodiratime", "diratime", True)]


def with_flag(flag: str, per_mount: bool) -> dict:
    return mount(per_mount=f"rw,{flag},relatime") if per_mount else mount(extra="," + flag)


def test_a_flag_the_kernel_shows_is_compared_both_ways():
    for flag, default, per_mount in FLAGS:
        assert compare(with_flag(flag, per_mount), flag) == ([], []), flag
        assert compare(mount(), flag) == ([f"{flag}: live absent, want {flag}"], []), flag
        if default:  # asking for the default: the flag must not be set
            assert compare(mount(), default) == ([], []), default
            assert compare(with_flag(flag, per_mount), default) == ([f"{default}: live {flag}, want {default}"], [])


def test_noac_is_compared_through_its_default_spelling_too():
    noac = mount(",noac,acregmin=0,acregmax=0,acdirmin=0,acdirmax=0")
    assert ms.differences(noac, "", ["ac"]) == ["ac: live noac, want ac"]
    assert compare(mount(), "ac") == ([], [])


def test_exactly_one_flag_of_a_group_is_shown():
    for option, per_mount, shown in [
            ("hard", "rw,relatime", "softerr"), ("softerr", "rw,relatime", "hard"), ("soft", "rw,relatime", "hard"),
            ("noatime", "rw,relatime", "relatime"), ("relatime", "rw,noatime", "noatime"), ("ro", "rw,relatime", "rw")]:
        live = mount(per_mount=per_mount, super_=SUPER.replace(",hard,", ",softerr,") if shown == "softerr" else SUPER)
        assert ms.differences(live, "", [option]) == [f"{option}: live {shown}, want {option}"]


def test_a_mount_showing_no_flag_of_a_group_is_absent_there():
    """strictatime: the kernel shows neither relatime nor noatime."""
    assert compare(mount(per_mount="rw"), "noatime") == (["noatime: live absent, want noatime"], [])


def test_each_value_the_kernel_always_shows_is_compared():
    for key, live, other in [
            ("vers", "4.1", "4.2"), ("rsize", "262144", "1048576"), ("wsize", "262144", "1048576"),
            ("proto", "tcp", "rdma"), ("port", "20049", "2049"), ("timeo", "600", "100"), ("retrans", "2", "5"),
            ("sec", "sys", "krb5p"), ("clientaddr", "10.99.1.2", "10.99.1.3"), ("addr", "10.99.1.1", "10.99.1.9"),
            ("local_lock", "none", "all")]:
        assert compare(mount(), f"{key}={live}") == ([], []), key
        assert compare(mount(), f"{key}={other}") == ([f"{key}: live {live}, want {other}"], [])


def test_each_value_the_kernel_shows_when_set_is_compared():
    for key, live, other, default in [("bsize", "1048576", "65536", None), ("xprtsec", "tls", "mtls", "none"),
                                      ("fsc", "kvcache", "other", None), ("nconnect", "4", "8", None)]:
        shown = mount(f",{key}={live}")
        assert compare(shown, f"{key}={live}") == ([], []), key
        assert compare(shown, f"{key}={other}") == ([f"{key}: live {live}, want {other}"], [])
        assert compare(mount(), f"{key}={other}") == ([f"{key}: live {default or 'absent'}, want {other}"], [])
        if default:  # the kernel leaves its default out of mountinfo
            assert compare(mount(), f"{key}={default}") == ([], []), key


def test_fsc_shown_as_a_flag_is_not_a_cache_tag():
    """The kernel shows plain `fsc` when FS-Cache runs without a tag (fsc=TAG with one)."""
    assert compare(mount(",fsc"), "fsc=kvcache") == (["fsc: live fsc, want kvcache"], [])


def test_a_transport_flag_is_the_proto_option():
    for flag in ("tcp", "udp", "rdma"):
        live = mount(super_=SUPER.replace("proto=tcp", f"proto={flag}"))
        other = "tcp" if flag == "rdma" else "rdma"
        assert compare(live, flag) == ([], []), flag
        assert compare(live, other) == ([f"proto: live {flag}, want {other}"], [])


def test_what_the_kernel_shows_by_itself_is_nobodys_choice():
    """No live option of a plain NFS 4.1 mount is `not among the desired options`, even when
    nothing was asked for (SELinux hosts add seclabel)."""
    assert ms.unasked(mount(",seclabel"), []) == []
    assert ms.unasked(mount(",seclabel,nconnect=4"), []) == ["nconnect=4"]


def test_an_option_kvprov_cannot_compare_is_warned_about_once():
    """An NFSv3 mount shows mountport= and friends, which kvprov's tables do not know: asking
    for one is `not compared`, not also `not among the desired options`."""
    v3 = ms.parse_mountinfo(
        "62 22 0:53 / /mnt/v3 rw,relatime shared:34 - nfs 10.99.1.1:/kv rw,vers=3,rsize=1048576,wsize=1048576,"
        "namlen=255,hard,proto=tcp,timeo=600,retrans=2,sec=sys,mountaddr=10.99.1.1,mountvers=3,mountport=20048,"
        "mountproto=udp,local_lock=none,addr=10.99.1.1\n", "/mnt/v3")
    assert ms.warnings(v3, ["vers=3", "mountport=20048"]) == [
        "mountaddr=10.99.1.1: live, but not among the desired options",
        "mountvers=3: live, but not among the desired options",
        "mountproto=udp: live, but not among the desired options",
        "mountport=20048: not compared (kvprov does not know how the kernel shows it)"]


def test_a_unit_keeps_the_options_kvprov_does_not_know_as_written():
    assert ms.as_shown(["hard", "mountport=20048", "strictatime", "_netdev"]) == {
        "hard": True, "mountport": "20048", "strictatime": True}
