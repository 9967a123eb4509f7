"""Each of audit's checks on a captured bundle: its category, what it expects, what it found
and how to fix it, on a clean host and on each kind of drift it names."""

import importlib.util
import json
import re

import yaml

from kvprov.validate import bundle as bf
from kvprov.validate.result import FAIL, PASS, SKIP
from tests.conftest import ROOT
from tests.unit.test_audit import files_of, run

DEPLOY = "kvprov deploy INVENTORY --limit kvlab-gpu1 --tags "
ENGINE_UNIT = "kvprov-sglang-main.service"  # enabled; not required to run on a host without a GPU


def unit_props(files: dict, unit: str, **props: str | None) -> None:
    """Sets (or, with None, removes) properties in a unit's `systemctl show` capture."""
    name = bf.systemctl_file(unit)
    for key, value in props.items():
        files[name], n = re.subn(rf"^{key}=.*\n", "" if value is None else f"{key}={value}\n", files[name],
                                 flags=re.M)
        assert n == 1, key


def test_each_check_is_reported_under_its_category():
    results = run(files_of("lab_gpu1"))
    assert {i.split(":")[0]: r.category for i, r in results.items()} == {
        "mount.present": "mount", "mount.source": "mount", "mount.options": "mount", "mount.transport": "mount",
        "mount.unit": "mount", "mount.lookupcache": "mount", "file": "file", "extra": "file", "unit": "unit", "package": "package",
        "venv": "venv", "storage_dir": "engine", "restarts": "unit", "lock": "unit", "user": "engine"}


def test_what_a_clean_host_shows_for_each_kind_of_check():
    results = run(files_of("lab_gpu1"))
    shown = {i: (r.status, r.expected, r.found) for i, r in results.items()}
    assert shown["mount.source"] == (PASS, "10.99.1.1:/kv", "10.99.1.1:/kv")
    assert shown["file:/etc/idmapd.conf"] == (PASS, "the content `kvprov render` gives (kvcache_mount role), "
                                                    "mode 0644, owner root", "identical content (mode not captured)")
    assert shown["file:/etc/cufile.json"] == (SKIP, "", "no NVIDIA GPU: the gds role writes this file only on "
                                                        "GPU hosts")
    assert shown["unit:mnt-kvcache.mount"] == (PASS, "enabled, active", "UnitFileState=enabled ActiveState=active")
    assert shown["package:rdma-core"] == (PASS, "installed", "rdma-core 44.0-2")


def test_a_mount_of_another_source_or_none_at_all_is_drift():
    files = files_of("lab_gpu1")
    files[bf.MOUNTINFO] = files[bf.MOUNTINFO].replace("10.99.1.1:/kv", "10.99.1.9:/kv")
    results = run(files)
    assert {i for i, r in results.items() if r.status == FAIL} == {"mount.source", "mount.unit"}
    assert results["mount.source"].found == "10.99.1.9:/kv is mounted instead"
    files[bf.MOUNTINFO] = "".join(line for line in files[bf.MOUNTINFO].splitlines(keepends=True)
                                  if " /mnt/kvcache " not in line)
    results = run(files)
    assert {i for i, r in results.items() if r.status == FAIL} == {"mount.present"}
    assert results["mount.present"].found == "nothing is mounted on /mnt/kvcache"


def test_an_engine_skipped_by_its_condition_is_said_so_only_when_it_may_be_stopped():
    files = files_of("lab_gpu1")
    r = run(files)[f"unit:{ENGINE_UNIT}"]
    assert (r.status, r.expected, r.found) == (
        PASS, "enabled", "UnitFileState=enabled ActiveState=inactive (skipped by its condition: no GPU)")
    unit_props(files, ENGINE_UNIT, ConditionResult="yes")  # stopped by hand: no condition to name
    assert run(files)[f"unit:{ENGINE_UNIT}"].found == "UnitFileState=enabled ActiveState=inactive"
    unit_props(files, "kvprov-soft-roce.service", ConditionResult="no")  # must run: a condition is no excuse
    r = run(files)["unit:kvprov-soft-roce.service"]
    assert (r.status, r.found) == (PASS, "UnitFileState=enabled ActiveState=active")


def test_a_unit_capture_without_its_states_is_drift_that_says_what_is_unknown():
    files = files_of("lab_gpu1")
    unit_props(files, "kvprov-soft-roce.service", UnitFileState=None, ActiveState=None, SubState=None)
    r = run(files)["unit:kvprov-soft-roce.service"]
    assert (r.status, r.found, r.fix) == (FAIL, "UnitFileState=?; ActiveState=? SubState=?", DEPLOY + "configure")
    unit_props(files, ENGINE_UNIT, LoadState=None)
    r = run(files)[f"unit:{ENGINE_UNIT}"]
    assert (r.status, r.found) == (FAIL, "LoadState=?: systemd cannot use the unit file "
                                         f"(`systemd-analyze verify {ENGINE_UNIT}`)")


