#!/usr/bin/env python3
"""Fleet-scale benchmark (prints figures; not a test): every kvprov command against 1, 8, 32
and 100 lab container hosts, with seconds, controller CPU seconds and peak controller memory.

For each size the lab is restarted with that many containers (`kvprov lab down`, `lab up
--containers N`: fresh hosts), its two VMs are paused (SIGSTOP; only containers are used),
and an inventory of only those containers is written. Then:

  first deploy        kvprov deploy on the fresh hosts (once)
  no-op deploy        kvprov deploy again: audits, finds every host clean, runs nothing
  no-op deploy --full the playbook on every host anyway (once: the fast path's baseline)
  deploy --check      kvprov deploy --check (audit first, like deploy)
  validate --no-bench kvprov validate --no-bench
  ansible -m ping     Ansible's floor: ansible.builtin.ping on the same hosts, same settings
  audit               kvprov audit, with drift made on 3 hosts (a TOML edit, a unit edit, a
                      disabled service; one host when N is 1)
  check --diff        ansible-playbook site.yml --check --diff on the same drift (once), whose
                      hosts with changes must be exactly the audit's drifted hosts
  testinfra -n 4      pytest --pyargs kvprov.checks -n 4 over Ansible (once)
  drift deploy        kvprov deploy converging the drifted hosts only

Cheap commands (the audit-based ones) are medians of --rounds runs; the others run once.
CPU is user + system seconds of the command and everything it waited for (ansible-playbook
and its forks; not the ssh connection masters Ansible leaves running); memory is the peak of the summed RSS of the command's process tree, sampled
every 0.2 s. Writes JSON (--json) and a PNG chart (--chart, seconds against hosts, a line
per command) and prints a table. Targets (issues #15, #28): audit of 100 hosts <= 20 s, <= 1.5x
`ansible -m ping` and >= 20x faster than --check --diff; no-op deploy <= 2x audit; validate
--no-bench <= 30 s and <= 1.5x audit. --only runs some commands (the first deploy always).

Run as root from the repository: python3 benchmarks/scale.py [--sizes 1,8,32,100] [--rounds 3]
[--variants 8]. The largest size runs first; the JSON is rewritten after each size. Takes
about 80 minutes for the default sizes on 2 cores. Leaves the lab down.

--hosts kvlab-c1[,...] runs one size on these containers of the running lab instead (no
restart, the VMs not paused, the lab left up, the drift deployed back in any case): CI runs
its smallest form so (`--hosts kvlab-c1 --rounds 1 --only audit`, tests/lab/test_9_collection.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kvprov.lab import lifecycle  # noqa: E402
from kvprov.lab.ssh import ssh  # noqa: E402

LAB_INVENTORY = Path("/var/lib/kvprov/lab/run/inventory.yml")
TOML = "/etc/kvprov/nixl_backend_config.toml"
UNIT = "/etc/systemd/system/kvprov-sglang-main.service"
DRIFT = (f"sed -i 's/^use_aio = false/use_aio = true/' {TOML}",
         f"sed -i 's/^RestartSec=10/RestartSec=1/' {UNIT} && systemctl daemon-reload",
         "systemctl disable --now kvprov-sglang-main.service")
COMMANDS = ("first deploy", "no-op deploy", "no-op deploy --full", "deploy --check", "validate --no-bench",
            "ansible -m ping", "audit", "check --diff", "testinfra -n 4", "drift deploy")
TARGETS = {"audit": 20.0, "validate --no-bench": 30.0}
# Ansible settings tried on a full no-op deploy (--variants): environment over ansible.cfg's
# forks=50, pipelining, ControlPersist=120s, linear strategy, minimal facts gathered each run.
VARIANTS = {
    "as shipped": {},
    "forks 4": {"ANSIBLE_FORKS": "4"},
    "no pipelining": {"ANSIBLE_PIPELINING": "False"},
    "no ControlPersist": {"ANSIBLE_SSH_ARGS": "-o ControlMaster=no"},
    "fact cache (jsonfile, smart)": {"ANSIBLE_GATHERING": "smart", "ANSIBLE_CACHE_PLUGIN": "jsonfile",
                                     "ANSIBLE_CACHE_PLUGIN_CONNECTION": "{tmp}/facts"},
    "strategy free": {"ANSIBLE_STRATEGY": "free"},
    "no facts (gathering explicit)": {"ANSIBLE_GATHERING": "explicit"},
}
PAGE = os.sysconf("SC_PAGE_SIZE")
TIMEOUT = 1800  # seconds for one command; a command stopped then is recorded with rc -9


def tree_rss(root: int) -> int:
    """Bytes resident in `root` and all its descendants now."""
    parent, rss = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            parent[int(entry)], rss[int(entry)] = int(fields[1]), int(fields[21]) * PAGE
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo += [p for p, pp in parent.items() if pp == pid]
    return total


def measure(cmd: list[str], timeout: float = 3600, env: dict | None = None) -> dict:
    """Run cmd; its wall seconds, CPU seconds (with its waited-for descendants), peak tree RSS, rc."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **(env or {})}, start_new_session=True)
    peak, done = [0], threading.Event()

    def sample() -> None:
        while not done.wait(0.2):
            peak[0] = max(peak[0], tree_rss(proc.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    done.set()
    sampler.join()
    seconds = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"seconds": round(seconds, 2), "cpu_s": round(cpu, 1), "peak_rss_mib": round(peak[0] / 2**20),
            "rc": proc.returncode, "output": out}


def kvprov(*args: str) -> list[str]:
    return [sys.executable, "-m", "kvprov", *args]


def pause_vms(sig: int) -> None:
    """SIGSTOP / SIGCONT the lab's QEMU VMs: the benchmark uses only containers, and idle TCG VMs
    take about half a core between them."""
    for h in (lifecycle.load_state() or {}).get("hosts", []):
        if h["kind"] == "vm" and h.get("pid"):
            try:
                os.kill(h["pid"], sig)
            except ProcessLookupError:
                pass  # gone already: `lab down` cleans up after it


def lab_down() -> None:
    pause_vms(signal.SIGCONT)
    subprocess.run(kvprov("lab", "down"), check=True, capture_output=True)


def lab_up(n: int) -> None:
    lab_down()
    up = subprocess.run(kvprov("lab", "up", "--containers", str(n)), capture_output=True, text=True)
    if up.returncode != 0:
        raise SystemExit(f"lab up --containers {n} failed:\n{up.stdout[-3000:]}{up.stderr[-3000:]}")
    pause_vms(signal.SIGSTOP)


def containers_inventory(path: Path, only: list[str] | None = None) -> list[tuple[str, str]]:
    """The lab's inventory with only its containers (no VMs, no storage), or only those named;
    their (name, address)."""
    data = yaml.safe_load(LAB_INVENTORY.read_text())
    nodes = data["all"]["children"]["gpu_nodes"]["children"]
    group = nodes["lab_containers"]
    if only:
        missing = sorted(set(only) - set(group["hosts"]))
        if missing:
            raise SystemExit(f"not containers of the running lab: {', '.join(missing)} (lab: {', '.join(group['hosts'])})")
        group = {**group, "hosts": {h: group["hosts"][h] for h in only}}
    data["all"]["children"] = {"gpu_nodes": {"children": {"lab_containers": group}}}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return [(h, v["ansible_host"]) for h, v in group["hosts"].items()]


def recap_changed(output: str) -> set[str]:
    """Hosts with changed > 0 in an ansible-playbook PLAY RECAP."""
    return {m.group(1) for m in re.finditer(r"^(\S+)\s+:\s+ok=\d+\s+changed=([1-9]\d*)", output, re.M)}


def audit_drifted(report: Path) -> set[str]:
    hosts = json.loads(report.read_text())["hosts"]
    return {h for h, v in hosts.items() if any(r["status"] == "fail" for r in v["results"])}


def variants(inv: Path, tmp: Path) -> dict:
    """A full no-op deploy under each of VARIANTS (once each; a first run warms a fact cache)."""
    out = {}
    for name, env in VARIANTS.items():
        env = {k: v.format(tmp=tmp) for k, v in env.items()}
        if "ANSIBLE_CACHE_PLUGIN" in env:
            measure(kvprov("deploy", str(inv), "--full"), env=env)  # fills the cache
        print(f"  variant {name}: no-op deploy --full ...", end="", flush=True)
        m = measure(kvprov("deploy", str(inv), "--full"), env=env)
        print(f" {m['seconds']:.1f} s, {m['cpu_s']:.0f} CPU s, rc {m['rc']}", flush=True)
        out[name] = {k: v for k, v in m.items() if k != "output"}
    return out


def run_size(n: int, rounds: int, tmp: Path, with_variants: bool = False, only: set[str] | None = None,
             reuse: list[str] | None = None) -> dict:
    if not reuse:
        lab_up(n)
    inv = tmp / f"inventory-{n}.yml"
    hosts = containers_inventory(inv, reuse)
    runs: dict[str, list[dict]] = {c: [] for c in COMMANDS}
    report = tmp / "audit.json"
    cfg = {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}  # what kvprov's own runs use
    steps = [
        ("first deploy", kvprov("deploy", str(inv)), 1, 0),
        ("no-op deploy", kvprov("deploy", str(inv)), rounds, 0),
        ("no-op deploy --full", kvprov("deploy", str(inv), "--full"), 1, 0),
        ("deploy --check", kvprov("deploy", str(inv), "--check"), rounds, 0),
        ("validate --no-bench", kvprov("validate", str(inv), "--no-bench"), rounds, 1),
        ("drift", None, 1, 0),
        # Ansible's floor: one module on every host, through the same connection settings
        ("ansible -m ping", ["ansible", "-i", str(inv), "gpu_nodes", "-m", "ansible.builtin.ping"], rounds, 0),
        ("audit", kvprov("audit", str(inv), "--json", str(report)), rounds, 1),
        ("check --diff", ["ansible-playbook", "-i", str(inv), "playbooks/site.yml", "--check", "--diff"], 1, 0),
        ("testinfra -n 4", [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "4",
                            "--hosts=ansible://gpu_nodes", f"--ansible-inventory={inv}", "--pyargs", "kvprov.checks"],
         1, 1),  # exit 1: the drift fails its checks
        ("drift deploy", kvprov("deploy", str(inv)), 1, 0),
    ]
    drifted = [h for h, _ in hosts[:len(DRIFT)]]
    findings = {}
    for name, cmd, times, ok_rc in steps:
        if cmd is None:  # make the drift: one kind a host
            for (host, address), change in zip(hosts, DRIFT if n >= len(DRIFT) else [" && ".join(DRIFT)]):
                r = ssh(address, 22, change)
                if r.returncode != 0:
                    raise SystemExit(f"drift on {host} failed: {r.stderr}")
            continue
        for i in range(times):
            if only and name not in only and name not in ("first deploy", "drift deploy"):
                break  # the hosts are deployed, and the drift put back, in any case
            print(f"  {n:>3} hosts: {name} ({i + 1}/{times}) ...", end="", flush=True)
            m = measure(cmd, timeout=TIMEOUT, env=cfg if cmd[0].startswith("ansible") else None)
            print(f" {m['seconds']:.1f} s, {m['cpu_s']:.0f} CPU s, {m['peak_rss_mib']} MiB, rc {m['rc']}", flush=True)
            if m["rc"] == -signal.SIGKILL:
                print(f"  {name} stopped after {TIMEOUT} s: recorded as at least that", flush=True)
            elif m["rc"] not in (0, ok_rc):  # recorded with its rc; the output's tail is printed
                print(f"  {name} with {n} hosts exited {m['rc']} (expected {ok_rc or 0}):\n{m['output'][-3000:]}",
                      flush=True)
            if name == "audit":
                findings["audit"] = sorted(audit_drifted(report))
            if name == "check --diff":
                findings["check --diff"] = sorted(recap_changed(m["output"]))
            runs[name].append({k: v for k, v in m.items() if k != "output"})
    figures = {name: summary(r) for name, r in runs.items() if r}
    return {"hosts": n, "commands": figures, "drifted": drifted, "findings": findings,
            "same_findings": findings.get("audit") == findings.get("check --diff") == drifted,
            "variants": variants(inv, tmp) if with_variants else {}}


def summary(runs: list[dict]) -> dict:
    secs = [r["seconds"] for r in runs]
    return {"seconds": round(statistics.median(secs), 2), "min": min(secs), "max": max(secs), "runs": len(runs),
            "rc": [r["rc"] for r in runs],
            "cpu_s": statistics.median(r["cpu_s"] for r in runs),
            "peak_rss_mib": max(r["peak_rss_mib"] for r in runs)}


def verdicts(sizes: list[dict]) -> list[str]:
    """The issue's targets at the largest size, met or missed by how much."""
    big = sizes[-1]
    c = big["commands"]
    lines = []

    def line(what: str, value: float, limit: float, ok: bool) -> None:
        lines.append(f"{'met   ' if ok else 'MISSED'} {what}: {value:.1f} (target {limit:g})")

    def ratio(what: str, a: str, b: str, limit: float, at_most: bool = True) -> None:
        if a in c and b in c:
            x = c[a]["seconds"] / c[b]["seconds"]
            line(f"{what} at {big['hosts']} hosts, x", x, limit, x <= limit if at_most else x >= limit)

    for name, limit in TARGETS.items():
        if name in c:
            line(f"{name} of {big['hosts']} hosts, s", c[name]["seconds"], limit, c[name]["seconds"] <= limit)
    ratio("audit / ansible -m ping (issue #28)", "audit", "ansible -m ping", 1.5)
    ratio("check --diff / audit", "check --diff", "audit", 20, at_most=False)
    ratio("validate --no-bench / audit (issue #28)", "validate --no-bench", "audit", 1.5)
    ratio("no-op deploy / audit", "no-op deploy", "audit", 2)
    if all(len(s["findings"]) == 2 for s in sizes):
        lines.append(f"{'met   ' if all(s['same_findings'] for s in sizes) else 'MISSED'} audit and check --diff "
                     "find the same drifted hosts at every size")
    return lines


def per_host(sizes: list[dict]) -> dict:
    """{command: (controller CPU seconds per host, fixed CPU seconds)}: the line through the two
    largest sizes, and the projected controller CPU seconds for 1,000 and 10,000 hosts."""
    a, b = sizes[-2], sizes[-1]
    out = {}
    for name in COMMANDS:
        if name in a["commands"] and name in b["commands"]:
            slope = (b["commands"][name]["cpu_s"] - a["commands"][name]["cpu_s"]) / (b["hosts"] - a["hosts"])
            fixed = b["commands"][name]["cpu_s"] - slope * b["hosts"]
            out[name] = {"cpu_s_per_host": round(slope, 3), "fixed_cpu_s": round(fixed, 1),
                         "cpu_s_1000": round(fixed + 1000 * slope), "cpu_s_10000": round(fixed + 10000 * slope)}
    return out


def chart(sizes: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(10.5, 5.5), dpi=110)
    xs = [s["hosts"] for s in sizes]
    for name in COMMANDS:
        ys = [s["commands"].get(name, {}).get("seconds") for s in sizes]
        if any(y is not None for y in ys):
            ax.plot(xs, ys, marker="o", label=name)
    for name, limit in TARGETS.items():
        ax.axhline(limit, color="grey", linestyle=":", linewidth=1)
        ax.annotate(f"target: {name} \u2264 {limit:g} s", (xs[0], limit), textcoords="offset points",
                    xytext=(2, 3), fontsize=7, color="grey")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("container hosts")
    ax.set_ylabel("seconds (median)")
    ax.set_title("kvprov at fleet scale: lab containers, one 2-core controller")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    fig.savefig(path)


def table(sizes: list[dict]) -> str:
    head = f"{'command':22}" + "".join(f"{str(s['hosts']) + ' hosts':>24}" for s in sizes)
    rows = [head, f"{'':22}" + "".join(f"{'s  CPU s  MiB':>24}" for _ in sizes)]
    for name in COMMANDS:
        cells = []
        for s in sizes:
            f = s["commands"].get(name)
            cells.append(f"{f['seconds']:9.1f} {f['cpu_s']:6.0f} {f['peak_rss_mib']:6}" if f else f"{'-':>24}")
        rows.append(f"{name:22}" + "".join(f"{c:>24}" for c in cells))
    return "\n".join(rows)


def markdown(sizes: list[dict]) -> str:
    """The table for docs/scale.md: seconds (controller CPU s, peak MiB) per command and size."""
    rows = ["| command | " + " | ".join(f"{s['hosts']} hosts" for s in sizes) + " |",
            "|---|" + "---:|" * len(sizes)]
    for name in COMMANDS:
        cells = [(f"{f['seconds']:.1f} s ({f['cpu_s']:.0f} CPU s, {f['peak_rss_mib']} MiB)"
                  if (f := s["commands"].get(name)) else "-") for s in sizes]
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,8,32,100", help="comma-separated container counts")
    ap.add_argument("--add", action="store_true",
                    help="keep the other sizes already in --json (to measure sizes in several runs)")
    ap.add_argument("--rounds", type=int, default=3, help="runs of each cheap command (the median is kept)")
    ap.add_argument("--only", type=lambda v: set(v.split(",")), metavar="CMD,...",
                    help=f"these commands only (the first deploy always runs); of: {', '.join(COMMANDS)}")
    ap.add_argument("--variants", type=int, metavar="N", default=8,
                    help="at this size, also time a full no-op deploy under each Ansible setting of VARIANTS (0: none)")
    ap.add_argument("--json", type=Path, default=ROOT / "benchmarks/results/scale.json")
    ap.add_argument("--chart", type=Path, default=ROOT / "benchmarks/results/scale.png")
    ap.add_argument("--hosts", type=lambda v: v.split(","), metavar="HOST,...",
                    help="one size on these containers of the running lab (no restart; see above)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the lab needs it")
    if args.hosts and ROOT / "benchmarks/results" in (args.json.parent, args.chart.parent):
        raise SystemExit("--hosts: give --json and --chart elsewhere (the committed figures are of fresh labs)")
    wanted = [len(args.hosts)] if args.hosts else sorted((int(x) for x in args.sizes.split(",")), reverse=True)
    sizes = [s for s in json.loads(args.json.read_text())["sizes"] if s["hosts"] not in wanted] \
        if args.add and args.json.exists() else []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for n in wanted:
                print(f"{n} container hosts: lab up ...", flush=True)
                size = run_size(n, args.rounds, Path(tmp), with_variants=n == args.variants, only=args.only,
                                reuse=args.hosts)
                sizes = sorted([*sizes, size], key=lambda s: s["hosts"])
                args.json.write_text(json.dumps({"machine": f"{os.cpu_count()} cores", "sizes": sizes}, indent=2) + "\n")
        finally:
            if not args.hosts:
                lab_down()
    if len(sizes) > 1:
        projection = per_host(sizes)
        args.json.write_text(json.dumps({"machine": f"{os.cpu_count()} cores", "sizes": sizes,
                                         "per_host": projection}, indent=2) + "\n")
        print(f"\n{'controller CPU':22} {'s/host':>7} {'fixed s':>8} {'1,000 hosts':>12} {'10,000 hosts':>13}")
        for name, f in projection.items():
            print(f"{name:22} {f['cpu_s_per_host']:7.2f} {f['fixed_cpu_s']:8.1f} {f['cpu_s_1000']:12} {f['cpu_s_10000']:13}")
    chart(sizes, args.chart)
    print("\n" + table(sizes) + "\n\n" + markdown(sizes))
    for size in sizes:
        for name, m in size["variants"].items():
            print(f"{size['hosts']} hosts, no-op deploy --full, {name:30} {m['seconds']:7.1f} s {m['cpu_s']:6.0f} CPU s")
    print("\n" + "\n".join(verdicts(sizes)))
    print(f"\nJSON: {args.json}\nchart: {args.chart}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
