#!/usr/bin/env python3
"""Cross-host visibility on a shared NFS export: how long after one host closes a new file
another host sees it (prints figures; not a test).

An engine instance that serves a prefix another instance stored finds it by the file's name:
SGLang HiCache's file backends, vLLM's fs tier and LMCache's fs L2 all test existence
(`stat`/`exists`) or `open` a chunk file. If the reader looked that name up before the file
existed (a miss, the normal case for a prefix nobody stored yet), the NFS client may keep
the negative lookup cached and report the file missing for a while after the writer closed it.

For each variant of mount options, both hosts mount the deployed export a second time at
/mnt/kvprov-visibility/<variant> (`nosharecache`, so each variant has its own caches; the
kvprov mount is not touched), and for each trial:
  1. the reader creates a fresh directory and looks up two names in it that do not exist yet
     (`stat()` of one, `open()` of the other: both fail with ENOENT);
  2. the writer creates both files (write, fsync, close) and reports it;
  3. the reader polls both names every --poll-ms until each is seen (or --timeout).
The delay is from the writer's report that it closed a file to the reader's that it sees it,
both timed on this controller as the reports arrive (the hosts' clocks are not compared): a
few tens of milliseconds either way are the two ssh paths' jitter, not visibility. A miss's cost on the
reader (`stat()` of an absent name, repeated) is measured too: that is what not caching
negative lookups costs.

  python3 benchmarks/visibility.py            # the lab: kvlab-gpu1 writes, kvlab-gpu2 reads

The same host in both roles (one mount a variant; the smallest form CI runs,
tests/lab/test_9_benchmarks.py) proves only that the script works: one client sees its own
files at once.

Both hosts must have the export mounted by `kvprov deploy` (the source and options are
read from the live kvprov mount). Writes only below the variant mount points' directory
`kvprov-visibility/`, which it creates and removes, and unmounts what it mounted.
"""

from __future__ import annotations

import argparse
import json
import queue
import shlex
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAB_SSH = "ssh -p {port} -i /var/lib/kvprov/lab/id_ed25519 -o StrictHostKeyChecking=no " \
          "-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes root@127.0.0.1"
BASE = "/mnt/kvprov-visibility"
# The variants: options added to (or replacing the same key of) the deployed mount's options.
VARIANTS = {
    "default": [],
    "actimeo=5": ["actimeo=5"],
    "actimeo=1": ["actimeo=1"],
    "lookupcache=positive": ["lookupcache=positive"],
    "lookupcache=none": ["lookupcache=none"],
}

# Runs on each host (python3 -c), one command a line on stdin, one answer a line on stdout.
AGENT = r'''
import os, sys, time
def say(*a):
    print(*a, flush=True)
for line in sys.stdin:
    cmd, *arg = line.split()
    if cmd == "mkdir_prime":          # reader: a fresh directory and two failed lookups in it
        d = arg[0]
        os.mkdir(d)
        for name, look in (("s", os.stat), ("o", lambda p: os.close(os.open(p, os.O_RDONLY)))):
            try:
                look(os.path.join(d, name))
                say("error", name, "exists")
                break
            except FileNotFoundError:
                pass
        else:
            say("primed")
    elif cmd == "write":              # writer: both files, each written, synced, closed and reported
        for name in ("s", "o"):
            fd = os.open(os.path.join(arg[0], name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, b"kv" * 2048)
            os.fsync(fd)
            os.close(fd)
            say("closed", name)
    elif cmd == "poll":               # reader: report each name the moment it is seen
        d, poll, timeout = arg[0], float(arg[1]), float(arg[2])
        seen, end = set(), time.monotonic() + timeout
        while len(seen) < 2 and time.monotonic() < end:
            for name, look in (("s", os.stat), ("o", lambda p: os.close(os.open(p, os.O_RDONLY)))):
                if name not in seen:
                    try:
                        look(os.path.join(d, name))
                        seen.add(name)
                        say("seen", name)
                    except FileNotFoundError:
                        pass
            time.sleep(poll)
        say("done")
    elif cmd == "miss_cost":          # reader: microseconds a stat() of an absent name takes
        d, n = arg[0], int(arg[1])
        p = os.path.join(d, "absent")
        t = time.perf_counter()
        for _ in range(n):
            try:
                os.stat(p)
            except FileNotFoundError:
                pass
        say("us", round((time.perf_counter() - t) / n * 1e6, 2))
    elif cmd == "cleanup":            # only what this run created
        d = arg[0]
        for name in ("s", "o"):
            try:
                os.unlink(os.path.join(d, name))
            except FileNotFoundError:
                pass
        os.rmdir(d)
        say("ok")
'''


