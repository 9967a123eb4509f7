"""The kvcache_mount role's kvprov_mount_state module: pure parts, on real mountinfo text."""

import importlib.util
import os

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location(
    "kvprov_mount_state", ROOT / "plugins/modules/kvprov_mount_state.py")
ms = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ms)

# /proc/self/mountinfo from the lab's GPU-node VM after `kvprov deploy`
MOUNTINFO = """\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,errors=remount-ro
61 22 0:52 / /mnt/kvcache rw,relatime shared:33 - nfs4 10.99.1.1:/kv rw,vers=4.1,rsize=262144,wsize=262144,namlen=255,hard,proto=rdma,max_connect=16,port=20049,timeo=600,retrans=2,sec=sys,clientaddr=10.99.1.2,local_lock=none,addr=10.99.1.1
70 22 0:60 / /mnt/with\\040space rw - tmpfs tmpfs rw
"""
DESIRED = ["vers=4.1", "proto=rdma", "port=20049", "rsize=262144", "wsize=262144", "hard", "max_connect=16",
           "_netdev", "x-systemd.mount-timeout=30"]


def test_parse_mountinfo_reads_super_options_and_unescapes():
    live = ms.parse_mountinfo(MOUNTINFO, "/mnt/kvcache")
    assert live["source"] == "10.99.1.1:/kv" and live["fstype"] == "nfs4"
    assert live["options"]["proto"] == "rdma" and live["options"]["hard"] is True
    assert ms.parse_mountinfo(MOUNTINFO, "/mnt/with space")["fstype"] == "tmpfs"
    assert ms.parse_mountinfo(MOUNTINFO, "/mnt/other") is None


def test_topmost_mount_wins():
    stacked = MOUNTINFO + "80 61 0:70 / /mnt/kvcache rw - nfs4 10.99.1.1:/kv rw,vers=4.2,proto=tcp,port=2049,hard\n"
    assert ms.parse_mountinfo(stacked, "/mnt/kvcache")["options"]["proto"] == "tcp"


def test_a_matching_mount_has_no_differences():
    live = ms.parse_mountinfo(MOUNTINFO, "/mnt/kvcache")
    assert ms.differences(live, "10.99.1.1:/kv", DESIRED) == []


def test_each_kind_of_difference_is_named():
    tcp = MOUNTINFO.replace("proto=rdma", "proto=tcp").replace("port=20049", "port=2049").replace(",hard,", ",soft,")
    live = ms.parse_mountinfo(tcp, "/mnt/kvcache")
    assert ms.differences(live, "10.99.2.1:/kv", DESIRED + ["nconnect=4"]) == [
        "source: live 10.99.1.1:/kv, want 10.99.2.1:/kv",
        "proto: live tcp, want rdma",
        "port: live 2049, want 20049",
        "hard: live soft, want hard",
        "nconnect: live absent, want 4",
    ]


def test_unescape_takes_only_octal_escapes():
    assert ms.unescape(r"/mnt/a\040b\999\12") == "/mnt/a b\\999\\12"


def test_the_default_nfs_port_is_not_shown_by_the_kernel():
    tcp = MOUNTINFO.replace("proto=rdma,max_connect=16,port=20049", "proto=tcp,max_connect=16")
    live = ms.parse_mountinfo(tcp, "/mnt/kvcache")
    assert ms.differences(live, "10.99.1.1:/kv", ["proto=tcp", "port=2049"]) == []
    assert ms.differences(live, "10.99.1.1:/kv", ["port=20049"]) == ["port: live 2049, want 20049"]


def test_garbage_lines_are_ignored():
    assert ms.parse_mountinfo("garbage\n1 2 - x\n\n" + MOUNTINFO, "/mnt/kvcache")["source"] == "10.99.1.1:/kv"


