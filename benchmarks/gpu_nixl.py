#!/usr/bin/env python3
"""GPU path of the KV-page throughput test, through the acceptance test's worker (prints
figures; not a test).

Runs kvprov/bench_worker.py -- NIXL GDS_MT from GPU memory, then NIXL POSIX from DRAM --
on --dir for each --concurrency, then fio (libaio, same file size, I/O size and depth; see
benchmarks/bench_vs_fio.py) or, without fio, T parallel dd streams of one O_DIRECT I/O per
file, and prints write/read GB/s, latencies, whether cuFile ran in compat mode, and the
worker's error when GDS cannot register files. Files: Qwen3-8B page 256 bf16 TP1 `_k`
files (18 MiB) unless --file-bytes.

With --fix-udev, a GDS run that fails while the udev record cuFile reads for the disk under
--dir is missing (machines and containers without /run/udev) is reported, then the record
is written and the run repeated: that is the first line of the report.

On the device machine (H200, CUDA 13, .wheels = nixl-cu13 cp312 + nixl, carried):

  python3 -m pip install -q --no-deps --break-system-packages .wheels/*.whl
  export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib
  python3 benchmarks/gpu_nixl.py --dir /var/tmp/kvprov-bench --files 64 --concurrency 8,32 \\
      --threads 32 --fix-udev --json $OUT/gpu-h200.json

Removes only the files it wrote (the worker's run directories, its dd files) and --dir if it
created it; a udev record it wrote stays (it describes the disk, like udev's own).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKER = ROOT / "kvprov" / "bench_worker.py"
FILE_BYTES = 18 << 20  # kv_file_bytes(36, 256, 8, 128, 2, 1): Qwen3-8B, page 256, bf16, TP1


def udev_record(directory: str) -> str:
    dev = os.stat(directory).st_dev
    return f"/run/udev/data/b{os.major(dev)}:{os.minor(dev)}"


def fix_udev(directory: str) -> str:
    record = udev_record(directory)
    fstype = subprocess.run(["findmnt", "-no", "FSTYPE", "--target", directory], capture_output=True,
                            text=True, check=False).stdout.strip() or "ext4"
    os.makedirs(os.path.dirname(record), exist_ok=True)
    with open(record, "w") as fh:
        fh.write(f"E:ID_FS_USAGE=filesystem\nE:ID_FS_TYPE={fstype}\n")
    return f"wrote {record} (ID_FS_TYPE={fstype})"


def worker(args, backend: str, mem: str, params: dict, depth: int) -> dict:
    cmd = [args.python, str(WORKER), "--dir", args.dir, "--backend", backend, "--mem", mem, "--gpu", str(args.gpu),
           "--params", json.dumps(params), "--file-bytes", str(args.file_bytes), "--files", str(args.files),
           "--concurrency", str(depth), "--label", f"{backend} {mem} depth {depth}"]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=900)
    out = json.loads(res.stdout) if res.stdout.strip() else {"ok": False, "error": f"no JSON (exit {res.returncode})"}
    if not out["ok"]:
        out["stderr_tail"] = res.stderr[-4000:]
    return out


def dd_streams(directory: str, size: int, files: int, depth: int) -> dict:
    """`depth` parallel dd streams, one O_DIRECT I/O of `size` per file, write then read."""
    run_dir = Path(directory) / f".kvprov-dd-{os.getpid()}"
    run_dir.mkdir()
    try:
        figures = {}
        for op, fmt in (("write", "dd if=/dev/zero of={f} bs={bs} count=1 oflag=direct status=none"),
                        ("read", "dd if={f} of=/dev/null bs={bs} iflag=direct status=none")):
            scripts = ["; ".join(fmt.format(f=run_dir / f"dd-{i:05d}", bs=size) for i in range(s, files, depth))
                       for s in range(depth)]
            t0 = time.monotonic()
            procs = [subprocess.Popen(["sh", "-ec", script]) for script in scripts]
            if any(p.wait() for p in procs):
                raise SystemExit(f"dd {op} failed")
            seconds = time.monotonic() - t0
            figures[op] = {"bytes": size * files, "seconds": seconds, "gbps": size * files / seconds / 1e9}
        return figures
    finally:
        for i in range(files):
            (run_dir / f"dd-{i:05d}").unlink(missing_ok=True)
        run_dir.rmdir()


def baseline(args, depth: int) -> dict:
    if shutil.which("fio"):
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from bench_vs_fio import fio_figures, fio_script

        res = subprocess.run(["sh", "-c", fio_script(args.dir, "libaio", depth, args.file_bytes, args.files, 600)],
                             capture_output=True, text=True, check=False, timeout=900)
        if res.returncode:
            raise SystemExit(f"fio failed: {res.stderr[-2000:]}")
        return {"tool": f"fio libaio iodepth={depth}", **fio_figures(res.stdout)}
    return {"tool": f"dd x{depth} streams", **dd_streams(args.dir, args.file_bytes, args.files, depth)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True, help="a directory on a local block-device file system")
    ap.add_argument("--files", type=int, default=64)
    ap.add_argument("--file-bytes", type=int, default=FILE_BYTES)
    ap.add_argument("--concurrency", default="8,32", help="comma-separated transfers in flight")
    ap.add_argument("--threads", type=int, default=32, help="GDS_MT thread_count")
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--python", default=sys.executable, help="python with nixl and numpy")
    ap.add_argument("--fix-udev", action="store_true", help="write cuFile's missing udev record (see above)")
    ap.add_argument("--no-gpu", action="store_true",
                    help="leave out the GDS runs: the POSIX path and the baseline only (a machine without a GPU; "
                         "CI runs this form)")
    ap.add_argument("--json", help="write the figures here too")
    ap.add_argument("--commit", help="the commit measured (default: git rev-parse HEAD of this checkout)")
    args = ap.parse_args()
    depths = [int(d) for d in args.concurrency.split(",")]
    smi = ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader", "-i", str(args.gpu)]
    commit = args.commit or subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                                           text=True, check=False).stdout.strip() or None
    report = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": commit,
              "gpu": subprocess.run(smi, capture_output=True, text=True, check=False).stdout.strip()
              if shutil.which("nvidia-smi") else "no nvidia-smi",
              "dir": args.dir, "file_bytes": args.file_bytes, "files": args.files, "notes": [], "runs": [],
              "baseline": []}
    created = not os.path.isdir(args.dir)
    os.makedirs(args.dir, exist_ok=True)
    try:
        for depth in depths if not args.no_gpu else []:
            run = worker(args, "GDS_MT", "VRAM", {"thread_count": args.threads}, depth)
            if not run["ok"] and args.fix_udev and not os.path.exists(udev_record(args.dir)):
                report["udev_failure"] = run
                report["notes"].append(f"without the udev record: {run['error']}")
                report["notes"].append(fix_udev(args.dir))
                run = worker(args, "GDS_MT", "VRAM", {"thread_count": args.threads}, depth)
            report["runs"].append(run)
        for depth in depths:
            report["runs"].append(worker(args, "POSIX", "DRAM", {}, depth))
        for depth in depths:
            report["baseline"].append({"concurrency": depth, **baseline(args, depth)})
    finally:
        if created:
            os.rmdir(args.dir)
    compat = next((r["compat_mode"] for r in report["runs"] if r.get("compat_mode") is not None), None)
    if compat is not None:
        report["notes"].append("no nvidia-fs driver: cuFile runs in compat mode (POSIX I/O inside cuFile)" if compat
                               else "nvidia-fs driver loaded: cuFile uses GPUDirect Storage")
    elif args.no_gpu:
        report["notes"].append("--no-gpu: no GDS run")
    print(f"{report['date']}, commit {report['commit']}, {report['gpu']}; {args.files} files x {args.file_bytes} B "
          f"in {args.dir}")
    print("\n".join(report["notes"]))
    print(f"{'path':32} {'depth':>5} {'write GB/s':>10} {'read GB/s':>10} {'p50 ms w/r':>14}  verified")
    for r in report["runs"]:
        if not r["ok"]:
            print(f"{r.get('label', '?'):32} failed: {r['error']}")
            continue
        lat = f"{r['write']['lat_ms']['p50']:.1f}/{r['read']['lat_ms']['p50']:.1f}"
        print(f"{r['backend'] + ' ' + r['mem']:32} {r['concurrency']:>5} {r['write']['gbps']:10.2f} "
              f"{r['read']['gbps']:10.2f} {lat:>14}  {r['verified']}")
    for b in report["baseline"]:
        print(f"{b['tool']:32} {b['concurrency']:>5} {b['write']['gbps']:10.2f} {b['read']['gbps']:10.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0 if all(r["ok"] for r in report["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
