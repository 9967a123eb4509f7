#!/usr/bin/env python3
"""Which open flags cuFile's cuFileHandleRegister accepts on a descriptor (prints a table; not
a test). Runs on a GPU host with libcufile: opens a file of --dir with each set of flags, hands
the descriptor to cuFileHandleRegister through ctypes (no NIXL), and prints the flags as
fcntl(F_GETFL) reports them, cuFile's answer and the ERROR line of its log. The worker's own
opens (WRITE: O_CREAT|O_EXCL; READ: O_PATH|O_NOFOLLOW, then /proc/self/fd/N) are among the
rows, and each row says whether kvprov/bench_worker.py's CUFILE_FD_FLAGS table admits it, so a
table that disagrees with cuFile shows at once (exit 1).

On the device machine (H200, CUDA 13):

  export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib
  python3 benchmarks/cufile_flags.py --dir /var/tmp/kvprov-flags --fix-udev --json $OUT/cufile-flags.json

Removes the file and --dir it creates; a udev record it wrote stays (see gpu_nixl.py).
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from gpu_nixl import fix_udev, udev_record  # noqa: E402

from kvprov import bench_worker as bw  # noqa: E402

O_RW_DIRECT = os.O_RDWR | os.O_DIRECT
PROBES = [  # (row, how the descriptor is opened)
    ("O_RDWR|O_DIRECT", O_RW_DIRECT),
    ("O_RDONLY|O_DIRECT", os.O_RDONLY | os.O_DIRECT),
    ("O_WRONLY|O_DIRECT", os.O_WRONLY | os.O_DIRECT),
    ("O_RDWR (no O_DIRECT)", os.O_RDWR),
    ("+O_NOFOLLOW", O_RW_DIRECT | os.O_NOFOLLOW),
    ("+O_APPEND", O_RW_DIRECT | os.O_APPEND),
    ("+O_SYNC", O_RW_DIRECT | os.O_SYNC),
    ("+O_DSYNC", O_RW_DIRECT | os.O_DSYNC),
    ("+O_NOATIME", O_RW_DIRECT | os.O_NOATIME),
    ("+O_NONBLOCK", O_RW_DIRECT | os.O_NONBLOCK),
    ("worker WRITE: O_RDWR|O_CREAT|O_EXCL|O_DIRECT", "create"),
    ("worker READ: O_PATH|O_NOFOLLOW, /proc/self/fd/N O_RDONLY|O_DIRECT", "reopen"),
]


class Error(ctypes.Structure):
    _fields_ = [("err", ctypes.c_int), ("cu_err", ctypes.c_int)]


class Handle(ctypes.Union):
    _fields_ = [("fd", ctypes.c_int), ("handle", ctypes.c_void_p)]


class Descr(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("handle", Handle), ("fs_ops", ctypes.c_void_p)]


def open_probe(directory: str, how) -> int:
    name = os.path.join(directory, "probe")
    if how == "create":
        if os.path.exists(name):
            os.unlink(name)
        return os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_DIRECT, 0o600)
    if how == "reopen":
        ref = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            return os.open(f"/proc/self/fd/{ref}", os.O_RDONLY | os.O_CLOEXEC | os.O_DIRECT)
        finally:
            os.close(ref)
    return os.open(name, how | os.O_CLOEXEC)


def new_errors(log: str, seen: int) -> tuple[list[str], int]:
    lines = Path(log).read_text(errors="replace").splitlines()
    return [line.strip() for line in lines[seen:] if "ERROR" in line], len(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True, help="a directory on a local block-device file system")
    ap.add_argument("--fix-udev", action="store_true", help="write cuFile's missing udev record (gpu_nixl.py)")
    ap.add_argument("--json", help="write the table here too")
    ap.add_argument("--commit", help="the commit measured, for the record")
    ap.add_argument("--library", default="libcufile.so.0", help="the cuFile library (default: libcufile.so.0 "
                    "on the loader's path; CI hands a labelled stand-in: tests/unit/test_benchmarks_smallest.py)")
    args = ap.parse_args()
    log = tempfile.mkstemp(prefix="cufile-flags-", suffix=".log")[1]
    os.environ[bw.CUFILE_LOG_ENV] = log  # before libcufile reads its configuration
    try:
        lib = ctypes.CDLL(args.library)
    except OSError as e:
        os.unlink(log)
        print(f"cannot load {args.library}: {e} (a GPU host with CUDA: set LD_LIBRARY_PATH to CUDA's "
              "targets/x86_64-linux/lib)", file=sys.stderr)
        return 2
    created = not os.path.isdir(args.dir)
    os.makedirs(args.dir, exist_ok=True)
    notes = []
    if args.fix_udev and not os.path.exists(udev_record(args.dir)):
        notes.append(fix_udev(args.dir))
    lib.cuFileDriverOpen.restype = Error
    lib.cuFileHandleRegister.restype = Error
    lib.cuFileHandleRegister.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(Descr)]
    lib.cuFileHandleDeregister.argtypes = [ctypes.c_void_p]
    opened = lib.cuFileDriverOpen()
    rows, seen = [], 0
    try:
        if opened.err:
            raise SystemExit(f"cuFileDriverOpen failed: {opened.err} (cuda {opened.cu_err}); {new_errors(log, 0)[0]}")
        with open(os.path.join(args.dir, "probe"), "wb") as fh:
            fh.write(os.urandom(1 << 20))
        for row, how in PROBES:
            fd = open_probe(args.dir, how)
            try:
                flags = fcntl.fcntl(fd, fcntl.F_GETFL)
                handle = ctypes.c_void_p()
                res = lib.cuFileHandleRegister(ctypes.byref(handle), ctypes.byref(Descr(1, Handle(fd=fd), None)))
                if not res.err:
                    lib.cuFileHandleDeregister(handle)
            finally:
                os.close(fd)
            errors, seen = new_errors(log, seen)
            admitted = not flags & ~bw.CUFILE_FD_FLAGS
            rows.append({"row": row, "f_getfl": flags, "flags": bw.flag_names(flags), "cufile_err": res.err,
                         "accepted": not res.err, "table_admits": admitted, "log": errors})
    finally:
        Path(args.dir, "probe").unlink(missing_ok=True)
        if created:
            os.rmdir(args.dir)
        os.unlink(log)
    for note in notes:
        print(note)
    print(f"{'how the descriptor was opened':66} {'F_GETFL':36} {'cuFile':>7}  table")
    for r in rows:
        print(f"{r['row']:66} {r['flags']:36} {'ok' if r['accepted'] else r['cufile_err']:>7}  "
              f"{'admits' if r['table_admits'] else 'refuses'}" + (f"\n    {r['log'][-1]}" if r["log"] else ""))
    # The table may be stricter than cuFile (it lists what the worker needs), never looser.
    wrong = [r["row"] for r in rows if r["table_admits"] and not r["accepted"]]
    worker = [r["row"] for r in rows if r["row"].startswith("worker") and not r["accepted"]]
    for what, bad in (("the table admits flags cuFile refuses", wrong), ("cuFile refuses the worker's opens", worker)):
        if bad:
            print(f"{what}: {', '.join(bad)}")
    if args.json:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader", "-i", "0"],
                             capture_output=True, text=True, check=False).stdout.strip() if shutil.which("nvidia-smi") else None
        Path(args.json).write_text(json.dumps({"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                               "commit": args.commit, "gpu": smi, "notes": notes,
                                               "cufile_fd_flags": bw.CUFILE_FD_FLAGS, "rows": rows}, indent=2))
    return 1 if wrong or worker else 0


if __name__ == "__main__":
    sys.exit(main())
