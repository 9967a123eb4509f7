"""Lab containers on the real NFS export (#23). The controller's kernel has no NFS client, so
neither it nor a container can mount the storage VM's export. kvlab-gpu1 can: each container
gets its KV directory from one NFS mount on kvlab-gpu1, made with kvprov's own options
(NFSv4.1 over RDMA, pNFS), relayed by sshfs.

- sshfs runs on the controller; its FUSE mount is made inside the container's mount namespace
  with the controller's /dev/fuse (nspawn gives a container none). The container's processes
  see an ordinary directory; each of their file calls becomes one sftp call served on
  kvlab-gpu1 (as root) on that host's NFS mount, over 4 ssh connections (RELAY_CONNS): an NFS
  client has many calls in flight, and one sftp server would queue every call behind one the
  storage does not answer (a stopped NFS server: each call fails only after the soft mount's
  timeout).
- The relay caches nothing (no sshfs directory cache, FUSE entry/attribute/negative timeouts 0),
  so what one container sees of another's files is what the NFS client on kvlab-gpu1 sees.
- Two containers use two NFS mounts, each with `nosharecache` (its own superblock, dentry and
  attribute caches, like another client host; one NFS client id, as both are on one kernel),
  beside kvprov's own mount, which the other lab group's tests remount meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from kvprov.lab import topology
from kvprov.lab.ssh import SSH_OPTS, ssh

GPU1 = ("127.0.0.1", topology.SSH_PORT_BASE + 1)
MOUNT_UNIT = "/etc/systemd/system/mnt-kvcache.mount"
FUSE_MAGIC = "65735546"  # statfs f_type of a FUSE file system
NO_CACHE = "dir_cache=no,entry_timeout=0,attr_timeout=0,negative_timeout=0"
RELAY_CONNS = 4


def _gpu1(command: str, timeout: float = 120) -> str:
    r = ssh(*GPU1, command, timeout=timeout)
    assert r.returncode == 0, f"`{command}` on kvlab-gpu1 -> {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def container_init(lab: dict, name: str) -> int:
    """The pid of the container's init (the child of its systemd-nspawn, in `lab status`)."""
    [nspawn] = [h["pid"] for h in lab["hosts"] if h["name"] == name]
    children = Path(f"/proc/{nspawn}/task/{nspawn}/children").read_text().split()
    assert children, f"{name}: systemd-nspawn {nspawn} has no child"
    return int(children[0])


def in_container(pid: int, command: str, **kw) -> subprocess.CompletedProcess:
    """`command` in the container's mount and pid namespaces, with the controller's credentials."""
    return subprocess.run(["nsenter", "-t", str(pid), "-m", "-p", "--", "sh", "-c", command],
                          capture_output=True, text=True, timeout=60, **kw)


def kvprov_mount(inventory: str) -> tuple[str, str]:
    """What and Options of the KV mount unit kvprov renders for kvlab-gpu1 (its desired state:
    the tests of the other lab group may be remounting the live one with other options)."""
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([sys.executable, "-m", "kvprov", "render", inventory, "--out", d, "--host", "kvlab-gpu1"],
                       check=True, capture_output=True, timeout=300)
        unit = Path(d, "kvlab-gpu1", MOUNT_UNIT.lstrip("/")).read_text()
    fields = dict(line.partition("=")[::2] for line in unit.splitlines() if "=" in line)
    return fields["What"], fields["Options"]


@contextlib.contextmanager
def nfs_mount_on_gpu1(mount: tuple[str, str], path: str):
    """One more mount of the KV export on kvlab-gpu1 at `path`: `mount` (What and Options, as
    kvprov_mount gives them) plus nosharecache. Yields the options."""
    src, opts = mount
    opts += ",nosharecache"
    _gpu1(f"mkdir -p {path} && mount -t nfs4 -o {shlex.quote(opts)} {shlex.quote(src)} {path}")
    try:
        yield opts
    finally:
        _gpu1(f"umount {path} && rmdir {path}")


@contextlib.contextmanager
def relay(lab: dict, container: str, target: str, remote_dir: str):
    """`remote_dir` on kvlab-gpu1 mounted at `target` inside `container` (over what is there)."""
    pid = container_init(lab, container)
    fd = os.open("/dev/fuse", os.O_RDWR)
    sshfs = None
    try:
        r = in_container(pid, f"mount -i -t fuse.sshfs -o fd={fd},rootmode=40000,user_id=0,group_id=0,"
                              f"allow_other kvlab-gpu1:{remote_dir} {target}", pass_fds=(fd,))
        assert r.returncode == 0, f"{container}: FUSE mount at {target}: {r.stderr}"
        ssh_opts = ",".join(o for o in SSH_OPTS if o != "-o")
        sshfs = subprocess.Popen(
            ["sshfs", "-f", "-o", f"{ssh_opts},IdentityFile={topology.ssh_key_path()},port={GPU1[1]},{NO_CACHE},max_conns={RELAY_CONNS}",
             f"root@{GPU1[0]}:{remote_dir}", f"/dev/fd/{fd}"],
            pass_fds=(fd,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        os.close(fd)
        fd = None
        r = in_container(pid, f"stat -f -c %t {target} && ls {target} >/dev/null")
        assert r.returncode == 0 and r.stdout.strip() == FUSE_MAGIC, (
            f"{container}: the relay of kvlab-gpu1:{remote_dir} does not answer: {r.stdout}{r.stderr}")
        yield
    finally:
        if fd is not None:
            os.close(fd)
        if sshfs is not None:
            in_container(pid, f"umount {target} || umount -l {target}")
            sshfs.terminate()
            try:
                sshfs.wait(timeout=30)
            except subprocess.TimeoutExpired:
                sshfs.kill()


def read_bytes(path: str) -> int:
    """What applications have read through the NFS mount at `path` on kvlab-gpu1 (the kernel's
    mountstats `bytes:` line: normal plus O_DIRECT reads)."""
    text = _gpu1("cat /proc/self/mountstats")
    block = text.split(f" mounted on {path} with fstype nfs4 ", 1)[1].split("\ndevice ", 1)[0]
    [fields] = [line.split()[1:] for line in block.splitlines() if line.strip().startswith("bytes:")]
    return int(fields[0]) + int(fields[2])
