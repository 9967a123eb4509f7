"""`kvprov lab up|down|status`: bring the lab up, report on it, take it down.

Every resource the lab creates (processes, network namespaces, veth devices, overlay
mounts, files under <lab home>/run) is recorded in run/state.json *before* it is
created, so `down` removes exactly what `up` made, even after a crash half-way.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kvprov.errors import EXIT_ENVIRONMENT, EXIT_LAB, EXIT_USAGE, KvprovError
from kvprov.lab import container, image, inventory, model, topology, vm
from kvprov.lab.proc import Progress, run, tail
from kvprov.lab.ssh import answers, ssh

VM_BOOT_TIMEOUT = 300  # TCG on 2 cores: ~25 s normally; generous for a loaded CI machine
CONTAINER_BOOT_TIMEOUT = 60
STORAGE_READY_TIMEOUT = 120

REQUIRED_TOOLS = {  # command -> Debian package
    "qemu-system-x86_64": "qemu-system-x86",
    "qemu-img": "qemu-utils",
    "debootstrap": "debootstrap",
    "mkfs.ext4": "e2fsprogs",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "ip": "iproute2",
}
CONTAINER_TOOLS = {"systemd-nspawn": "systemd-container"}
# Every container's systemd, journald and logind hold inotify instances (about 5 each), all
# counted against root: the kernel's default of 128 stops the 24th or so container from
# booting (no ssh, an empty console). `up` raises the limit for the lab; `down` restores it.
INOTIFY_INSTANCES = Path("/proc/sys/fs/inotify/max_user_instances")
INOTIFY_PER_CONTAINER = 16


def state_path() -> Path:
    return topology.run_dir() / "state.json"


def load_state() -> dict | None:
    try:
        return json.loads(state_path().read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise KvprovError(f"lab state {state_path()} is unreadable ({e}); remove it after checking "
                          "that no lab processes run", EXIT_LAB) from e


def save_state(state: dict) -> None:
    p = state_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(p)


def _ours(pid: int) -> bool:
    """The pid is alive and is a process this lab started (its command line names the lab's
    run dir: QEMU's disks and nspawn's root live there), so a recycled pid is never signalled."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return str(topology.run_dir()) in cmdline


