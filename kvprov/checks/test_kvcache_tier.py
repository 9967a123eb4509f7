"""The KV-cache tier of a GPU node, as deploy leaves it (testinfra; read-only on the host).

Each test checks one concern for every item the inventory asks for, and fails with one
message that lists everything that differs, so a CI log names the drift directly.
"""

from __future__ import annotations

import difflib
import json

import pytest

from kvprov import mountstats
from kvprov.validate import parsers
from kvprov.validate.bundle import Desired
from kvprov.validate.checks.mount import LAYOUT_NAMES

VENV_VERSIONS = ("import importlib.metadata as m, json; "
                 "print(json.dumps({d.metadata['Name'].lower().replace('_', '-'): d.version "
                 "for d in m.distributions()}))")


def _fail_if(problems: list[str], what: str) -> None:
    if problems:
        pytest.fail(f"{what}:\n  " + "\n  ".join(problems), pytrace=False)


def _nfs_only(d: Desired) -> None:
    if not d.is_nfs:
        pytest.skip(f"storage profile local: {d.mount_point} is a local directory")


def test_managed_files(host, kvprov_desired: Desired):
    """Every file deploy writes has the content the roles render, and its mode."""
    problems = []
    no_gpu = kvprov_desired.gds_mode == "auto" and not host.file("/proc/driver/nvidia/gpus").is_directory
    for f in kvprov_desired.files:
        if f.role == "gds" and no_gpu:
            continue  # the gds role writes its files only on GPU hosts
        live = host.file(f.path)
        if not live.exists:
            problems.append(f"{f.path}: missing")
            continue
        if live.mode != int(f.mode, 8):
            problems.append(f"{f.path}: mode {live.mode:04o}, want {f.mode}")
        text = live.content_string
        if text != f.content:
            diff = difflib.unified_diff(f.content.splitlines(), text.splitlines(), "desired", "live", n=0,
                                        lineterm="")
            problems.append(f"{f.path}: content differs from `kvprov render`:\n    "
                            + "\n    ".join(list(diff)[2:22]))
    _fail_if(problems, f"{len(problems)} managed file(s) drifted")


def test_directories(host, kvprov_desired: Desired):
    """Every directory deploy creates on the host is one (not a link), with its mode and owner
    (the storage directories on the KV volume: test_storage_dirs, under a timeout)."""
    shared = {i.storage_dir for i in kvprov_desired.instances}
    problems = []
    for want in kvprov_desired.dirs:
        if want.path in shared:
            continue
        live = host.file(want.path)
        if not live.exists or live.is_symlink or not live.is_directory:
            problems.append(f"{want.path}: {'a link' if live.is_symlink else 'not a directory' if live.exists else 'missing'}")
        elif (live.mode, live.user, live.group) != (int(want.mode, 8), want.owner, want.owner):
            problems.append(f"{want.path}: {live.user}:{live.group} {live.mode:04o}, want {want.owner}:{want.owner} "
                            f"{want.mode}")
    _fail_if(problems, f"{len(problems)} directory(ies) drifted")


def test_engine_user(host, kvprov_desired: Desired):
    """The engine user's account as deploy makes it: primary group, home, shell (and uid when set)."""
    d = kvprov_desired
    if d.engine_home is None:
        pytest.skip("the desired state does not say how the account looks")
    user = host.user(d.engine_user)
    if not user.exists:
        pytest.fail(f"no user {d.engine_user}", pytrace=False)
    want = {"group": d.engine_user, "home": d.engine_home, "shell": d.engine_shell, "uid": d.engine_uid}
    live = {"group": user.group, "home": user.home, "shell": user.shell, "uid": user.uid}
    _fail_if([f"{k} {live[k]}, want {v}" for k, v in want.items() if v is not None and live[k] != v],
             f"the engine user {d.engine_user}")


def test_mount_options(host, kvprov_desired: Desired):
    """The live mount (mountinfo, not fstab) has the source and options of the profile."""
    d = kvprov_desired
    _nfs_only(d)
    live = parsers.parse_mountinfo(host.file("/proc/self/mountinfo").content_string, d.mount_point)
    if live is None:
        pytest.fail(f"nothing is mounted on {d.mount_point} (want {d.source})", pytrace=False)
    _fail_if(parsers.mount_state.differences(live, d.source, list(d.mount_options)),
             f"{d.mount_point} is mounted with other options than {','.join(d.mount_options)}")


