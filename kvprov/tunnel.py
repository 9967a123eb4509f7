"""ssh port forwards to engines that listen on a host's loopback only (the secure default):
`kvprov loadtest` and `validate --engine-roundtrip` reach them through the host's own Ansible
connection (address, port, user, key, ssh arguments and jump host as the inventory and
ansible.cfg say), opened before the first request and closed at the end. Nothing on the host
changes and no engine port is opened to the network.

On the controller the forward ends in a Unix socket, not a TCP port (#38): `<dir>/<port>.sock`
in a fresh directory of mkdtemp's (mode 0700, the controller user's), the socket itself 0600
(ssh's StreamLocalBindMask), the directory removed at the close. A loopback port was open to
every account of the controller while the tunnel lasted, and one that bound it first (between
a probe and ssh's bind) got the prompts and the API key; the socket is reachable by its owner
only, and no TCP port is opened at all. The clients (kvprov/loadtest_client.py) connect to it
and still speak to the engine's own address (Host, TLS name).

`ssh_argv` and `forward_argv` are pure (unit-tested); `forward` runs ssh."""

from __future__ import annotations

import configparser
import os
import shlex
import shutil
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
    key = (var("ansible_ssh_private_key_file", "ansible_private_key_file") or ansible_cli.private_key()
           or defaults.get("private_key_file"))
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


# before the host's own options (ssh takes the first value of an option): ansible_ssh_args or
# ansible.cfg's ssh_args cannot make the socket readable by others nor fail on a leftover file
SOCKET_OPTIONS = ["-o", "StreamLocalBindMask=0177", "-o", "StreamLocalBindUnlink=yes"]
SOCKET_PATH_MAX = 107


def forward_argv(argv: list[str], sockets: dict[int, str]) -> list[str]:
    """ssh_argv's command with the forwards: each of the host's loopback ports (`sockets` {remote
    port: controller socket path}) to its Unix socket, created 0600 (StreamLocalBindMask 0177)."""
    forwards = [w for port, path in sockets.items() for w in ("-L", f"{path}:127.0.0.1:{port}")]
    return argv[:1] + SOCKET_OPTIONS + argv[1:-1] + forwards + argv[-1:]


def _socket_dir() -> str:
    """A fresh directory (0700, this user's) for the sockets: in the temporary directory where a
    socket's path fits in sun_path (108 bytes with its NUL), else in /tmp."""
    base = tempfile.gettempdir()
    if len(os.path.join(base, "kvprov-tunnel-xxxxxxxx", "65535.sock").encode()) > SOCKET_PATH_MAX:
        base = "/tmp"
    return tempfile.mkdtemp(prefix="kvprov-tunnel-", dir=base)


def _answers(path: str) -> bool:
    """Whether the forward's socket is there and ssh accepts a connection on it."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(1)
        return s.connect_ex(path) == 0


@contextmanager
def forward(name: str, values: dict, ports: list[int], timeout: float = 30,
            defaults: dict[str, str] | None = None) -> Iterator[dict[int, str]]:
    """Forward each of the host's loopback `ports` to a Unix socket on the controller, in a
    directory of its own only this user reaches: {remote port: socket path} while open; the
    directory is removed at the end. Raises KvprovError (naming the host and ssh's own words)
    when ssh fails."""
    directory = _socket_dir()
    try:
        local = {p: os.path.join(directory, f"{p}.sock") for p in ports}
        argv = forward_argv(ssh_argv(name, values, connection_defaults() if defaults is None else defaults), local)
        with _ssh(name, argv, list(local.values()), timeout):
            yield local
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@contextmanager
def _ssh(name: str, argv: list[str], sockets: list[str], timeout: float) -> Iterator[None]:
    """ssh running while open, once every socket answers; stopped (and waited for) at the end."""
    # ssh's messages to a file: a pipe nobody reads during a long run (a message per refused
    # connection while an engine restarts) would fill and stop ssh
    errors = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors, text=True)
    try:
        end = time.monotonic() + timeout
        waiting = set(sockets)
        while waiting:
            if proc.poll() is not None:
                errors.seek(0)
                raise KvprovError(f"{name}: the ssh tunnel to its engine did not open: "
                                  f"{errors.read().strip()[-500:] or f'ssh exited {proc.returncode}'}")
            if time.monotonic() > end:
                raise KvprovError(f"{name}: the ssh tunnel to its engine did not open within {timeout:g} s")
            waiting = {path for path in waiting if not _answers(path)}
            time.sleep(0.1)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        errors.close()
