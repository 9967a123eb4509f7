#!/usr/bin/env python3
"""Audit benchmark (prints figures; not a test): `kvprov audit` beside `ansible-playbook
--check --diff` of the deploy playbook, on the same lab container hosts with the same
drift, and whether both find the same drifted hosts.

Run as root: python3 benchmarks/audit.py [--containers 8] [--rounds 3]
Uses a running lab with at least --containers containers, or restarts the lab with that
many. Deploys the containers, makes drift on three of them (a TOML hand edit, a unit hand
edit, a disabled service), times both tools, then `kvprov audit --fix` puts them back.
Target: the audit at least 5x faster.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kvprov import paths, runner  # noqa: E402
from kvprov.lab.ssh import ssh  # noqa: E402

INVENTORY = "/var/lib/kvprov/lab/run/inventory.yml"
LIMIT = "lab_containers"
TOML = "/etc/kvprov/nixl_backend_config.toml"
UNIT = "/etc/systemd/system/kvprov-sglang-main.service"
DRIFT = {  # container index: (what, command)
    1: ("TOML hand edit", f"sed -i 's/^use_aio = false/use_aio = true/' {TOML}"),
    2: ("unit hand edit", f"sed -i 's/^RestartSec=10/RestartSec=1/' {UNIT} && systemctl daemon-reload"),
    3: ("service disabled", "systemctl disable --now kvprov-sglang-main.service"),
}


def kvprov(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "kvprov", *args], capture_output=True, text=True, cwd=ROOT)
    if check and r.returncode not in (0, 1):
        raise SystemExit(f"kvprov {' '.join(args)} -> {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r


def ensure_lab(containers: int) -> None:
    st = kvprov("lab", "status", "--json", check=False)
    data = json.loads(st.stdout) if st.returncode == 0 and st.stdout.strip() else None
    running = (data or {}).get("topology", {}).get("containers", -1)
    if running < containers:
        print(f"(re)starting the lab with {containers} containers", file=sys.stderr)
        kvprov("lab", "down")
        up = kvprov("lab", "up", "--containers", str(containers), check=False)
        if up.returncode != 0:
            raise SystemExit(up.stderr)


def timed(fn):
    t = time.monotonic()
    out = fn()
    return time.monotonic() - t, out


def audit_once(tmp: Path) -> set[str]:
    out = tmp / "audit.json"
    kvprov("audit", INVENTORY, "--limit", LIMIT, "--json", str(out))
    data = json.loads(out.read_text())
    return {h for h, v in data["hosts"].items() if any(r["status"] == "fail" for r in v["results"])}


def ansible_check_once() -> set[str]:
    """ansible-playbook --check --diff of site.yml; the hosts it would change."""
    env = {**os.environ, **runner.ansible_env()}  # the Ansible settings kvprov's own runs get
    r = subprocess.run(["ansible-playbook", "-i", INVENTORY, str(paths.playbooks_dir() / "site.yml"),
                        "--check", "--diff", "--limit", LIMIT], capture_output=True, text=True, env=env, cwd=ROOT)
    if r.returncode not in (0, 2):
        raise SystemExit(f"ansible-playbook --check failed:\n{r.stdout[-3000:]}")
    recap = re.findall(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)", r.stdout, flags=re.M)
    return {h for h, changed in recap if int(changed) > 0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--containers", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3, help="timed runs of each tool (the median is shown)")
    args = ap.parse_args()
    if args.containers < 8:
        print("note: the issue asks for at least 8 container hosts", file=sys.stderr)
    ensure_lab(args.containers)
    print(f"deploying {LIMIT} ...", file=sys.stderr)
    d = kvprov("deploy", INVENTORY, "--limit", LIMIT)
    if d.returncode != 0:
        raise SystemExit(d.stdout[-3000:])
    for j, (_, command) in DRIFT.items():
        r = ssh(f"10.98.{j}.2", 22, command)
        if r.returncode != 0:
            raise SystemExit(f"drift on kvlab-c{j} failed: {r.stderr}")
    want = {f"kvlab-c{j}" for j in DRIFT}
    with tempfile.TemporaryDirectory() as tmp:
        audits = [timed(lambda: audit_once(Path(tmp))) for _ in range(args.rounds)]
    checks = [timed(ansible_check_once) for _ in range(args.rounds)]
    fix = kvprov("audit", INVENTORY, "--limit", LIMIT, "--fix")
    a_s, c_s = statistics.median(t for t, _ in audits), statistics.median(t for t, _ in checks)
    a_hosts, c_hosts = audits[0][1], checks[0][1]
    print(f"\nlab: {args.containers} container hosts (systemd-nspawn), drift on "
          + ", ".join(f"kvlab-c{j} ({what})" for j, (what, _) in DRIFT.items()))
    print(f"{'tool':44} {'median s':>9} {'runs':>24}  drifted hosts found")
    print(f"{'kvprov audit':44} {a_s:9.1f} {' '.join(f'{t:.1f}' for t, _ in audits):>24}  {' '.join(sorted(a_hosts))}")
    print(f"{'ansible-playbook site.yml --check --diff':44} {c_s:9.1f} "
          f"{' '.join(f'{t:.1f}' for t, _ in checks):>24}  {' '.join(sorted(c_hosts))}")
    print(f"ratio: audit is {c_s / a_s:.1f}x faster (target >= 5x); same findings: "
          f"{'yes' if a_hosts == c_hosts == want else 'NO'} (expected {' '.join(sorted(want))})")
    print(f"audit --fix afterwards: exit {fix.returncode}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
