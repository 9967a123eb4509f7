"""kvprov/tunnel.py: the ssh command that reaches a host as Ansible's ssh connection would and
its forwards to Unix sockets (pure), and the real ssh failing to reach a host. The real ssh's
forward through a real SSH server: tests/unit/test_tunnel_socket.py."""

from __future__ import annotations

import os
import tempfile

import pytest

from kvprov.errors import KvprovError
from kvprov.tunnel import forward, forward_argv, ssh_argv


def test_the_hosts_connection_variables_come_first_and_the_configuration_fills_in():
    values = {"ansible_host": "10.0.0.6", "ansible_port": 2222, "ansible_user": "ops",
              "ansible_ssh_private_key_file": "~/k", "ansible_ssh_common_args": "-o ProxyJump=bastion",
              "ansible_ssh_extra_args": "-o ServerAliveInterval=5"}
    argv = ssh_argv("gpu7", values, {"ssh_args": "-C -o ControlMaster=auto", "remote_user": "cfg",
                                     "host_key_checking": "False"})
    assert argv[:4] == ["ssh", "-C", "-o", "ControlMaster=auto"] and argv[-1] == "10.0.0.6"
    opts = [argv[i + 1] for i, a in enumerate(argv) if a == "-o"]
    assert "StrictHostKeyChecking=no" in opts and "User=ops" in opts and "Port=2222" in opts
    assert any(o.startswith("IdentityFile=/") and o.endswith("/k") for o in opts)  # ~ expanded
    assert {"ProxyJump=bastion", "ServerAliveInterval=5", "BatchMode=yes", "ExitOnForwardFailure=yes"} <= set(opts)
    # nothing given: the inventory name, the configuration's user and key, host keys checked
    argv = ssh_argv("gpu7", {}, {"remote_user": "cfg", "private_key_file": "/etc/k"})
    assert argv[-1] == "gpu7" and "User=cfg" in argv and "IdentityFile=/etc/k" in argv
    assert "StrictHostKeyChecking=no" not in argv
    assert ssh_argv("gpu7", {"ansible_ssh_args": "-o A=1"}, {"ssh_args": "-o B=2"})[1:3] == ["-o", "A=1"]


def test_the_command_lines_user_is_taken_as_ansible_playbook_takes_it(monkeypatch):
    """#39: kvprov -u USER reaches the tunnel too: above the configuration's remote_user, below a
    host's ansible_user."""
    from kvprov import ansible_cli, cli

    monkeypatch.setattr(ansible_cli, "_user", [])
    ansible_cli.configure(cli.build_parser().parse_args(["loadtest", "inv.yml", "-u", "deployer"]))
    assert "User=deployer" in ssh_argv("gpu7", {}, {"remote_user": "cfg"})
    assert "User=ops" in ssh_argv("gpu7", {"ansible_user": "ops"}, {"remote_user": "cfg"})
    ansible_cli.configure(cli.build_parser().parse_args(["loadtest", "inv.yml"]))
    assert "User=cfg" in ssh_argv("gpu7", {}, {"remote_user": "cfg"})


def test_the_command_lines_private_key_is_taken_as_ansible_playbook_takes_it(monkeypatch, tmp_path):
    """#39: kvprov --private-key FILE reaches the tunnel too: above the configuration's
    private_key_file, below a host's ansible_ssh_private_key_file."""
    from kvprov import ansible_cli, cli

    key = tmp_path / "id_deploy"
    key.write_text("key\n")
    monkeypatch.setattr(ansible_cli, "_key", [])
    ansible_cli.configure(cli.build_parser().parse_args(["loadtest", "inv.yml", "--private-key", str(key)]))
    assert f"IdentityFile={key}" in ssh_argv("gpu7", {}, {"private_key_file": "/etc/k"})
    assert "IdentityFile=/h/k" in ssh_argv("gpu7", {"ansible_ssh_private_key_file": "/h/k"}, {"private_key_file": "/etc/k"})
    ansible_cli.configure(cli.build_parser().parse_args(["loadtest", "inv.yml"]))
    assert "IdentityFile=/etc/k" in ssh_argv("gpu7", {}, {"private_key_file": "/etc/k"})


def test_the_forwards_go_to_unix_sockets_with_their_options_ahead_of_the_hosts():
    """#38: each port to its socket (no TCP port on the controller); the socket's mode mask and the
    unlink of a leftover first, where ssh_args or ansible_ssh_args cannot override them (ssh takes
    an option's first value)."""
    argv = ssh_argv("gpu7", {"ansible_ssh_args": "-o StreamLocalBindMask=0000 -C", "ansible_user": "ops"}, {})
    before = list(argv)
    assert forward_argv(argv, {8000: "/d/8000.sock", 19000: "/d/19000.sock"}) == [
        "ssh", "-o", "StreamLocalBindMask=0177", "-o", "StreamLocalBindUnlink=yes",
        "-o", "StreamLocalBindMask=0000", "-C", "-o", "User=ops", "-o", "BatchMode=yes",
        "-o", "ExitOnForwardFailure=yes", "-N",
        "-L", "/d/8000.sock:127.0.0.1:8000", "-L", "/d/19000.sock:127.0.0.1:19000", "gpu7"]
    assert argv == before  # the caller's list untouched
    assert forward_argv(["ssh", "-N", "h"], {}) == ["ssh", "-o", "StreamLocalBindMask=0177", "-o",
                                                    "StreamLocalBindUnlink=yes", "-N", "h"]


def test_a_tunnel_that_cannot_open_names_the_host_and_ssh_says_why(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(KvprovError, match=r"^gpu7: the ssh tunnel to its engine did not open: .+"):
        with forward("gpu7", {"ansible_host": "127.0.0.1", "ansible_port": 1}, [8000], timeout=20, defaults={}):
            pass
    assert os.listdir(tmp_path) == []  # its socket directory removed