def test_open_users_finds_a_cwd_under_the_mount(tmp_path):
    proc = tmp_path / "proc"
    (proc / "42/fd").mkdir(parents=True)
    (proc / "42/comm").write_text("sglang\n")
    os.symlink("/mnt/kvcache/gpu1/main", proc / "42/cwd")
    (proc / "43/fd").mkdir(parents=True)
    os.symlink("/mnt/kvcache-other/x", proc / "43/cwd")  # a sibling path is not "under" the mount
    os.symlink("/mnt/kvcache/f", proc / "43/fd/3")
    (proc / "43/comm").write_text("python3\n")
    (proc / "43/cgroup").write_text("0::/system.slice/kvprov-sglang-main.service\n")
    (proc / "self").mkdir()
    assert sorted(ms.open_users("/mnt/kvcache", str(proc)), key=lambda u: u["pid"]) == [
        {"pid": 42, "comm": "sglang", "unit": ""},
        {"pid": 43, "comm": "python3", "unit": "kvprov-sglang-main.service"}]
    assert ms.open_users("/srv", str(proc)) == []


def test_the_service_of_a_process_comes_from_its_cgroup():
    assert ms.service_of("0::/system.slice/kvprov-vllm-a.service\n") == "kvprov-vllm-a.service"
    assert ms.service_of("12:pids:/system.slice/ssh.service/x\n0::/user.slice/session-1.scope") == "ssh.service"
    assert ms.service_of("0::/user.slice/user-0.slice/session-3.scope\n") == ""


# A live mount with NetApp's extra options, and the desired options that match it.
EXTRA = MOUNTINFO.replace(",local_lock=none,", ",local_lock=none,write=eager,lookupcache=pos,acregmin=600,"
                                               "acregmax=600,acdirmin=600,acdirmax=600,nconnect=4,trunkdiscovery,"
                                               "nocto,")
EXTRA_DESIRED = DESIRED + ["write=eager,lookupcache=positive", "actimeo=600", "nconnect=4", "trunkdiscovery", "nocto"]


def test_every_desired_option_is_compared_in_the_kernels_spelling():
    live = ms.parse_mountinfo(EXTRA, "/mnt/kvcache")
    # lookupcache=positive is shown as pos; actimeo=600 as the four attribute cache times
    assert ms.differences(live, "10.99.1.1:/kv", EXTRA_DESIRED) == []
    assert ms.warnings(live, EXTRA_DESIRED) == []


def test_each_option_the_kernel_shows_is_compared():
    """One drift per option the profile or the inventory can ask for (a remount by hand that lost it)."""
    live = ms.parse_mountinfo(EXTRA, "/mnt/kvcache")
    cases = {
        "vers=4.1": ("vers=4.1", "vers=4.2", "vers: live 4.2, want 4.1"),
        "rsize=262144": ("rsize=262144", "rsize=131072", "rsize: live 131072, want 262144"),
        "wsize=262144": ("wsize=262144", "wsize=65536", "wsize: live 65536, want 262144"),
        "max_connect=16": (",max_connect=16", "", "max_connect: live 1, want 16"),
        "write=eager": (",write=eager", "", "write: live lazy, want eager"),
        "lookupcache=positive": (",lookupcache=pos", "", "lookupcache: live all, want pos"),
        "nconnect=4": (",nconnect=4", ",nconnect=2", "nconnect: live 2, want 4"),
        "trunkdiscovery": (",trunkdiscovery", "", "trunkdiscovery: live absent, want trunkdiscovery"),
        "nocto": (",nocto", "", "nocto: live absent, want nocto"),
        "actimeo=600": (",acregmin=600", "", "acregmin: live 3, want 600 (actimeo=600)"),
    }
    for option, (old, new, message) in cases.items():
        drifted = ms.parse_mountinfo(EXTRA.replace(old, new, 1), "/mnt/kvcache")
        assert ms.differences(drifted, "10.99.1.1:/kv", EXTRA_DESIRED) == [message], option
    assert ms.differences(live, "", ["actimeo=60"]) == [f"{k}: live 600, want 60 (actimeo=60)" for k in (
        "acregmin", "acregmax", "acdirmin", "acdirmax")]
    defaults = ms.parse_mountinfo(MOUNTINFO, "/mnt/kvcache")  # the kernel leaves out the times at their defaults
    assert ms.differences(defaults, "", ["actimeo=60"]) == ["acregmin: live 3, want 60 (actimeo=60)",
                                                            "acdirmin: live 30, want 60 (actimeo=60)"]
    assert ms.differences(live, "", ["nfsvers=4.2"]) == ["vers: live 4.1, want 4.2 (nfsvers=4.2)"]


