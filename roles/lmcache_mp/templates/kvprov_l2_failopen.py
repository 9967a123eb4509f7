# {{ ansible_managed }}
"""kvprov's fail-open wrapper around LMCache's file-system L2 adapters (fs, fs_native).

LMCache 0.5.6 waits on its L2 without a bound: every prefetch asks the L2 adapter about every
key (L1 hits included) and waits for the answer, so a storage server that stops answering stops
every request, and the MP server cannot start while the mount hangs (the adapter is built in
StorageManager.__init__). A KV tier is a cache: losing it must cost speed, never availability.
This adapter (LMCache's `plugin` L2 type) puts a bound on each wait a request makes:

- A lookup not answered within `lookup_timeout_s` is answered "nothing there" (the request
  recomputes) and the tier is *bypassed*: lookups are answered "nothing there" at once, stores
  are refused at once (the L1 copies stay in DRAM), until a probe of the directory (statvfs, on
  a thread of its own, one at a time, every `probe_interval_s`) answers within
  `probe_timeout_s`. Then the tier is used again, with no restart. A late lookup's locks are
  released when its answer comes.
- Loads and stores already handed to LMCache's adapter are never given up early: they read or
  write the caller's buffers, which must not be reused while LMCache's threads still use them.
  A load only follows a lookup that answered in time; on a soft mount it errors out within the
  mount's timeout, and an errored load is a miss (recomputed).
- LMCache's adapter is built on a thread: when that takes longer than `lookup_timeout_s` (the
  mount hangs at start), the server starts with the tier bypassed and takes the adapter into
  use once it is built and a probe answers.

Written by kvprov (roles/lmcache_mp); loaded by the LMCache MP server from PYTHONPATH.
"""

from __future__ import annotations

import os
import select
import threading
import time

from lmcache.lmcache_native import Bitmap
from lmcache.logging import init_logger
from lmcache.v1.distributed.internal_api import L2StoreResult
from lmcache.v1.distributed.l2_adapters.base import AdapterUsage, L2AdapterInterface
from lmcache.v1.distributed.l2_adapters.config import L2AdapterConfigBase, get_l2_adapter_config_class
from lmcache.v1.distributed.l2_adapters.factory import create_l2_adapter_from_registry
from lmcache.v1.platform import create_event_notifier
from lmcache.v1.platform.event_notifier import consume_fd

logger = init_logger(__name__)

WRAPPED = ("fs", "fs_native")  # adapters whose files live in a directory a probe can ask
TICK_S = 0.1  # how often deadlines and probes are looked at, at most


class FailOpenL2AdapterConfig(L2AdapterConfigBase):
    """adapter_params: {"inner": <fs or fs_native adapter spec>, "lookup_timeout_s": 2,
    "probe_interval_s": 5, "probe_timeout_s": 2}."""

    def __init__(self, inner: L2AdapterConfigBase, inner_type: str, base_path: str,
                 lookup_timeout_s: float, probe_interval_s: float, probe_timeout_s: float):
        self.inner = inner
        self.inner_type = inner_type
        self.base_path = base_path
        self.lookup_timeout_s = lookup_timeout_s
        self.probe_interval_s = probe_interval_s
        self.probe_timeout_s = probe_timeout_s

    @classmethod
    def from_dict(cls, d: dict) -> "FailOpenL2AdapterConfig":
        inner = d.get("inner")
        if not isinstance(inner, dict) or inner.get("type") not in WRAPPED:
            raise ValueError(f"inner must be an adapter spec of type {' or '.join(WRAPPED)}")
        if not isinstance(inner.get("base_path"), str) or not inner["base_path"]:
            raise ValueError("inner.base_path must be a non-empty string")
        bounds = {}
        for name, default in (("lookup_timeout_s", 2.0), ("probe_interval_s", 5.0), ("probe_timeout_s", 2.0)):
            value = d.get(name, default)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 3600:
                raise ValueError(f"{name} must be a number of seconds in (0, 3600]")
            bounds[name] = float(value)
        config = get_l2_adapter_config_class(inner["type"]).from_dict(inner)
        return cls(config, inner["type"], inner["base_path"], **bounds)

    @classmethod
    def help(cls) -> str:
        return ("kvprov fail-open L2 adapter: inner (fs or fs_native spec, required), lookup_timeout_s (2), "
                "probe_interval_s (5), probe_timeout_s (2)")


