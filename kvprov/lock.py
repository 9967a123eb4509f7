"""One change at a time per inventory: `kvprov deploy`, `kvprov audit --fix` and every engine
restart (`loadtest --replay`/`--cross-host`, `validate --engine-roundtrip`) hold a
controller-side lock (flock on a file named after the inventory sources' real paths, sorted:
the same sources in any order are the same inventory), so a second
one is refused, naming the holder, instead of two runs pip-installing into the same venvs
and racing remounts. The lock goes with the process (a killed run leaves nothing held)."""

from __future__ import annotations

import fcntl
import getpass
import hashlib
import json
import os
import secrets
import socket
import time
from contextlib import contextmanager
from pathlib import Path

from kvprov import paths
from kvprov.errors import EXIT_BUSY, KvprovError
from kvprov.inventory import describe, source_list


def locks_dir() -> Path:
    return Path(os.environ.get("KVPROV_LOCK_DIR", paths.state_dir() / "locks"))


def _real(inventory: str | list[str]) -> list[str]:
    """The sources' real paths, sorted."""
    return sorted(os.path.realpath(s) for s in source_list(inventory))


def lock_path(inventory: str | list[str]) -> Path:
    key = hashlib.sha256("\n".join(_real(inventory)).encode()).hexdigest()[:16]  # one source: its real path
    return locks_dir() / f"{key}.lock"


@contextmanager
def inventory_lock(inventory: str | list[str], command: str):
    """Hold the inventory's lock for the block; KvprovError (EXIT_BUSY) when another run has it."""
    path = lock_path(inventory)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise KvprovError(f"{describe(inventory)}: {_holder(fd)} is changing these hosts; wait for it to finish "
                              f"(or stop it), then run again (lock: {path})", EXIT_BUSY) from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "command": command, "inventory": _real(inventory),
                                 "since": time.strftime("%Y-%m-%d %H:%M:%S")}).encode())
        yield
    finally:
        os.close(fd)  # releases the lock


def owner(inventory: str | list[str]) -> str:
    """Who holds a host lock: this user on this controller with this inventory. Only the same
    owner takes over a lock, and only while it holds the inventory's controller lock
    (inventory_lock: the earlier run of that owner is gone); another user of the same bastion
    is another owner, refused by name."""
    return f"{getpass.getuser()}@{socket.gethostname()}:{','.join(_real(inventory))}"


def host_lock_vars(inventory: str | list[str], command: str) -> dict:
    """Extra vars for the playbooks' host-side lock (plugins/modules/kvprov_host_lock.py;
    site.yml, restart.yml): a rerun takes over what an interrupted run of the same owner
    left, a run of any other owner is refused by name."""
    return {"kvprov_lock_owner": owner(inventory), "kvprov_lock_command": f"kvprov {command}",
            "kvprov_run_id": secrets.token_hex(6)}


def _holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"`kvprov {info['command']}` (pid {info['pid']}, since {info['since']})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another kvprov run"
