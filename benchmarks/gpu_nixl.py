#!/usr/bin/env python3
"""GPU path of the KV-page throughput test (prints figures; not a test).

Writes then reads N files shaped like SGLang's KV pages (default: Qwen3-8B, page 256,
bf16, TP1 -> 18 MiB `_k` files) through NIXL's GDS_MT plugin from GPU memory, with
O_DIRECT files, verifies the data, and prints GB/s beside NIXL POSIX from pinned DRAM and
dd with the same file size and count. Says whether cuFile ran in compat mode.

  python3 benchmarks/gpu_nixl.py --dir /var/tmp/kvprov-bench [--files 32] [--threads 16] [--fix-udev]

Needs a CUDA GPU, torch, and `nixl` + `nixl-cuXX` (libcudart/libcufile on LD_LIBRARY_PATH).
--fix-udev writes the udev record cuFile needs for the disk under --dir when the machine has
no /run/udev (containers): without it GDS fails to register any file (cuFile error 5027).
Removes only the files it wrote, and its --dir if it created it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

MIB = 1 << 20


def kv_page_bytes(layers=36, page=256, kv_heads=8, head_dim=128, dtype_bytes=2, tp=1) -> int:
    """One `_k` (or `_v`) file of a page_first layout page: layers x page x heads/tp x dim x dtype."""
    return layers * page * (kv_heads // tp) * head_dim * dtype_bytes


def fix_udev(directory: str) -> str:
    st = os.stat(directory)
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    record = f"/run/udev/data/b{major}:{minor}"
    if os.path.exists(record):
        return f"{record} exists"
    fstype = subprocess.run(["findmnt", "-no", "FSTYPE", "--target", directory], capture_output=True,
                            text=True).stdout.strip() or "ext4"
    os.makedirs("/run/udev/data", exist_ok=True)
    with open(record, "w") as fh:
        fh.write(f"E:ID_FS_USAGE=filesystem\nE:ID_FS_TYPE={fstype}\n")
    return f"wrote {record} (ID_FS_TYPE={fstype})"


def nixl_roundtrip(backend: str, params: dict, mem: str, src, dst, paths: list[str], size: int) -> dict:
    from nixl._api import nixl_agent, nixl_agent_config

    agent = nixl_agent(f"kvprov-bench-{backend}", nixl_agent_config(backends=[]))
    agent.create_backend(backend, params)
    dev = src.device.index if mem == "VRAM" else 0
    fds = [os.open(p, os.O_RDWR | os.O_CREAT | getattr(os, "O_DIRECT", 0), 0o600) for p in paths]
    try:
        files = agent.register_memory([(0, size, fd, "") for fd in fds], "FILE")
        out = {}
        for op, buf in (("WRITE", src), ("READ", dst)):
            agent.register_memory([(buf.data_ptr(), buf.numel(), dev, "")], mem)
            descs = agent.get_xfer_descs([(buf.data_ptr() + i * size, size, dev) for i in range(len(fds))], mem)
            handle = agent.initialize_xfer(op, descs, files.trim(), agent.name)
            t0 = time.perf_counter()
            state = agent.transfer(handle)
            while state not in ("DONE", "ERR"):
                state = agent.check_xfer_state(handle)
            seconds = time.perf_counter() - t0
            agent.release_xfer_handle(handle)
            if state != "DONE":
                raise RuntimeError(f"{backend} {op} ended in {state}")
            if op == "WRITE":
                for fd in fds:
                    os.fsync(fd)
                subprocess.run(["sh", "-c", "echo 3 > /proc/sys/vm/drop_caches"], check=False)
            out[op.lower()] = len(fds) * size / seconds / 1e9
        import torch

        out["verified"] = bool(torch.equal(src.cpu(), dst.cpu()))
        return out
    finally:
        for fd in fds:
            os.close(fd)


def dd(path: str, size: int, count: int) -> dict:
    out = {}
    for op, args in (("write", ["if=/dev/zero", f"of={path}", "oflag=direct", "conv=fsync"]),
                     ("read", [f"if={path}", "of=/dev/null", "iflag=direct"])):
        t0 = time.perf_counter()
        subprocess.run(["dd", f"bs={size}", f"count={count}", *args], check=True, capture_output=True)
        out[op] = count * size / (time.perf_counter() - t0) / 1e9
    os.unlink(path)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--files", type=int, default=32)
    ap.add_argument("--threads", type=int, default=16, help="GDS_MT thread_count")
    ap.add_argument("--fix-udev", action="store_true")
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args()
    import torch

    size = kv_page_bytes()
    created = not os.path.isdir(args.dir)
    os.makedirs(args.dir, exist_ok=True)
    notes = [f"file size {size / MIB:.0f} MiB x {args.files} files (Qwen3-8B, page 256, bf16, TP1 `_k` file)"]
    if args.fix_udev:
        notes.append(fix_udev(args.dir))
    paths = [os.path.join(args.dir, f"kvprov-bench-{i:04d}_k") for i in range(args.files)]
    rows = {}
    try:
        n = size * args.files
        gpu_src = torch.randint(0, 255, (n,), dtype=torch.uint8, device="cuda")
        gpu_dst = torch.zeros(n, dtype=torch.uint8, device="cuda")
        rows["NIXL GDS_MT, GPU memory <-> file"] = nixl_roundtrip(
            "GDS_MT", {"thread_count": str(args.threads)}, "VRAM", gpu_src, gpu_dst, paths, size)
        del gpu_src, gpu_dst
        cpu_src = torch.randint(0, 255, (n,), dtype=torch.uint8).pin_memory()
        cpu_dst = torch.zeros(n, dtype=torch.uint8).pin_memory()
        rows["NIXL POSIX, pinned DRAM <-> file"] = nixl_roundtrip(
            "POSIX", {"use_aio": "false"}, "DRAM", cpu_src, cpu_dst, paths, size)
        rows[f"dd bs={size // MIB}M O_DIRECT"] = dd(paths[0] + ".dd", size, args.files)
    finally:
        for p in paths:
            if os.path.exists(p):
                os.unlink(p)
        if created:
            os.rmdir(args.dir)
    nvfs = os.path.exists("/proc/driver/nvidia-fs/version")
    notes.append("nvidia-fs driver loaded" if nvfs else "no nvidia-fs driver: cuFile runs in compat mode (POSIX inside cuFile)")
    print("\n".join(notes))
    print(f"{'path':40} {'write GB/s':>10} {'read GB/s':>10}  verified")
    for name, r in rows.items():
        print(f"{name:40} {r['write']:10.2f} {r['read']:10.2f}  {r.get('verified', '-')}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"notes": notes, "rows": rows, "compat_mode": not nvfs}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
