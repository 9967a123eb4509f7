"""The collector's I/O probe runs as root on a shared volume: it writes only a randomly named
file of its own inside a root-owned 0700 directory of its host, never through a link."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("kvprov_collect", ROOT / "plugins/modules/kvprov_collect.py")
collector = importlib.util.module_from_spec(spec)
spec.loader.exec_module(collector)

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="the probe is root's: it checks its directory is root's")


def probe(mount, host="h1"):
    return subprocess.run([sys.executable, "-c", collector.IO_PROBE, str(mount), host, "65536"],
                          capture_output=True, text=True, timeout=60)


@ROOT_ONLY
def test_probe_writes_reads_and_removes_only_its_own_file(tmp_path):
    r = probe(tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["ok"] is True and out["path"].startswith(f"{tmp_path}/.kvprov-h1/probe-")
    d = tmp_path / ".kvprov-h1"
    assert list(d.iterdir()) == [] and d.stat().st_mode & 0o777 == 0o700
    assert json.loads(probe(tmp_path).stdout)["path"] != out["path"]  # a new random name every time


@ROOT_ONLY
def test_a_link_planted_where_the_probe_writes_is_refused(tmp_path):
    victim = tmp_path / "elsewhere"
    victim.mkdir()
    (victim / "precious").write_text("keep")
    mount = tmp_path / "mnt"
    mount.mkdir()
    (mount / ".kvprov-h1").symlink_to(victim)
    r = probe(mount)
    assert r.returncode != 0 and "is not a root-owned 0700 directory (a link or someone else's)" in r.stderr
    assert sorted(p.name for p in victim.iterdir()) == ["precious"] and (victim / "precious").read_text() == "keep"


@ROOT_ONLY
def test_someone_elses_directory_is_refused(tmp_path):
    d = tmp_path / ".kvprov-h1"
    d.mkdir(mode=0o700)
    os.chown(d, 65534, 65534)
    r = probe(tmp_path)
    assert r.returncode != 0 and "refusing to write there" in r.stderr
    assert list(d.iterdir()) == []


def test_captured_command_lines_carry_no_api_key():
    assert collector.redact(["python3", "-m", "sglang.launch_server", "--api-key", "sk-1", "--port", "8000"]) == [
        "python3", "-m", "sglang.launch_server", "--api-key", "<redacted>", "--port", "8000"]
    assert collector.redact(["x", "--api-key=sk-1"]) == ["x", "--api-key=<redacted>"]


def test_fstab_keeps_only_the_kv_and_nfs_lines_with_credentials_redacted():
    fstab = ("# /etc/fstab: static file system information.\n"
             "UUID=0a1b / ext4 errors=remount-ro 0 1\n"
             "10.99.1.1:/kv /mnt/kvcache nfs4 vers=4.1,proto=tcp,sec=sys,password=hunter2 0 0\n"
             "//fs/share /mnt/kvcache cifs user=bob%hunter2,credentials=/root/.smb,seal 0 0\n"
             "nas:/home /home nfs rw,auth_token=hunter2,x-secret-key=hunter2 0 0\n"
             "https://bob:hunter2@dav.example/ /mnt/dav davfs rw 0 0\n"
             "tmpfs /tmp tmpfs rw,user=alice 0 0\n")
    assert collector.fstab_lines(fstab, "/mnt/kvcache/", "10.99.1.1:/kv") == (
        "10.99.1.1:/kv /mnt/kvcache nfs4 vers=4.1,proto=tcp,sec=sys,password=*** 0 0\n"
        "//fs/share /mnt/kvcache cifs user=***,credentials=***,seal 0 0\n"
        "nas:/home /home nfs rw,auth_token=***,x-secret-key=*** 0 0\n")
    assert collector.fstab_lines("a\\040b:/kv /mnt/kv\\040cache nfs4 pass=x 0 0\n", "/mnt/kv cache", "x") == \
        "a\\040b:/kv /mnt/kv\\040cache nfs4 pass=*** 0 0\n"


def test_what_reaches_the_target_names_the_managed_files_and_carries_no_content(tmp_path):
    """A real local Ansible run of playbooks/collect.yml, keeping what Ansible sends to the
    target (its remote files, not piped): the collector module with its arguments written in.
    They name the managed files, never their content; nothing is logged there (no AnsibleModule);
    the bundle's desired.json (with the content) is written by the controller."""
    (tmp_path / "pp").mkdir()
    (tmp_path / "pp/sitecustomize.py").write_text(  # what a module would hand to syslog (no syslogd here)
        "import os, syslog\n"
        "def _log(*args):\n"
        "    with open(os.environ['LOG_CAPTURE'], 'a') as fh:\n"
        "        fh.write(str(args[-1]) + '\\n')\n"
        "syslog.syslog = _log\n")
    inv = tmp_path / "inv.yml"
    inv.write_text(json.dumps({"gpu_nodes": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable, "ansible_become": False,
        "kvprov_storage_profile": "local", "kvprov_storage_pnfs_layout": "none",
        "kvprov_storage_mount_point": str(tmp_path / "kv"), "kvprov_engine_install": False,
        "kvprov_engine_model_path": "org/MARKER-7f3a9c"}}}}))
    log, remote = tmp_path / "syslog.txt", tmp_path / "remote"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "pp"), "LOG_CAPTURE": str(log), "ANSIBLE_PIPELINING": "False",
           "ANSIBLE_KEEP_REMOTE_FILES": "True", "ANSIBLE_REMOTE_TMP": str(remote)}
    r = subprocess.run([sys.executable, "-m", "kvprov", "collect", str(inv), "--out", str(tmp_path / "out")],
                       capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    desired = json.loads((tmp_path / "out/localhost/desired.json").read_text())
    unit = desired["files"]["/etc/systemd/system/kvprov-sglang-main.service"]["content"]
    assert "MARKER-7f3a9c" in unit, r.stderr
    [sent] = [p.read_text() for p in remote.rglob("*kvprov_collect*")]
    assert "def collect(desired" in sent and '"/etc/systemd/system/kvprov-sglang-main.service"' in sent
    assert "MARKER" not in sent and "[Install]" not in sent and "ExecStart" not in sent
    assert not log.exists() or "desired" not in log.read_text()


def test_directories_and_the_account_are_captured_as_the_audit_reads_them(tmp_path):
    """stat_paths: lstat in a child process (a link is reported, never followed); account: pwd/grp."""
    (tmp_path / "d").mkdir(mode=0o750)
    os.chmod(tmp_path / "d", 0o750)
    (tmp_path / "link").symlink_to(tmp_path / "d")
    paths = [str(tmp_path / n) for n in ("d", "link", "missing")]
    stats, timed_out = collector.stat_paths(paths, 30)
    assert {k: (v["exists"], v["is_dir"], v["is_link"], v["mode"], v["owner"], v["error"]) for k, v in stats.items()} == {
        paths[0]: (True, True, False, "0750", "root", None),
        paths[1]: (True, False, True, "0777", "root", None),
        paths[2]: (False, False, False, None, None, None)}
    assert not timed_out and collector.stat_paths([], 30) == ({}, False)
    # the mount already did not answer (one deadline): nothing is run, each entry says why
    hung, _ = collector.stat_paths(paths[:1], 30, hung="not run: the KV mount did not answer")
    assert hung[paths[0]]["error"] == "not run: the KV mount did not answer" and not hung[paths[0]]["exists"]
    assert collector.account("root") == {"exists": True, "uid": 0, "group": "root", "home": "/root",
                                         "shell": collector.pwd.getpwnam("root").pw_shell}
    assert collector.account("kvprov-no-such-user") == {"exists": False}
