"""kvprov/tunnel.py's forward() against a FAKE ssh (first on PATH: it records its argv and
listens on each -L socket, or fails as ssh does), and ssh_argv's aliases and defaults (#41 item 1):
the forward opens only once every socket answers, says ssh's own words when it fails, and leaves
no ssh process, descriptor or socket directory behind. The real ssh's forward (the socket's
mode, other accounts refused, no TCP port): tests/unit/test_tunnel_socket.py."""

from __future__ import annotations

import json
import os
import socket
import stat
import sys
import tempfile
import textwrap
import time

import pytest

from kvprov import ansible_cli, tunnel
from kvprov.errors import KvprovError

FAKE = textwrap.dedent("""\
    #!{python}
    import json, os, signal, socket, sys, time
    state = os.environ["FAKE_SSH_STATE"]
    mode = os.environ.get("FAKE_SSH_MODE", "listen")
    with open(os.path.join(state, "argv.json"), "w") as f:
        json.dump({{"argv": sys.argv[1:], "pid": os.getpid()}}, f)
    if mode == "fail":
        sys.stderr.write(os.environ["FAKE_SSH_ERR"])
        sys.exit(255)
    if mode == "exit":
        sys.exit(3)
    def terminated(*_):
        open(os.path.join(state, "terminated"), "w").close()
        sys.exit(0)
    signal.signal(signal.SIGTERM, terminated)
    specs = [sys.argv[i + 1] for i, a in enumerate(sys.argv) if a == "-L"]
    if mode == "file":  # a socket file nobody listens on (a dead ssh's leftover): not ready
        for spec in specs:
            socket.socket(socket.AF_UNIX).bind(spec.split(":")[0])
    if mode == "listen":
        time.sleep(0.2)  # ssh takes a moment to listen: forward() must wait for it
        socks = []
        for spec in specs:
            s = socket.socket(socket.AF_UNIX)
            s.bind(spec.split(":")[0])
            s.listen()
            socks.append(s)
    time.sleep(60)
    """)


@pytest.fixture
def ssh(tmp_path, monkeypatch):
    """The fake ssh on PATH; returns its state directory (argv.json, terminated)."""
    bindir, state = tmp_path / "bin", tmp_path / "state"
    bindir.mkdir()
    state.mkdir()
    fake = bindir / "ssh"
    fake.write_text(FAKE.format(python=sys.executable))
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SSH_STATE", str(state))
    monkeypatch.setattr(ansible_cli, "_user", [])
    return state


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # a zombie (never waited for) still answers
    except ProcessLookupError:
        return True
    return False


def fds() -> set[str]:
    """This process's open descriptors. A test compares them as sets (nothing it opened is left
    open): another thread of the worker may close one of its own meanwhile."""
    return set(os.listdir("/proc/self/fd"))


def test_a_forward_opens_once_every_socket_answers_and_ssh_and_the_directory_go_at_the_end(ssh):
    before = fds()
    with tunnel.forward("gpu7", {"ansible_host": "10.0.0.7"}, [8000, 8001], timeout=20,
                        defaults={"remote_user": "ops", "ssh_args": "-o StreamLocalBindMask=0"}) as local:
        assert sorted(local) == [8000, 8001]
        d = os.path.dirname(local[8000])
        assert local == {8000: f"{d}/8000.sock", 8001: f"{d}/8001.sock"}
        assert os.path.basename(d).startswith("kvprov-tunnel-")
        st = os.lstat(d)
        assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()
        for path in local.values():
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(5)
                s.connect(path)
        seen = json.loads((ssh / "argv.json").read_text())
    # the socket's options first: ssh takes the first value of an option, so ssh_args cannot undo them
    assert seen["argv"] == ["-o", "StreamLocalBindMask=0177", "-o", "StreamLocalBindUnlink=yes",
                            "-o", "StreamLocalBindMask=0", "-o", "User=ops",
                            "-o", "BatchMode=yes", "-o", "ExitOnForwardFailure=yes", "-N",
                            "-L", f"{d}/8000.sock:127.0.0.1:8000", "-L", f"{d}/8001.sock:127.0.0.1:8001", "10.0.0.7"]
    assert "-L" not in tunnel.ssh_argv("gpu7", {}, {})  # ssh_argv alone: no forward
    assert (ssh / "terminated").exists() and gone(seen["pid"])  # asked to stop (SIGTERM), and waited for
    assert not os.path.lexists(d)  # the directory and its sockets removed
    assert fds() <= before  # ssh's message file closed too