class _Lookup:
    __slots__ = ("inner_id", "keys", "deadline")

    def __init__(self, inner_id: int, keys: list, deadline: float):
        self.inner_id, self.keys, self.deadline = inner_id, keys, deadline


class FailOpenL2Adapter(L2AdapterInterface):
    def __init__(self, config: FailOpenL2AdapterConfig, l1_memory_desc=None):
        capacity = int(float(getattr(config.inner, "max_capacity_gb", 0) or 0) * 1024 ** 3)
        super().__init__(max_capacity_bytes=capacity)
        self._config = config
        self._l1_memory_desc = l1_memory_desc
        self._lock = threading.Lock()
        self._store_efd, self._lookup_efd, self._load_efd = (create_event_notifier() for _ in range(3))
        self._wake = create_event_notifier()
        self._inner: L2AdapterInterface | None = None
        self._identity: tuple[str, bool] | None = None
        self._next_id = 0
        self._lookups: dict[int, _Lookup] = {}     # ours, answered by LMCache's adapter or the deadline
        self._late: dict[int, list] = {}           # inner id -> keys of a lookup answered by the deadline
        self._loads: dict[int, int] = {}           # ours -> inner id
        self._stores: dict[int, int] = {}          # inner id -> ours
        self._done_lookups: dict[int, Bitmap] = {}
        self._done_loads: dict[int, Bitmap] = {}
        self._done_stores: dict[int, L2StoreResult] = {}
        self._bypassed_since: float | None = time.monotonic()  # until LMCache's adapter is built
        self._probe: threading.Thread | None = None
        self._next_probe = 0.0
        self._building = False
        self._stop = threading.Event()
        self._build()
        deadline = time.monotonic() + config.lookup_timeout_s
        while self._inner is None and self._building and time.monotonic() < deadline:
            time.sleep(0.01)
        if self._inner is None:
            logger.warning("kvprov fail-open: the %s adapter on %s is not built after %.1f s; the MP server starts "
                           "with the KV tier bypassed and takes it into use when it is", config.inner_type,
                           config.base_path, config.lookup_timeout_s)
        self._monitor = threading.Thread(target=self._run, name="kvprov-failopen", daemon=True)
        self._monitor.start()

    # ---- LMCache's adapter, built on a thread (its constructor touches the directory) ----

    def _build(self) -> None:
        self._building = True
        threading.Thread(target=self._build_inner, name="kvprov-failopen-build", daemon=True).start()

    def _build_inner(self) -> None:
        try:
            # first from Python, which lets go of the GIL while it waits: fs_native's C++ constructor
            # holds it while it touches the directory, and on a hanging mount it would stop the server
            os.statvfs(self._config.base_path)
            inner = create_l2_adapter_from_registry(self._config.inner, self._l1_memory_desc)
        except Exception as e:  # the mount errors: serve without the tier, build again after a probe
            logger.warning("kvprov fail-open: building the %s adapter on %s failed (%s); KV tier bypassed",
                           self._config.inner_type, self._config.base_path, e)
            self._building = False
            return
        for listener in list(self._listeners):
            inner.register_listener(listener)
        if self._identity is not None:
            inner.set_backend_identity(*self._identity)
        with self._lock:
            self._inner = inner
            if self._bypassed_since is not None:
                logger.info("kvprov fail-open: the %s adapter on %s is built; KV tier in use",
                            self._config.inner_type, self._config.base_path)
            self._bypassed_since = None
        self._building = False
        self._wake.notify()

    # ---- the breaker ----

    def _bypass(self, why: str) -> None:
        """Called with self._lock held."""
        if self._bypassed_since is None:
            self._bypassed_since = time.monotonic()
            self._next_probe = self._bypassed_since + self._config.probe_interval_s
            logger.warning("kvprov fail-open: KV tier on %s bypassed (%s); serving without it, probing every %.0f s",
                           self._config.base_path, why, self._config.probe_interval_s)

    def _probe_directory(self) -> None:
        started = time.monotonic()
        try:
            os.statvfs(self._config.base_path)
        except OSError as e:
            logger.info("kvprov fail-open: probe of %s failed: %s", self._config.base_path, e)
            return
        took = time.monotonic() - started
        if took > self._config.probe_timeout_s:
            logger.info("kvprov fail-open: probe of %s answered in %.1f s (> %.1f s)", self._config.base_path,
                        took, self._config.probe_timeout_s)
            return
        if self._inner is None:
            if not self._building:
                self._build()
            return
        with self._lock:
            if self._bypassed_since is not None:
                logger.warning("kvprov fail-open: KV tier on %s answers again after %.0f s; in use",
                               self._config.base_path, time.monotonic() - self._bypassed_since)
            self._bypassed_since = None

    # ---- the monitor thread: forwards LMCache's completions, enforces deadlines, probes ----

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._wake.fileno(), select.POLLIN)
        watched = False
        while not self._stop.is_set():
            inner = self._inner
            if inner is not None and not watched:
                for fd in (inner.get_store_event_fd(), inner.get_lookup_and_lock_event_fd(),
                           inner.get_load_event_fd()):
                    poller.register(fd, select.POLLIN)
                watched = True
            for fd, _ in poller.poll(int(TICK_S * 1000)):
                try:
                    consume_fd(fd)
                except OSError:
                    pass
            try:
                self._tick(inner)
            except Exception:
                logger.exception("kvprov fail-open: monitor error")

    def _tick(self, inner: L2AdapterInterface | None) -> None:
        signal = set()
        if inner is not None:
            self._collect(inner, signal)
        now = time.monotonic()
        with self._lock:
            for ours, lookup in list(self._lookups.items()):
                if now >= lookup.deadline:
                    del self._lookups[ours]
                    self._late[lookup.inner_id] = lookup.keys
                    self._done_lookups[ours] = Bitmap(len(lookup.keys))
                    signal.add(self._lookup_efd)
                    self._bypass(f"a lookup of {len(lookup.keys)} keys took over {self._config.lookup_timeout_s:g} s")
            probe = self._bypassed_since is not None and now >= self._next_probe and not (
                self._probe and self._probe.is_alive())
            if probe:
                self._next_probe = now + self._config.probe_interval_s
                self._probe = threading.Thread(target=self._probe_directory, name="kvprov-failopen-probe",
                                               daemon=True)
        if probe:
            self._probe.start()
        for efd in signal:
            efd.notify()

    def _collect(self, inner: L2AdapterInterface, signal: set) -> None:
        with self._lock:
            lookups = [(ours, lookup.inner_id) for ours, lookup in self._lookups.items()]
            late = list(self._late.items())
            loads = list(self._loads.items())
            stores = inner.pop_completed_store_tasks()
            for inner_id, result in stores.items():
                self._done_stores[self._stores.pop(inner_id)] = result
        if stores:
            signal.add(self._store_efd)
        for ours, inner_id in lookups:
            found = inner.query_lookup_and_lock_result(inner_id)
            if found is not None:
                with self._lock:
                    del self._lookups[ours]
                    self._done_lookups[ours] = found
                signal.add(self._lookup_efd)
        for inner_id, keys in late:
            found = inner.query_lookup_and_lock_result(inner_id)
            if found is not None:
                with self._lock:
                    del self._late[inner_id]
                locked = [keys[i] for i in found.get_indices_list()]
                if locked:
                    inner.submit_unlock(locked)
        for ours, inner_id in loads:
            loaded = inner.query_load_result(inner_id)
            if loaded is not None:
                with self._lock:
                    del self._loads[ours]
                    self._done_loads[ours] = loaded
                signal.add(self._load_efd)

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _in_use(self) -> L2AdapterInterface | None:
        """LMCache's adapter, if the tier is in use (called with self._lock held)."""
        return self._inner if self._bypassed_since is None else None

    # ---- L2AdapterInterface ----

    def get_store_event_fd(self) -> int:
        return self._store_efd.fileno()

    def get_lookup_and_lock_event_fd(self) -> int:
        return self._lookup_efd.fileno()

    def get_load_event_fd(self) -> int:
        return self._load_efd.fileno()

    def submit_store_task(self, keys, objects) -> int:
        with self._lock:
            ours = self._new_id()
            inner = self._in_use()
            if inner is None:
                self._done_stores[ours] = L2StoreResult(False, 0)
            else:
                self._stores[inner.submit_store_task(keys, objects)] = ours
        if inner is None:
            self._store_efd.notify()
        return ours

    def pop_completed_store_tasks(self) -> dict:
        with self._lock:
            done, self._done_stores = self._done_stores, {}
        return done

    def submit_lookup_and_lock_task(self, keys, group_layout_descs) -> int:
        with self._lock:
            ours = self._new_id()
            inner = self._in_use()
            if inner is None:
                self._done_lookups[ours] = Bitmap(len(keys))
            else:
                inner_id = inner.submit_lookup_and_lock_task(keys, group_layout_descs)
                self._lookups[ours] = _Lookup(inner_id, list(keys),
                                              time.monotonic() + self._config.lookup_timeout_s)
        if inner is None:
            self._lookup_efd.notify()
        else:
            self._wake.notify()
        return ours

    def query_lookup_and_lock_result(self, task_id: int):
        with self._lock:
            return self._done_lookups.pop(task_id, None)

    def submit_unlock(self, keys) -> None:
        if self._inner is not None:
            self._inner.submit_unlock(keys)

    def submit_load_task(self, keys, objects) -> int:
        with self._lock:
            ours = self._new_id()
            inner = self._in_use()
            if inner is None:
                self._done_loads[ours] = Bitmap(len(keys))
            else:
                self._loads[ours] = inner.submit_load_task(keys, objects)
        if inner is None:
            self._load_efd.notify()
        else:
            self._wake.notify()
        return ours

    def query_load_result(self, task_id: int):
        with self._lock:
            return self._done_loads.pop(task_id, None)

    def register_listener(self, listener) -> None:
        super().register_listener(listener)
        if self._inner is not None:
            self._inner.register_listener(listener)

    def set_backend_identity(self, name: str, shared: bool = False) -> None:
        super().set_backend_identity(name, shared)
        self._identity = (name, shared)
        if self._inner is not None:
            self._inner.set_backend_identity(name, shared)

    def delete(self, keys) -> None:
        if self._inner is not None:
            self._inner.delete(keys)

    def list_l2_keys(self, *args, **kwargs):
        if self._inner is None:
            raise NotImplementedError("the KV tier's adapter is not built yet")
        return self._inner.list_l2_keys(*args, **kwargs)

    def get_usage(self) -> AdapterUsage:
        if self._inner is None:
            return AdapterUsage(total_bytes_used=0, total_capacity_bytes=self._max_capacity_bytes)
        return self._inner.get_usage()

    def report_status(self) -> dict:
        since = self._bypassed_since
        status = {"is_healthy": True, "type": "kvprov fail-open (" + self._config.inner_type + ")",
                  "base_path": self._config.base_path, "tier": "in use" if since is None else "bypassed",
                  "bypassed_for_s": 0 if since is None else round(time.monotonic() - since, 1)}
        if self._inner is not None:
            status["inner"] = self._inner.report_status()
        return status

    def close(self) -> None:
        self._stop.set()
        self._wake.notify()
        self._monitor.join(timeout=2)
        inner = self._inner
        if inner is not None:  # on a thread: LMCache's close waits for its tasks, which may wait on storage
            closer = threading.Thread(target=inner.close, name="kvprov-failopen-close", daemon=True)
            closer.start()
            closer.join(timeout=self._config.lookup_timeout_s)
        for efd in (self._store_efd, self._lookup_efd, self._load_efd, self._wake):
            efd.close()
