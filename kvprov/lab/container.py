"""systemd-nspawn containers for the lab: each in its own network namespace with a veth
to the controller, booting systemd from an overlay on the lab image's root directory, with
the engine wheelhouse and the lab's models bound in read-only (topology.container_binds)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from kvprov.lab import topology
from kvprov.lab.proc import run

NO_KERNEL_NFS_UNITS = ("proc-fs-nfsd.mount", "run-rpc_pipefs.mount")


def netns_up(c: topology.Container) -> None:
    ns = c.netns
    run(["ip", "netns", "add", ns])
    run(["ip", "link", "add", c.veth, "type", "veth", "peer", "name", "host0", "netns", ns])
    run(["ip", "addr", "add", f"{c.host_ip}/24", "dev", c.veth])
    run(["ip", "link", "set", c.veth, "up"])
    run(["ip", "-n", ns, "link", "set", "lo", "up"])
    run(["ip", "-n", ns, "addr", "add", f"{c.ip}/24", "dev", "host0"])
    run(["ip", "-n", ns, "link", "set", "host0", "up"])


def netns_down(c: topology.Container) -> list[str]:
    removed = []
    if run(["ip", "netns", "del", c.netns], check=False).returncode == 0:
        removed.append(f"netns {c.netns}")
    # deleting the namespace deletes the veth pair; this only catches a half-made one
    if run(["ip", "link", "del", c.veth], check=False).returncode == 0:
        removed.append(f"veth {c.veth}")
    return removed


def root_paths(rundir: Path, c: topology.Container) -> dict[str, Path]:
    d = rundir / c.name
    return {"dir": d, "upper": d / "upper", "work": d / "work", "root": d / "root"}


def start(c: topology.Container, rootfs: Path, rundir: Path) -> int:
    p = root_paths(rundir, c)
    for k in ("upper", "work", "root"):
        p[k].mkdir(parents=True, exist_ok=True)
    etc = p["upper"] / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "fstab").write_text("# kvprov lab container: no block devices\n")
    (etc / "hostname").write_text(c.name + "\n")
    # The host kernel has no NFS: mask the units that would only fail in a container.
    units = etc / "systemd/system"
    units.mkdir(parents=True, exist_ok=True)
    for unit in NO_KERNEL_NFS_UNITS:
        if not (units / unit).is_symlink():
            (units / unit).symlink_to("/dev/null")
    run(["mount", "-t", "overlay", "overlay", "-o",
         f"lowerdir={rootfs},upperdir={p['upper']},workdir={p['work']}", str(p["root"])])
    netns_up(c)
    binds = []
    for host_path, guest_path in topology.container_binds():
        host_path.mkdir(parents=True, exist_ok=True)  # nspawn refuses a missing source
        binds.append(f"--bind-ro={host_path}:{guest_path}")
    topology.shared_kv_dir().mkdir(parents=True, exist_ok=True)
    binds.append(f"--bind={topology.shared_kv_dir()}:{topology.CONTAINER_KV}")
    with (p["dir"] / "console.log").open("w") as out:
        proc = subprocess.Popen(
            ["systemd-nspawn", "--quiet", "--register=no", "--keep-unit", "--boot",
             f"--directory={p['root']}", f"--machine={c.name}",
             f"--network-namespace-path=/run/netns/{c.netns}",
             "--link-journal=no", "--resolv-conf=off", "--timezone=off", "--console=pipe", *binds],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    return proc.pid


def unmount(rundir: Path, c: topology.Container) -> list[str]:
    root = root_paths(rundir, c)["root"]
    if run(["mountpoint", "-q", str(root)], check=False).returncode == 0:
        run(["umount", str(root)], check=False)
        return [f"overlay {root}"]
    return []