def test_each_forward_gets_a_directory_of_its_own(ssh):
    with tunnel.forward("gpu7", {}, [8000], timeout=20, defaults={}) as a:
        with tunnel.forward("gpu8", {}, [8000], timeout=20, defaults={}) as b:
            assert os.path.dirname(a[8000]) != os.path.dirname(b[8000])
            assert os.path.exists(a[8000]) and os.path.exists(b[8000])
        assert os.path.exists(a[8000]) and not os.path.lexists(os.path.dirname(b[8000]))
    assert not os.path.lexists(os.path.dirname(a[8000]))


def test_the_configuration_is_read_only_when_no_defaults_are_given(ssh, monkeypatch):
    monkeypatch.setattr(tunnel, "connection_defaults", lambda: {"remote_user": "from-config"})
    with tunnel.forward("gpu7", {}, [8000], timeout=20):
        pass
    assert "User=from-config" in json.loads((ssh / "argv.json").read_text())["argv"]
    with tunnel.forward("gpu7", {}, [8000], timeout=20, defaults={}):
        pass
    assert not any(w.startswith("User=") for w in json.loads((ssh / "argv.json").read_text())["argv"])


def test_ssh_failing_is_said_in_its_own_words(ssh, monkeypatch, short_tmp):
    monkeypatch.setenv("FAKE_SSH_MODE", "fail")
    monkeypatch.setenv("FAKE_SSH_ERR", "Permission denied (publickey).\n")
    tmp_path = short_tmp
    before = fds()
    with pytest.raises(KvprovError) as e:
        with tunnel.forward("gpu7", {}, [8000], timeout=20, defaults={}):
            pytest.fail("opened")
    assert str(e.value) == "gpu7: the ssh tunnel to its engine did not open: Permission denied (publickey)."
    assert fds() <= before
    assert list((tmp_path / "tmp").iterdir()) == []  # its socket directory removed too
    assert any(a.startswith(f"{tmp_path}/tmp/kvprov-tunnel-") for a in json.loads(
        (ssh / "argv.json").read_text())["argv"])


def test_the_directory_goes_when_the_caller_fails_too(ssh, monkeypatch, short_tmp):
    tmp_path = short_tmp
    with pytest.raises(RuntimeError):
        with tunnel.forward("gpu7", {}, [8000], timeout=20, defaults={}) as local:
            assert os.path.dirname(os.path.dirname(local[8000])) == str(tmp_path / "tmp")
            raise RuntimeError("the load failed")
    assert list((tmp_path / "tmp").iterdir()) == []
    assert (ssh / "terminated").exists()


