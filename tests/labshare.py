"""The lab shared by two pytest-xdist workers (tests/conftest.py): the lab tests run as two groups,
`lab` (the storage VM, kvlab-gpu1 and containers c1-c3) and `engine` (the real engine on c4 and c5,
then the unit tests), one a worker. What they share goes through files in the run's own temporary
directory:

- one `lab up` for the run (the first worker brings it up, the other waits and reads its state);
- milestones one group reaches and the other waits for (`deployed`: kvlab-gpu1 is deployed);
- the storage lock: the storage VM to one test at a time, for the tests that stop or break it and
  for the engines' cross-host test, which reads through it (on mounts of its own on kvlab-gpu1,
  beside the KV mount that the `lab` group's tests remount);
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
    def __init__(self, directory: Path, fixtures_used: dict[str, set[str]]):
        self.dir = directory
        self.fixtures_used = fixtures_used  # fixture name -> the groups whose tests use it

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

    def wait_for_fixture(self, fixture: str, group: str, why: str) -> None:
        """Until the milestone of the same name as `fixture` when tests of another group use it
        (in this run); at once otherwise (then the fixture ran before, in this process, or not at all)."""
        if self.fixtures_used.get(fixture, set()) - {group}:
            self.wait(fixture, why)
