"""Build (and cache) the lab's Debian image from Debian packages.

One image serves every lab host: the storage VM and GPU-node VMs boot it as a QEMU disk
(their role comes from the kernel command line), containers use its root directory as
the lower layer of an overlay. The image is cached under the lab home, keyed by a hash
of this recipe (this file, the guest files, the lab's ssh key and the NIXL wheelhouse's
file names and sizes), and rebuilt when the recipe changes.

The image carries the lab's NIXL wheelhouse where the nixl role copies it on a host
(/opt/kvprov/wheelhouse): the role's copy then finds every wheel in place and the first
deploy of a TCG-emulated VM saves the ~30 s of pushing 100 MB through its ssh.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from kvprov.errors import EXIT_ENVIRONMENT, EXIT_LAB, KvprovError
from kvprov.lab import topology
from kvprov.lab.proc import Progress, run

SUITE = "bookworm"
# debootstrap --include: enough to boot systemd with sshd and run Ansible.
BASE_PACKAGES = ["systemd", "systemd-sysv", "dbus", "openssh-server", "python3", "iproute2",
                 "kmod", "udev", "procps"]
# installed inside the chroot: the kernel, the storage server, and the client-side
# packages a GPU node would have available (kvprov configures them, the lab does not).
KERNEL_AND_STORAGE_PACKAGES = [
    "linux-image-amd64", "initramfs-tools", "nfs-kernel-server", "nfs-common", "rdma-core",
    "ibverbs-providers", "ibverbs-utils", "xfsprogs", "fio", "python3-venv", "python3-apt",
    "python3-packaging",
    "ca-certificates", "less", "sudo",
]
DISK_SIZE = "6G"
MIN_FREE_GIB = 6
GUEST_DIR = Path(__file__).parent / "guest"
# install-deps fills the first (the lab inventory's kvprov_nixl_wheelhouse); the second is
# the nixl role's _kvprov_nixl_host_wheelhouse (tests/unit/test_lab_image.py holds them equal)
WHEELHOUSE, HOST_WHEELHOUSE = Path("/var/lib/kvprov/wheelhouse"), "opt/kvprov/wheelhouse"


@dataclass(frozen=True)
class Image:
    root: Path

    @property
    def rootfs(self) -> Path:
        return self.root / "rootfs"

    @property
    def disk(self) -> Path:
        return self.root / "disk.img"

    @property
    def kernel(self) -> Path:
        return self.root / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.root / "initrd.img"

    @property
    def ready(self) -> bool:
        return (self.root / "READY").exists()


def recipe_hash(pubkey: str) -> str:
    h = hashlib.sha256()
    h.update(Path(__file__).read_bytes())
    for f in sorted(GUEST_DIR.iterdir()):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    h.update(pubkey.encode())
    for f in wheels():
        h.update(f"{f.name}\0{f.stat().st_size}\0".encode())
    return h.hexdigest()[:12]


def wheels() -> list[Path]:
    """The lab wheelhouse's wheels (none before install-deps has run)."""
    return sorted(WHEELHOUSE.glob("*.whl"))


def current(pubkey: str) -> Image:
    return Image(topology.cache_dir() / f"image-{recipe_hash(pubkey)}")


@contextlib.contextmanager
def _chroot_mounts(root: Path, log: Path):
    mounted = []
    try:
        for src, fstype in (("/proc", "proc"), ("/sys", "sysfs"), ("/dev", None), ("/dev/pts", None)):
            target = root / src.lstrip("/")
            target.mkdir(parents=True, exist_ok=True)
            if fstype:
                run(["mount", "-t", fstype, fstype, str(target)], log)
            else:
                run(["mount", "--bind", src, str(target)], log)
            mounted.append(target)
        yield
    finally:
        for target in reversed(mounted):
            run(["umount", "-l", str(target)], log, check=False)


def _install(src: Path, dst: Path, mode: int = 0o644) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    dst.chmod(mode)


def _copy_apt_sources(rootfs: Path) -> None:
    """Use the controller's own apt sources inside the image (never a hard-coded mirror)."""
    etc_apt = Path("/etc/apt")
    lists = [p for p in (etc_apt / "sources.list.d").glob("*") if p.suffix in (".list", ".sources")]
    if (etc_apt / "sources.list").is_file():
        lists.append(etc_apt / "sources.list")
    if not lists:
        return  # keep debootstrap's default
    (rootfs / "etc/apt/sources.list").write_text("")
    for p in lists:
        target = rootfs / "etc/apt" / p.relative_to(etc_apt)
        _install(p, target)