def test_a_long_temporary_directory_puts_the_sockets_in_tmp(ssh, monkeypatch, tmp_path):
    """A socket's path must fit in sun_path (108 bytes): with a longer TMPDIR the directory goes to
    /tmp (it was an internal error, 'AF_UNIX path too long'); one that fits stays in TMPDIR."""
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    with tunnel.forward("gpu7", {}, [8000], timeout=20, defaults={}) as local:
        assert os.path.dirname(os.path.dirname(local[8000])) == "/tmp" and len(local[8000]) <= 107
        assert stat.S_IMODE(os.stat(os.path.dirname(local[8000])).st_mode) == 0o700
    assert not os.path.exists(os.path.dirname(local[8000]))
    unique = f"/tmp/{os.urandom(4).hex()}"  # two runs at once (xdist, mutation jobs) get two
    fits = unique + "f" * (107 - len(unique) - len("/kvprov-tunnel-xxxxxxxx/65535.sock"))
    os.mkdir(fits)
    try:
        monkeypatch.setattr(tempfile, "tempdir", fits)
        with tunnel.forward("gpu7", {}, [8000], timeout=20, defaults={}) as local:
            assert os.path.dirname(os.path.dirname(local[8000])) == fits
        monkeypatch.setattr(tempfile, "tempdir", fits + "g")
        os.mkdir(fits + "g")
        with tunnel.forward("gpu7", {}, [8000], timeout=20, defaults={}) as local:
            assert os.path.dirname(os.path.dirname(local[8000])) == "/tmp"
    finally:
        os.rmdir(fits)
        if os.path.isdir(fits + "g"):
            os.rmdir(fits + "g")


def test_a_long_message_is_cut_to_its_last_500_characters(ssh, monkeypatch):
    monkeypatch.setenv("FAKE_SSH_MODE", "fail")
    monkeypatch.setenv("FAKE_SSH_ERR", "A" * 100 + "B" * 500)
    with pytest.raises(KvprovError) as e:
        with tunnel.forward("gpu7", {}, [8000], timeout=20, defaults={}):
            pass
    assert str(e.value).endswith("did not open: " + "B" * 500)


def test_ssh_exiting_without_a_word_is_said_by_its_status(ssh, monkeypatch):
    monkeypatch.setenv("FAKE_SSH_MODE", "exit")
    with pytest.raises(KvprovError, match=r"^gpu7: the ssh tunnel to its engine did not open: ssh exited 3$"):
        with tunnel.forward("gpu7", {}, [8000], timeout=20, defaults={}):
            pass


@pytest.mark.parametrize("mode", ["hang", "file"])
def test_a_socket_that_never_answers_times_out_and_ssh_is_stopped(ssh, monkeypatch, mode):
    monkeypatch.setenv("FAKE_SSH_MODE", mode)
    t = time.monotonic()
    with pytest.raises(KvprovError, match=r"^gpu7: the ssh tunnel to its engine did not open within 0.6 s$"):
        with tunnel.forward("gpu7", {}, [8000], timeout=0.6, defaults={}):
            pass
    assert 0.6 <= time.monotonic() - t < 15
    pid = json.loads((ssh / "argv.json").read_text())["pid"]
    assert (ssh / "terminated").exists() and gone(pid)


# ---------------------------------------------------------------------------- ssh_argv

@pytest.fixture
def no_cli_user(monkeypatch):
    monkeypatch.setattr(ansible_cli, "_user", [])


def test_with_nothing_configured_the_command_is_the_bare_forward(no_cli_user):
    assert tunnel.ssh_argv("gpu7", {}, {}) == ["ssh", "-o", "BatchMode=yes", "-o", "ExitOnForwardFailure=yes", "-N",
                                               "gpu7"]


@pytest.mark.parametrize("values, option", [
    ({"ansible_ssh_host": "10.0.0.9"}, None), ({"ansible_host": "", "ansible_ssh_host": "10.0.0.9"}, None),
    ({"ansible_ssh_user": "ops"}, "User=ops"), ({"ansible_user": "", "ansible_ssh_user": "ops"}, "User=ops"),
    ({"ansible_ssh_port": 2200}, "Port=2200"), ({"ansible_port": None, "ansible_ssh_port": "2200"}, "Port=2200"),
    ({"ansible_private_key_file": "/k/id"}, "IdentityFile=/k/id")])