def test_defaults_and_other_spellings():
    plain = ms.parse_mountinfo(MOUNTINFO.replace(",max_connect=16", ""), "/mnt/kvcache")
    # what the kernel leaves out of mountinfo is its default: asking for it is no difference
    assert ms.differences(plain, "", ["write=lazy", "lookupcache=all", "max_connect=1", "cto",
                                      "acregmin=3", "notrunkdiscovery", "rdma", "local_lock=none"]) == []
    live = ms.parse_mountinfo(MOUNTINFO, "/mnt/kvcache")
    assert ms.differences(live, "", ["tcp", "soft", "ro"]) == [
        "proto: live rdma, want tcp", "soft: live hard, want soft", "ro: live rw, want ro"]
    nocto = ms.parse_mountinfo(MOUNTINFO.replace(",hard,", ",hard,nocto,"), "/mnt/kvcache")
    assert ms.differences(nocto, "", ["cto"]) == ["cto: live nocto, want cto"]
    ipv6 = ms.parse_mountinfo(MOUNTINFO.replace("proto=rdma", "proto=rdma6"), "/mnt/kvcache")
    assert ms.differences(ipv6, "", ["proto=rdma"]) == []
    noac = ms.parse_mountinfo(MOUNTINFO.replace(",hard,", ",hard,noac,acregmin=0,acregmax=0,acdirmin=0,acdirmax=0,"),
                              "/mnt/kvcache")
    assert ms.differences(noac, "", ["noac"]) == []
    assert ms.differences(live, "", ["noac"]) == ["noac: live absent, want noac"] + [
        f"{k}: live {v}, want 0 (noac)" for k, v in (("acregmin", 3), ("acregmax", 60), ("acdirmin", 30),
                                                      ("acdirmax", 60))]


def test_live_options_nobody_asked_for_are_warnings():
    live = ms.parse_mountinfo(EXTRA, "/mnt/kvcache")
    assert ms.differences(live, "10.99.1.1:/kv", DESIRED) == []  # not a reason to remount ...
    assert ms.unasked(live, DESIRED) == ["write=eager", "lookupcache=pos", "acregmin=600", "acregmax=600",
                                         "acdirmin=600", "acdirmax=600", "nconnect=4", "trunkdiscovery",
                                         "nocto"]  # ... but said
    assert ms.warnings(live, DESIRED)[0] == "write=eager: live, but not among the desired options"
    # what the kernel shows by itself on every NFS mount is nobody's choice
    assert ms.unasked(ms.parse_mountinfo(MOUNTINFO, "/mnt/kvcache"), DESIRED) == []


def test_options_kvprov_cannot_compare_are_said_not_ignored_silently():
    live = ms.parse_mountinfo(MOUNTINFO, "/mnt/kvcache")
    desired = DESIRED + ["strictatime", "mystery=3", "namlen=255"]
    assert ms.differences(live, "", desired) == []
    assert ms.uncompared(desired) == ["strictatime", "mystery=3", "namlen=255"]
    assert ms.warnings(live, desired) == [
        f"{o}: not compared (kvprov does not know how the kernel shows it)" for o in ms.uncompared(desired)]


def test_a_units_options_compare_in_the_kernels_spelling_too():
    """validate's mount.unit compares the unit's Options= with the inventory's through as_shown()."""
    options = ["nfsvers=4.1", "rdma", "hard", "actimeo=600", "lookupcache=positive", "cto", "_netdev"]
    unit = {"source": "s:/e", "options": ms.as_shown(options)}
    assert unit["options"] == {"vers": "4.1", "proto": "rdma", "hard": True, "acregmin": "600", "acregmax": "600",
                               "acdirmin": "600", "acdirmax": "600", "lookupcache": "pos"}
    assert ms.differences(unit, "s:/e", options) == []
    assert ms.differences(unit, "s:/e", ["vers=4.2", "write=eager"]) == ["vers: live 4.1, want 4.2",
                                                                         "write: live lazy, want eager"]
