#!/usr/bin/env python3
"""The acceptance test's worker beside fio, same directory and same I/O (prints figures; not a test).

For each --concurrency T: kvprov/bench_worker.py (NIXL POSIX from DRAM) writes then reads
--files files of --file-bytes, T transfers in flight, one file per I/O; fio does the same
I/O with the engine NIXL's POSIX plugin really uses (see the worker's docstring): one job,
`--ioengine=libaio --iodepth=T --direct=1 --bs=B --filesize=B --nrfiles=N --fallocate=none`
(io_uring / posixaio when --params asks for use_uring / use_posix_aio), a write run then a
read run of the same files. Like the engine's (SGLang's NIXL connector creates its files
with O_CREAT and nothing else), fio's files start empty and the writes extend them: on ext4
that makes each write complete inside io_submit, one at a time, on both sides (the worker's
`in_flight` shows it); files pre-sized with --fallocate=truncate would give fio an
asynchronous queue the engine does not have.

Two figures per side and pass, the first the headline:
- engine GB/s: bytes / the clock an engine sees, the creation (or opening), I/O and close of
  every file: the worker's engine_gbps. For fio: the wall-clock of the fio process less fio's
  own start and exit, measured first as the least of 3 writes of one 4 KiB file (0.3 s here,
  a fifth of a 2.25 GiB pass on a local disk); never below fio's runtime. fio's runtime alone
  would leave out the closes, which fio makes after its clock stops: microseconds on a local
  disk, but on NFS a close costs round trips (on the lab's pNFS block mount a LAYOUTCOMMIT
  and a CLOSE, ~90 ms a file), which the engine pays. --create_on_open=1 makes fio create
  each file during its run, as the engine does.
- data GB/s: bytes / first submission to last completion: the worker's gbps; fio's runtime.
The worker's own work per file (open, NIXL registration, its buffer's stamps, the transfer
handle, deregistration, close) is printed too, in µs, with the rate it alone would cap one
submitting thread at: the worker overlaps it with the I/O (see its docstring), but on a mount
much faster than this disk (an 18 MiB file moves in 0.38 ms at 50 GB/s) it must stay well
under the I/O time for the test to measure the storage rather than the worker.
Runs are interleaved: each round runs every depth once, the worker and fio back to back,
which one goes first alternating; medians of --repeat rounds are compared, with the
spread (min-max) and the ratios worker/fio (target >= 0.95). The worker's buffers are
populated beforehand (as a pinned pool is); fio's read run gets --zero_buffers=1 so that its
buffers are touched before its clock too, not faulted in by the first reads inside io_submit
(at depth 32 here, fio alone read at 1.2 GB/s without it and 1.4-1.9 with it, though the
median of 10 rounds moved only from 1.31 to 1.32; the worker without MAP_POPULATE read at
1.2-2.1 GB/s instead of 3.0-3.4). The worker still reads faster at depth 8 and 32 (a read
ratio above 1 is no bug: the physical layout of its buffers lets the block layer merge more,
see the worker's docstring). Worker latencies are submit -> done of each transfer, fio's
include the time an I/O waits in fio's own queue.

  python3 benchmarks/bench_vs_fio.py --dir /var/tmp/kvb --python /path/to/venv/bin/python3 --json out.json
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
TARGET = 0.95
OPS = ("write", "read")
SPLIT = "--- kvprov: fio read run ---"


def fio_engine(params: dict) -> str:
    true = ("1", "true", "yes", "on", "y", "enable")
    if str(params.get("use_uring", "")).lower() in true:
        return "io_uring"
    if str(params.get("use_posix_aio", "")).lower() in true:
        return "posixaio"
    return "libaio"  # use_aio true, false or absent: NIXL's default queue is Linux AIO


WALL = "kvprov-wall-ns"


def fio_script(directory: str, engine: str, depth: int, size: int, files: int, seconds: float,
               ops: tuple[str, ...] = OPS) -> str:
    """sh script: fio's write then read run in a fresh directory, each followed by a line with its
    wall-clock in ns; removes its files and that directory."""
    run_dir = shlex.quote(f"{directory.rstrip('/')}/.kvprov-fio-{os.getpid()}-{time.time_ns()}")
    common = (f"--output-format=json --directory=\"$d\" --filename_format='kvprov-fio.$filenum' "
              f"--ioengine={engine} --iodepth={depth} --direct=1 --bs={size} --filesize={size} "
              f"--nrfiles={files} --size={size * files} --lat_percentiles=1 "
              f"--runtime={max(1, round(seconds))}")
    # Two runs, not two jobs of one: fio would lay out the read job's files before the write
    # job runs, and the writes would then overwrite allocated blocks. The write run creates each
    # file, empty, when it first does I/O to it (as the engine does).
    runs = {"write": "--name=write --rw=write --fallocate=none --create_on_open=1",
            "read": "--name=read --rw=read --zero_buffers=1"}
    timed = [f't0=$(date +%s%N); fio {common} {runs[op]} || exit 1; echo "{WALL} $(($(date +%s%N) - t0))"'
             for op in ops]
    return (f"d={run_dir}\n"
            "mkdir \"$d\" || exit 1\n"
            "trap 'rm -f \"$d\"/kvprov-fio.*; rmdir \"$d\"' EXIT\n"
            "trap 'exit 1' HUP INT TERM\n"
            + f"\necho {SPLIT}\n".join(timed) + "\n")


def fio_figures(out: str, overhead: float = 0.0, ops: tuple[str, ...] = OPS) -> dict:
    """Per op: the data clock (fio's runtime) and the engine clock (the fio process's wall-clock
    less `overhead`, fio's own start and exit: it holds the creation, I/O and close of every
    file; never below the runtime)."""
    figures = {}
    for op, text in zip(ops, out.split(SPLIT), strict=True):
        data = json.JSONDecoder().raw_decode(text[text.index("{"):])[0]["jobs"][0][op]
        wall = int(text.rsplit(WALL, 1)[1].split()[0]) / 1e9
        pct = data["lat_ns"].get("percentile", {})
        seconds = data["runtime"] / 1e3
        engine_seconds = max(seconds, wall - overhead)
        figures[op] = {"bytes": data["io_bytes"], "seconds": seconds, "gbps": rate(data["io_bytes"], seconds),
                       "wall_seconds": wall, "engine_seconds": engine_seconds,
                       "engine_gbps": rate(data["io_bytes"], engine_seconds),
                       "lat_ms": {"p50": pct.get("50.000000", 0) / 1e6, "p99": pct.get("99.000000", 0) / 1e6}}
    return figures


def rate(nbytes: int, seconds: float) -> float | None:
    return nbytes / seconds / 1e9 if seconds > 0 else None


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
    return fio_figures(res.stdout, args.fio_overhead)


def fio_overhead(host: Host, args: argparse.Namespace, engine: str, runs: int = 3) -> float:
    """fio's own start and exit: the least wall-clock less runtime of a write of one 4 KiB file
    (with that file's creation and close, a small bias in fio's favour)."""
    spent = []
    for _ in range(runs):
        res = host.sh(fio_script(args.dir, engine, 1, 4096, 1, 10, ops=("write",)))
        if res.returncode != 0:
            raise SystemExit(f"fio failed (exit {res.returncode}):\n{res.stderr[-3000:]}{res.stdout[-3000:]}")
        f = fio_figures(res.stdout, ops=("write",))["write"]
        spent.append(f["wall_seconds"] - f["seconds"])
    return min(spent)


def ratio(a, b):
    return a / b if a and b else None


def spread(values) -> dict:
    """Median, min and max of `values`."""
    values = list(values)
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(rows: list[dict]) -> dict:
    """Per op and clock (engine, data): each side's median and spread of GB/s, the ratio of the
    medians and the spread of the runs' ratios."""
    out = {}
    for op in OPS:
        for clock, key in (("engine", "engine_gbps"), ("data", "gbps")):
            sides = {side: spread(r[side][op][key] for r in rows) for side in ("worker", "fio")}
            out[op, clock] = {**sides, "ratio": ratio(sides["worker"]["median"], sides["fio"]["median"]),
                              "run_ratios": spread(ratio(r["worker"][op][key], r["fio"][op][key]) for r in rows)}
    return out


