"""Parsers of what a Linux NFS server (knfsd) says about itself (pure: text in, data out).

- /proc/fs/nfsd/versions: "-2 +3 +4 +4.1 +4.2" (newer kernels also "-4.0");
- /proc/fs/nfsd/portlist: one listener a line, "rdma 20049", "tcp 2049";
- `exportfs -v`: one export a line, "PATH<tab>CLIENT(options)" (a path longer than 14
  characters on a line of its own, the client on the next, indented); `<world>` is `*`;
- `stat -f -c '%S %b %a %c %d' PATH`: block size, blocks, blocks available to users,
  inodes, free inodes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

STATFS_FORMAT = "%S %b %a %c %d"


def versions(text: str) -> dict[str, bool]:
    """{"3": False, "4": True, "4.1": True, ...} from /proc/fs/nfsd/versions."""
    out = {}
    for word in text.split():
        if word[:1] in "+-" and re.fullmatch(r"\d+(\.\d+)?", word[1:]):
            out[word[1:]] = word[0] == "+"
    return out


def version_enabled(enabled: dict[str, bool], version: str) -> bool:
    """Whether a version is served: "4.1" needs "+4" and "+4.1"; "4.0" is "+4" unless the
    kernel lists "-4.0" (kernels before 4.0 could be turned off alone list no 4.0)."""
    major = version.split(".")[0]
    if not enabled.get(major, False):
        return False
    return enabled.get(version, version == "4.0")


def portlist(text: str) -> set[tuple[str, int]]:
    """{("rdma", 20049), ("tcp", 2049), ...} from /proc/fs/nfsd/portlist."""
    out = set()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out.add((parts[0], int(parts[1])))
    return out


@dataclass(frozen=True)
class Export:
    path: str
    client: str  # "*" for <world>
    options: tuple[str, ...]

    def has(self, option: str) -> bool:
        return option in self.options


def _unescape(path: str) -> str:
    """exportfs writes a space, tab, newline or backslash in a path as \\040 and friends."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), path)


_CLIENT = re.compile(r"(?P<client>\S+?)\((?P<options>[^()]*)\)$")


def exports(text: str) -> list[Export]:
    """The exports of `exportfs -v`, in its order."""
    out, path = [], None
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            fields = line.split(None, 1)  # the path never holds a blank (exportfs escapes it)
            path, rest = _unescape(fields[0]), (fields[1] if len(fields) > 1 else "").strip()
            if not rest:
                continue  # a long path: its client follows on the next line
        else:
            rest = line.strip()
        m = _CLIENT.fullmatch(rest)
        if path is None or m is None:
            continue
        client = "*" if m["client"] == "<world>" else m["client"]
        out.append(Export(path, client, tuple(o for o in m["options"].split(",") if o)))
    return out


@dataclass(frozen=True)
class StatFs:
    size: int  # bytes
    available: int  # bytes available to non-root users
    files: int  # inodes (0: no limit reported)
    files_free: int


def statfs(text: str) -> StatFs | None:
    """The output of `stat -f -c '%S %b %a %c %d' PATH`; None when it is not that."""
    parts = text.split()
    if len(parts) != 5 or not all(p.isdigit() for p in parts):
        return None
    bsize, blocks, avail, files, ffree = map(int, parts)
    return StatFs(bsize * blocks, bsize * avail, files, ffree)