def _running(pid: int) -> bool:
    """The process exists and has not exited (for a child just started: right after
    fork/exec its /proc cmdline can briefly be empty, so `_ours` would misreport it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def preflight(topo: topology.Topology) -> None:
    if os.geteuid() != 0:
        raise KvprovError("the lab needs root (QEMU, network namespaces, overlay mounts): "
                          "run `sudo kvprov lab up`", EXIT_ENVIRONMENT)
    tools = dict(REQUIRED_TOOLS, **(CONTAINER_TOOLS if topo.containers else {}))
    missing = sorted({pkg for cmd, pkg in tools.items() if shutil.which(cmd) is None})
    if missing:
        raise KvprovError("missing tools for the lab; install them with:\n"
                          f"  apt-get install -y {' '.join(missing)}", EXIT_ENVIRONMENT)
    busy = []
    for port in topo.tcp_ports():
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                busy.append(port)
    if busy:
        raise KvprovError(f"127.0.0.1 port(s) {', '.join(map(str, busy))} already in use; the lab needs "
                          f"{', '.join(map(str, topo.tcp_ports()))} (find the owner with `ss -ltnp`)",
                          EXIT_ENVIRONMENT)
    if topo.containers:
        clash = [c.netns for c in topo.container_hosts if Path(f"/run/netns/{c.netns}").exists()]
        if clash:
            raise KvprovError(f"network namespace(s) {', '.join(clash)} exist but no lab is recorded; "
                              "remove them with `ip netns del NAME` if they are leftovers", EXIT_ENVIRONMENT)


def ensure_key(progress: Progress) -> str:
    key = topology.ssh_key_path()
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "kvprov-lab", "-f", str(key)])
        progress(f"created lab ssh key {key}")
    return key.with_suffix(".pub").read_text()


def ensure_engine_lab(progress: Progress) -> None:
    """Containers can run a real CPU engine when scripts/install-deps made the engine venv
    and wheelhouse: build the tiny model they serve (skipped when built). Otherwise say so
    once; the rest of the lab does not need it."""
    if not model.engine_venv_ready():
        progress(f"engine lab not available (no {topology.ENGINE_VENV}): run scripts/install-deps "
                 "for vLLM/LMCache in the containers")
        return
    model.ensure(progress)


def _host_entries(topo: topology.Topology) -> list[dict]:
    hosts = [{"name": v.name, "kind": "vm", "role": v.role, "address": "127.0.0.1", "port": v.ssh_port}
             for v in topo.vms]
    hosts += [{"name": c.name, "kind": "container", "role": "container", "address": c.ip, "port": 22,
               "index": c.index} for c in topo.container_hosts]
    return hosts


def _console(host: dict) -> Path:
    return topology.run_dir() / host["name"] / "console.log"


def _wait_ssh(host: dict, deadline: float, pid_alive) -> None:
    while time.monotonic() < deadline:
        if not pid_alive():
            raise KvprovError(f"{host['name']} exited during boot; its console log "
                              f"({_console(host)}) ends with:\n{tail(_console(host))}", EXIT_LAB)
        if answers(host["address"], host["port"]):
            return
        time.sleep(1)
    raise KvprovError(f"{host['name']} did not answer ssh on {host['address']}:{host['port']} in time; "
                      f"its console log ({_console(host)}) ends with:\n{tail(_console(host))}", EXIT_LAB)


def _wait_storage(host: dict, deadline: float) -> None:
    """The storage VM is ready when knfsd is active and listens on RDMA port 20049."""
    last = ""
    while time.monotonic() < deadline:
        r = ssh(host["address"], host["port"],
                "systemctl is-active kvlab-storage nfs-server; cat /proc/fs/nfsd/portlist", timeout=15)
        last = (r.stdout + r.stderr).strip()
        if r.returncode == 0 and f"rdma {topology.RDMA_PORT}" in r.stdout:
            return
        if "failed" in r.stdout:
            break
        time.sleep(1)
    journal = ssh(host["address"], host["port"],
                  "journalctl -b --no-pager -n 30 -u kvlab-storage -u nfs-server", timeout=15)
    raise KvprovError(f"storage VM did not start knfsd with RDMA: {last}\n{journal.stdout}", EXIT_LAB)


def up(clients: int = 1, containers: int = 0, progress: Progress | None = None) -> dict:
    progress = progress or Progress()
    try:
        topo = topology.Topology(clients, containers)
    except ValueError as e:
        raise KvprovError(str(e), EXIT_USAGE) from e
    state = load_state()
    if state is not None:
        alive = [h["name"] for h in state["hosts"] if h.get("pid") and _ours(h["pid"])]
        if len(alive) == len(state["hosts"]) and state.get("ready"):
            if state["topology"] == {"clients": clients, "containers": containers}:
                progress("lab already running; nothing to do (`kvprov lab status` for details)")
                return state
            raise KvprovError(f"a lab with {state['topology']} is running; `kvprov lab down` first",
                              EXIT_USAGE)
        progress("found an incomplete or stopped lab; cleaning it up first")
        down(progress)
    preflight(topo)
    t0 = time.monotonic()
    pubkey = ensure_key(progress)
    img = image.build(pubkey, progress)
    if topo.containers:
        ensure_engine_lab(progress)
    rundir = topology.run_dir()
    rundir.mkdir(parents=True, exist_ok=True)
    accel = vm.probe_accel(img, rundir)
    progress(f"accelerator: {accel}" + ("" if accel == "kvm" else " (KVM unavailable or hangs; QEMU TCG)"))
    state = {"topology": {"clients": clients, "containers": containers}, "image": img.root.name,
             "accel": accel, "hosts": _host_entries(topo), "netns": [], "mounts": [], "ready": False,
             "inventory": str(rundir / "inventory.yml")}
    save_state(state)
    shared = rundir / "shared.img"
    with shared.open("wb") as fh:  # sparse; the storage VM formats it XFS at first boot
        fh.truncate(topology.SHARED_DISK_GIB * 2**30)

    by_name = {h["name"]: h for h in state["hosts"]}

    def started(name: str, pid: int) -> None:
        by_name[name].update(pid=pid, started=time.monotonic())
        save_state(state)

    # Containers first: they boot in about a second while the CPUs are still free.
    if topo.containers:
        _raise_inotify_limit(state, 128 + INOTIFY_PER_CONTAINER * topo.containers, progress)
    for c in topo.container_hosts:
        state["netns"].append(c.name)
        state["mounts"].append(c.name)
        save_state(state)
        started(c.name, container.start(c, img.rootfs, rundir))
    if topo.containers:
        progress(f"started {topo.containers} container(s)")
    storage = topo.storage
    started(storage.name, vm.start(storage, img, rundir, shared, accel))
    deadline = time.monotonic() + 20
    while not all(vm.listening(topology.LINK_PORT_BASE + i) for i in range(1, clients + 1)):
        if time.monotonic() > deadline or not _running(by_name[storage.name]["pid"]):
            raise KvprovError(f"storage VM failed to start: {tail(rundir / storage.name / 'qemu.log')}", EXIT_LAB)
        time.sleep(0.1)
    for v in topo.clients_vms:
        started(v.name, vm.start(v, img, rundir, shared, accel))
    progress(f"started {len(topo.vms)} VM(s): {', '.join(v.name for v in topo.vms)}")

    def wait(host: dict) -> dict:
        limit = VM_BOOT_TIMEOUT if host["kind"] == "vm" else CONTAINER_BOOT_TIMEOUT
        _wait_ssh(host, host["started"] + limit, lambda: _running(host["pid"]))
        host["ready_after_s"] = round(time.monotonic() - host["started"], 1)
        progress(f"{host['name']}: ssh ready {host['ready_after_s']:.1f}s after its start")
        if host["role"] == "storage":
            _wait_storage(host, time.monotonic() + STORAGE_READY_TIMEOUT)
            progress(f"{host['name']}: knfsd serving NFSv4.1+/RDMA on port {topology.RDMA_PORT}")
        return host

    with ThreadPoolExecutor(max_workers=min(32, len(state["hosts"]))) as pool:
        list(pool.map(wait, state["hosts"]))
    for h in state["hosts"]:
        del h["started"]  # monotonic clock values mean nothing to a later process
    Path(state["inventory"]).write_text(inventory.render(topo))
    if topo.containers:
        used = [container_memory(h["pid"]) for h in state["hosts"] if h["kind"] == "container"]
        progress(f"memory: {sum(used) / len(used) / 2**20:.0f} MiB per container on average "
                 f"(PSS; {sum(used) / 2**30:.1f} GiB for {len(used)})")
    state["ready"] = True
    state["up_seconds"] = round(time.monotonic() - t0, 1)
    save_state(state)
    progress(f"lab up in {state['up_seconds']:.0f}s; inventory: {state['inventory']}")
    return state


def _raise_inotify_limit(state: dict, want: int, progress: Progress) -> None:
    old = int(INOTIFY_INSTANCES.read_text())
    if old >= want:
        return
    state["inotify_instances"] = old  # recorded before the change: `down` puts it back
    save_state(state)
    INOTIFY_INSTANCES.write_text(f"{want}\n")
    progress(f"fs.inotify.max_user_instances {old} -> {want} for {state['topology']['containers']} "
             "containers (restored by `kvprov lab down`)")


def container_memory(pid: int) -> int:
    """Bytes of memory (PSS) of an nspawn process and everything below it: one container."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo += children.get(p, [])
        try:
            rollup = Path(f"/proc/{p}/smaps_rollup").read_text()
        except OSError:
            continue
        total += next((int(line.split()[1]) * 1024 for line in rollup.splitlines() if line.startswith("Pss:")), 0)
    return total