def test_a_pinned_distribution_is_found_under_its_normalized_name():
    """pip lists flash_attn as flash-attn (PEP 503 normalization)."""
    files = files_of("lab_gpu1")
    desired = json.loads(files["desired.json"])
    desired["venvs"]["/opt/kvprov/nixl"]["Flash_Attn"] = "2.8.3"
    venvs = json.loads(files["venvs.json"])
    venvs["/opt/kvprov/nixl"]["flash-attn"] = "2.8.3"
    files["desired.json"], files["venvs.json"] = json.dumps(desired), json.dumps(venvs)
    r = run(files)["venv:/opt/kvprov/nixl:Flash_Attn"]
    assert (r.status, r.expected, r.found) == (PASS, "Flash_Attn==2.8.3", "Flash_Attn 2.8.3")


def test_a_missing_package_is_drift_that_names_the_install_tag():
    files = files_of("lab_gpu1")
    files[bf.PACKAGES] = "".join(line for line in files[bf.PACKAGES].splitlines(keepends=True)
                                 if not line.startswith("rdma-core\t"))
    r = run(files)["package:rdma-core"]
    assert (r.status, r.expected, r.found, r.fix) == (FAIL, "installed", "not installed", DEPLOY + "install")


def installed(files: dict) -> dict:
    """The bundle's host with its engine installed (the lab's GPU VM has config and units only)."""
    desired = json.loads(files[bf.DESIRED])
    desired["engine"]["install"] = True
    return {**files, bf.DESIRED: json.dumps(desired)}


def test_a_restart_an_interrupted_deploy_owes_is_drift_naming_the_units():
    files = installed(files_of("lab_gpu1"))
    assert run(files)["restarts"].status == SKIP  # a bundle from before the capture existed
    files[bf.RESTART_PENDING] = json.dumps(["notes.txt"])  # deploy's restart step reads only *.service
    assert (run(files)["restarts"].status, run(files)["restarts"].found) == (PASS, "none")
    files[bf.RESTART_PENDING] = json.dumps([ENGINE_UNIT])
    r = run(files)["restarts"]
    assert r.status == FAIL and r.found.startswith(f"owed for {ENGINE_UNIT}: a deploy changed")
    assert r.fix == "kvprov deploy INVENTORY --limit kvlab-gpu1"
    files[bf.RESTART_PENDING] = json.dumps({"error": "Permission denied"})
    r = run(files)["restarts"]
    assert r.status != PASS and "Permission denied" in r.found


def test_an_engine_that_is_not_installed_owes_no_restart():
    """Config and units only: deploy never restarts it, nor crosses a note out; a note left from
    when it was installed is no drift."""
    files = {**files_of("lab_gpu1"), bf.RESTART_PENDING: json.dumps([ENGINE_UNIT])}
    r = run(files)["restarts"]
    assert (r.status, r.found) == (SKIP, "the engine is not installed (config and units only): nothing to restart")


def test_a_managed_file_with_its_content_but_another_mode_owner_or_as_a_link_is_drift():
    files = files_of("lab_gpu1")
    desired = json.loads(files[bf.DESIRED])["files"]
    modes = {path: {"mode": f["mode"], "uid": 0, "link": False} for path, f in desired.items()}
    toml = "/etc/kvprov/nixl_backend_config.toml"
    files[bf.FILE_MODES] = json.dumps(modes)
    assert (run(files)[f"file:{toml}"].status, run(files)[f"file:{toml}"].found) == (PASS, "identical")
    for change, found in (({"mode": "0600"}, "identical content; mode 0600, uid 0"),
                          ({"uid": 1000}, "identical content; mode 0644, uid 1000"),
                          ({"link": True}, "identical content; mode 0644, uid 0, a link")):
        files[bf.FILE_MODES] = json.dumps({**modes, toml: {**modes[toml], **change}})
        r = run(files)[f"file:{toml}"]
        assert (r.status, r.found, r.fix) == (FAIL, found, DEPLOY + "nixl"), change


def test_a_deploy_lock_on_the_host_is_drift_naming_its_holder():
    files = files_of("lab_gpu1")
    assert run(files)["lock"].status == SKIP  # a bundle from before the capture existed
    files[bf.DEPLOY_LOCK] = "null"
    assert (run(files)["lock"].status, run(files)["lock"].found) == (PASS, "none")
    files[bf.DEPLOY_LOCK] = json.dumps({"owner": "ctl:/srv/inv", "command": "kvprov deploy", "run_id": "ab12",
                                        "since": "2026-12-01T10:00:00Z"})
    r = run(files)["lock"]
    assert r.status == FAIL and r.found.startswith(
        "held by `kvprov deploy` from ctl:/srv/inv since 2026-12-01T10:00:00Z: a deploy running now, or one")
    assert "kvprov deploy INVENTORY --limit kvlab-gpu1" in r.fix
    files[bf.DEPLOY_LOCK] = json.dumps({"error": "Too many levels of symbolic links"})
    r = run(files)["lock"]
    assert r.status != PASS and "symbolic links" in r.found


