"""Small process helpers for the lab: run a command, log it, explain a failure."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from kvprov.errors import EXIT_LAB, KvprovError


def tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def run(cmd: list[str], log: Path | None = None, timeout: float = 1800, check: bool = True,
        **kw) -> subprocess.CompletedProcess:
    """Run cmd; append its output to `log` (if given); on failure raise with the log's tail."""
    if log is None:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
        if check and res.returncode != 0:
            raise KvprovError(f"command failed ({res.returncode}): {' '.join(cmd)}\n{res.stderr.strip()}",
                              EXIT_LAB)
        return res
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as fh:
        fh.write(f"\n$ {' '.join(cmd)}\n")
        fh.flush()
        res = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, text=True, timeout=timeout, **kw)
    if check and res.returncode != 0:
        raise KvprovError(f"command failed ({res.returncode}): {' '.join(cmd)}\n"
                          f"--- last lines of {log} ---\n{tail(log)}", EXIT_LAB)
    return res


class Progress:
    """One line per step with elapsed seconds, for people watching a long run."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.t0 = time.monotonic()

    def __call__(self, msg: str) -> None:
        print(f"[{time.monotonic() - self.t0:6.1f}s] {msg}", file=self.stream, flush=True)
