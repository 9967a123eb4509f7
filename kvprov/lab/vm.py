"""QEMU virtual machines for the lab: accelerator probe, command line, start."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from kvprov.lab import topology
from kvprov.lab.image import Image
from kvprov.lab.proc import run

QEMU = "qemu-system-x86_64"
KVM_PROBE_SECONDS = 6


def probe_accel(image: Image, workdir: Path) -> str:
    """Return "kvm" when KVM really boots a kernel here, else "tcg" (cached per host boot).

    /dev/kvm can exist while nested guests hang at boot (as on this project's CI), so
    boot the lab kernel with KVM and wait for its first console line. KVPROV_LAB_ACCEL
    (kvm|tcg) skips the probe.
    """
    forced = os.environ.get("KVPROV_LAB_ACCEL")
    if forced in ("kvm", "tcg"):
        return forced
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "tcg"
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    cached = topology.cache_dir() / f"accel-{boot_id}"
    if cached.exists():
        return cached.read_text().strip()
    log = workdir / "kvm-probe.log"
    with log.open("w") as fh:
        proc = subprocess.Popen(
            [QEMU, "-accel", "kvm", "-m", "256", "-display", "none", "-vga", "none", "-no-reboot",
             "-serial", "stdio", "-monitor", "none", "-kernel", str(image.kernel),
             "-append", "console=ttyS0 panic=-1 earlyprintk=ttyS0"],
            stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + KVM_PROBE_SECONDS
    ok = False
    while time.monotonic() < deadline and proc.poll() is None:
        if "Linux version" in log.read_text(errors="replace"):
            ok = True
            break
        time.sleep(0.2)
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for old in topology.cache_dir().glob("accel-*"):
        old.unlink()
    cached.write_text("kvm" if ok else "tcg")
    return cached.read_text()


def command(vm: topology.Vm, image: Image, overlay: Path, shared_disk: Path, accel: str,
            console: Path, pidfile: Path) -> list[str]:
    # -cpu max: wheels such as numpy 2.x need x86-64-v2+ instructions that qemu64 lacks
    accel_args = ["-accel", "kvm", "-cpu", "host"] if accel == "kvm" else ["-accel", "tcg,thread=multi", "-cpu", "max"]
    cmd = [QEMU, "-name", vm.name, *accel_args, "-smp", "1", "-m", str(vm.mem_mib),
           "-display", "none", "-vga", "none", "-monitor", "none", "-parallel", "none",
           "-serial", f"file:{console}", "-pidfile", str(pidfile),
           "-kernel", str(image.kernel), "-initrd", str(image.initrd),
           "-append", vm.kernel_cmdline(),
           "-object", "rng-random,filename=/dev/urandom,id=rng0", "-device", "virtio-rng-pci,rng=rng0",
           "-drive", f"file={overlay},format=qcow2,if=virtio",
           "-drive", f"file={shared_disk},format=raw,if=virtio,file.locking=off,cache=none"]
    mgmt = vm.nics[0]
    cmd += ["-netdev", f"user,id=mgmt,net=10.0.2.0/24,hostfwd=tcp:127.0.0.1:{vm.ssh_port}-:22",
            "-device", f"virtio-net-pci,netdev=mgmt,mac={mgmt.mac}"]
    for i, (nic, link) in enumerate(zip(vm.nics[1:], vm.links), start=1):
        cmd += ["-netdev", f"socket,id=data{i},{link}",
                "-device", f"virtio-net-pci,netdev=data{i},mac={nic.mac}"]
    return cmd


def start(vm: topology.Vm, image: Image, rundir: Path, shared_disk: Path, accel: str) -> int:
    """Create the VM's copy-on-write disk and start QEMU in the background; return its pid."""
    d = rundir / vm.name
    d.mkdir(parents=True, exist_ok=True)
    overlay = d / "disk.qcow2"
    run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(image.disk), "-F", "raw", str(overlay)])
    console = d / "console.log"
    pidfile = d / "qemu.pid"
    with (d / "qemu.log").open("w") as out:
        proc = subprocess.Popen(command(vm, image, overlay, shared_disk, accel, console, pidfile),
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    return proc.pid


def listening(port: int) -> bool:
    """True when something listens on TCP 127.0.0.1:port (without connecting to it:
    QEMU's socket netdev accepts exactly one peer)."""
    want = f"0100007F:{port:04X}"
    for table in ("/proc/net/tcp",):
        try:
            for line in Path(table).read_text().splitlines()[1:]:
                f = line.split()
                if f[1] == want and f[3] == "0A":
                    return True
        except OSError:
            pass
    return False