def status() -> dict | None:
    state = load_state()
    if state is None:
        return None

    def probe(h: dict) -> dict:
        running = bool(h.get("pid")) and _ours(h["pid"])
        return dict(h, running=running, ssh=running and answers(h["address"], h["port"]))

    with ThreadPoolExecutor(max_workers=min(32, len(state["hosts"]) or 1)) as pool:
        state["hosts"] = list(pool.map(probe, state["hosts"]))
    return state


def _stop(pids: list[int], grace: float) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_ours(p) for p in pids):
        time.sleep(0.2)
    for pid in pids:
        if _ours(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_ours(p) for p in pids):
        time.sleep(0.1)


def down(progress: Progress | None = None) -> list[str]:
    """Remove everything the recorded lab made; return what was removed."""
    progress = progress or Progress()
    state = load_state()
    rundir = topology.run_dir()
    if state is None:
        if rundir.exists():
            shutil.rmtree(rundir)
            return [f"dir {rundir}"]
        progress("no lab recorded; nothing to do")
        return []
    removed = []
    hosts = state["hosts"]
    # VMs are throwaway (their disks are deleted below): a plain kill is safe and fast.
    vm_pids = [h["pid"] for h in hosts if h["kind"] == "vm" and h.get("pid") and _ours(h["pid"])]
    ct_pids = [h["pid"] for h in hosts if h["kind"] == "container" and h.get("pid") and _ours(h["pid"])]
    _stop(ct_pids, grace=10)  # nspawn turns SIGTERM into an orderly container shutdown
    _stop(vm_pids, grace=3)
    removed += [f"process {p}" for p in ct_pids + vm_pids]
    containers = {h["name"]: topology.Container(h["name"], h["index"]) for h in hosts if h["kind"] == "container"}
    for name in state.get("mounts", []):
        removed += container.unmount(rundir, containers[name])
    for name in state.get("netns", []):
        removed += container.netns_down(containers[name])
    if "inotify_instances" in state:
        INOTIFY_INSTANCES.write_text(f"{state['inotify_instances']}\n")
        removed.append(f"fs.inotify.max_user_instances back to {state['inotify_instances']}")
    shutil.rmtree(rundir)
    removed.append(f"dir {rundir}")
    progress(f"lab down: removed {len(removed)} resource(s)")
    return removed
