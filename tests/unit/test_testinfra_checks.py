"""The testinfra checks' own logic (kvprov/checks/test_kvcache_tier.py), run on a host made of a
captured bundle (gpu_a01): what each check fails on, and its message. No host is contacted."""

import json
import re
from dataclasses import replace

import pytest

from kvprov.checks import test_kvcache_tier as tier
from kvprov.validate.bundle import Desired, ManagedDir
from tests.conftest import FIXTURES

BUNDLE = FIXTURES / "bundles" / "gpu_a01"
UNIT = "kvprov-sglang-gpu0-3.service"


class File:
    def __init__(self, content: str | None, mode: int = 0o644, directory: bool = False):
        self.exists = content is not None or directory
        self.is_directory = directory
        self.content_string = content or ""
        self.mode = mode


class Host:
    """What the checks ask a testinfra host, answered from the bundle's captured files."""

    def __init__(self, gpu: bool = True):
        self.files = {"/proc/self/mountinfo": (BUNDLE / "proc/mountinfo").read_text(),
                      "/proc/self/mountstats": (BUNDLE / "proc/mountstats").read_text()}
        self.files.update({"/" + str(p.relative_to(BUNDLE / "files")): p.read_text()
                           for p in (BUNDLE / "files").rglob("*") if p.is_file()})
        self.modes: dict[str, int] = {}
        self.show = {p.name.removesuffix(".txt"): p.read_text() for p in (BUNDLE / "systemctl").iterdir()}
        self.gpu = gpu

    def file(self, path: str) -> File:
        if path == "/proc/driver/nvidia/gpus":
            return File(None, directory=self.gpu)
        return File(self.files.get(path), self.modes.get(path, 0o644))

    def check_output(self, command: str, *args: str) -> str:
        assert command.startswith("systemctl show"), command
        props = re.findall(r"-p (\w+)", command)
        return "\n".join(line for line in self.show[args[0]].splitlines() if line.split("=")[0] in props)

    def set_unit(self, unit: str, **props: str) -> None:
        for key, value in props.items():
            self.show[unit] = re.sub(rf"^{key}=.*$", f"{key}={value}", self.show[unit], flags=re.M)


@pytest.fixture
def desired() -> Desired:
    return Desired.from_dict(json.loads((BUNDLE / "desired.json").read_text()))


def failure(check, *args) -> str:
    with pytest.raises(pytest.fail.Exception) as e:
        check(*args)
    return str(e.value)


def test_a_deployed_host_passes(desired):
    host = Host()
    host.modes = {f.path: int(f.mode, 8) for f in desired.files}
    for check in (tier.test_managed_files, tier.test_mount_options, tier.test_mount_transport_and_pnfs,
                  tier.test_units):
        check(host, desired)


@pytest.mark.parametrize("state", ["disabled", "enabled-runtime", "static"])
def test_units_count_only_enabled_as_enabled(desired, state):
    host = Host()
    host.set_unit(UNIT, UnitFileState=state)
    assert f"{UNIT}: {state}, want enabled" in failure(tier.test_units, host, desired)


def test_units_stopped_or_not_loaded(desired):
    host = Host()
    host.set_unit(UNIT, ActiveState="inactive")
    host.set_unit("mnt-kvcache.mount", LoadState="not-found")
    message = failure(tier.test_units, host, desired)
    assert f"{UNIT}: inactive, want active" in message and "mnt-kvcache.mount: LoadState=not-found" in message


def test_mount_options_name_a_lost_extra_option(desired):
    host = Host()
    host.files["/proc/self/mountinfo"] = host.files["/proc/self/mountinfo"].replace(",write=eager,", ",")
    assert "write: live lazy, want eager" in failure(tier.test_mount_options, host, desired)


def test_mount_transport_and_pnfs_name_the_wrong_layout_type(desired):
    host = Host()
    host.files["/proc/self/mountstats"] = host.files["/proc/self/mountstats"].replace(
        "pnfs=LAYOUT_NFSV4_1_FILES", "pnfs=LAYOUT_BLOCK_VOLUME")
    message = failure(tier.test_mount_transport_and_pnfs, host, desired)
    assert "pnfs=LAYOUT_BLOCK_VOLUME, want LAYOUT_NFSV4_1_FILES" in message


def test_managed_files_check_the_gds_files_on_gpu_hosts_only(desired):
    host = Host()
    host.modes = {f.path: int(f.mode, 8) for f in desired.files}
    host.files["/etc/cufile.json"] = host.files["/etc/cufile.json"].replace('"allow_compat_mode": false',
                                                                            '"allow_compat_mode": true')
    message = failure(tier.test_managed_files, host, desired)
    assert "1 managed file(s) drifted" in message and "/etc/cufile.json: content differs" in message
    host.gpu = False  # kvprov_gds_mode: required: a GPU-less host still owes cufile.json
    assert "/etc/cufile.json: content differs" in failure(tier.test_managed_files, host, desired)
    auto = Desired.from_dict({**desired.to_dict(), "gds": {**desired.to_dict()["gds"], "mode": "auto"}})
    tier.test_managed_files(host, auto)  # auto: the gds role writes cufile.json only on GPU hosts


class Entry:
    """A directory or account as testinfra reports it."""

    def __init__(self, **kw):
        self.__dict__.update({"exists": True, "is_symlink": False, "is_directory": True, **kw})


def test_directories_and_the_engine_account_as_deploy_makes_them(desired):
    d = replace(desired, dirs=(ManagedDir("/etc/kvprov", "0755", "root", "nixl"),
                               ManagedDir("/var/lib/kvprov-engine/gpu0-3", "0750", "kvprov", "engine")),
                engine_user="kvprov", engine_home="/var/lib/kvprov-engine", engine_shell="/usr/sbin/nologin")
    live = {"/etc/kvprov": Entry(mode=0o755, user="root", group="root"),
            "/var/lib/kvprov-engine/gpu0-3": Entry(mode=0o750, user="kvprov", group="kvprov")}
    account = Entry(group="kvprov", home="/var/lib/kvprov-engine", shell="/usr/sbin/nologin", uid=998)
    host = type("H", (), {"file": lambda self, p: live[p], "user": lambda self, name: account})()
    tier.test_directories(host, d)
    tier.test_engine_user(host, d)

    live["/etc/kvprov"] = Entry(mode=0o777, user="root", group="root")
    live["/var/lib/kvprov-engine/gpu0-3"] = Entry(is_symlink=True, is_directory=False, mode=0o777, user="x", group="x")
    message = failure(tier.test_directories, host, d)
    assert "2 directory(ies) drifted" in message and "/etc/kvprov: root:root 0777, want root:root 0755" in message
    assert "/var/lib/kvprov-engine/gpu0-3: a link" in message
    account.shell, account.home = "/bin/bash", "/home/kvprov"
    assert "home /home/kvprov, want /var/lib/kvprov-engine\n  shell /bin/bash, want /usr/sbin/nologin" in failure(
        tier.test_engine_user, host, replace(d, engine_uid=None))
    assert "uid 998, want 1500" in failure(tier.test_engine_user, host, replace(d, engine_uid=1500))
