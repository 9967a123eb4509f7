#!/usr/bin/env python3
"""vLLM's fs tier on the KV mount: offload block size 64 vs 256 tokens (prints figures; not a test).

vLLM 0.33's filesystem tier (vllm/v1/kv_offload/tiering/fs) writes one file per offloaded
block and rank: `<root>_r<rank>/<hhh>/<hh>_g<group>/<hash>.bin`, each store an `exists()`
of the final name, `makedirs` of its directory, a write to `<name>.tmp<suffix>` and an
`os.replace` onto the final name, from a pool of write threads (16 by default); each load
an `open` and a read of the whole file. The block size (`kvprov_vllm_offload_block_size`,
in tokens) sets how large those files are: a 64-token block of Qwen3-8B (bf16, TP 1:
147,456 bytes a token) is a 9 MiB file, a 256-token block 36 MiB. On NFS every file costs
round trips (LOOKUP, OPEN, CLOSE, RENAME, COMMIT) however small it is, so fewer, larger files
move the same bytes with fewer metadata operations, at the price of coarser prefix reuse
(a prefix is served from storage in whole blocks).

This runs that I/O pattern on a host's live kvprov mount, for each block size, side by side
in one run, alternating the order each round: the same bytes written as files of each size
(write rate, files a second, the volume's file count for 1 TiB), then the client's page
cache dropped and every file read back. It writes only below
`<mount>/kvprov-blocksize/`, which it creates and removes.

  python3 benchmarks/fs_block_size.py                        # the lab: kvlab-gpu1, /mnt/kvcache
  python3 benchmarks/fs_block_size.py --total-mib 1152 --rounds 5 --json results/blocksize.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys

LAB_SSH = "ssh -p {port} -i /var/lib/kvprov/lab/id_ed25519 -o StrictHostKeyChecking=no " \
          "-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes root@127.0.0.1"

# Runs on the host (python3 -c): one block size, one round. Prints one JSON line.
AGENT = r'''
import concurrent.futures as cf, hashlib, json, os, sys, time
base, file_bytes, count, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
os.makedirs(base)
payload = os.urandom(file_bytes)
names = []
for i in range(count):
    h = hashlib.sha256(f"{base}/{i}".encode()).hexdigest()
    names.append(os.path.join(base + "_r0", h[:3], h[3:5] + "_g0", h + ".bin"))
def store(path):
    if os.path.exists(path):
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp" + str(os.getpid())
    fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        view, done = memoryview(payload), 0
        while done < file_bytes:
            done += os.write(fd, view[done:])
    finally:
        os.close(fd)
    os.replace(tmp, path)
def load(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        got = 0
        while True:
            chunk = os.read(fd, 8 << 20)
            if not chunk:
                break
            got += len(chunk)
    finally:
        os.close(fd)
    assert got == file_bytes, (path, got)
with cf.ThreadPoolExecutor(threads) as pool:
    t = time.perf_counter(); list(pool.map(store, names)); os.sync(); write_s = time.perf_counter() - t
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")
    t = time.perf_counter(); list(pool.map(load, names)); read_s = time.perf_counter() - t
print(json.dumps({"write_s": write_s, "read_s": read_s}))
'''

CLEANUP = "rm -rf --one-file-system -- {base} {base}_r0"


def run(ssh: list[str], command: list[str], stdin: str | None = None, timeout: float = 1800) -> str:
    r = subprocess.run(ssh + [shlex.join(command)], input=stdin, capture_output=True, text=True,
                       timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{shlex.join(command)}: {r.stderr.strip() or r.stdout.strip()}")
    return r.stdout.strip()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ssh", help="ssh command to the host (default: the lab's kvlab-gpu1)")
    ap.add_argument("--mount", default="/mnt/kvcache", help="the host's kvprov KV mount")
    ap.add_argument("--blocks", default="64,256", help="offload block sizes to compare, in tokens")
    ap.add_argument("--bytes-per-token", type=int, default=147456,
                    help="KV bytes a token on one rank (Qwen3-8B, bf16, TP 1: 147456)")
    ap.add_argument("--total-mib", type=int, default=576, help="bytes each block size moves a round")
    ap.add_argument("--threads", type=int, default=16, help="I/O threads (vLLM's fs tier: 16)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="write the figures here as well")
    a = ap.parse_args(argv)
    ssh = shlex.split(a.ssh or LAB_SSH.format(port=2221))
    blocks = [int(b) for b in a.blocks.split(",")]
    base = f"{a.mount.rstrip('/')}/kvprov-blocksize"
    fstype = run(ssh, ["findmnt", "-n", "-o", "FSTYPE", "--target", a.mount])  # the file system holding it
    if fstype not in ("nfs4", "nfs"):
        print(f"note: {a.mount} is on {fstype or 'an unknown file system'}, not NFS", file=sys.stderr)
    samples: dict[int, list[dict]] = {b: [] for b in blocks}
    total = a.total_mib << 20
    try:
        for rnd in range(a.rounds):
            for b in (blocks if rnd % 2 == 0 else blocks[::-1]):  # alternate which goes first
                file_bytes = b * a.bytes_per_token
                count = max(1, total // file_bytes)
                d = f"{base}/b{b}-{rnd}"
                out = json.loads(run(ssh, ["python3", "-c", AGENT, d, str(file_bytes), str(count),
                                           str(a.threads)]))
                run(ssh, ["sh", "-c", CLEANUP.format(base=shlex.quote(d))])
                mib = count * file_bytes / 2**20
                s = {"files": count, "file_mib": file_bytes / 2**20, "mib": mib,
                     "write_mib_s": mib / out["write_s"], "read_mib_s": mib / out["read_s"],
                     "write_files_s": count / out["write_s"], "read_files_s": count / out["read_s"]}
                samples[b].append(s)
                print(f"round {rnd + 1}/{a.rounds}  block {b:>4}: {count} files of {s['file_mib']:.1f} MiB  "
                      f"write {s['write_mib_s']:7.1f} MiB/s  read {s['read_mib_s']:7.1f} MiB/s", flush=True)
    finally:
        run(ssh, ["rm", "-rf", "--one-file-system", "--", base])
    rows = []
    for b in blocks:
        med = {k: statistics.median(s[k] for s in samples[b]) for k in
               ("write_mib_s", "read_mib_s", "write_files_s", "read_files_s")}
        rows.append({"block_tokens": b, "file_mib": samples[b][0]["file_mib"], "samples": len(samples[b]),
                     "files_per_tib": round(2**40 / (b * a.bytes_per_token)), **med})
    print(f"\nmedian of {a.rounds} round(s), {a.total_mib} MiB a block size a round, {a.threads} threads, "
          f"{a.bytes_per_token} bytes a token, on {a.mount}")
    print(f"{'block':>6} {'file MiB':>9} {'files/TiB':>10} {'write MiB/s':>12} {'read MiB/s':>11} "
          f"{'writes/s':>9} {'reads/s':>8}")
    for r in rows:
        print(f"{r['block_tokens']:>6} {r['file_mib']:>9.1f} {r['files_per_tib']:>10} {r['write_mib_s']:>12.1f} "
              f"{r['read_mib_s']:>11.1f} {r['write_files_s']:>9.1f} {r['read_files_s']:>8.1f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"mount": a.mount, "threads": a.threads, "bytes_per_token": a.bytes_per_token,
                       "rows": rows, "samples": {str(b): samples[b] for b in blocks}}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