class Agent:
    def __init__(self, ssh: str):
        self.p = subprocess.Popen(shlex.split(ssh) + ["python3", "-u", "-c", shlex.quote(AGENT)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.lines: queue.Queue = queue.Queue()  # each answer as it arrives, timed by this controller
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.p.stdout:
            self.lines.put((time.monotonic(), line.strip()))
        self.lines.put((time.monotonic(), None))

    def send(self, line: str) -> None:
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def read(self, timeout: float) -> tuple[float, str]:
        """(when it arrived, the answer)."""
        try:
            at, line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError("no answer from the host") from None
        if line is None:
            raise RuntimeError(f"the host's agent exited ({self.p.wait()})")
        return at, line

    def ask(self, line: str, timeout: float = 60) -> str:
        self.send(line)
        return self.read(timeout)[1]

    def close(self) -> None:
        self.p.stdin.close()
        try:
            self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:  # still polling after a failure
            self.p.kill()
            self.p.wait()


def sh(ssh: str, command: str, check: bool = True) -> str:
    r = subprocess.run(shlex.split(ssh) + [command], capture_output=True, text=True, timeout=120)
    if check and r.returncode != 0:
        raise RuntimeError(f"{command!r}: {r.stderr.strip() or r.stdout.strip()}")
    return r.stdout.strip()


def merged(options: str, extra: list[str]) -> str:
    """The live mount's options with each extra option added or replacing the same key."""
    keys = {o.split("=")[0] for o in extra}
    if "actimeo" in keys:
        keys |= {"acregmin", "acregmax", "acdirmin", "acdirmax"}
    kept = [o for o in options.split(",") if o.split("=")[0] not in keys
            and o.split("=")[0] not in ("addr", "clientaddr")]  # the kernel fills these in itself
    return ",".join(kept + extra + ["nosharecache"])


def trial(reader: Agent, writer: Agent, d: str, poll_ms: float, timeout: float) -> dict:
    answer = reader.ask(f"mkdir_prime {d}")
    if answer != "primed":
        raise RuntimeError(f"priming {d}: {answer}")
    reader.send(f"poll {d} {poll_ms / 1000} {timeout}")
    time.sleep(0.2)  # the reader is polling: the names stay looked-up-and-missing meanwhile
    writer.send(f"write {d}")
    closed = {}
    for name in ("s", "o"):
        at, answer = writer.read(60)
        if answer != f"closed {name}":
            raise RuntimeError(f"writing in {d}: {answer}")
        closed[name] = at
    seen = {}
    while True:
        at, line = reader.read(timeout + 30)
        if line == "done":
            break
        seen[line.split()[1]] = at
    delays = {key: round(seen[name] - closed[name], 3) if name in seen else None
              for key, name in (("stat", "s"), ("open", "o"))}
    if reader.ask(f"cleanup {d}") != "ok":
        raise RuntimeError(f"cleanup of {d} failed")
    return delays


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--writer-ssh", default=LAB_SSH.format(port=2221), help="ssh command to the writer (default: kvlab-gpu1)")
    ap.add_argument("--reader-ssh", default=LAB_SSH.format(port=2222), help="ssh command to the reader (default: kvlab-gpu2)")
    ap.add_argument("--mount-point", default="/mnt/kvcache", help="the kvprov mount on both hosts")
    ap.add_argument("--variant", action="append", choices=sorted(VARIANTS), help="default: all")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--poll-ms", type=float, default=5)
    ap.add_argument("--timeout", type=float, default=90, help="seconds a trial waits for the reader")
    ap.add_argument("--json", type=Path, default=ROOT / "benchmarks/results/visibility.json")
    args = ap.parse_args()

    hosts = {"writer": args.writer_ssh, "reader": args.reader_ssh}
    live = {}
    for role, ssh in hosts.items():
        out = sh(ssh, f"findmnt -n -o SOURCE,FSTYPE,OPTIONS --mountpoint {shlex.quote(args.mount_point)}")
        if not out:
            raise SystemExit(f"{role}: nothing mounted at {args.mount_point}: deploy first")
        source, fstype, options = out.split()
        live[role] = {"source": source, "fstype": fstype, "options": options,
                      "kernel": sh(ssh, "uname -r")}
    print(f"writer: {live['writer']['source']} {live['writer']['options']}")
    print(f"reader: kernel {live['reader']['kernel']}")

    results = []
    for name in args.variant or list(VARIANTS):
        mnt = f"{BASE}/{name.replace('=', '-')}"
        for role, ssh in hosts.items():
            if role == "reader" and ssh == hosts["writer"]:
                continue  # one host in both roles (the smallest form): one mount
            opts = merged(live[role]["options"], VARIANTS[name])
            sh(ssh, f"mkdir -p {mnt} && mount -t {live[role]['fstype']} -o {shlex.quote(opts)} "
                    f"{shlex.quote(live[role]['source'])} {mnt}")
        writer, reader = Agent(hosts["writer"]), Agent(hosts["reader"])
        workdir = f"{mnt}/kvprov-visibility-{time.time_ns()}"
        try:
            rows = []
            sh(hosts["reader"], f"mkdir {workdir}")  # a new directory: all this run removes is in it
            shown = sh(hosts["reader"], f"findmnt -n -o OPTIONS --mountpoint {mnt}")
            for t in range(args.trials):
                rows.append(trial(reader, writer, f"{workdir}/t{t}-{time.time_ns()}", args.poll_ms, args.timeout))
                print(f"  {name:<22} trial {t + 1}/{args.trials}: stat {rows[-1]['stat']} s, "
                      f"open {rows[-1]['open']} s", flush=True)
            miss = float(reader.ask(f"miss_cost {workdir} 300", timeout=300).split()[1])
        finally:
            writer.close()
            reader.close()
            sh(hosts["reader"], f"rm -rf --one-file-system {workdir}", check=False)
            for ssh in dict.fromkeys(hosts.values()):
                sh(ssh, f"umount {mnt} && rmdir {mnt}", check=False)

        def summary(key: str) -> dict:
            vals = [r[key] for r in rows]
            seen = [v for v in vals if v is not None]
            return {"median_s": statistics.median(seen) if seen else None, "max_s": max(seen) if seen else None,
                    "not_seen": len(vals) - len(seen), "trials_s": vals}
        results.append({"variant": name, "options_added": VARIANTS[name], "reader_live_options": shown,
                        "stat": summary("stat"), "open": summary("open"), "miss_stat_us": miss})

    print(f"\n{'variant':<22} {'stat() median / max':>22} {'open() median / max':>22} {'miss cost':>10}")
    for r in results:
        cols = []
        for key in ("stat", "open"):
            s = r[key]
            txt = "-" if s["median_s"] is None else f"{s['median_s']:.2f} / {s['max_s']:.2f} s"
            cols.append(txt + (f" ({s['not_seen']} unseen)" if s["not_seen"] else ""))
        print(f"{r['variant']:<22} {cols[0]:>22} {cols[1]:>22} {r['miss_stat_us']:>7.0f} us")
    data = {"command": " ".join(sys.argv), "writer": live["writer"], "reader": live["reader"],
            "trials": args.trials, "poll_ms": args.poll_ms, "timeout_s": args.timeout, "results": results}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(data, indent=1) + "\n")
    print(f"written: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
