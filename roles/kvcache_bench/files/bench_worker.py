#!/usr/bin/env python3
"""Target-side worker of the throughput acceptance test (`kvprov bench`).

Copied to a GPU host and run there with the NIXL venv's python (or run in place):

  /opt/kvprov/nixl/bin/python3 bench_worker.py --dir BASE [--backend POSIX|GDS_MT|GDS]
      [--params JSON] [--file-bytes N] [--files N] [--seconds S] [--concurrency T]
      [--mem DRAM|VRAM] [--gpu N] [--no-direct] [--no-verify] [--start-at EPOCH] [--label TEXT]
      [--trace]

Writes, then reads back, files shaped like SGLang HiCache KV pages (one `_k`/`_v` file of
--file-bytes each, one NIXL transfer per file) in its own run directory
BASE/.kvprov-bench-<host>-<pid>-<time>, keeping --concurrency transfers in flight, and
prints exactly one JSON object on stdout (diagnostics go to stderr; exit 0 when ok, 1 when
not, 2 for unparsable arguments). It removes the files it created and its run directory,
also after an error, Ctrl-C, SIGTERM or SIGHUP, and nothing else. BASE may be on a volume
others write (root runs this): BASE, the run directory and every file are opened without
following a link, the run directory and files relative to their directory's descriptor
(never by path again), so a link planted or swapped in at any time is not written through.

Data: every 4 KiB block of every file is unique (the first 8 bytes of each block carry a
per-run, per-file, per-block stamp; the rest is random), so storage that deduplicates or
compresses (ONTAP does both inline) cannot flatter the figures. With verification on (the
default) each file read back is compared with what was written, in helper threads (numpy
and cudaMemcpy release the GIL), the read buffer slot being reused only once checked.
Two clocks per pass. `engine_seconds` / `engine_gbps` (the headline) run from the first
file's open to the last file's close: what an engine pays for its pages (SGLang's NIXL
connector opens/creates the files, registers them, runs the transfer, deregisters and
closes them), NFS metadata round trips included (on the TCG lab's NFS ~50 ms a file, and
pNFS LAYOUTCOMMIT at close). `seconds` / `gbps` (data only) run from the first submission to
the last completion; open_ms (open and register) / close_ms (deregister and close) give the
per-file metadata latencies. The per-I/O latency is submit -> DONE, and `in_flight` is the
mean number of transfers in flight over the data clock (Little's law: summed latencies /
data seconds). --no-direct measures the page cache on writes: the fsync and
posix_fadvise(DONTNEED) that make the read pass cold run untimed after it.

The worker's own per-file work (open, NIXL registration, stamping a write's buffer, the
transfer handle, its release, deregistration, close: ~0.1-0.3 ms a file on a local disk) is
overlapped with the I/O: one thread, as an engine's, pipelines it -- the next file is opened
and registered before a transfer is started, one file beyond the window is kept armed (slot,
stamp, handle) so a freed transfer slot is refilled at once, and the loop does one piece of
that work between polls of the transfers in flight (run_pass). Otherwise it would sit between
one file's I/O and the next at depth 1: an 18 MiB file moves in 0.38 ms at 50 GB/s, and the
test would measure the worker, not the storage. Each pass reports that work, summed per file
(`overhead_us`, mean, µs), and the rate it alone would cap one submitting thread at
(`overhead_cap_gbps` = file bytes / overhead); --trace adds each file's times (prepared,
armed, submitted, done, closed). On ext4 a write that extends its file completes inside
io_submit (below): nothing is in flight to overlap with then, for fio neither.

Host buffers are anonymous mmap'd memory populated when allocated, as an engine's pinned host
pool is. On a virtio disk the physical layout of the buffer pages changed read GB/s by up to
2x (the block layer merges contiguous pages into fewer requests): buffers faulted in by the
I/O itself, as fio's read buffers are, read at about half the speed.

NIXL 1.5.1 POSIX plugin, from NIXL's source (src/plugins/posix, read in the tree just before
1.5), checked against the 1.5.1 wheel's plugin (its strings, its libaio and liburing) and by
running it (NIXL_LOG_LEVEL=INFO prints "POSIX backend initialized using io queue type: ..."):
- The I/O queue is chosen by use_aio / use_uring / use_posix_aio (mutually exclusive). With
  none of them true -- `{}` or `{"use_aio": "false"}` alike -- the default queue is "AIO", i.e.
  Linux native AIO through libaio (io_submit / io_getevents, bundled in the wheel): use_aio
  false does NOT mean synchronous I/O. use_uring gives io_uring, use_posix_aio glibc's POSIX
  AIO (aio_read/aio_write, which glibc runs in threads).
- One queue per backend engine (kernel queue 256 entries by default) is shared by all of the
  agent's transfers: several outstanding transfers really run concurrently, and polling any
  one handle reaps completions for all. A transfer's descriptors are submitted from the
  caller's thread in transfer(); there is no plugin-side thread.
- Writes go to new, empty files (O_CREAT, no truncate or fallocate), as SGLang's NIXL
  connector creates them, so every write extends its file. On ext4 an extending O_DIRECT AIO
  write completes inside io_submit (the kernel waits for it: IOMAP_DIO_FORCE_WAIT), so one
  submitting thread -- NIXL's, whose transfer() calls io_submit from the caller's thread, and
  fio's alike -- has one write in flight at the device whatever the depth (strace: io_submit
  of an 18 MiB write takes the ~10 ms of the write; in_flight ~1; fio's latency then grows
  with its depth only because it counts the time an I/O waits in fio's own queue). Reads, and
  writes into files already of full size (fio --fallocate=truncate), are asynchronous and
  keep T in flight. (NFS's direct I/O path does not wait inside io_submit, extending or
  not; not measured here.)
- SGLang's HiCache NIXL connector runs one transfer per batch of pages -- the batch's
  `_k`/`_v` files as the descriptors of one transfer -- and polls it to completion before the
  next batch: N files queued at once, then drained. This worker keeps a sliding window of T
  one-file transfers, as fio's --iodepth=T does; the kernel sees the same io_submit calls
  from one thread either way.
- Hence the matching fio job is `--ioengine=libaio --iodepth=T --direct=1 --numjobs=1`, with
  --bs = --filesize = the file size (one I/O per file) and --fallocate=none (fio creates the
  files empty and its writes extend them, as here), and the read pass a separate fio run (a
  read job in the same run makes fio lay the files out beforehand);
  benchmarks/bench_vs_fio.py runs exactly that.
- io_submit can block its caller (above; and pinning 4608 pages for an 18 MiB read): the
  transfer loop below therefore submits one file per sweep and polls the others in between.
- GDS_MT runs each descriptor as one cuFileRead/cuFileWrite on a pool of thread_count
  threads; GDS uses cuFile's batch API. Both take concurrent transfers.

Importable without numpy or NIXL (the controller uses kv_file_bytes and percentiles):
top-level imports are the standard library only.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import errno
import fcntl
import glob
import importlib
import json
import mmap
import os
import platform
import signal
import socket
import stat
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

BLOCK = 4096  # O_DIRECT alignment and the stamping granularity
POLL_S = 0.00005  # idle poll interval of the transfer loop
HANG_GRACE_S = 60  # in-flight I/Os still running this long after a pass's time bound: storage hung
QWEN3_8B_FILE_BYTES = 18 << 20  # kv_file_bytes(36, 256, 8, 128, 2, 1)
TRACE_EVENTS = ("prepared", "armed", "t0", "done", "closed")  # --trace: a file's times, in this order


NOFOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

# The open flags (as fcntl(F_GETFL) reports them) cuFile's cuFileHandleRegister accepts on a
# descriptor: the access mode, O_DIRECT (which GPUDirect Storage needs) and O_LARGEFILE (the
# kernel sets it on every file of a 64-bit process). It refuses the others it checks for,
# O_NOFOLLOW among them ("cuFileHandleRegister error, fd opened with unsupported flags: 180226",
# i.e. O_RDWR | O_DIRECT | O_LARGEFILE | O_NOFOLLOW, CUDA 13.0's libcufile on an H200);
# benchmarks/cufile_flags.py probes each flag on a GPU host and benchmarks/results/ keeps what it
# found. O_CREAT, O_EXCL, O_TRUNC and O_CLOEXEC never show in F_GETFL. Every descriptor the
# worker hands to GDS/GDS_MT carries only these (tests/unit/test_bench_worker_gds_flags.py).
# Python's os.O_LARGEFILE is 0 on 64-bit machines (glibc's), the kernel's value is per architecture.
O_LARGEFILE = os.O_LARGEFILE or {"aarch64": 0o400000, "ppc64le": 0o200000}.get(platform.machine(), 0o100000)
CUFILE_FD_FLAGS = os.O_ACCMODE | os.O_DIRECT | O_LARGEFILE
CUFILE_LOG_ENV = "CUFILE_LOGFILE_PATH"  # where cuFile writes its log (else cufile.json's logging.dir)
OPEN_FLAG_NAMES = ("O_WRONLY", "O_RDWR", "O_APPEND", "O_NONBLOCK", "O_DSYNC", "O_ASYNC", "O_DIRECT",
                   "O_LARGEFILE", "O_DIRECTORY", "O_NOFOLLOW", "O_NOATIME", "O_SYNC", "O_PATH")


class Failure(Exception):
    """An error the operator can act on; its text becomes the one-line `error`."""


def available_memory() -> int | None:
    """MemAvailable of /proc/meminfo, in bytes (None where the kernel does not say)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def require_memory(need: int, slots: int, concurrency: int, available: int | None) -> None:
    """Failure when the buffers (`slots` file-sized ones, populated at once) would take more than
    nine tenths of the host's available memory."""
    if available is not None and need > 0.9 * available:
        raise Failure(f"the test's buffers need {need / 2**30:.2f} GiB of host memory ({slots} file-sized slots at "
                      f"concurrency {concurrency}) and {available / 2**30:.2f} GiB are available: lower "
                      "kvprov_bench_concurrency (or --concurrency)")