def test_the_collector_reads_the_lock_the_lock_module_takes():
    modules = {}
    for name in ("kvprov_collect", "kvprov_host_lock"):
        spec = importlib.util.spec_from_file_location(name, ROOT / f"plugins/modules/{name}.py")
        modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(modules[name])
    lock_default = yaml.safe_load(modules["kvprov_host_lock"].DOCUMENTATION)["options"]["path"]["default"]
    assert modules["kvprov_collect"].DEPLOY_LOCK == lock_default == "/run/kvprov/deploy.lock"


def with_dirs_and_account(files: dict) -> dict:
    """The lab GPU node's bundle as a kvprov that checks directories and the engine user captures it."""
    desired = json.loads(files[bf.DESIRED])
    desired["dirs"] = {"/etc/kvprov": {"mode": "0755", "owner": "root", "role": "nixl"},
                       "/var/lib/kvprov/sglang/main": {"mode": "0750", "owner": "sglang", "role": "engine"}}
    desired["engine"].update(home="/var/lib/kvprov/sglang", shell="/usr/sbin/nologin", uid=None)
    files[bf.DESIRED] = json.dumps(desired)
    stat = {"is_dir": True, "is_link": False, "exists": True, "error": None}
    files[bf.DIR_MODES] = json.dumps({
        "/etc/kvprov": {**stat, "path": "/etc/kvprov", "mode": "0755", "owner": "root", "group": "root"},
        "/var/lib/kvprov/sglang/main": {**stat, "path": "/var/lib/kvprov/sglang/main", "mode": "0750",
                                        "owner": "sglang", "group": "sglang"}})
    files[bf.ENGINE_USER] = json.dumps({"exists": True, "uid": 998, "group": "sglang",
                                        "home": "/var/lib/kvprov/sglang", "shell": "/usr/sbin/nologin"})
    return files


def test_a_directory_deploy_creates_with_another_mode_owner_or_kind_is_drift():
    files = with_dirs_and_account(files_of("lab_gpu1"))
    r = run(files)["dir:/etc/kvprov"]
    assert (r.status, r.category, r.expected, r.found) == (
        PASS, "file", "a directory, mode 0755, owner root:root (nixl role)", "mode 0755, owner root:root")
    entries = json.loads(files[bf.DIR_MODES])
    work = "/var/lib/kvprov/sglang/main"
    for change, found, fix in (
            ({"mode": "0777"}, "mode 0777, owner sglang:sglang", DEPLOY + "engine"),
            ({"owner": "root"}, "mode 0750, owner root:sglang", DEPLOY + "engine"),
            ({"group": "users"}, "mode 0750, owner sglang:users", DEPLOY + "engine"),
            ({"exists": False}, "does not exist", DEPLOY + "engine"),
            ({"is_dir": False}, "not a directory", DEPLOY + "engine"),
            ({"is_link": True}, "a symbolic link: root never follows one there", "remove the link, then " + DEPLOY + "engine"),
            ({"error": "stat timed out (hung mount?)"}, "the collector could not check it: stat timed out (hung mount?)",
             "a hung stat() means the mount hung (see mount.io_probe); otherwise collect again")):
        files[bf.DIR_MODES] = json.dumps({**entries, work: {**entries[work], **change}})
        r = run(files)[f"dir:{work}"]
        assert (r.status, r.found, r.fix) == (FAIL, found, fix), change
    files[bf.DIR_MODES] = json.dumps({"/etc/kvprov": entries["/etc/kvprov"]})
    r = run(files)[f"dir:{work}"]
    assert (r.status, r.found) == (FAIL, f"dir_modes.json: has no entry for {work}"), r.found


def test_the_engine_user_with_another_shell_home_group_or_uid_is_drift():
    files = with_dirs_and_account(files_of("lab_gpu1"))
    r = run(files)["user:sglang"]
    assert (r.status, r.expected, r.found) == (
        PASS, "system user sglang: group sglang, home /var/lib/kvprov/sglang, shell /usr/sbin/nologin",
        "uid 998, as deployed")
    account = json.loads(files[bf.ENGINE_USER])
    for change, found in (({"shell": "/bin/bash"}, "shell /bin/bash"),
                          ({"home": "/home/sglang", "group": "users"}, "group users, home /home/sglang"),
                          ({"exists": False}, "no such user")):
        files[bf.ENGINE_USER] = json.dumps({**account, **change})
        r = run(files)["user:sglang"]
        assert (r.status, r.found, r.fix) == (FAIL, found, DEPLOY + "engine"), change
    desired = json.loads(files[bf.DESIRED])
    desired["engine"]["uid"] = 1500  # kvprov_engine_uid: the same uid on every host of a shared volume
    files[bf.DESIRED], files[bf.ENGINE_USER] = json.dumps(desired), json.dumps(account)
    r = run(files)["user:sglang"]
    assert (r.status, r.found) == (FAIL, "uid 998"), r.found


def test_a_bundle_from_before_directories_and_the_account_were_captured_skips_them():
    results = run(files_of("lab_gpu1"))
    assert not [i for i in results if i.startswith("dir:")]
    assert (results["user:sglang"].status, results["user:sglang"].found) == (
        SKIP, "not captured (a bundle from an older kvprov)")
