"""kvprov_mount_state.open_users on a hand-made /proc: each way a process can hold the
mount (cwd, root, executable, an open file) and each process listed once."""

import os

from kvprov.validate.parsers import mount_state as ms


def proc_entry(proc, pid: int, links: dict, comm: str | None = None, cgroup: str | None = None) -> None:
    (proc / str(pid) / "fd").mkdir(parents=True)
    for name, target in links.items():
        os.symlink(target, proc / str(pid) / name)
    if comm is not None:
        (proc / str(pid) / "comm").write_text(comm + "\n")
    if cgroup is not None:
        (proc / str(pid) / "cgroup").write_text(cgroup)


def test_each_kind_of_hold_counts_once_per_process(tmp_path):
    proc = tmp_path / "proc"
    proc_entry(proc, 10, {"root": "/mnt/kv/chroot"}, "a")
    proc_entry(proc, 11, {"exe": "/mnt/kv/bin/engine"}, "b", "0::/system.slice/kvprov-x.service\n")
    proc_entry(proc, 12, {"cwd": "/mnt/kv", "root": "/mnt/kv", "exe": "/mnt/kv/e", "fd/3": "/mnt/kv/f"})
    proc_entry(proc, 13, {"cwd": "/", "root": "/", "exe": "/usr/bin/python3", "fd/0": "/dev/null"}, "c")
    (proc / "cpuinfo").write_text("")
    assert sorted(ms.open_users("/mnt/kv/", str(proc)), key=lambda u: u["pid"]) == [
        {"pid": 10, "comm": "a", "unit": ""},
        {"pid": 11, "comm": "b", "unit": "kvprov-x.service"},
        {"pid": 12, "comm": "?", "unit": ""},  # no comm to read
    ]


def test_the_real_proc_by_default(tmp_path, monkeypatch):
    assert ms.open_users(str(tmp_path / "nothing-uses-this")) == []
    monkeypatch.chdir(tmp_path)
    users = ms.open_users(str(tmp_path))
    assert {"pid": os.getpid(), "comm": ms._read(f"/proc/{os.getpid()}/comm"),
            "unit": ms.service_of(ms._read(f"/proc/{os.getpid()}/cgroup"))} in users


class FakeModule:
    """AnsibleModule.run_command's answers, by command; the commands asked are kept."""

    def __init__(self, answers: dict):
        self.answers, self.asked = answers, []

    def run_command(self, argv):
        self.asked.append(argv)
        return self.answers[tuple(argv[:2])]


def test_active_dependents_are_the_running_services_that_need_the_mount():
    m = FakeModule({("systemctl", "show"): (0, "b.service a.service\nx.target c.service\n", ""),
                    ("systemctl", "is-active"): (3, "active\ninactive\nactivating\n", "")})
    assert ms.active_dependents(m, "mnt-kv.mount") == ["a.service", "c.service"]
    assert m.asked == [["systemctl", "show", "--value", "-p", "RequiredBy", "-p", "BoundBy", "mnt-kv.mount"],
                       ["systemctl", "is-active", "a.service", "b.service", "c.service"]]
    m = FakeModule({("systemctl", "show"): (0, "a.service\n", ""), ("systemctl", "is-active"): (0, "reloading\n", "")})
    assert ms.active_dependents(m, "u") == ["a.service"]


def test_no_dependents_when_systemctl_fails_or_names_none():
    m = FakeModule({("systemctl", "show"): (1, "a.service", "")})
    assert ms.active_dependents(m, "u") == [] and len(m.asked) == 1
    m = FakeModule({("systemctl", "show"): (0, "\n\n", "")})
    assert ms.active_dependents(m, "u") == [] and len(m.asked) == 1


def test_mountinfo_lines_without_super_options_or_with_too_few_fields():
    text = ("36 25 0:50 / /mnt/kv rw,relatime shared:9 - nfs4 10.0.0.1:/kv\n"  # no super options field
            "37 25 0:51 / /mnt/kv rw - nfs4\n"  # no source: not a mount line
            "38 25 0:52 /mnt/kv rw - nfs4 10.0.0.2:/x rw\n")  # too few fields before "-"
    assert ms.parse_mountinfo(text, "/mnt/kv") == {
        "source": "10.0.0.1:/kv", "fstype": "nfs4", "options": {"rw": True, "relatime": True}}
    assert ms.parse_mountinfo("36 25 0:50 / /mnt/k\\134v rw - nfs4 a:/b rw,vers=4.1\n", "/mnt/k\\v") == {
        "source": "a:/b", "fstype": "nfs4", "options": {"rw": True, "vers": "4.1"}}


def test_unescape_reads_only_three_octal_digits():
    assert ms.unescape("a\\040b\\134c") == "a b\\c"
    assert ms.unescape("a\\04") == "a\\04" and ms.unescape("a\\X12") == "a\\X12" and ms.unescape("\\0401") == " 1"
    assert ms.unescape("\\") == "\\" and ms.unescape("ab\\") == "ab\\"


def test_the_service_is_the_innermost_service_of_the_cgroup_path():
    assert ms.service_of("0::/system.slice/a.service/sub.service\n") == "sub.service"
    assert ms.service_of("1:name=systemd:/system.slice/b.service\n") == "b.service"


def test_the_service_is_the_last_one_on_the_cgroup_path_whatever_its_name_holds():
    """A unit's name may hold ":" (systemd allows it); the hierarchy's fields never end in .service."""
    assert ms.service_of("0::/system.slice/kvprov-engine@gpu:0-3.service\n") == "kvprov-engine@gpu:0-3.service"
    assert ms.service_of("1:name=systemd:/system.slice/a.service/b.service/sub\n") == "b.service"
    assert ms.service_of("0::/\n") == ""