def kv_file_bytes(layers: int, page_size: int, kv_heads: int, head_dim: int, dtype_bytes: int,
                  tp: int = 1) -> int:
    """Bytes of one SGLang HiCache `_k` (or `_v`) file with a page_first layout: one page of
    one TP rank's KV heads (kv_heads // tp, at least 1) across all layers."""
    return layers * page_size * max(1, kv_heads // tp) * head_dim * dtype_bytes


def percentiles(values) -> dict:
    """Nearest-rank p50, p90, p99 and the max of `values` (each None when there are none)."""
    ordered = sorted(values)
    if not ordered:
        return dict.fromkeys(("p50", "p90", "p99", "max"))
    n = len(ordered)
    return {f"p{p}": ordered[max(1, -(-p * n // 100)) - 1] for p in (50, 90, 99)} | {"max": ordered[-1]}


def mean_in_flight(latencies_ms, seconds: float) -> float | None:
    """Mean number of I/Os in flight over `seconds` (Little's law): summed latencies / the time."""
    return round(sum(latencies_ms) / 1e3 / seconds, 2) if seconds > 0 and latencies_ms else None


def rounded(pcts: dict) -> dict:
    return {k: None if v is None else round(v, 3) for k, v in pcts.items()}


def nixl_params(text: str) -> dict:
    """--params JSON -> NIXL's string parameters (true/false for booleans, digits for ints)."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise Failure(f"--params is not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise Failure("--params must be a JSON object, e.g. '{\"thread_count\": 32}'")
    out = {}
    for key, value in raw.items():
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, (int, str)):
            out[key] = str(value)
        else:
            raise Failure(f"--params {key}: {value!r} is not a string, integer or boolean")
    return out


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True, help="storage directory (must exist); the run directory goes inside")
    ap.add_argument("--backend", choices=("POSIX", "GDS_MT", "GDS"), default="POSIX")
    ap.add_argument("--params", default="{}", help="the backend's NIXL parameters as a JSON object")
    ap.add_argument("--file-bytes", type=int, default=QWEN3_8B_FILE_BYTES,
                    help="bytes of one file = one I/O, a multiple of 4096 (default: Qwen3-8B page 256 bf16 TP1)")
    ap.add_argument("--files", type=int, default=64, help="most files per pass")
    ap.add_argument("--seconds", type=float, default=60, help="time bound of each pass")
    ap.add_argument("--concurrency", type=int, default=8, help="transfers kept in flight")
    ap.add_argument("--mem", choices=("DRAM", "VRAM"), default="DRAM")
    ap.add_argument("--gpu", type=int, default=0, help="CUDA device of --mem VRAM")
    ap.add_argument("--direct", action=argparse.BooleanOptionalAction, default=True, help="O_DIRECT files")
    ap.add_argument("--verify", action=argparse.BooleanOptionalAction, default=True,
                    help="compare what is read back with what was written")
    ap.add_argument("--start-at", type=float, help="wall-clock epoch to start the I/O at")
    ap.add_argument("--label", default="", help="free text, echoed back")
    ap.add_argument("--trace", action="store_true",
                    help="add each file's times to each pass (trace: [index, prepared, armed, submitted, done, "
                         "closed], microseconds from the pass's start)")
    return ap.parse_args(argv)


def check_args(args: argparse.Namespace) -> None:
    if args.file_bytes <= 0 or args.file_bytes % BLOCK:
        raise Failure(f"--file-bytes {args.file_bytes} must be a positive multiple of {BLOCK} (O_DIRECT)")
    for name in ("files", "concurrency", "seconds"):
        if getattr(args, name) <= 0:
            raise Failure(f"--{name} must be positive")
    if args.mem == "VRAM" and args.backend == "POSIX":
        raise Failure("the POSIX backend moves host memory only: use --mem DRAM, or GDS_MT/GDS for VRAM")
    import resource  # a pass holds about 2 x --concurrency files open at once: room for all, to be safe

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = max(args.files, args.concurrency) + 256
    if soft != resource.RLIM_INFINITY and soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            raise Failure(f"--files {args.files} needs {need} open files, the limit is {hard}: use fewer files")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


# --- CUDA runtime through ctypes (no torch) ---------------------------------------------

def cudart_candidates(major: int | None) -> list[str]:
    names = [f"libcudart.so.{m}" for m in dict.fromkeys(m for m in (major, 13, 12) if m)]
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    patterns = ["/usr/local/cuda*/targets/x86_64-linux/lib", "/usr/local/cuda*/lib64"]
    for entry in sys.path:  # pip-installed CUDA runtimes and NIXL's bundled libraries
        patterns += [os.path.join(entry, *p)
                     for p in (("nvidia", "cu*", "lib"), ("nvidia", "cuda_runtime", "lib"), ("nixl_cu*.libs",))]
    dirs += [d for pattern in patterns for d in sorted(glob.glob(pattern))]
    found = ctypes.util.find_library("cudart")
    paths = names + [os.path.join(d, n) for d in dirs for n in names] + ([found] if found else [])
    return list(dict.fromkeys(paths))


class Cuda:
    H2D, D2H = 1, 2

    def __init__(self, major: int | None, device: int):
        for path in cudart_candidates(major):
            try:
                self.lib = ctypes.CDLL(path)
                break
            except OSError:
                continue
        else:
            raise Failure("--mem VRAM: libcudart.so.13/.12 not found (set LD_LIBRARY_PATH to the CUDA "
                          "toolkit's targets/x86_64-linux/lib)")
        self.path, self.device = path, device
        lib = self.lib
        lib.cudaGetErrorString.restype = ctypes.c_char_p
        lib.cudaSetDevice.argtypes = [ctypes.c_int]
        lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
        lib.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        lib.cudaMemcpy2D.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                                     ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int]
        self.set_device()

    def call(self, name: str, *args) -> None:
        err = getattr(self.lib, name)(*args)
        if err:
            raise Failure(f"CUDA {name} failed on GPU {self.device}: "
                          f"{self.lib.cudaGetErrorString(err).decode()} (error {err}, {self.path})")

    def set_device(self) -> None:  # per thread: the runtime's current device is thread-local
        self.call("cudaSetDevice", self.device)

    def malloc(self, nbytes: int) -> int:
        ptr = ctypes.c_void_p()
        self.call("cudaMalloc", ctypes.byref(ptr), nbytes)
        return ptr.value

    def copy(self, dst: int, src: int, nbytes: int, kind: int) -> None:
        self.call("cudaMemcpy", dst, src, nbytes, kind)

    def scatter_words(self, dst: int, words, pitch: int) -> None:
        """Write the uint64 array `words` to GPU memory, one word every `pitch` bytes."""
        self.call("cudaMemcpy2D", dst, pitch, words.ctypes.data, 8, 8, len(words), self.H2D)


# --- the benchmark -----------------------------------------------------------------------

def import_nixl():
    """(nixl._api -- from the meta package, else a flavour installed alone --, NIXL's exceptions)."""
    errors = []
    for name in ("nixl._api", "nixl_cu13._api", "nixl_cu12._api"):
        try:
            api = importlib.import_module(name)
        except ImportError as exc:
            errors.append(f"{name}: {exc}")
            continue
        bindings = importlib.import_module(api.__name__.replace("._api", "._bindings"))
        return api, tuple(v for v in vars(bindings).values() if isinstance(v, type) and issubclass(v, Exception))
    raise Failure(f"cannot import NIXL with {sys.executable} ({'; '.join(errors)})")


def mount_fstype(major: int, minor: int) -> str | None:
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            fields = line.split()
            if fields[2] == f"{major}:{minor}" and " - " in line:
                return line.split(" - ", 1)[1].split()[0]
    return None


def udev_hint(path: str) -> str:
    """Why cuFile may refuse files here: the udev record of their block device is missing."""
    dev = os.stat(path).st_dev
    major, minor = os.major(dev), os.minor(dev)
    record = f"/run/udev/data/b{major}:{minor}"
    if major == 0 or os.path.exists(record):  # major 0: NFS, tmpfs, overlay (no block device)
        return ""
    fstype = mount_fstype(major, minor) or "ext4"
    return (f"; the udev record {record} of the block device holding {path} is missing (no /run/udev, "
            f"e.g. a container) and cuFile needs it: mount the host's /run/udev, or write it: mkdir -p "
            f"/run/udev/data; printf 'E:ID_FS_USAGE=filesystem\\nE:ID_FS_TYPE={fstype}\\n' > {record}")


def flag_names(flags: int, access: bool = True) -> str:
    """`flags` (as F_GETFL reports them) in the open(2) names, e.g. O_RDWR|O_DIRECT|O_LARGEFILE
    (without the access mode when not `access`)."""
    values = {n: O_LARGEFILE if n == "O_LARGEFILE" else getattr(os, n, 0) for n in OPEN_FLAG_NAMES}
    names = [n for n, v in values.items() if v and flags & v == v]
    if access and flags & os.O_ACCMODE == os.O_RDONLY:
        names.insert(0, "O_RDONLY")
    return "|".join(names)


def cufile_said() -> str:
    """cuFile's last three ERROR lines in its log (CUFILE_LOGFILE_PATH), without their time and
    thread prefix, as "; cuFile says: ..." (else "")."""
    try:
        with open(os.environ[CUFILE_LOG_ENV], errors="replace") as fh:
            lines = [line.split(" ERROR ", 1)[1].strip() for line in fh if " ERROR " in line]
    except (OSError, KeyError):
        return ""
    return f"; cuFile says: {' | '.join(lines[-3:])}" if lines else ""


def cufile_hint(flags: int, run_dir: str) -> str:
    """Why cuFile refused a file: its own ERROR lines, the descriptor's flags it does not accept,
    and a missing udev record of the block device."""
    hint = cufile_said()
    outside = flags & ~CUFILE_FD_FLAGS
    if outside:
        hint += (f"; the descriptor was opened with {flag_names(flags)} and cuFile accepts none of "
                 f"{flag_names(outside, access=False)}")
    hint += udev_hint(run_dir)
    return hint or f"; cuFile's log ({os.environ.get(CUFILE_LOG_ENV) or 'cufile.log'}) says why"


def library_hint() -> str:
    libs = {"libcufile.so.0": ("libcufile.so.0",), "libcudart.so.13/.12": ("libcudart.so.13", "libcudart.so.12")}
    missing = [label for label, names in libs.items() if not any(_loadable(name) for name in names)]
    return (f"; {', '.join(missing)} not loadable: put the CUDA toolkit's targets/x86_64-linux/lib on "
            f"LD_LIBRARY_PATH" if missing else "")


def _loadable(name: str) -> bool:
    try:
        ctypes.CDLL(name)
        return True
    except OSError:
        return False


class Bench:
    def __init__(self, args: argparse.Namespace, params: dict, run_dir: str, run_fd: int, created: list):
        self.args, self.run_dir, self.run_fd, self.created = args, run_dir, run_fd, created
        self.written = {}  # file name -> (st_dev, st_ino) of the file this run created under it
        self.size = args.file_bytes
        self.blocks = self.size // BLOCK
        self.np = importlib.import_module("numpy")
        api, self.nixl_errors = import_nixl()
        flavour = api.__name__.split(".")[0]  # nixl_cu13 / nixl_cu12
        major = int(flavour[len("nixl_cu"):]) if flavour.startswith("nixl_cu") else None
        self.cuda = Cuda(major, args.gpu) if args.mem == "VRAM" else None
        self.devid = args.gpu if self.cuda else 0
        self.agent = api.nixl_agent(f"kvprov-bench-{os.getpid()}",
                                    api.nixl_agent_config(enable_prog_thread=False, backends=[]))
        try:
            self.agent.create_backend(args.backend, params)
        except self.nixl_errors as exc:
            plugins = self.agent.get_plugin_list()
            why = (f"; no {args.backend} plugin among {', '.join(plugins)}" if args.backend not in plugins
                   else library_hint() + cufile_said() if args.backend.startswith("GDS") else "")
            raise Failure(f"NIXL cannot create the {args.backend} backend with {params}: {exc}{why}") from None
        t = args.concurrency + 1  # the window's slots and one for the file armed next
        if not self.cuda:  # populated host memory: more than there is would end in the OOM killer
            require_memory((3 * t - 1) * self.size, 3 * t - 1, args.concurrency, available_memory())
        self.src = self.alloc(t)  # write slots
        self.dst = self.alloc(2 * t - 1)  # read slots: one being checked while the next is read
        rng = self.np.random.default_rng()
        self.base = int(rng.integers(0, 2**63))
        self.block_ids = self.np.arange(self.blocks, dtype=self.np.uint64)
        # Host copy of the random slot contents; for DRAM it is the source buffer itself.
        self.expect = self.src[1] if not self.cuda else self.np.empty(t * self.size, self.np.uint8)
        for slot in range(t):
            self.expect[slot * self.size:(slot + 1) * self.size] = self.np.frombuffer(rng.bytes(self.size),
                                                                                      self.np.uint8)
        if self.cuda:
            self.cuda.copy(self.src[0], self.expect.ctypes.data, t * self.size, Cuda.H2D)
        self.local = {}  # (op, slot) -> NIXL descriptor list of that slot
        for op, (addr, _), slots in (("WRITE", self.src, t), ("READ", self.dst, 2 * t - 1)):
            self.agent.register_memory([(addr, slots * self.size, self.devid, "")], args.mem)
            for s in range(slots):
                self.local[op, s] = self.agent.get_xfer_descs([(addr + s * self.size, self.size, self.devid)], args.mem)
        self.slot_of = {}  # written file index -> source slot
        self.local_check = threading.local()

    def alloc(self, slots: int):
        """(address, host numpy view or None) of `slots` file-sized slots."""
        nbytes = slots * self.size
        if self.cuda:
            return self.cuda.malloc(nbytes), None
        # Page aligned, as O_DIRECT needs; populated now (see the module's docstring).
        buf = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE)
        view = self.np.frombuffer(buf, self.np.uint8)
        return view.ctypes.data, view

    def stamps(self, index: int):
        return self.block_ids + self.np.uint64((self.base + index * self.blocks) % 2**64)

    def stamp(self, slot: int, index: int) -> None:
        """Make file `index` unique: its stamps in the first word of each block of the slot."""
        if self.cuda:
            self.cuda.scatter_words(self.src[0] + slot * self.size, self.stamps(index), BLOCK)
        else:
            words = self.src[1][slot * self.size:(slot + 1) * self.size].view(self.np.uint64)
            words[::BLOCK // 8] = self.stamps(index)

    def check(self, index: int, slot: int) -> bool:
        """Is read slot `slot` what file `index` was written with?"""
        np = self.np
        if self.cuda:
            scratch = getattr(self.local_check, "buf", None)
            if scratch is None:
                self.cuda.set_device()
                scratch = self.local_check.buf = np.empty(self.size, np.uint8)
            self.cuda.copy(scratch.ctypes.data, self.dst[0] + slot * self.size, self.size, Cuda.D2H)
            got = scratch
        else:
            got = self.dst[1][slot * self.size:(slot + 1) * self.size]
        src = self.slot_of[index] * self.size
        want = self.expect[src:src + self.size].reshape(self.blocks, BLOCK).view(np.uint64)
        got = got.reshape(self.blocks, BLOCK).view(np.uint64)
        # Contiguous and into a buffer of this thread's: 2-3x cheaper than comparing got[:, 1:]
        # (strided, a new result array each time), so it takes less of the CPU the I/O needs.
        differs = getattr(self.local_check, "differs", None)
        if differs is None:
            differs = self.local_check.differs = np.empty(got.shape, bool)
        np.not_equal(got, want, out=differs)
        np.not_equal(got[:, 0], self.stamps(index), out=differs[:, 0])  # the stamps, not the slot's
        return not differs.any()

    def open(self, op: str, index: int, name: str) -> int:
        """File `name` of the run directory, relative to its descriptor and never through a link,
        with only the flags cuFile accepts (CUFILE_FD_FLAGS): cuFile refuses O_NOFOLLOW.

        WRITE creates the file with O_CREAT | O_EXCL, which never follows a link (a name that
        exists, a link included, fails with EEXIST), in the run directory this run made 0700, and
        notes the file's identity. READ opens the name with O_PATH | O_NOFOLLOW (a link is opened
        as the link itself), checks it is the very file this run wrote (device and inode), then
        opens that descriptor's file through /proc/self/fd/N -- the kernel's reference to the
        inode, no path walked again -- with the data flags; a link, or another file swapped in for
        the name, is refused before any byte is read. The POSIX path opens its files the same way."""
        path = os.path.join(self.run_dir, name)
        direct = os.O_DIRECT if self.args.direct else 0
        if op == "WRITE":
            self.created.append((self.run_fd, name, path, False))  # before the open: a signal must not orphan it
            try:
                fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | direct, 0o600,
                             dir_fd=self.run_fd)
            except OSError as exc:
                raise Failure(f"cannot open {path}: {exc.strerror}{self.direct_hint()}") from None
            st = os.fstat(fd)
            self.written[name] = (st.st_dev, st.st_ino)
            return fd
        try:
            ref = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.run_fd)
        except OSError as exc:
            raise Failure(f"cannot open {path}: {exc.strerror}") from None
        try:
            st = os.fstat(ref)
            if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != self.written.get(name):
                what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not the file this run wrote"
                raise Failure(f"cannot open {path}: it is {what} (something replaced it in the run directory); "
                              "refusing to read through it")
            return os.open(f"/proc/self/fd/{ref}", os.O_RDONLY | os.O_CLOEXEC | direct)
        except OSError as exc:
            raise Failure(f"cannot open {path} through /proc/self/fd (is /proc mounted?): "
                          f"{exc.strerror}{self.direct_hint()}") from None
        finally:
            os.close(ref)

    def direct_hint(self) -> str:
        return " (does the file system support O_DIRECT? --no-direct turns it off)" if self.args.direct else ""

    def prepare(self, op: str, index: int, name: str) -> dict:
        """Open (WRITE: create) file `index` and register it with NIXL."""
        t0 = time.monotonic()
        fd = self.open(op, index, name)
        backend = self.args.backend
        io = {"index": index, "fd": fd, "path": os.path.join(self.run_dir, name)}
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        try:
            io["file"] = self.agent.register_memory([(0, self.size, fd, "")], "FILE")
        except self.nixl_errors as exc:
            os.close(fd)
            msg = f"{backend} could not register {io['path']} (NIXL: {exc})"
            if backend.startswith("GDS"):
                msg += cufile_hint(flags, self.run_dir)
            raise Failure(msg) from None
        io["prepared"] = time.monotonic()
        io["open_ms"] = (io["prepared"] - t0) * 1e3
        return io

    def arm(self, op: str, io: dict, slot: int) -> None:
        """Give a prepared file a buffer slot (WRITE: stamped with the file's blocks) and its
        NIXL transfer handle: what is left to do is transfer()."""
        t0 = time.monotonic()
        io["slot"] = slot
        if op == "WRITE":
            self.slot_of[io["index"]] = slot
            self.stamp(slot, io["index"])
        try:
            io["handle"] = self.agent.initialize_xfer(op, self.local[op, slot], io["file"].trim(), self.agent.name)
        except self.nixl_errors as exc:
            raise Failure(f"NIXL {self.args.backend} could not start the {op} of {io['path']}: {exc}") from None
        io["armed"] = time.monotonic()
        io["arm_ms"] = (io["armed"] - t0) * 1e3

    def submit(self, op: str, io: dict) -> None:
        try:
            io["t0"] = time.monotonic()
            io["state"] = self.agent.transfer(io["handle"])
        except self.nixl_errors as exc:
            raise Failure(f"NIXL {self.args.backend} could not start the {op} of {io['path']}: {exc}"
                          + full_volume(self.run_dir, self.size)) from None

    def close(self, io: dict) -> None:
        """Deregister and close a prepared file; its latency goes to io["close_ms"]."""
        t0 = time.monotonic()
        try:
            self.agent.deregister_memory(io["file"])
        finally:
            os.close(io["fd"])
            io["fd"] = None
        io["closed"] = time.monotonic()
        io["close_ms"] = (io["closed"] - t0) * 1e3

    def run_pass(self, op: str, names: list[str], checker=None) -> tuple[dict, list[str]]:
        """Keep --concurrency transfers of whole files in flight until all `names` are done or
        --seconds have passed (every file started is waited for: the files done are always the
        first ones); return the pass's figures and the files that read back wrong.

        One thread does all of a file's work, as an engine's does, pipelined so that the I/O
        does not wait for it: a file is opened and registered (prepared), given a buffer slot
        and its transfer handle (armed), transferred, and deregistered and closed; a file's
        transfer is started only once the next file is prepared, and one armed file is kept
        beyond the window, so a freed transfer slot is refilled at once. Between polls of the
        transfers in flight the loop does one piece of that per-file work, so it runs while the
        I/O is in flight (where a transfer completes inside its submission -- ext4's extending
        writes -- there is nothing in flight to overlap with). The engine clock runs from the first open to the last close, the
        data clock from the first submission to the last completion; `overhead_us` is the
        worker's own time per file on that thread (open, register, stamp, transfer handle,
        release, deregister, close: everything but the transfer call and the polls), and
        `overhead_cap_gbps` the rate that overhead alone would cap the pass at."""
        window = self.args.concurrency
        free = list(range((window if op == "WRITE" else 2 * window) + 1))  # +1: the next file's slot
        opened, armed, inflight, done = [], [], [], []
        ios, checking, lat, mismatched = [], {}, [], []
        nxt = 0
        t_open = time.monotonic()
        deadline = t_open + self.args.seconds
        t_start = t_end = None
        try:
            while True:
                progressed = False
                for io in list(inflight):
                    try:
                        state = io["state"] if io["state"] != "PROC" else self.agent.check_xfer_state(io["handle"])
                    except self.nixl_errors as exc:
                        state = f"an error ({exc})"
                    if state == "PROC":
                        continue
                    if state != "DONE":
                        raise Failure(f"NIXL {self.args.backend} {op} of {io['path']} ended in {state}"
                                      + (full_volume(self.run_dir, self.size)
                                         or " (the backend's log on stderr says why)"))
                    t_end = io["done"] = time.monotonic()
                    lat.append((t_end - io["t0"]) * 1e3)
                    self.agent.release_xfer_handle(io.pop("handle"))
                    inflight.remove(io)
                    done.append(io)
                    if checker:
                        checking[checker.submit(self.check, io["index"], io["slot"])] = io
                    else:
                        free.append(io["slot"])
                    io["reap_ms"] = (time.monotonic() - t_end) * 1e3
                    progressed = True
                for future in [f for f in checking if f.done()]:
                    io = checking.pop(future)
                    if not future.result():
                        mismatched.append(io["path"])
                    free.append(io["slot"])
                    progressed = True
                now = time.monotonic()
                more = nxt < len(names) and now < deadline  # files still to prepare
                # One submission per sweep: a submission can block (see the module's docstring),
                # and the I/Os already in flight must not be charged for the time it takes. A file
                # is submitted once the next one is prepared.
                if (armed and len(inflight) < window and now < deadline
                        and (len(armed) + len(opened) >= 2 or not more)):
                    io = armed.pop(0)
                    self.submit(op, io)
                    t_start = io["t0"] if t_start is None else t_start
                    inflight.append(io)
                    continue
                # Else one piece of per-file work: arm, prepare, or close a finished file (before
                # preparing another once more than the window's worth are done but open, so that
                # closes are spread over the pass, also where each I/O completes inside io_submit).
                staged = len(armed) + len(opened)
                if opened and free and len(armed) < window - len(inflight) + 1 and now < deadline:
                    io = opened.pop(0)
                    self.arm(op, io, free.pop())
                    armed.append(io)
                elif len(done) > window:
                    self.close(done.pop(0))
                elif more and staged < window - len(inflight) + 2:
                    io = self.prepare(op, nxt, names[nxt])
                    ios.append(io)
                    opened.append(io)
                    nxt += 1
                elif done:
                    self.close(done.pop(0))
                elif not inflight and not checking and (not armed or now >= deadline):
                    break
                elif inflight and now > deadline + HANG_GRACE_S:
                    raise Failure(f"{len(inflight)} {op}s of {self.args.backend} still in flight {HANG_GRACE_S} s "
                                  f"after the pass's time bound: the storage does not answer (hung mount?)")
                elif not progressed:
                    time.sleep(POLL_S)
        finally:
            for io in ios:  # after an error, or files prepared but not started before the deadline
                if io["fd"] is not None:
                    try:
                        if "handle" in io:
                            self.agent.release_xfer_handle(io.pop("handle"))
                        self.close(io)
                    except self.nixl_errors:  # a transfer still in flight after an error: the error is reported
                        pass
        engine = time.monotonic() - t_open
        moved = [io for io in ios if "done" in io]
        seconds = t_end - t_start if moved else 0.0
        nbytes = len(moved) * self.size
        overhead = [sum(io.get(k, 0.0) for k in ("open_ms", "arm_ms", "reap_ms", "close_ms")) * 1e3 for io in moved]
        mean_us = sum(overhead) / len(overhead) if overhead else None
        stats = {"files": len(moved), "bytes": nbytes, "seconds": round(seconds, 6),
                 "gbps": round(nbytes / seconds / 1e9, 4) if seconds > 0 else None,
                 "lat_ms": rounded(percentiles(lat)), "in_flight": mean_in_flight(lat, seconds),
                 "engine_seconds": round(engine, 6), "engine_gbps": round(nbytes / engine / 1e9, 4),
                 "open_ms": rounded(percentiles([io["open_ms"] for io in ios])),
                 "close_ms": rounded(percentiles([io["close_ms"] for io in ios if "close_ms" in io])),
                 "overhead_us": None if mean_us is None else round(mean_us, 1),
                 "overhead_cap_gbps": float(f"{self.size / mean_us / 1e3:.3g}") if mean_us else None}
        if self.args.trace:
            stats["trace"] = [[io["index"]] + [None if k not in io else round((io[k] - t_open) * 1e6)
                                               for k in TRACE_EVENTS] for io in ios]
        return stats, mismatched

    def settle(self, names: list[str]) -> None:
        """Untimed, after the write pass: flush and drop cached pages so reads are cold."""
        for name in names:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.run_fd)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def pass_line(op: str, stats: dict) -> str:
    """One pass's figures for stderr, with the worker's own per-file overhead and the rate it caps."""
    return (f"bench: {op} {stats['files']} files, engine clock {stats['engine_gbps']} GB/s, data {stats['gbps']} GB/s, "
            f"{stats['in_flight']} in flight; the worker's own work {stats['overhead_us']} us a file "
            f"(caps it at {stats['overhead_cap_gbps']} GB/s)")


def file_name(index: int) -> str:
    """Page index//2, `_k` then `_v`, as HiCache names a page_first page's two files."""
    return f"{index // 2:06d}_{'kv'[index % 2]}"


def full_volume(path: str, need: int) -> str:
    """Why a write failed when the volume has no room for a file (else "")."""
    try:
        st = os.statvfs(path)
    except OSError:
        return ""
    free = st.f_bavail * st.f_frsize
    return (f": No space left on device (the volume has {free} bytes free, a file needs {need}); free space on it "
            "or lower kvprov_bench_files") if free < need else ""


def open_dir(path: str, what: str, parent: int | None = None) -> int:
    """A directory opened without following a link (the open itself refuses one: no check that
    a link could be swapped in after); relative to `parent` when given."""
    stripped = path.rstrip("/") or "/"  # a trailing slash would make the open follow a link
    try:
        return os.open(stripped if parent is None else os.path.basename(stripped), NOFOLLOW_DIR, dir_fd=parent)
    except FileNotFoundError:
        raise Failure(f"{what} {path} does not exist") from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(stripped):  # only to word the error
            try:
                target = os.readlink(stripped)
            except OSError:
                target = "?"
            raise Failure(f"{what} {path} is a symbolic link (to {target}): refusing to write through it; "
                          "remove it") from None
        raise Failure(f"cannot open the {what} {path}: {exc.strerror}") from None


def run(args: argparse.Namespace, result: dict, created: list) -> None:
    params = nixl_params(args.params)
    result["params"] = params
    check_args(args)
    base_fd = open_dir(args.dir, "storage directory")  # root on a shared volume never follows a planted link
    run_name = os.path.basename(result["run_dir"])
    try:
        os.mkdir(run_name, 0o700, dir_fd=base_fd)
    except OSError as exc:
        raise Failure(f"cannot create the run directory {result['run_dir']}: {exc.strerror}") from None
    created.append((base_fd, run_name, result["run_dir"], True))
    run_fd = open_dir(result["run_dir"], "run directory", base_fd)
    if os.fstat(run_fd).st_uid != os.geteuid():  # another user's directory swapped in for the new one
        raise Failure(f"the run directory {result['run_dir']} was replaced by another user's: refusing to write in it")
    bench = Bench(args, params, result["run_dir"], run_fd, created)
    if args.start_at is not None and args.start_at > time.time():
        time.sleep(args.start_at - time.time())
    result["start"] = time.time()
    names = [file_name(i) for i in range(max(args.files, args.concurrency))]
    print(f"bench: {args.backend} {args.mem} {params} {len(names)} x {args.file_bytes} B files, "
          f"{args.concurrency} in flight, in {result['run_dir']}", file=sys.stderr)
    result["write"], _ = bench.run_pass("WRITE", names)
    print(pass_line("write", result["write"]), file=sys.stderr)
    names = names[:result["write"]["files"]]
    bench.settle(names)
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        result["read"], mismatched = bench.run_pass("READ", names, pool if args.verify else None)
    print(pass_line("read", result["read"]), file=sys.stderr)
    if args.verify:
        result["verified"] = not mismatched
        if mismatched:
            raise Failure(f"{len(mismatched)} of {result['read']['files']} files read back differ from what "
                          f"was written (first: {mismatched[0]})")


def cleanup(created: list) -> bool:
    """Remove what this run created (its files, then its run directory), each relative to the
    descriptor of the directory it was made in (created: (dir_fd, name, path, is_dir)); True
    when all is gone. The descriptors close when the worker exits."""
    ok = True
    for dir_fd, name, path, is_dir in reversed(created):
        try:
            if is_dir:
                os.rmdir(name, dir_fd=dir_fd)
            else:
                os.unlink(name, dir_fd=dir_fd)
        except FileNotFoundError:
            pass
        except OSError as exc:
            print(f"bench: cannot remove {path}: {exc}", file=sys.stderr)
            ok = False
    return ok


def on_signal(signum, frame):
    raise Failure(f"stopped by {signal.Signals(signum).name}")


def main(argv=None) -> int:
    args = parse_args(argv)
    stdout = os.dup(1)
    os.dup2(2, 1)  # whatever NIXL or CUDA print goes to stderr; stdout carries the JSON alone
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    host = socket.gethostname()
    result = {"ok": False, "error": None, "host": host, "label": args.label, "backend": args.backend,
              "mem": args.mem, "params": None, "file_bytes": args.file_bytes, "concurrency": args.concurrency,
              "direct": args.direct, "start": None, "write": None, "read": None, "verified": None,
              "compat_mode": (not os.path.exists("/proc/driver/nvidia-fs/version")
                              if args.backend.startswith("GDS") else None),
              "run_dir": os.path.join(args.dir, f".kvprov-bench-{host}-{os.getpid()}-{int(time.time())}"),
              "cleaned": False}
    created: list[tuple[int, str, str, bool]] = []
    own_log = None
    if args.backend.startswith("GDS") and not os.environ.get(CUFILE_LOG_ENV):
        # cuFile's log, kept until the run ends so that a refused file's reason can be quoted
        fd, own_log = tempfile.mkstemp(prefix="kvprov-bench-cufile-", suffix=".log")
        os.close(fd)
        os.environ[CUFILE_LOG_ENV] = own_log
    try:
        run(args, result, created)
        result["ok"] = True
    except Failure as exc:
        result["error"] = str(exc)
    except KeyboardInterrupt:
        result["error"] = "interrupted"
    except Exception as exc:  # noqa: BLE001 -- an unforeseen error still yields the JSON report
        result["error"] = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    finally:
        result["cleaned"] = cleanup(created)
        if own_log:
            os.unlink(own_log)
            del os.environ[CUFILE_LOG_ENV]
    if result["error"]:
        print(f"bench: {result['error']}", file=sys.stderr)
    sys.stdout.flush()
    os.dup2(stdout, 1)
    os.close(stdout)
    os.write(1, (json.dumps(result) + "\n").encode())
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    # Skip interpreter teardown: NIXL's and CUDA's destructors at exit add nothing to a
    # finished report and must not be able to change its exit code.
    os._exit(code)
