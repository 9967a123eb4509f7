#!/usr/bin/env python3
"""The acceptance test's worker beside fio, same directory and same I/O (prints figures; not a test).

For each --concurrency T: kvprov/bench_worker.py (NIXL POSIX from DRAM) writes then reads
--files files of --file-bytes, T transfers in flight, one file per I/O; then fio does the
same I/O with the engine NIXL's POSIX plugin really uses (see the worker's docstring): one
job, `--ioengine=libaio --iodepth=T --direct=1 --bs=B --filesize=B --nrfiles=N
--fallocate=truncate` (io_uring / posixaio when --params asks for
use_uring / use_posix_aio), a write run then a read run of the same files. Prints write and
read GB/s of both, the ratios worker/fio (target >= 0.9) and median latencies. Runs alternate
which one goes first; medians of --repeat runs are compared. fio's read buffers are faulted in
by the reads themselves, the worker's are populated beforehand (as a pinned pool is), which
on some disks makes fio's reads slower (a read ratio above 1 is no bug); worker latencies are
submit -> done of each transfer, fio's include the time an I/O waits in fio's own queue.

  python3 benchmarks/bench_vs_fio.py --dir /var/tmp/kvb --python /path/to/venv/bin/python3
  python3 benchmarks/bench_vs_fio.py --dir /mnt/kvcache/kvprov \\
      --ssh "ssh -p 2221 -i /var/lib/kvprov/lab/id_ed25519 -o StrictHostKeyChecking=no root@127.0.0.1"

--ssh runs both on that host: the worker is sent on the ssh command's stdin to the remote
python (`--python`, default /opt/kvprov/nixl/bin/python3 there; locally, this python).
Needs fio where the I/O runs. Each side writes only inside a directory of its own under
--dir and removes only its own files and that directory.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKER = ROOT / "kvprov" / "bench_worker.py"
TARGET = 0.9
SPLIT = "--- kvprov: fio read run ---"


def fio_engine(params: dict) -> str:
    true = ("1", "true", "yes", "on", "y", "enable")
    if str(params.get("use_uring", "")).lower() in true:
        return "io_uring"
    if str(params.get("use_posix_aio", "")).lower() in true:
        return "posixaio"
    return "libaio"  # use_aio true, false or absent: NIXL's default queue is Linux AIO


def fio_script(directory: str, engine: str, depth: int, size: int, files: int, seconds: float) -> str:
    """sh script: fio's write then read job in a fresh directory; removes its files and that directory."""
    run_dir = shlex.quote(f"{directory.rstrip('/')}/.kvprov-fio-{os.getpid()}-{int(time.time())}")
    common = (f"--output-format=json --directory=\"$d\" --filename_format='kvprov-fio.$filenum' "
              f"--ioengine={engine} --iodepth={depth} --direct=1 --bs={size} --filesize={size} "
              f"--nrfiles={files} --size={size * files} --lat_percentiles=1 "
              f"--runtime={max(1, round(seconds))}")
    return (f"d={run_dir}\n"
            "mkdir \"$d\" || exit 1\n"
            "trap 'rm -f \"$d\"/kvprov-fio.*; rmdir \"$d\"' EXIT\n"
            "trap 'exit 1' HUP INT TERM\n"
            # Two runs, not two jobs of one: fio would lay out the read job's files before the
            # write job runs, and the writes would then overwrite allocated blocks. The write
            # run makes empty files (ftruncate) before its clock, as the worker opens its files
            # before its clock; the timed writes allocate the blocks, in both.
            f"fio {common} --name=write --rw=write --fallocate=truncate || exit 1\n"
            f"echo {SPLIT}\n"
            f"fio {common} --name=read --rw=read\n")


def fio_figures(out: str) -> dict:
    figures = {}
    for op, text in zip(("write", "read"), out.split(SPLIT), strict=True):
        data = json.loads(text[text.index("{"):])["jobs"][0][op]
        pct = data["lat_ns"].get("percentile", {})
        figures[op] = {"bytes": data["io_bytes"], "seconds": data["runtime"] / 1e3,
                       "gbps": data["io_bytes"] / (data["runtime"] / 1e3) / 1e9 if data["runtime"] else None,
                       "lat_ms": {"p50": pct.get("50.000000", 0) / 1e6, "p99": pct.get("99.000000", 0) / 1e6}}
    return figures


