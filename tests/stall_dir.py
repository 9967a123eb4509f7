"""A directory whose storage can stop answering, for fail-open tests without a lab: a FUSE mount
(sshfs in passive mode, no network) served by OpenSSH's sftp-server on a local directory, over a
socket pair. SIGSTOP to the sftp-server and every call on the mount waits, as on a black-holed NFS
server behind a hard mount; SIGCONT and the calls go on. Real kernel FUSE, real blocking syscalls."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.required import engine_missing

SFTP_SERVER = "/usr/lib/openssh/sftp-server"
NO_CACHE = "dir_cache=no,entry_timeout=0,attr_timeout=0,negative_timeout=0"


class Stall:
    def __init__(self, server: subprocess.Popen, mount: Path):
        self.server, self.mount = server, mount

    def stop(self) -> None:
        os.kill(self.server.pid, signal.SIGSTOP)

    def cont(self) -> None:
        os.kill(self.server.pid, signal.SIGCONT)


def mounted(mount: Path, container_pid: int | None) -> bool:
    """The FUSE mount answers at `mount` (in the container, when given)."""
    if container_pid is None:
        return os.path.ismount(mount)
    from tests.lab.nfs_relay import FUSE_MAGIC, in_container

    r = in_container(container_pid, f"stat -f -c %t {mount} && ls {mount} >/dev/null")
    return r.returncode == 0 and r.stdout.strip() == FUSE_MAGIC


@contextlib.contextmanager
def stall_dir(backing: Path, mount: Path, container_pid: int | None = None):
    """`backing` (on this machine) mounted at `mount` through FUSE; yields a Stall. With
    `container_pid` (a lab container's init: tests/lab/nfs_relay.py), the mount is made at `mount`
    inside that container's mount namespace (over what is there), with this machine's /dev/fuse."""
    if not (os.access(SFTP_SERVER, os.X_OK) and shutil.which("sshfs") and os.path.exists("/dev/fuse")):
        engine_missing(f"no {SFTP_SERVER}, sshfs or /dev/fuse (scripts/install-deps installs openssh-sftp-server "
                       "and sshfs)")
    backing.mkdir(parents=True, exist_ok=True)
    fd, target = None, str(mount)
    if container_pid is None:
        mount.mkdir(parents=True, exist_ok=True)
    else:
        from tests.lab.nfs_relay import in_container

        fd = os.open("/dev/fuse", os.O_RDWR)
        r = in_container(container_pid, f"mount -i -t fuse.sshfs -o fd={fd},rootmode=40000,user_id=0,group_id=0,"
                                        f"allow_other stall:{backing} {mount}", pass_fds=(fd,))
        if r.returncode:
            os.close(fd)
            pytest.fail(f"FUSE mount at {mount} in the container: {r.stderr}")
        target = f"/dev/fd/{fd}"
    ours, theirs = socket.socketpair()
    server = subprocess.Popen([SFTP_SERVER], stdin=ours, stdout=ours)
    fuse = subprocess.Popen(["sshfs", "-f", "-o", f"passive,{NO_CACHE}" + (",allow_other" if fd else ""),
                             f":{backing}", target], stdin=theirs, stdout=theirs, stderr=subprocess.PIPE,
                            pass_fds=(fd,) if fd else ())
    ours.close()
    theirs.close()
    if fd is not None:
        os.close(fd)
    stall = Stall(server, mount)
    try:
        deadline = time.monotonic() + 30
        while not mounted(mount, container_pid):
            if fuse.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"sshfs did not mount {mount}: {fuse.stderr.read().decode()[-2000:]}")
            time.sleep(0.1)
        yield stall
    finally:
        stall.cont()
        if container_pid is None:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True, timeout=30)
        else:
            in_container(container_pid, f"umount {mount} || umount -l {mount}")
        for proc in (fuse, server):
            proc.kill()
            proc.wait(timeout=30)
