"""Drives kvprov's fail-open L2 adapter (roles/lmcache_mp/templates/kvprov_l2_failopen.py.j2, as
rendered) around LMCache's own fs or fs_native adapter, as LMCache's prefetch and store
controllers do (submit, wait on the adapter's event fd, query), on a directory whose storage
can stop answering (tests/stall_dir.py). Run by the engine venv's python:

    ENGINE_VENV/bin/python tests/lmcache_failopen_drive.py < {"module_dir", "mount", "sftp_pid",
                                                              "inner_type"}

Prints one JSON object of what it measured; tests/unit/test_lmcache_failopen.py asserts on it.
The buffers stand in for LMCache's L1 memory objects: the adapters use only their byte_array."""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time

CHUNK = 64 * 1024
TIMEOUT = 1.0  # lookup_timeout_s and probe_timeout_s
PROBE = 1.0    # probe_interval_s


class Buffer:
    def __init__(self, fill: int):
        self.data = bytearray([fill]) * CHUNK
        self.byte_array = memoryview(self.data)


def wait(fd: int, query, task: int, limit: float = 60.0):
    """Poll the adapter's event fd until its query answers `task` (LMCache's controllers do so)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        select.select([fd], [], [], 0.05)
        try:
            os.eventfd_read(fd)
        except BlockingIOError:
            pass
        result = query(task)
        if result is not None:
            return result
    raise TimeoutError(f"task {task} not answered in {limit} s")


def main() -> None:
    args = json.load(sys.stdin)
    sys.path.insert(0, args["module_dir"])
    from lmcache.v1.distributed.api import ObjectKey
    from kvprov_l2_failopen import FailOpenL2Adapter, FailOpenL2AdapterConfig

    spec = {"inner": {"type": args["inner_type"], "base_path": args["mount"], "relative_tmp_dir": ".tmp-drive"},
            "lookup_timeout_s": TIMEOUT, "probe_timeout_s": TIMEOUT, "probe_interval_s": PROBE}
    config = FailOpenL2AdapterConfig.from_dict(spec)
    keys = [ObjectKey(chunk_hash=bytes([i]) * 16, model_name="m", kv_rank=0) for i in range(4)]
    out: dict = {}

    def metric():
        """The server's /metrics gauge (prometheus_client's default registry)."""
        from prometheus_client import REGISTRY
        return REGISTRY.get_sample_value("kvprov_l2_bypassed", {"base_path": args["mount"]})

    def build():
        started = time.monotonic()
        adapter = FailOpenL2Adapter(config)
        return adapter, time.monotonic() - started

    def store(adapter, n: int = 3):
        task = adapter.submit_store_task(keys[:n], [Buffer(i + 1) for i in range(n)])
        done = wait(adapter.get_store_event_fd(), lambda t: adapter.pop_completed_store_tasks().get(t), task)
        return done.is_successful()

    def lookup(adapter):
        started = time.monotonic()
        task = adapter.submit_lookup_and_lock_task(keys, {})
        found = wait(adapter.get_lookup_and_lock_event_fd(), adapter.query_lookup_and_lock_result, task)
        return sorted(found.get_indices_list()), round(time.monotonic() - started, 3)

    def load(adapter, n: int = 3):
        buffers = [Buffer(0) for _ in range(n)]
        task = adapter.submit_load_task(keys[:n], buffers)
        loaded = wait(adapter.get_load_event_fd(), adapter.query_load_result, task)
        return sorted(loaded.get_indices_list()), [b.data == Buffer(i + 1).data for i, b in enumerate(buffers)]

    def until_found(adapter) -> float:
        """Seconds until a lookup finds the stored keys again (at most 30)."""
        started = time.monotonic()
        while lookup(adapter)[0] != [0, 1, 2] and time.monotonic() - started < 30:
            time.sleep(0.1)
        return round(time.monotonic() - started, 3)

    if "--planted-link" in sys.argv:  # the tier's directory is a link another writer planted
        adapter, _ = build()
        time.sleep(3 * PROBE)  # probes meanwhile: each tries to build it again
        out["status"] = adapter.report_status()["tier"]
        out["lookup"] = lookup(adapter)[0]
        out["stored"] = store(adapter, 1)
        adapter.close()
        print(json.dumps(out))
        return

    if "--full" in sys.argv:  # a volume that fills: store 8 chunks, then what is found and loads whole
        keys[:] = [ObjectKey(chunk_hash=bytes([i]) * 16, model_name="m", kv_rank=0) for i in range(8)]
        adapter, _ = build()
        out["stored"] = store(adapter, 8)
        out["found"] = lookup(adapter)[0]
        buffers = [Buffer(0) for _ in out["found"]]
        task = adapter.submit_load_task([keys[i] for i in out["found"]], buffers)
        wait(adapter.get_load_event_fd(), adapter.query_load_result, task)
        out["loaded"] = [i for i, b in zip(out["found"], buffers) if b.data == Buffer(i + 1).data]
        adapter.close()
        print(json.dumps(out))
        return

    stop = lambda: os.kill(args["sftp_pid"], signal.SIGSTOP)  # noqa: E731
    cont = lambda: os.kill(args["sftp_pid"], signal.SIGCONT)  # noqa: E731

    # healthy storage: what is stored is found and loaded, byte for byte
    adapter, out["build_s"] = build()
    out["stored"] = store(adapter)
    out["healthy_lookup"] = lookup(adapter)
    out["healthy_load"] = load(adapter)
    out["status_healthy"] = adapter.report_status()["tier"], metric()

    # the storage stops answering
    stop()
    out["stalled_lookup"] = lookup(adapter)          # answered by the deadline: nothing there
    out["status_stalled"] = adapter.report_status()["tier"], metric()
    out["bypassed_lookup"] = lookup(adapter)         # the tier bypassed: answered at once
    started = time.monotonic()
    out["bypassed_store"] = store(adapter, 1)        # refused at once
    out["bypassed_store_s"] = round(time.monotonic() - started, 3)
    time.sleep(3 * PROBE)                            # probes meanwhile wait on the storage too
    out["still_stalled_lookup"] = lookup(adapter)

    # it answers again: within a probe interval the tier is in use, with no restart
    cont()
    out["recovered_after_s"] = until_found(adapter)
    out["recovered_lookup"] = lookup(adapter)
    out["recovered_load"] = load(adapter)
    out["status_recovered"] = adapter.report_status()["tier"], metric()
    adapter.close()

    # a server that starts while the storage hangs, its directory not made yet (kvprov-kv-key names
    # the keyed subdirectory without the storage): it starts, bypassed, and once the storage answers
    # makes the directory and uses the tier
    config.base_path = config.inner.base_path = os.path.join(args["mount"], "fp-0123456789ab")
    stop()
    adapter, out["stalled_build_s"] = build()
    out["stalled_build_lookup"] = lookup(adapter)
    out["stalled_build_status"] = adapter.report_status()["tier"]
    cont()
    started = time.monotonic()
    while adapter.report_status()["tier"] != "in use" and time.monotonic() - started < 30:
        time.sleep(0.1)
    out["stalled_build_recovered_after_s"] = round(time.monotonic() - started, 3)
    out["stalled_build_dir"] = os.path.isdir(config.base_path) and not os.path.islink(config.base_path)
    out["stalled_build_stored"] = store(adapter)
    out["stalled_build_load"] = load(adapter)
    adapter.close()

    # the control: LMCache's adapter alone, same storage, same stop
    from lmcache.v1.distributed.l2_adapters.factory import create_l2_adapter_from_registry
    bare = create_l2_adapter_from_registry(config.inner)
    stop()
    task = bare.submit_lookup_and_lock_task(keys, {})
    try:
        wait(bare.get_lookup_and_lock_event_fd(), bare.query_lookup_and_lock_result, task, limit=5)
        out["bare_stalled_lookup_answered"] = True
    except TimeoutError:
        out["bare_stalled_lookup_answered"] = False
    cont()
    wait(bare.get_lookup_and_lock_event_fd(), bare.query_lookup_and_lock_result, task)
    bare.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
