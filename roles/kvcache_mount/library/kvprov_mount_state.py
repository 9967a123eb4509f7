#!/usr/bin/python3
"""Ansible module: the live state of a mount point, compared with the desired one.

Reads /proc/self/mountinfo (never stat()s the mount, which could hang on a hard NFS
mount that lost its server) and scans /proc for processes using the mount.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: kvprov_mount_state
short_description: Live mount options vs desired, and who has the mount open
options:
  path: {type: str, required: true, description: Mount point.}
  source: {type: str, default: "", description: Desired source (server:/export).}
  options: {type: list, elements: str, default: [], description: Desired mount options.}
  unit: {type: str, default: "", description: "The mount unit: its running dependents are listed (a remount restarts them)."}
"""

import os

# Options only mount(8)/systemd read; the kernel never shows them in mountinfo.
USERSPACE_OPTIONS = ("_netdev", "auto", "noauto", "nofail", "defaults", "user", "nouser", "users")
# Flags the kernel reports for NFS and that we can therefore compare.
KERNEL_FLAGS = {"hard": "soft", "soft": "hard"}
# key=value options whose live value the kernel reports for NFS.
KERNEL_VALUES = ("vers", "proto", "port", "rsize", "wsize", "nconnect", "max_connect", "timeo",
                 "retrans", "sec", "write", "lookupcache", "local_lock")
# Values the kernel leaves out of mountinfo when they are its default.
KERNEL_DEFAULTS = {"port": "2049"}


def unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as \\ooo."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and len(field[i + 1:i + 4]) == 3 and all(c in "01234567" for c in field[i + 1:i + 4]):
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def split_options(text: str) -> dict:
    opts = {}
    for item in text.split(","):
        if item:
            key, sep, value = item.partition("=")
            opts[key] = value if sep else True
    return opts


def parse_mountinfo(text: str, path: str) -> dict | None:
    """The topmost mount on `path`: {source, fstype, options} (mount + super options)."""
    found = None
    for line in text.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        sep = fields.index("-")
        if sep < 6 or len(fields) < sep + 3:
            continue
        if unescape(fields[4]) != path:
            continue
        options = split_options(fields[5])
        options.update(split_options(fields[sep + 3] if len(fields) > sep + 3 else ""))
        found = {"source": unescape(fields[sep + 2]), "fstype": fields[sep + 1], "options": options}
    return found


def differences(live: dict, source: str, desired: list) -> list:
    """Human-readable differences between a live mount and the desired source/options."""
    diffs = []
    if source and live["source"] != source:
        diffs.append(f"source: live {live['source']}, want {source}")
    opts = live["options"]
    for item in desired:
        key, sep, value = item.partition("=")
        if key in USERSPACE_OPTIONS or key.startswith("x-"):
            continue
        if not sep:
            if key in KERNEL_FLAGS and key not in opts:
                diffs.append(f"{key}: live {KERNEL_FLAGS[key] if KERNEL_FLAGS[key] in opts else 'absent'}, "
                             f"want {key}")
            continue
        live_value = str(opts.get(key, KERNEL_DEFAULTS.get(key, "absent")))
        if key in KERNEL_VALUES and live_value != value:
            diffs.append(f"{key}: live {live_value}, want {value}")
    return diffs


def open_users(path: str, proc: str = "/proc") -> list:
    """Processes with a cwd, root, executable or open file under `path`:
    [{"pid", "comm", "unit"}] (unit: the systemd service whose cgroup holds it, or "")."""
    prefix = path.rstrip("/") + "/"
    users = []
    for pid in os.listdir(proc):
        if not pid.isdigit():
            continue
        links = [f"{proc}/{pid}/{name}" for name in ("cwd", "root", "exe")]
        try:
            links += [f"{proc}/{pid}/fd/{fd}" for fd in os.listdir(f"{proc}/{pid}/fd")]
        except OSError:
            pass
        for link in links:
            try:
                target = os.readlink(link)
            except OSError:
                continue
            if target == path or target.startswith(prefix):
                users.append({"pid": int(pid), "comm": _read(f"{proc}/{pid}/comm") or "?",
                              "unit": service_of(_read(f"{proc}/{pid}/cgroup"))})
                break
    return users


def _read(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return ""


def service_of(cgroup: str) -> str:
    """The service a process runs in, from /proc/PID/cgroup (`0::/system.slice/x.service`)."""
    for line in cgroup.splitlines():
        for part in reversed(line.rpartition(":")[2].split("/")):
            if part.endswith(".service"):
                return part
    return ""


def active_dependents(module, unit: str) -> list:
    """Running units that Require (RequiresMountsFor=) or are bound to the mount unit: a
    restart of the mount restarts them too."""
    rc, out, _ = module.run_command(["systemctl", "show", "--value", "-p", "RequiredBy", "-p", "BoundBy", unit])
    names = sorted({name for name in out.split() if name.endswith(".service")}) if rc == 0 else []
    if not names:
        return []
    _, out, _ = module.run_command(["systemctl", "is-active", *names])
    return [name for name, state in zip(names, out.split()) if state in ("active", "activating", "reloading")]


def main():
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={"path": {"type": "str", "required": True},
                       "source": {"type": "str", "default": ""},
                       "options": {"type": "list", "elements": "str", "default": []},
                       "unit": {"type": "str", "default": ""}},
        supports_check_mode=True)
    path = module.params["path"].rstrip("/") or "/"
    with open("/proc/self/mountinfo") as fh:
        live = parse_mountinfo(fh.read(), path)
    if live is None:
        module.exit_json(changed=False, mounted=False, differences=[], users=[], dependents=[])
    diffs = differences(live, module.params["source"], module.params["options"])
    users = open_users(path) if diffs else []
    dependents = active_dependents(module, module.params["unit"]) if diffs and module.params["unit"] else []
    module.exit_json(changed=False, mounted=True, source=live["source"], fstype=live["fstype"],
                     options=live["options"], differences=diffs, dependents=dependents,
                     users=[f"{u['pid']} ({u['comm']})" + (f" of {u['unit']}" if u["unit"] else "") for u in users],
                     # users a stop of the dependents would not end
                     other_users=[f"{u['pid']} ({u['comm']})" for u in users if u["unit"] not in dependents])


if __name__ == "__main__":
    main()
