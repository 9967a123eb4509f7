"""The lab's usual failures give a clear message and a distinct exit code."""

import socket

import pytest

from kvprov.errors import EXIT_ENVIRONMENT, EXIT_LAB, EXIT_USAGE, KvprovError
from kvprov.lab import lifecycle, topology
from tests.conftest import kvprov


@pytest.fixture(autouse=True)
def lab_home(monkeypatch, tmp_path):
    """Every test here, and every `kvprov lab` it starts, uses a lab home of its own: never the
    real lab (/var/lib/kvprov/lab), which may be running."""
    home = tmp_path / "lab-home"
    monkeypatch.setenv("KVPROV_LAB_HOME", str(home))
    assert topology.lab_home() == home
    return home


def test_not_root(monkeypatch):
    monkeypatch.setattr(lifecycle.os, "geteuid", lambda: 1000)
    with pytest.raises(KvprovError, match="needs root") as e:
        lifecycle.preflight(topology.Topology())
    assert e.value.exit_code == EXIT_ENVIRONMENT


def test_missing_tools_name_the_apt_command(monkeypatch):
    monkeypatch.setattr(lifecycle.os, "geteuid", lambda: 0)
    monkeypatch.setattr(lifecycle.shutil, "which", lambda cmd: None if cmd.startswith(("qemu", "systemd")) else "/x")
    with pytest.raises(KvprovError) as e:
        lifecycle.preflight(topology.Topology(containers=1))
    assert "apt-get install -y qemu-system-x86 qemu-utils systemd-container" in str(e.value)
    assert e.value.exit_code == EXIT_ENVIRONMENT


def test_port_in_use_is_named(monkeypatch, tmp_path):
    monkeypatch.setattr(lifecycle.os, "geteuid", lambda: 0)
    monkeypatch.setattr(lifecycle.shutil, "which", lambda cmd: "/x")
    # a topology whose ports we can occupy without disturbing a running lab
    monkeypatch.setattr(topology, "SSH_PORT_BASE", 0)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        monkeypatch.setattr(topology.Topology, "tcp_ports", lambda self: [port])
        with pytest.raises(KvprovError, match=f"port\\(s\\) {port} already in use") as e:
            lifecycle.preflight(topology.Topology())
    assert e.value.exit_code == EXIT_ENVIRONMENT


def test_host_that_never_answers_shows_its_console(lab_home):
    console = lab_home / "run/kvlab-x/console.log"
    console.parent.mkdir(parents=True)
    console.write_text("early boot\nKernel panic - not syncing: VFS: Unable to mount root fs\n")
    with socket.socket() as s:  # a closed port: bound, never accepting
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        host = {"name": "kvlab-x", "address": "127.0.0.1", "port": port}
        with pytest.raises(KvprovError, match="Kernel panic") as e:
            lifecycle._wait_ssh(host, deadline=lifecycle.time.monotonic() + 2, pid_alive=lambda: True)
    assert e.value.exit_code == EXIT_LAB
    assert "did not answer ssh" in str(e.value)


def test_cli_rejects_bad_sizes_before_touching_anything(lab_home):
    r = kvprov("lab", "up", "--clients", "0")
    assert r.returncode == EXIT_USAGE
    assert "--clients must be between 1 and 8" in r.stderr
    assert not lab_home.exists()


def test_cli_usage_error_exit_code():
    r = kvprov("lab", "sideways")
    assert r.returncode == EXIT_USAGE
    assert "invalid choice" in r.stderr


def test_running_tells_live_from_exited_children():
    import os
    import subprocess
    import time

    assert lifecycle._running(os.getpid())
    child = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while lifecycle._running(child.pid) and time.monotonic() < deadline:  # a zombie until reaped
        time.sleep(0.05)
    assert not lifecycle._running(child.pid)
    child.wait()
    assert not lifecycle._running(child.pid)