def test_mount_transport_and_pnfs(host, kvprov_desired: Desired):
    """Every transport of the mount is the profile's (rdma), NFS >= 4.1, the expected pNFS layout."""
    d = kvprov_desired
    _nfs_only(d)
    found = mountstats.find(parsers.parse_mountstats(host.file("/proc/self/mountstats").content_string),
                            d.mount_point)
    if found is None:
        pytest.fail(f"{d.mount_point}: no NFS mount in /proc/self/mountstats", pytrace=False)
    problems = [f"xprt: {t.protocol}, want {d.transport}" for t in found.transports if t.protocol != d.transport]
    if not found.transports:
        problems.append("no xprt: line")
    vers = found.opts.get("vers", "")
    if parsers.version_tuple(vers) is None or parsers.version_tuple(vers) < (4, 1):
        problems.append(f"vers={vers}: pNFS needs NFS 4.1 or later")
    if d.pnfs_layout != "none" and found.pnfs != LAYOUT_NAMES[d.pnfs_layout]:
        problems.append(f"pnfs={found.pnfs or 'not configured'}, want {LAYOUT_NAMES[d.pnfs_layout]}")
    _fail_if(problems, f"{d.mount_point} is not the tier the inventory asks for")


def test_units(host, kvprov_desired: Desired):
    """Units are valid (loaded, no pending reload), enabled, and running where deploy starts them."""
    problems = []
    for u in kvprov_desired.units:
        props = parsers.parse_systemctl_show(host.check_output(
            "systemctl show --no-pager -p LoadState -p UnitFileState -p ActiveState -p NeedDaemonReload %s",
            u.unit))
        if props.get("LoadState") != "loaded":
            problems.append(f"{u.unit}: LoadState={props.get('LoadState')}")
            continue
        if u.enabled and not parsers.enabled_at_boot(props.get("UnitFileState", "")):
            problems.append(f"{u.unit}: {props.get('UnitFileState')}, want enabled")
        if u.active and props.get("ActiveState") != "active":
            problems.append(f"{u.unit}: {props.get('ActiveState')}, want active")
        if props.get("NeedDaemonReload") == "yes":
            problems.append(f"{u.unit}: changed on disk since systemd loaded it (NeedDaemonReload=yes)")
    _fail_if(problems, "units not as deployed")


def test_packages(host, kvprov_desired: Desired):
    """The OS packages the roles install are installed."""
    _fail_if([f"{p}: not installed" for p in kvprov_desired.packages if not host.package(p).is_installed],
             "missing packages")


def test_venv_versions(host, kvprov_desired: Desired):
    """Each venv holds the pinned versions (nixl-cuXX, nixl, sglang)."""
    problems = []
    for venv, pins in sorted(kvprov_desired.venvs.items()):
        run = host.run(f"{venv}/bin/python3 -c %s", VENV_VERSIONS)
        if run.rc != 0:
            problems.append(f"{venv}: cannot list its packages: {run.stderr.strip()[-200:]}")
            continue
        have = json.loads(run.stdout)
        for dist, pin in pins.items():
            got = have.get(dist.lower().replace("_", "-"))
            if got is None or (pin and got != pin):
                problems.append(f"{venv}: {dist} {got or 'not installed'}, want {pin or 'installed'}")
    _fail_if(problems, "venv versions differ from the inventory's pins")


def on_mount(host, seconds: int, command: str, *args: str) -> str:
    """Run a command that touches the KV mount under `timeout`: a hard NFS mount whose server
    is gone fails the test after `seconds` instead of hanging the run."""
    run = host.run(f"timeout -k 5 {seconds} {command}", *args)
    if run.rc in (124, 137):
        pytest.fail(f"`{command % args}` did not finish within {seconds}s: the KV mount does not answer "
                    "(is its NFS server up?)", pytrace=False)
    return run.stdout.strip() if run.rc == 0 else ""


def test_storage_dirs(host, kvprov_desired: Desired, kvprov_timeout: int):
    """Each engine instance's NIXL storage dir is on the KV tier, a real directory (not a link)
    owned by the service user, mode 0750."""
    d = kvprov_desired
    problems = []
    for inst in d.instances:
        found = on_mount(host, kvprov_timeout, "stat -c '%%F|%%U|%%G|%%a' -- %s", inst.storage_dir)
        kind, _, owner = found.partition("|")
        if kind != "directory":
            problems.append(f"{inst.storage_dir}: {kind or 'missing'}, not a directory")
            continue
        user, group, mode = owner.split("|")
        if (user, group, int(mode, 8)) != (d.engine_user, d.engine_user, 0o750):
            problems.append(f"{inst.storage_dir}: {user}:{group} {int(mode, 8):04o}, "
                            f"want {d.engine_user}:{d.engine_user} 0750")
        if d.is_nfs:
            mount = on_mount(host, kvprov_timeout, "findmnt -n -o TARGET --target %s", inst.storage_dir)
            if mount != d.mount_point:
                problems.append(f"{inst.storage_dir}: on {mount}, not on the KV mount {d.mount_point}")
    _fail_if(problems, "engine storage directories")
