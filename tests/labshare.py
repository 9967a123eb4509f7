"""The lab shared by two pytest-xdist workers (tests/conftest.py): the lab tests run as two groups,
`lab` (the storage VM, kvlab-gpu1 and containers c1-c3) and `engine` (the real engine on c4 and c5,
then the unit tests), one a worker. What they share goes through files in the run's own temporary
directory:

- one `lab up` for the run (the first worker brings it up, the other waits and reads its state);
- milestones one group reaches and the other waits for (`fixture:deployed`: kvlab-gpu1 is
  deployed; `module:test_3_validate`: that module's tests have run);
- the storage lock: the storage VM and kvlab-gpu1's NFS client to one test at a time, for the
  tests that stop or break the storage or mount it over TCP, and for the engines' cross-host
  test, which reads through it (on RDMA mounts of its own on kvlab-gpu1, beside the KV mount
  that the `lab` group's tests remount with other options);
- each group's end, which the test that takes the lab down waits for.

Without xdist the directory is the run's own and nothing waits."""

from __future__ import annotations

import contextlib
import fcntl
import json
import time
from pathlib import Path

WAIT = 3600  # seconds one group waits for the other, at most


class LabShare:
    def __init__(self, directory: Path, used: dict[str, set[str]]):
        self.dir = directory
        self.used = used  # "fixture:NAME" / "module:NAME" -> the lab groups whose tests use it (this run)

    @contextlib.contextmanager
    def lock(self, name: str):
        with open(self.dir / f"{name}.lock", "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            yield

    def reach(self, name: str, problem: str | None = None) -> None:
        """Milestone `name` reached (problem: why it never will be)."""
        tmp = self.dir / f".{name}.milestone"
        tmp.write_text(json.dumps({"problem": problem}))
        tmp.rename(self.dir / f"{name}.milestone")

    def wait(self, name: str, why: str, timeout: float = WAIT) -> None:
        """Until milestone `name` is reached; fails when it never will be."""
        path, deadline = self.dir / f"{name}.milestone", time.monotonic() + timeout
        while not path.exists():
            if time.monotonic() > deadline:
                raise AssertionError(f"{why}: the lab's other worker did not reach `{name}` within {timeout:.0f}s")
            time.sleep(1)
        problem = json.loads(path.read_text())["problem"]
        if problem:
            raise AssertionError(f"{why}: `{name}` failed on the lab's other worker: {problem}")

    def after(self, milestone: str, group: str, why: str) -> None:
        """Until `milestone` ("fixture:NAME", reached by that fixture; "module:NAME", reached when
        that test module's last test has run) when tests of another lab group reach it in this run;
        at once otherwise (then it was reached before, in this process, or never is)."""
        if self.used.get(milestone, set()) - {group}:
            self.wait(milestone, why)