def _configure(rootfs: Path, pubkey: str, log: Path) -> None:
    g = GUEST_DIR
    _install(g / "kvlab-net", rootfs / "usr/local/sbin/kvlab-net", 0o755)
    _install(g / "kvlab-storage", rootfs / "usr/local/sbin/kvlab-storage", 0o755)
    _install(g / "kvlab-net.service", rootfs / "etc/systemd/system/kvlab-net.service")
    _install(g / "kvlab-storage.service", rootfs / "etc/systemd/system/kvlab-storage.service")
    _install(g / "nfs-server-lab.conf", rootfs / "etc/systemd/system/nfs-server.service.d/kvprov-lab.conf")
    _install(g / "nfs.conf", rootfs / "etc/nfs.conf.d/kvprov-lab.conf")
    _install(g / "exports", rootfs / "etc/exports")
    (rootfs / "etc/fstab").write_text("/dev/vda / ext4 rw,errors=remount-ro 0 1\n")
    (rootfs / "etc/resolv.conf").unlink(missing_ok=True)
    (rootfs / "etc/resolv.conf").write_text("nameserver 10.0.2.3\n")  # slirp's DNS
    (rootfs / "etc/hostname").write_text("kvlab\n")
    (rootfs / "etc/machine-id").write_text("")  # a fresh id on every boot
    ssh = rootfs / "root/.ssh"
    ssh.mkdir(mode=0o700, parents=True, exist_ok=True)
    (ssh / "authorized_keys").write_text(pubkey)
    (ssh / "authorized_keys").chmod(0o600)
    (rootfs / "etc/ssh/sshd_config.d/kvprov-lab.conf").write_text(
        "PermitRootLogin prohibit-password\nUseDNS no\nPasswordAuthentication no\n")
    (rootfs / "etc/systemd/journald.conf.d").mkdir(parents=True, exist_ok=True)
    (rootfs / "etc/systemd/journald.conf.d/kvprov-lab.conf").write_text("[Journal]\nStorage=volatile\n")
    chroot = ["chroot", str(rootfs)]
    run(chroot + ["systemctl", "enable", "kvlab-net.service", "kvlab-storage.service",
                  "nfs-server.service", "ssh.service"], log)
    # The GPU-node VMs must come up with NFS/RDMA *not* configured: kvprov's roles do it.
    run(chroot + ["systemctl", "disable", "nfs-blkmap.service"], log, check=False)
    run(chroot + ["systemctl", "mask", "apt-daily.timer", "apt-daily-upgrade.timer",
                  "e2scrub_all.timer", "fstrim.timer"], log, check=False)
    staged = rootfs / HOST_WHEELHOUSE  # as the nixl role's copy leaves it: root, 0644 files in a 0755 directory
    for wheel in wheels():
        _install(wheel, staged / wheel.name)
    if staged.is_dir():
        staged.chmod(0o755)


def build(pubkey: str, progress: Progress, force: bool = False) -> Image:
    """Return the cached image for this recipe, building it first when needed."""
    cache = topology.cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    image = current(pubkey)
    with (cache / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if image.ready and not force:
            progress(f"image {image.root.name}: cached")
            return image
        free = shutil.disk_usage(cache).free / 2**30
        if free < MIN_FREE_GIB:
            raise KvprovError(f"not enough disk space in {cache}: {free:.1f} GiB free, the lab image "
                              f"needs {MIN_FREE_GIB} GiB (set KVPROV_LAB_HOME to use another disk)",
                              EXIT_ENVIRONMENT)
        t0 = time.monotonic()
        work = cache / f"build-{image.root.name}"
        if work.exists():
            shutil.rmtree(work)  # a half-finished build of ours
        work.mkdir()
        log = work / "build.log"
        rootfs = work / "rootfs"
        progress(f"image {image.root.name}: debootstrap {SUITE} (log: {log})")
        run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", SUITE,
             str(rootfs)], log)
        progress("image: installing kernel, knfsd, NFS/RDMA client packages")
        _copy_apt_sources(rootfs)
        policy = rootfs / "usr/sbin/policy-rc.d"
        policy.write_text("#!/bin/sh\nexit 101\n")  # no daemons start inside the chroot
        policy.chmod(0o755)
        env = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
               "LC_ALL": "C"}
        with _chroot_mounts(rootfs, log):
            run(["chroot", str(rootfs), "apt-get", "update", "-q"], log, env=env)
            run(["chroot", str(rootfs), "apt-get", "install", "-y", "-q", "--no-install-recommends",
                 *KERNEL_AND_STORAGE_PACKAGES], log, env=env)
            run(["chroot", str(rootfs), "apt-get", "clean"], log, env=env)
            _configure(rootfs, pubkey, log)
        policy.unlink()
        kernels = sorted((rootfs / "boot").glob("vmlinuz-*"))
        initrds = sorted((rootfs / "boot").glob("initrd.img-*"))
        if not kernels or not initrds:
            raise KvprovError(f"image build produced no kernel/initrd in {rootfs}/boot; see {log}", EXIT_LAB)
        shutil.copyfile(kernels[-1], work / "vmlinuz")
        shutil.copyfile(initrds[-1], work / "initrd.img")
        progress(f"image: writing {DISK_SIZE} ext4 disk")
        run(["mkfs.ext4", "-q", "-F", "-L", "kvlab-root", "-d", str(rootfs), str(work / "disk.img"),
             DISK_SIZE], log)
        (work / "READY").write_text(f"built in {time.monotonic() - t0:.1f}s\n")
        if image.root.exists():
            shutil.rmtree(image.root)
        work.rename(image.root)
        for old in cache.glob("image-*"):
            if old != image.root:
                shutil.rmtree(old)  # images of older recipes, made by this same code
        progress(f"image {image.root.name}: built in {time.monotonic() - t0:.0f}s")
        return image
