#!/usr/bin/env python3
"""Lab benchmark (prints figures; not a test).

  image build time, cold (cache removed first; only with --cold) and cached
  `kvprov lab up` to every host answering ssh (storage + 1 GPU-node VM [+ containers])
  fio write/read MB/s on the NFSv4.1-over-RDMA (pNFS block) mount from kvlab-gpu1

Run as root: python3 benchmarks/lab.py [--cold] [--containers N] [--keep]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kvprov.lab import handmount, image, lifecycle, topology  # noqa: E402
from kvprov.lab.proc import Progress  # noqa: E402
from kvprov.lab.ssh import ssh  # noqa: E402

FIO_JOBS, FIO_BS = 2, "1M"


def fio(host, directory: str, rw: str, size: str) -> float:
    cmd = (f"fio --name=bench --directory={directory} --rw={rw} --bs={FIO_BS} --size={size} "
           f"--numjobs={FIO_JOBS} --direct=1 --ioengine=psync --group_reporting --output-format=json")
    r = ssh(*host, cmd, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"fio failed: {r.stderr}")
    job = json.loads(r.stdout)["jobs"][0]
    return job["write" if rw == "write" else "read"]["bw_bytes"] / 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cold", action="store_true", help="remove the cached image first and time a cold build")
    ap.add_argument("--containers", type=int, default=4)
    ap.add_argument("--keep", action="store_true", help="leave the lab running afterwards")
    ap.add_argument("--reuse", action="store_true",
                    help="time the cached image build and fio on the running lab, without restarting it (and "
                         "keep it): the smallest form, which CI runs (tests/lab/test_9_benchmarks.py)")
    ap.add_argument("--fio-size", default="128M", help="bytes each fio job writes, then reads")
    args = ap.parse_args()
    quiet = Progress(open("/dev/null", "w"))
    rows = []
    if args.reuse and not lifecycle.load_state():
        raise SystemExit("--reuse: no lab is running (`kvprov lab up`)")
    if not args.reuse:
        lifecycle.down(quiet)
    pubkey = lifecycle.ensure_key(quiet)
    if args.cold:
        for old in topology.cache_dir().glob("image-*"):
            shutil.rmtree(old)
        t = time.monotonic()
        image.build(pubkey, Progress())
        rows.append(("image build, cold", f"{time.monotonic() - t:.1f} s"))
    t = time.monotonic()
    image.build(pubkey, quiet)
    rows.append(("image build, cached", f"{time.monotonic() - t:.2f} s"))

    if not args.reuse:
        t = time.monotonic()
        state = lifecycle.up(1, args.containers, Progress())
        rows.append((f"lab up (storage + 1 VM + {args.containers} containers) to all ssh-ready",
                     f"{time.monotonic() - t:.1f} s"))
        for h in state["hosts"]:
            rows.append((f"  {h['name']}: ssh-ready after its start", f"{h['ready_after_s']:.1f} s"))

    gpu = ("127.0.0.1", topology.SSH_PORT_BASE + 1)
    mnt = "/mnt/kvprov-bench"
    r = ssh(*gpu, handmount.mount_script(mnt, topology.Topology().storage_address_for(1)), timeout=120)
    if r.returncode != 0:
        raise SystemExit(f"mount failed: {r.stderr}")
    try:
        w = fio(gpu, mnt, "write", args.fio_size)
        ssh(*gpu, "sync; echo 3 > /proc/sys/vm/drop_caches")
        rd = fio(gpu, mnt, "read", args.fio_size)
        rows.append((f"fio write, pNFS/RDMA mount ({FIO_JOBS} jobs x {FIO_BS}, O_DIRECT, {args.fio_size} each)",
                     f"{w:.0f} MB/s"))
        rows.append((f"fio read,  pNFS/RDMA mount ({FIO_JOBS} jobs x {FIO_BS}, O_DIRECT, {args.fio_size} each)",
                     f"{rd:.0f} MB/s"))
    finally:
        ssh(*gpu, f"rm -f {mnt}/bench.*; " + handmount.unmount_script(mnt), timeout=120)
        if not (args.keep or args.reuse):
            lifecycle.down(quiet)
    width = max(len(k) for k, _ in rows)
    print()
    for k, v in rows:
        print(f"{k:{width}}  {v:>12}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
