#!/usr/bin/python
"""Ansible module: a directory on the shared KV volume, made without following any link.

Every host's root writes the shared volume, so a link planted at any component of a storage
directory's path (`<mount>/lnk -> /`, then `<mount>/lnk/etc/cron.d`) would make a plain
`file: state=directory owner=...` hand a system directory to the engine user. This module
walks the path one component at a time from the mount point, each opened relative to its
parent's descriptor with O_NOFOLLOW|O_DIRECTORY (what openat2's RESOLVE_NO_SYMLINKS |
RESOLVE_BENEATH does, without needing it), creates what is missing (intermediate directories
root 0755), and sets the owner and mode of the last one through its descriptor. A link or a
non-directory anywhere below the mount point is refused, naming it. Check mode only reads.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: kvprov_volume_dir
short_description: Create a directory on the shared KV volume without following links
description:
  - Walks from I(base) to I(path) one component at a time (openat with O_NOFOLLOW), creating what is missing.
  - Refuses a symbolic link or a non-directory at any component below I(base), naming it.
author: kvprov maintainers (!UNKNOWN)
options:
  base:
    description: The mount point (trusted; it must be a directory, not a link).
    type: path
    required: true
  path:
    description: The directory to create, under I(base).
    type: path
    required: true
  owner:
    description: Its owner, and group of the same name.
    type: str
    required: true
  mode:
    description: Its mode, in octal (for example V("0750")).
    type: str
    required: true
attributes:
  check_mode:
    description: Reads only, and says what it would create or change.
    support: full
  diff_mode:
    description: No diff.
    support: none
  platform:
    description: Linux (openat with O_NOFOLLOW).
    support: full
    platforms: posix
"""

EXAMPLES = r"""
- name: A storage directory on the KV mount
  kvprov.kvprov.kvprov_volume_dir:
    base: /mnt/kvcache
    path: /mnt/kvcache/kv/vllm_offload/models-Qwen3-8B
    owner: kvprov-engine
    mode: "0750"
"""

RETURN = r"""
path:
  description: The directory.
  returned: always
  type: str
changes:
  description: What was (or in check mode would be) created or changed, one line each.
  returned: always
  type: list
  elements: str
"""

import errno
import os
import posixpath
import stat

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(Exception):
    """A link or a non-directory on the way: nothing is changed through it."""


def components(base: str, path: str) -> list[str]:
    """The names below base that lead to path; ValueError when path is not under base."""
    base, path = posixpath.normpath(base), posixpath.normpath(path)
    if not path.startswith(base.rstrip("/") + "/"):
        raise ValueError(f"{path} is not under {base}")
    parts = path[len(base.rstrip("/")) + 1:].split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"{path}: empty, . or .. component")
    return parts


def _open_dir(parent: int, name: str, shown: str) -> int:
    try:
        return os.open(name, DIR_FLAGS, dir_fd=parent)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            kind = "a symbolic link" if stat.S_ISLNK(os.lstat(name, dir_fd=parent).st_mode) else "not a directory"
            raise Refused(f"{shown} is {kind}: on the shared KV volume kvprov never follows one; remove it and "
                          "deploy again") from None
        raise


def ensure(base: str, path: str, uid: int, gid: int, mode: int, check: bool) -> list[str]:
    """Make path (under base) a directory owned uid:gid with mode, through descriptors only.
    Returns what changed (or would, in check mode); Refused on a link or a non-directory."""
    names = components(base, path)
    changes: list[str] = []
    try:
        fd = os.open(base, DIR_FLAGS)
    except FileNotFoundError:
        if not check:
            raise
        # check mode on a fresh host: the mount point is made (and mounted) by the storage role
        return [f"created {posixpath.join(posixpath.normpath(base), *names)} (the mount point {base} is not there yet)"]
    try:
        shown = posixpath.normpath(base)
        for i, name in enumerate(names):
            shown = posixpath.join(shown, name)
            last = i == len(names) - 1
            try:
                child = _open_dir(fd, name, shown)
            except FileNotFoundError:
                changes.append(f"created {shown}")
                if check:  # what follows does not exist yet either
                    changes += [f"created {posixpath.join(shown, *names[i + 1:])}"] if not last else []
                    return changes + ([f"owner {uid}:{gid} mode {mode:04o} on {path}"])
                os.mkdir(name, 0o700 if last else 0o755, dir_fd=fd)  # the last: opened up only once owned
                child = _open_dir(fd, name, shown)
                if not last:
                    os.fchown(child, 0, 0)
                    os.fchmod(child, 0o755)
            os.close(fd)
            fd = child
        st = os.fstat(fd)
        if (st.st_uid, st.st_gid) != (uid, gid):
            changes.append(f"owner {st.st_uid}:{st.st_gid} -> {uid}:{gid} on {path}")
            if not check:
                os.fchown(fd, uid, gid)
        if stat.S_IMODE(st.st_mode) != mode:
            changes.append(f"mode {stat.S_IMODE(st.st_mode):04o} -> {mode:04o} on {path}")
            if not check:
                os.fchmod(fd, mode)
        return changes
    finally:
        os.close(fd)


def main():
    import grp
    import pwd

    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(argument_spec={
        "base": {"type": "path", "required": True},
        "path": {"type": "path", "required": True},
        "owner": {"type": "str", "required": True},
        "mode": {"type": "str", "required": True},
    }, supports_check_mode=True)
    p = module.params
    try:
        uid = pwd.getpwnam(p["owner"]).pw_uid
        gid = grp.getgrnam(p["owner"]).gr_gid
    except KeyError:
        if not module.check_mode:  # check mode on a fresh host: the user is not created yet
            module.fail_json(msg=f"{p['path']}: no user or group {p['owner']} on this host")
        uid = gid = -1
    try:
        changes = ensure(p["base"], p["path"], uid, gid, int(p["mode"], 8), module.check_mode)
    except (Refused, ValueError) as e:
        module.fail_json(msg=str(e))
    except OSError as e:
        module.fail_json(msg=f"{p['path']}: {e}")
    module.exit_json(changed=bool(changes), changes=changes, path=p["path"])


if __name__ == "__main__":
    main()
