"""`kvprov lab up|down|status|ssh|console`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kvprov.errors import EXIT_LAB, EXIT_USAGE, KvprovError
from kvprov.lab import lifecycle, topology
from kvprov.lab.proc import tail
from kvprov.lab.ssh import ssh_args


def add_parser(sub) -> None:
    p = sub.add_parser("lab", help="the local lab: storage VM, GPU-node VMs, containers",
                       description="Bring up, inspect and remove the local lab (needs root).")
    lab = p.add_subparsers(dest="lab_command", required=True, metavar="ACTION")
    deps = lab.add_parser("deps", help="install what the lab needs on this Debian 12 controller (as root)",
                          description="Debian's packages (QEMU, debootstrap, systemd-nspawn, sshfs, fio), the "
                                      "lab's offline wheelhouses and the engine venvs: what scripts/install-deps "
                                      "does in a checkout, for kvprov installed from its wheel. A second run is fast.")
    deps.set_defaults(func=cmd_deps)
    up = lab.add_parser("up", help="build the image (cached) and boot the lab",
                        description="Build the Debian 12 image (debootstrap; cached, rebuilt when its recipe changes) "
                                    "and boot the storage VM, --clients GPU-node VMs and --containers containers. "
                                    "Idempotent: a running lab is reported, not restarted. Writes the inventory of "
                                    "what it started to <lab home>/run/inventory.yml (docs/lab.md).")
    up.add_argument("--clients", type=int, default=1, help="GPU-node VMs (default 1)")
    up.add_argument("--containers", type=int, default=0, help="systemd-nspawn hosts (default 0)")
    up.set_defaults(func=cmd_up)
    st = lab.add_parser("status", help="what runs and whether it answers ssh",
                        description="Each lab host: whether it runs and answers ssh. Exit 0 when every host does.")
    st.add_argument("--json", action="store_true", help="print JSON")
    st.set_defaults(func=cmd_status)
    dn = lab.add_parser("down", help="stop the lab and remove everything it made",
                        description="Remove every process, namespace, device, mount and file the lab made (each is "
                                    "recorded before it is created, so this also cleans up after a crash); the image "
                                    "cache and the ssh key stay.")
    dn.set_defaults(func=cmd_down)
    sh = lab.add_parser("ssh", help="ssh into a lab host: kvprov lab ssh kvlab-gpu1 [COMMAND...]",
                        description="ssh into a lab host as root with the lab's key; a COMMAND runs there instead "
                                    "of a shell.")
    sh.add_argument("host")
    sh.add_argument("remote", nargs="*", help="command to run (default: a shell)")
    sh.set_defaults(func=cmd_ssh)
    co = lab.add_parser("console", help="the tail of a host's console log",
                        description="The last lines of a lab host's serial console (a VM) or boot log (a container).")
    co.add_argument("host")
    co.add_argument("-n", type=int, default=40, help="lines (default 40)")
    co.set_defaults(func=cmd_console)


def cmd_deps(args) -> int:
    script = Path(__file__).with_name("install-deps")  # package data: a wheel carries it
    return subprocess.run(["bash", str(script)], check=False).returncode


def cmd_up(args) -> int:
    state = lifecycle.up(args.clients, args.containers)
    _print_hosts(state["hosts"], with_probe=False)
    print(f"inventory: {state['inventory']}")
    return 0


def _print_hosts(hosts: list[dict], with_probe: bool) -> None:
    print(f"{'HOST':16} {'KIND':10} {'SSH':22}" + (f" {'RUNNING':8} {'SSH OK':6}" if with_probe else ""))
    for h in hosts:
        line = f"{h['name']:16} {h['kind']:10} {h['address'] + ':' + str(h['port']):22}"
        if with_probe:
            line += f" {'yes' if h['running'] else 'NO':8} {'yes' if h['ssh'] else 'NO':6}"
        print(line)


def cmd_status(args) -> int:
    state = lifecycle.status()
    if args.json:
        print(json.dumps(state or {"hosts": []}, indent=2))
    elif state is None:
        print("no lab running (`kvprov lab up` starts one)")
    else:
        print(f"lab: {state['topology']}, image {state['image']}, accel {state['accel']}")
        _print_hosts(state["hosts"], with_probe=True)
        print(f"inventory: {state['inventory']}")
    if state is None:
        return 0
    return 0 if all(h["running"] and h["ssh"] for h in state["hosts"]) else EXIT_LAB


def cmd_down(args) -> int:
    for item in lifecycle.down():
        print(f"removed {item}")
    return 0


def _host(name: str) -> dict:
    state = lifecycle.load_state()
    if state is None:
        raise KvprovError("no lab running (`kvprov lab up` starts one)", EXIT_LAB)
    for h in state["hosts"]:
        if h["name"] == name:
            return h
    raise KvprovError(f"no lab host {name!r}; hosts: {', '.join(h['name'] for h in state['hosts'])}",
                      EXIT_USAGE)


def cmd_ssh(args) -> int:
    h = _host(args.host)
    argv = ssh_args(h["address"], h["port"]) + args.remote
    if sys.stdin.isatty() and not args.remote:
        argv.insert(1, "-t")
    os.execvp(argv[0], argv)


def cmd_console(args) -> int:
    h = _host(args.host)
    print(tail(topology.run_dir() / h["name"] / "console.log", args.n))
    return 0