class Host:
    """Runs sh scripts here or, with --ssh, on the remote host."""

    def __init__(self, ssh: str | None, timeout: float):
        self.prefix = shlex.split(ssh) if ssh else ["sh", "-c"]
        self.timeout = timeout

    def sh(self, script: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([*self.prefix, script], input=stdin, capture_output=True, text=True, check=False,
                              timeout=self.timeout)


def run_worker(host: Host, args: argparse.Namespace, depth: int) -> dict:
    cmd = [args.python, "-", "--dir", args.dir, "--backend", "POSIX", "--params", args.params,
           "--file-bytes", str(args.file_bytes), "--files", str(args.files), "--seconds", str(args.seconds),
           "--concurrency", str(depth), "--label", "bench_vs_fio"]
    res = host.sh(" ".join(shlex.quote(c) for c in cmd), stdin=WORKER.read_text())
    try:
        out = json.loads(res.stdout)
    except ValueError:
        raise SystemExit(f"worker printed no JSON (exit {res.returncode}):\n{res.stderr[-3000:]}") from None
    if not out["ok"]:
        raise SystemExit(f"worker failed: {out['error']}")
    return out


def run_fio(host: Host, args: argparse.Namespace, engine: str, depth: int) -> dict:
    res = host.sh(fio_script(args.dir, engine, depth, args.file_bytes, args.files, args.seconds))
    if res.returncode != 0:
        raise SystemExit(f"fio failed (exit {res.returncode}):\n{res.stderr[-3000:]}{res.stdout[-3000:]}")
    return fio_figures(res.stdout)


def ratio(a, b):
    return a / b if a and b else None


def fmt(value, spec=".2f") -> str:
    return "-" if value is None else format(value, spec)


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from kvprov.bench_worker import kv_file_bytes

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True, help="directory to test (must exist where the I/O runs)")
    ap.add_argument("--ssh", help="ssh command line reaching the host to test (default: this machine)")
    ap.add_argument("--python", help="python with NIXL and numpy (default: this python, or "
                                     "/opt/kvprov/nixl/bin/python3 with --ssh)")
    ap.add_argument("--params", default="{}", help="NIXL POSIX parameters, JSON (default {}: libaio)")
    ap.add_argument("--file-bytes", type=int, default=kv_file_bytes(36, 256, 8, 128, 2, 1),
                    help="bytes per file and per I/O (default: Qwen3-8B page 256 bf16 TP1, 18 MiB)")
    ap.add_argument("--files", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=60, help="time bound of each pass")
    ap.add_argument("--concurrency", default="1,8", help="comma-separated I/O depths")
    ap.add_argument("--repeat", type=int, default=3, help="runs per depth (medians are compared)")
    ap.add_argument("--json", help="write all figures here too")
    args = ap.parse_args()
    args.python = args.python or ("/opt/kvprov/nixl/bin/python3" if args.ssh else sys.executable)
    engine = fio_engine(json.loads(args.params))
    host = Host(args.ssh, timeout=4 * args.seconds + 300)
    runs, summary = [], []
    print(f"{args.dir} on {args.ssh or 'this machine'}: {args.files} files x {args.file_bytes} B, one I/O per file, "
          f"O_DIRECT; NIXL POSIX {args.params} vs fio {engine}")
    print(f"{'depth':>5} {'run':>6} | {'write GB/s':>21} {'ratio':>6} | {'read GB/s':>21} {'ratio':>6} | "
          f"{'p50 ms w/r worker':>18} {'fio':>12}")
    print(f"{'':>5} {'':>6} | {'worker':>10} {'fio':>10} {'':>6} | {'worker':>10} {'fio':>10}")
    for depth in (int(d) for d in args.concurrency.split(",")):
        mine = []
        for i in range(args.repeat):
            if i % 2:  # alternate which one runs first: the disk's and memory's state drift between runs
                fio = run_fio(host, args, engine, depth)
                worker = run_worker(host, args, depth)
            else:
                worker = run_worker(host, args, depth)
                fio = run_fio(host, args, engine, depth)
            row = {"concurrency": depth, "worker": worker, "fio": fio,
                   "ratio": {op: ratio(worker[op]["gbps"], fio[op]["gbps"]) for op in ("write", "read")}}
            runs.append(row)
            mine.append(row)
            print_row(depth, str(i + 1), {op: worker[op]["gbps"] for op in ("write", "read")},
                      {op: fio[op]["gbps"] for op in ("write", "read")},
                      [worker[op]["lat_ms"]["p50"] for op in ("write", "read")],
                      [fio[op]["lat_ms"]["p50"] for op in ("write", "read")])
        med = {side: {op: statistics.median(r[side][op]["gbps"] for r in mine) for op in ("write", "read")}
               for side in ("worker", "fio")}
        summary.append({"concurrency": depth, "worker_gbps": med["worker"], "fio_gbps": med["fio"],
                        "ratio": {op: ratio(med["worker"][op], med["fio"][op]) for op in ("write", "read")}})
        print_row(depth, "median", med["worker"], med["fio"], None, None)
    low = [f"depth {s['concurrency']} {op}" for s in summary for op, r in s["ratio"].items() if r and r < TARGET]
    print(f"worker/fio below {TARGET}: {', '.join(low)}" if low else f"worker/fio >= {TARGET} everywhere")
    if args.json:
        Path(args.json).write_text(json.dumps({"dir": args.dir, "ssh": args.ssh, "params": args.params,
                                               "fio_engine": engine, "file_bytes": args.file_bytes,
                                               "files": args.files, "runs": runs, "summary": summary}, indent=2))
    return 0


def print_row(depth, run, worker, fio, worker_lat, fio_lat) -> None:
    lat = (f"{fmt(worker_lat[0], '.1f'):>8}/{fmt(worker_lat[1], '.1f'):<9} "
           f"{fmt(fio_lat[0], '.1f'):>5}/{fmt(fio_lat[1], '.1f'):<6}" if worker_lat else "")
    print(f"{depth:>5} {run:>6} | {fmt(worker['write']):>10} {fmt(fio['write']):>10} "
          f"{fmt(ratio(worker['write'], fio['write'])):>6} | {fmt(worker['read']):>10} {fmt(fio['read']):>10} "
          f"{fmt(ratio(worker['read'], fio['read'])):>6} | {lat}")


if __name__ == "__main__":
    sys.exit(main())
