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


@contextlib.contextmanager
def stall_dir(backing: Path, mount: Path):
    """`backing` (on this machine) mounted at `mount` through FUSE; yields a Stall."""
    if not (os.access(SFTP_SERVER, os.X_OK) and shutil.which("sshfs") and os.path.exists("/dev/fuse")):
        engine_missing(f"no {SFTP_SERVER}, sshfs or /dev/fuse (scripts/install-deps installs openssh-sftp-server "
                       "and sshfs)")
    backing.mkdir(parents=True, exist_ok=True)
    mount.mkdir(parents=True, exist_ok=True)
    ours, theirs = socket.socketpair()
    server = subprocess.Popen([SFTP_SERVER], stdin=ours, stdout=ours)
    fuse = subprocess.Popen(["sshfs", "-f", "-o", f"passive,{NO_CACHE}", f":{backing}", str(mount)],
                            stdin=theirs, stdout=theirs, stderr=subprocess.PIPE)
    ours.close()
    theirs.close()
    stall = Stall(server, mount)
    try:
        deadline = time.monotonic() + 30
        while not os.path.ismount(mount):
            if fuse.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"sshfs did not mount {mount}: {fuse.stderr.read().decode()[-2000:]}")
            time.sleep(0.1)
        yield stall
    finally:
        stall.cont()
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, timeout=30)
        for proc in (fuse, server):
            proc.kill()
            proc.wait(timeout=30)
