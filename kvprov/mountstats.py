"""Parse /proc/self/mountstats (pure: text in, data out).

Only NFS mounts carry the detail lines; other mounts are returned with just their
device, mount point and fstype.
"""

from __future__ import annotations

import re

from dataclasses import dataclass, field


@dataclass
class Transport:
    protocol: str  # "rdma", "tcp", "udp"
    fields: list[str]


@dataclass
class MountStats:
    device: str
    mountpoint: str
    fstype: str
    opts: dict[str, str] = field(default_factory=dict)
    nfsv4: dict[str, str] = field(default_factory=dict)
    transports: list[Transport] = field(default_factory=list)
    ops: dict[str, list[int]] = field(default_factory=dict)

    @property
    def pnfs(self) -> str:
        """The negotiated pNFS layout (e.g. LAYOUT_BLOCK_VOLUME), or "" if none."""
        value = self.nfsv4.get("pnfs", "")
        return "" if value == "not configured" else value

    def op_count(self, op: str) -> int:
        return self.ops.get(op, [0])[0]


def _options(text: str) -> dict[str, str]:
    out = {}
    for item in text.split(","):
        if item:
            key, _, value = item.partition("=")
            out[key] = value
    return out


def unescape(field: str) -> str:
    """The kernel writes space, tab, newline and backslash in mount points as octal (\\040)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse(text: str) -> list[MountStats]:
    mounts: list[MountStats] = []
    current: MountStats | None = None
    in_ops = False
    for raw in text.splitlines():
        line = raw.strip()
        if raw.startswith("device "):
            # device SRV:/path mounted on /mnt/x with fstype nfs4 statvers=1.1
            words = raw.split()
            try:
                on, with_ = words.index("on"), words.index("with")
                fstype = words[words.index("fstype") + 1]
            except (ValueError, IndexError):
                current = None
                continue
            current = MountStats(device=unescape(words[1]), mountpoint=unescape(" ".join(words[on + 1:with_])),
                                 fstype=fstype)
            mounts.append(current)
            in_ops = False
            continue
        if current is None or not line:
            continue
        key, _, rest = line.partition(":")
        rest = rest.strip()
        if key == "opts":
            current.opts = _options(rest)
        elif key == "nfsv4":
            current.nfsv4 = _options(rest)
        elif key == "xprt":
            parts = rest.split()
            if parts:
                current.transports.append(Transport(parts[0], parts[1:]))
        elif line == "per-op statistics":
            in_ops = True
        elif in_ops and rest:
            try:
                current.ops[key] = [int(x) for x in rest.split()]
            except ValueError:
                pass
    return mounts


def find(mounts: list[MountStats], mountpoint: str) -> MountStats | None:
    """The last (topmost) mount on mountpoint, as the kernel resolves it."""
    found = None
    for m in mounts:
        if m.mountpoint == mountpoint:
            found = m
    return found
