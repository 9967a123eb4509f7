"""ssh into lab hosts with the lab's key (host keys are throwaway: not checked)."""

from __future__ import annotations

import subprocess

from kvprov.lab import topology

SSH_OPTS = ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-o", "ConnectTimeout=3"]


def ssh_args(address: str, port: int) -> list[str]:
    return ["ssh", *SSH_OPTS, "-i", str(topology.ssh_key_path()), "-p", str(port), f"root@{address}"]


def ssh(address: str, port: int, command: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run `command` on the host; a hung host counts as a failure (rc 255), not a hang."""
    try:
        return subprocess.run([*ssh_args(address, port), command], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(e.cmd, 255, "", f"timed out after {timeout}s")


def answers(address: str, port: int) -> bool:
    return ssh(address, port, "true", timeout=8).returncode == 0
