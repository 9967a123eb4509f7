"""What `kvprov lab up` does for many containers: the inotify instance limit it raises (and
`down` puts back), and the memory it reports per container (a real process tree here)."""

import io
import os
import subprocess
import sys
import time

from kvprov.lab import lifecycle
from kvprov.lab.proc import Progress


def test_the_limit_is_raised_only_when_too_low_and_recorded_first(tmp_path, monkeypatch):
    limit = tmp_path / "max_user_instances"  # stands in for /proc/sys/fs/inotify/max_user_instances
    monkeypatch.setattr(lifecycle, "INOTIFY_INSTANCES", limit)
    saved = []
    monkeypatch.setattr(lifecycle, "save_state", lambda state: saved.append(dict(state)))
    out = io.StringIO()
    state, progress = {"topology": {"clients": 1, "containers": 100}}, Progress(out)

    limit.write_text("4096\n")
    lifecycle._raise_inotify_limit(state, 1728, progress)
    assert (limit.read_text(), state, saved, out.getvalue()) == ("4096\n", {"topology": state["topology"]}, [], "")

    limit.write_text("128\n")
    lifecycle._raise_inotify_limit(state, 1728, progress)
    assert limit.read_text() == "1728\n"
    assert saved[-1]["inotify_instances"] == 128  # saved before the write
    assert out.getvalue().endswith("] fs.inotify.max_user_instances 128 -> 1728 for 100 containers "
                                   "(restored by `kvprov lab down`)\n")


def test_container_memory_counts_the_whole_process_tree():
    child = subprocess.Popen([sys.executable, "-c", "import time; b = bytearray(64 << 20); time.sleep(30)"],
                             stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while lifecycle.container_memory(child.pid) < (64 << 20) and time.monotonic() < deadline:
            time.sleep(0.1)
        alone = lifecycle.container_memory(child.pid)
        assert alone >= 64 << 20
        assert lifecycle.container_memory(os.getpid()) >= alone  # the child is below this process
    finally:
        child.kill()
        child.wait()
    assert lifecycle.container_memory(child.pid) == 0  # gone: nothing to count