def overheads(rows: list[dict], file_bytes: int) -> dict:
    """Per op: the spread of the worker's own per-file work (overhead_us, µs) over `rows` and the
    rate its median caps one submitting thread at (None for a worker that does not report it)."""
    out = {}
    for op in OPS:
        values = [r["worker"][op]["overhead_us"] for r in rows if r["worker"][op].get("overhead_us")]
        us = spread(values) if values else None
        out[op] = {"us": us, "cap_gbps": file_bytes / us["median"] / 1e3} if us else None
    return out


def misses(summary: list[dict], target: float = TARGET) -> list[str]:
    """The depths and ops whose engine-clock ratio is below `target`."""
    return [f"depth {s['concurrency']} {op} {fmt(s[op]['engine']['ratio'])}"
            for s in summary for op in OPS if (s[op]["engine"]["ratio"] or 0) < target]


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
    ap.add_argument("--files", type=int, default=128, help="files per pass (default 128: 2.25 GiB of 18 MiB files)")
    ap.add_argument("--seconds", type=float, default=120, help="time bound of each pass")
    ap.add_argument("--concurrency", default="1,8,32", help="comma-separated I/O depths")
    ap.add_argument("--repeat", type=int, default=5, help="rounds (medians of them are compared)")
    ap.add_argument("--json", help="write all figures here too")
    args = ap.parse_args()
    args.python = args.python or ("/opt/kvprov/nixl/bin/python3" if args.ssh else sys.executable)
    engine = fio_engine(json.loads(args.params))
    depths = [int(d) for d in args.concurrency.split(",")]
    host = Host(args.ssh, timeout=4 * args.seconds + 300)
    args.fio_overhead = fio_overhead(host, args, engine)
    print(f"{args.dir} on {args.ssh or 'this machine'}: {args.files} files x {args.file_bytes} B "
          f"({args.files * args.file_bytes / 2**30:.2f} GiB a pass), one I/O per file, O_DIRECT; "
          f"NIXL POSIX {args.params} vs fio {engine} (fio's own start and exit: {args.fio_overhead:.3f} s)",
          flush=True)
    print(f"{'round':>7} {'depth':>5} | {'engine GB/s write':>22} {'read':>16} | {'data GB/s write':>20} "
          f"{'read':>16} | in flight w/r | p50 ms w/r worker, fio | worker's own us/file w/r", flush=True)
    runs = []
    for i in range(args.repeat):
        for j, depth in enumerate(depths):
            if (i + j) % 2:  # alternate which one runs first: the disk's and memory's state drift
                fio = run_fio(host, args, engine, depth)
                worker = run_worker(host, args, depth)
            else:
                worker = run_worker(host, args, depth)
                fio = run_fio(host, args, engine, depth)
            runs.append({"round": i + 1, "concurrency": depth, "worker": worker, "fio": fio})
            print(f"{i + 1:>3}/{args.repeat:<3} {depth:>5} | "
                  + " | ".join(" ".join(f"{fmt(worker[op][key]):>6} {fmt(fio[op][key]):>5} "
                                        f"({fmt(ratio(worker[op][key], fio[op][key]))})" for op in OPS)
                               for key in ("engine_gbps", "gbps"))
                  + f" | {fmt(worker['write']['in_flight'], '.1f'):>5}/{fmt(worker['read']['in_flight'], '.1f'):<5}"
                  + f" | {fmt(worker['write']['lat_ms']['p50'], '.0f')}/{fmt(worker['read']['lat_ms']['p50'], '.0f')}, "
                  + f"{fmt(fio['write']['lat_ms']['p50'], '.0f')}/{fmt(fio['read']['lat_ms']['p50'], '.0f')}"
                  + " | " + "/".join(fmt(worker[op].get("overhead_us"), ".0f") for op in OPS),
                  flush=True)
    summary = []
    print(f"\nmedians of {args.repeat} runs [min-max], worker / fio, ratio of medians [range of the runs' ratios]:")
    for depth in depths:
        s = summarize([r for r in runs if r["concurrency"] == depth])
        o = overheads([r for r in runs if r["concurrency"] == depth], args.file_bytes)
        summary.append({"concurrency": depth, **{op: {clock: s[op, clock] for clock in ("engine", "data")}
                                                  | {"worker_overhead": o[op]} for op in OPS}})
        for op in OPS:
            print(f"depth {depth:>2} {op:<5} " + "   ".join(
                f"{clock}: {fmt_spread(s[op, clock]['worker'])} / {fmt_spread(s[op, clock]['fio'])} GB/s, "
                f"ratio {fmt(s[op, clock]['ratio'])} {fmt_spread(s[op, clock]['run_ratios'], False)}"
                for clock in ("engine", "data"))
                  + (f"   worker's own work {fmt(o[op]['us']['median'], '.0f')} us a file "
                     f"{fmt_spread(o[op]['us'], False, '.0f')}, caps {fmt(o[op]['cap_gbps'], '.3g')} GB/s"
                     if o[op] else ""))
    low = misses(summary)
    print(f"engine-clock worker/fio below {TARGET}: {', '.join(low)}" if low
          else f"engine-clock worker/fio >= {TARGET} at every depth, write and read")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "dir": args.dir, "ssh": args.ssh, "params": args.params, "fio_engine": engine,
            "file_bytes": args.file_bytes, "files": args.files, "repeat": args.repeat, "target": TARGET,
            "fio_overhead_seconds": args.fio_overhead,
            "summary": summary, "runs": runs}, indent=2))
    return 0


def fmt_spread(s: dict, median: bool = True, spec: str = ".2f") -> str:
    return (f"{fmt(s['median'], spec)} " if median else "") + f"[{fmt(s['min'], spec)}-{fmt(s['max'], spec)}]"


if __name__ == "__main__":
    sys.exit(main())
