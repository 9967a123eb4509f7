#!/usr/bin/env python3
"""Deploy benchmark (prints figures; not a test): time of a first and a second (no-op)
`kvprov deploy` of the lab, per host changed counts.

Run as root: python3 benchmarks/deploy.py [--containers N]
It restarts the lab (`lab down` + `lab up`) so the first deploy meets fresh hosts.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def kvprov(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvprov", *args], capture_output=True, text=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--containers", type=int, default=2)
    args = ap.parse_args()
    kvprov("lab", "down")
    up = kvprov("lab", "up", "--containers", str(args.containers))
    if up.returncode != 0:
        raise SystemExit(up.stderr)
    inventory = "/var/lib/kvprov/lab/run/inventory.yml"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label in ("first deploy (fresh hosts)", "second deploy (no-op)"):
            out = Path(tmp) / "result.json"
            t = time.monotonic()
            r = kvprov("deploy", inventory, "--json", str(out))
            seconds = time.monotonic() - t
            if r.returncode != 0:
                raise SystemExit(f"{label} failed:\n{r.stdout[-3000:]}")
            changed = {h: s["changed"] for h, s in json.loads(out.read_text())["hosts"].items()}
            rows.append((label, f"{seconds:.1f} s", " ".join(f"{h}:changed={n}" for h, n in sorted(changed.items()))))
    print(f"\nlab: storage VM + 1 GPU-node VM (QEMU) + {args.containers} containers")
    for label, secs, detail in rows:
        print(f"{label:28} {secs:>9}   {detail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
