"""ssh port forwards to engines that listen on a host's loopback only (the secure default):
`kvprov loadtest` and `validate --engine-roundtrip` reach them through the host's own Ansible
connection (address, port, user, key, ssh arguments and jump host as the inventory and
ansible.cfg say), opened before the first request and closed at the end. Nothing on the host
changes and no engine port is opened to the network.

`ssh_argv` is pure (unit-tested); `forward` runs ssh."""

from __future__ import annotations

import configparser
import os
import shlex
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from typing import Iterator

from kvprov import ansible_cli
from kvprov.errors import KvprovError


def connection_defaults() -> dict[str, str]:
    """What the user's Ansible configuration says for every host: remote_user, private_key_file,
    ssh_args and host_key_checking (environment first, then ansible.cfg, found as Ansible finds it)."""
    from ansible.config.manager import find_ini_config_file

    ini = configparser.ConfigParser(interpolation=None, strict=False)
    cfg = os.environ.get("ANSIBLE_CONFIG") or find_ini_config_file()
    if cfg:
        ini.read(cfg)
    out = {}
    for key, env, sections in (("remote_user", "ANSIBLE_REMOTE_USER", ("defaults",)),
                               ("private_key_file", "ANSIBLE_PRIVATE_KEY_FILE", ("defaults",)),
                               ("ssh_args", "ANSIBLE_SSH_ARGS", ("ssh_connection",)),
                               ("host_key_checking", "ANSIBLE_HOST_KEY_CHECKING", ("defaults", "ssh_connection"))):
        value = os.environ.get(env) or next((ini.get(s, key) for s in sections if ini.has_option(s, key)), None)
        if value:
            out[key] = value
    return out


def ssh_argv(name: str, values: dict, defaults: dict[str, str]) -> list[str]:
    """The ssh command (without the forward) that reaches inventory host `name` as Ansible's
    ssh connection would: its connection variables first, the configuration's defaults after."""
    def var(*names):
        return next((str(values[n]) for n in names if values.get(n) not in (None, "")), None)

    argv = ["ssh"]
    argv += shlex.split(var("ansible_ssh_args") or defaults.get("ssh_args", ""))
    if str(defaults.get("host_key_checking", "True")).lower() in ("false", "no", "0", "off"):
        argv += ["-o", "StrictHostKeyChecking=no"]
    key = var("ansible_ssh_private_key_file", "ansible_private_key_file") or defaults.get("private_key_file")
    if key:
        argv += ["-o", f"IdentityFile={os.path.expanduser(key)}", "-o", "IdentitiesOnly=yes"]
    user = var("ansible_user", "ansible_ssh_user") or ansible_cli.remote_user() or defaults.get("remote_user")
    if user:
        argv += ["-o", f"User={user}"]
    port = var("ansible_port", "ansible_ssh_port")
    if port:
        argv += ["-o", f"Port={port}"]
    argv += shlex.split(var("ansible_ssh_common_args") or "") + shlex.split(var("ansible_ssh_extra_args") or "")
    return argv + ["-o", "BatchMode=yes", "-o", "ExitOnForwardFailure=yes", "-N",
                   var("ansible_host", "ansible_ssh_host") or name]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def forward(name: str, values: dict, ports: list[int], timeout: float = 30,
            defaults: dict[str, str] | None = None) -> Iterator[dict[int, int]]:
    """Forward each of the host's loopback `ports` to a free local port: {remote port: local
    port} while open. Raises KvprovError (naming the host and ssh's own words) when ssh fails."""
    local = {p: _free_port() for p in ports}
    argv = ssh_argv(name, values, connection_defaults() if defaults is None else defaults)
    for remote, mine in local.items():
        argv[-1:-1] = ["-L", f"127.0.0.1:{mine}:127.0.0.1:{remote}"]
    # ssh's messages to a file: a pipe nobody reads during a long run (a message per refused
    # connection while an engine restarts) would fill and stop ssh
    errors = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors, text=True)
    try:
        end = time.monotonic() + timeout
        waiting = set(local.values())
        while waiting:
            if proc.poll() is not None:
                errors.seek(0)
                raise KvprovError(f"{name}: the ssh tunnel to its engine did not open: "
                                  f"{errors.read().strip()[-500:] or f'ssh exited {proc.returncode}'}")
            if time.monotonic() > end:
                raise KvprovError(f"{name}: the ssh tunnel to its engine did not open within {timeout:g} s")
            for port in list(waiting):
                with socket.socket() as s:
                    s.settimeout(1)
                    if s.connect_ex(("127.0.0.1", port)) == 0:
                        waiting.discard(port)
            time.sleep(0.1)
        yield local
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        errors.close()