def test_ansibles_other_spellings_of_the_connection_variables_are_taken(no_cli_user, values, option):
    argv = tunnel.ssh_argv("gpu7", values, {})
    if option is None:
        assert argv[-1] == "10.0.0.9"
    else:
        assert argv[argv.index(option) - 1] == "-o" and argv[-1] == "gpu7"
    if option and option.startswith("IdentityFile"):
        assert argv[argv.index(option) + 1:argv.index(option) + 3] == ["-o", "IdentitiesOnly=yes"]


def test_empty_values_fall_back_to_the_configuration(no_cli_user):
    argv = tunnel.ssh_argv("gpu7", {"ansible_user": "", "ansible_ssh_args": "", "ansible_ssh_common_args": "",
                                    "ansible_ssh_extra_args": ""}, {"remote_user": "cfg"})
    assert argv == ["ssh", "-o", "User=cfg", "-o", "BatchMode=yes", "-o", "ExitOnForwardFailure=yes", "-N", "gpu7"]


@pytest.mark.parametrize("setting, checked", [
    ("False", False), ("false", False), ("no", False), ("0", False), ("off", False), ("OFF", False),
    ("True", True), ("yes", True), ("1", True), ("on", True)])
def test_host_key_checking_is_off_only_for_ansibles_false_words(no_cli_user, setting, checked):
    argv = tunnel.ssh_argv("gpu7", {}, {"host_key_checking": setting})
    assert ("StrictHostKeyChecking=no" not in argv) is checked


def test_the_configuration_is_read_from_the_environment_first_then_ansible_cfg(tmp_path, monkeypatch):
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text("[defaults]\nremote_user = cfg-user\nprivate_key_file = /cfg/key\nhost_key_checking = False\n"
                   "[ssh_connection]\nssh_args = -C\n")
    for env in ("ANSIBLE_REMOTE_USER", "ANSIBLE_PRIVATE_KEY_FILE", "ANSIBLE_SSH_ARGS", "ANSIBLE_HOST_KEY_CHECKING"):
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setenv("ANSIBLE_CONFIG", str(cfg))
    assert tunnel.connection_defaults() == {"remote_user": "cfg-user", "private_key_file": "/cfg/key",
                                            "ssh_args": "-C", "host_key_checking": "False"}
    env = {"ANSIBLE_REMOTE_USER": "env-user", "ANSIBLE_PRIVATE_KEY_FILE": "/env/key", "ANSIBLE_SSH_ARGS": "-o A=1",
           "ANSIBLE_HOST_KEY_CHECKING": "True"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert tunnel.connection_defaults() == {"remote_user": "env-user", "private_key_file": "/env/key",
                                            "ssh_args": "-o A=1", "host_key_checking": "True"}
    for name in env:
        monkeypatch.delenv(name)
    cfg.write_text("[ssh_connection]\nhost_key_checking = no\n")  # either section
    assert tunnel.connection_defaults() == {"host_key_checking": "no"}
    cfg.write_text("[defaults]\nremote_user =\n")  # empty: not set
    assert tunnel.connection_defaults() == {}


def test_without_ansible_config_the_working_directorys_ansible_cfg_is_read_as_ansible_reads_it(tmp_path,
                                                                                               monkeypatch):
    """Ansible's own lookup (ANSIBLE_CONFIG, ./ansible.cfg, ~/.ansible.cfg, /etc/ansible), and its
    tolerance of an option given twice (the last one counts)."""
    for env in ("ANSIBLE_CONFIG", "ANSIBLE_REMOTE_USER", "ANSIBLE_PRIVATE_KEY_FILE", "ANSIBLE_SSH_ARGS",
                "ANSIBLE_HOST_KEY_CHECKING"):
        monkeypatch.delenv(env, raising=False)
    os.chmod(tmp_path, 0o700)  # Ansible skips an ansible.cfg in a world-writable directory
    (tmp_path / "ansible.cfg").write_text("[defaults]\nremote_user = first\nremote_user = cwd-user\n")
    monkeypatch.chdir(tmp_path)
    assert tunnel.connection_defaults()["remote_user"] == "cwd-user"
