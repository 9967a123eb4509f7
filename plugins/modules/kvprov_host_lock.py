#!/usr/bin/python
"""Ansible module: the host-side deploy lock.

The controller lock (kvprov/lock.py) keeps one controller from running two changes at once;
this lock keeps two controllers (two laptops, a laptop and AWX) from changing one host at
the same time. It is a root-only file in /run (gone at reboot) naming its holder.

A lock whose owner is the one asking was left by an interrupted run of the same controller
and inventory (kvprov holds the controller lock for the whole run, so that run is gone): it
is taken over. Any other holder is refused, by name. Check mode only reads.
The lock is bookkeeping for the length of a run: taking and releasing it is never a change.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: kvprov_host_lock
short_description: Take or release the host's kvprov deploy lock
description:
  - One change at a time per host, whichever controller runs it; a root-only file in /run naming its holder.
  - A lock left by an interrupted run of the same owner is taken over; any other holder is refused, by name.
author: kvprov maintainers (!UNKNOWN)
options:
  state:
    description: Take (V(present)) or release (V(absent)) the lock.
    type: str
    choices: [present, absent]
    default: present
  owner:
    description: "Who asks: the controller's host name and the inventory's path."
    type: str
    required: true
  command:
    description: What the holder runs (shown to a refused run).
    type: str
    default: deploy
  run_id:
    description: This run's id (only its own lock is released).
    type: str
    required: true
  path:
    description: The lock file (its directory is root-only).
    type: path
    default: /run/kvprov/deploy.lock
attributes:
  check_mode:
    description: Writes nothing; refused while another run holds the lock, as a real run would be.
    support: full
  diff_mode:
    description: No diff.
    support: none
  platform:
    description: Linux.
    support: full
    platforms: posix
"""

RETURN = r"""
released:
  description: Whether this run's lock was released (V(state=absent)).
  returned: when state is absent
  type: bool
msg:
  description: Whose stale lock was taken over, or empty.
  returned: when state is present
  type: str
"""

EXAMPLES = r"""
- name: Take the host's deploy lock
  kvprov.kvprov.kvprov_host_lock:
    owner: "ctl1:/srv/inventory.yml"
    run_id: 0123456789ab
    command: kvprov deploy
"""

import errno
import json
import os
import stat
import time


def _read(path: str) -> dict | None:
    """The holder, None when the lock is free ({} for a lock file we cannot read: held)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as e:
        if e.errno == errno.ENOENT:
            return None
        raise
    with os.fdopen(fd) as f:
        try:
            data = json.loads(f.read(65536) or "{}")
        except ValueError:
            data = {}
    return data if isinstance(data, dict) else {}


def _private_dir(path: str) -> None:
    """The lock's directory: created root-only; an existing one must be a real root-owned dir."""
    d = os.path.dirname(path)
    try:
        os.mkdir(d, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
        raise PermissionError(f"{d} is not a root-owned directory only root can write (refusing to use it)")


def describe(info: dict) -> str:
    return (f"`{info.get('command', '?')}` from {info.get('owner', '?')} (run {info.get('run_id', '?')}, "
            f"since {info.get('since', '?')})")


def take(path: str, owner: str, command: str, run_id: str, check: bool) -> tuple[bool, str]:
    """(ok, message). ok is False when another owner holds the lock."""
    held = _read(path)
    if held is not None and held.get("owner") != owner:
        return False, (f"{describe(held)} is changing this host; wait for it to finish. If that run is "
                       f"gone for good, remove {path} on this host and run again")
    note = f"took over the lock an interrupted run left ({describe(held)})" if held and held.get("run_id") != run_id else ""
    if check:
        return True, note
    _private_dir(path)
    tmp = f"{path}.{run_id}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"owner": owner, "command": command, "run_id": run_id, "pid": os.getppid(),
                   "since": time.strftime("%Y-%m-%d %H:%M:%S %Z")}, f)
    if held is not None:
        os.replace(tmp, path)  # our own lock, left by an interrupted run
        return True, note
    try:
        os.link(tmp, path)  # atomic: fails if another run took the lock meanwhile
        return True, note
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
    return take(path, owner, command, run_id, check)


def release(path: str, run_id: str, check: bool) -> bool:
    """Remove the lock if this run holds it; True if removed."""
    if (_read(path) or {}).get("run_id") != run_id or check:
        return False
    os.unlink(path)
    return True


def main():
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(argument_spec={
        "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
        "owner": {"type": "str", "required": True},
        "command": {"type": "str", "default": "deploy"},
        "run_id": {"type": "str", "required": True},
        "path": {"type": "path", "default": "/run/kvprov/deploy.lock"},
    }, supports_check_mode=True)
    p = module.params
    try:
        if p["state"] == "absent":
            module.exit_json(changed=False, released=release(p["path"], p["run_id"], module.check_mode))
        ok, message = take(p["path"], p["owner"], p["command"], p["run_id"], module.check_mode)
    except OSError as e:
        module.fail_json(msg=f"host lock {p['path']}: {e}")
    if not ok:
        module.fail_json(msg=message, busy=True)
    module.exit_json(changed=False, msg=message, warnings=[message] if message else [])


if __name__ == "__main__":
    main()
