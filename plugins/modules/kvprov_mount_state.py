#!/usr/bin/python
"""Ansible module: the live state of a mount point, compared with the desired one.

Every desired option the kernel shows in mountinfo is compared, in the kernel's spelling
and with its defaults (the tables below); live options nobody asked for, and desired
options the kernel does not show, are warnings. Reads /proc/self/mountinfo (never stat()s
the mount, which could hang on a hard NFS mount that lost its server) and scans /proc for
processes using the mount.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: kvprov_mount_state
short_description: Live mount options vs desired, and who has the mount open
description:
  - Reads /proc/self/mountinfo (never stat()s the mount) and compares the live options, in the kernel's spelling, with the desired ones.
  - Scans /proc for the processes that use the mount and lists the mount unit's running dependents.
author: kvprov maintainers (!UNKNOWN)
options:
  path: {type: str, required: true, description: Mount point.}
  source: {type: str, default: "", description: Desired source (server:/export).}
  options: {type: list, elements: str, default: [], description: Desired mount options.}
  unit: {type: str, default: "", description: "The mount unit: its running dependents are listed (a remount restarts them)."}
attributes:
  check_mode:
    description: Reads only; the same result as a normal run.
    support: full
  diff_mode:
    description: No diff.
    support: none
  platform:
    description: Linux (C(/proc/self/mountinfo), C(/proc), C(systemctl)).
    support: full
    platforms: posix
"""

EXAMPLES = r"""
- name: Read the live mount
  kvprov.kvprov.kvprov_mount_state:
    path: /mnt/kvcache
    source: "10.0.0.1:/kv"
    options: [vers=4.1, proto=rdma]
"""

RETURN = r"""
mounted:
  description: Whether anything is mounted on O(path) (the topmost mount there is the one read).
  returned: always
  type: bool
source:
  description: The live mount's source.
  returned: when mounted
  type: str
  sample: "10.0.0.1:/kv"
fstype:
  description: The live mount's filesystem type.
  returned: when mounted
  type: str
  sample: nfs4
options:
  description: The live mount and superblock options, in the kernel's spelling; a flag's value is V(true).
  returned: when mounted
  type: dict
  sample: {rw: true, vers: "4.1", proto: rdma, hard: true}
differences:
  description:
    - How the live source and options differ from the desired ones, one line each.
    - Empty when they agree or nothing is mounted.
  returned: always
  type: list
  elements: str
  sample: ["proto: live tcp, want rdma"]
users:
  description:
    - Processes with a working directory, root, executable or open file under O(path), one line each
      (the process ID, its command name in parentheses, then C(of UNIT) when a service runs it).
    - Looked for only when there are differences; empty otherwise.
  returned: always
  type: list
  elements: str
  sample: ["4242 (vllm) of kvprov-vllm-main.service"]
dependents:
  description:
    - Running services that require or are bound to O(unit) (a remount restarts them).
    - Looked for only when there are differences and O(unit) is set; empty otherwise.
  returned: always
  type: list
  elements: str
  sample: [kvprov-vllm-main.service]
other_users:
  description:
    - The RV(users) that are not in one of the RV(dependents) (stopping the dependents would not end them).
    - One line each, the process ID and its command name in parentheses.
  returned: when mounted
  type: list
  elements: str
"""

import os

# ---- Mount options in the kernel's spelling. The one place kvprov knows how the kernel
# (fs/nfs/super.c nfs_show_mount_options, fs/proc_namespace.c) reports mount options in
# /proc/self/mountinfo: deploy (this module, run on the host: stdlib only) and validate,
# audit and the testinfra checks (which load this file through kvprov.validate.parsers)
# compare the live mount with these tables.

# Options only mount(8), mount.nfs or systemd read; the kernel never shows them.
USERSPACE_OPTIONS = ("_netdev", "auto", "noauto", "nofail", "defaults", "user", "nouser", "users", "owner", "group",
                     "bg", "fg", "retry", "sloppy", "comment")
# Flags of which the kernel always shows exactly one (when none shows, the first is the default).
FLAG_CHOICES = (("hard", "soft", "softerr"), ("rw", "ro"), ("relatime", "noatime"))
# Flags the kernel shows while set, with the opposite spelling that asks for its default (never
# shown; dirsync has none).
SHOWN_FLAGS = {"nocto": "cto", "noac": "ac", "nolock": "lock", "noacl": "acl", "nordirplus": "rdirplus",
               "nosharecache": "sharecache", "noresvport": "resvport", "trunkdiscovery": "notrunkdiscovery",
               "fsc": "nofsc", "migration": "nomigration", "softreval": "nosoftreval", "posix": "noposix",
               "sync": "async", "dirsync": None, "lazytime": "nolazytime", "nosuid": "suid", "nodev": "dev",
               "noexec": "exec", "nodiratime": "diratime"}
DEFAULT_FLAGS = {default: flag for flag, default in SHOWN_FLAGS.items() if default}
# key=value options the kernel shows, with the value it leaves out of mountinfo (its default), if any.
KERNEL_VALUES = {"vers": None, "proto": None, "port": "2049", "rsize": None, "wsize": None, "bsize": None,
                 "nconnect": None, "max_connect": "1", "timeo": None, "retrans": None, "sec": None,
                 "clientaddr": None, "addr": None, "local_lock": None, "xprtsec": "none", "fsc": None,
                 "write": "lazy", "lookupcache": "all",
                 "acregmin": "3", "acregmax": "60", "acdirmin": "30", "acdirmax": "60"}
# Another spelling mount.nfs accepts for an option, in the kernel's: key -> key, value -> value.
KEY_ALIASES = {"nfsvers": "vers"}
VALUE_ALIASES = {"lookupcache": {"positive": "pos"}}
# Options that stand for others: the flag spelling of proto=, actimeo= (all four attribute
# cache times) and noac (which also zeroes them).
_ACTIMES = ("acregmin", "acregmax", "acdirmin", "acdirmax")
# What the kernel shows by itself on every NFS mount, asked for or not.
ALWAYS_SHOWN = ("vers", "rsize", "wsize", "namlen", "hard", "proto", "port", "timeo", "retrans", "sec",
                "clientaddr", "local_lock", "addr", "rw", "relatime", "seclabel")


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


def _canonical(key: str, value: str) -> str:
    """A value in the kernel's spelling (proto=rdma6 on an IPv6 mount is proto=rdma)."""
    if key == "proto":
        return value.removesuffix("6")
    return VALUE_ALIASES.get(key, {}).get(value, value)


def split_desired(desired: list) -> list:
    """The desired options one by one (an item may hold several, comma-separated)."""
    return [o.strip() for item in desired for o in str(item).split(",") if o.strip()]


def expectations(option: str) -> dict | None:
    """What mountinfo shows for one desired option, in the kernel's spelling:
    {key: value (a str), True (the flag is shown) or None (nothing is shown under key)};
    {} for options only userspace reads; None for an option kvprov does not know."""
    key, sep, value = option.partition("=")
    key = KEY_ALIASES.get(key, key)
    if key in USERSPACE_OPTIONS or key.startswith("x-"):
        return {}
    if not sep:
        if key in ("rdma", "tcp", "udp"):
            return {"proto": key}
        if key == "noac":
            return {"noac": True, **{k: "0" for k in _ACTIMES}}
        if key in SHOWN_FLAGS or any(key in group for group in FLAG_CHOICES):
            return {key: True}
        if key in DEFAULT_FLAGS:
            return {DEFAULT_FLAGS[key]: None}
        return None
    if key == "actimeo":
        return {k: value for k in _ACTIMES}
    if key in KERNEL_VALUES:
        return {key: _canonical(key, value)}
    return None


def _live(opts: dict, key: str) -> str:
    """How the live mount shows `key`: its value, the flag of its group that is set, its
    default when the kernel leaves it out, or "absent"."""
    value = opts.get(key)
    if value is True:
        return key
    if value is not None:
        return _canonical(key, value)
    for group in FLAG_CHOICES:
        if key in group:
            return next((flag for flag in group if flag in opts), "absent")
    return KERNEL_VALUES.get(key) or "absent"


def differences(live: dict, source: str, desired: list) -> list:
    """Human-readable differences between a live mount and the desired source/options:
    every option the kernel shows is compared (see uncompared() for the others)."""
    diffs = []
    if source and live["source"] != source:
        diffs.append(f"source: live {live['source']}, want {source}")
    opts = live["options"]
    for option in split_desired(desired):
        for key, want in (expectations(option) or {}).items():
            via = f" ({option})" if key != option.partition("=")[0] and option != want else ""
            if want is None:  # a default flag: its opposite must not be set
                if key in opts:
                    diffs.append(f"{option}: live {key}, want {option}")
            elif want is True:
                if key not in opts:
                    diffs.append(f"{key}: live {_live(opts, key)}, want {key}")
            elif _live(opts, key) != want:
                diffs.append(f"{key}: live {_live(opts, key)}, want {want}{via}")
    return diffs


def as_shown(options: list) -> dict:
    """Options as mountinfo would show them (a mount unit's Options=, to compare it with the
    desired ones through differences()): actimeo=600 as the four times, rdma as proto=rdma."""
    shown = {}
    for option in split_desired(options):
        view = expectations(option)
        if view is None:
            key, sep, value = option.partition("=")
            view = {key: value if sep else True}
        shown.update({key: value for key, value in view.items() if value is not None})
    return shown


def uncompared(desired: list) -> list:
    """Desired options kvprov cannot compare with the live mount (the kernel's spelling of
    them is not in the tables above)."""
    return [o for o in split_desired(desired) if expectations(o) is None]


def unasked(live: dict, desired: list) -> list:
    """Live options that nobody asked for: neither desired nor shown by the kernel by itself
    (a hand-made remount, or an option the inventory dropped without a remount)."""
    asked = set(ALWAYS_SHOWN)
    for option in split_desired(desired):
        asked.update(expectations(option) or {})
        asked.add(option.partition("=")[0])  # one kvprov cannot compare is warned about once (uncompared)
    return [key if value is True else f"{key}={value}" for key, value in live["options"].items()
            if key not in asked]


def warnings(live: dict, desired: list) -> list:
    """What deploy, validate and audit warn about: options nobody asked for, options that
    cannot be compared."""
    return ([f"{o}: live, but not among the desired options" for o in unasked(live, desired)]
            + [f"{o}: not compared (kvprov does not know how the kernel shows it)" for o in uncompared(desired)])


def open_users(path: str, proc: str = "/proc") -> list:
    """Processes with a cwd, root, executable or open file under `path`:
    [{"pid", "comm", "unit"}] (unit: the systemd service whose cgroup holds it, or "")."""
    prefix = os.path.join(path, "")  # "/mnt/kvcache/" ("/" for "/")
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
        for part in reversed(line.split("/")):  # (a unit's name may hold ":", a hierarchy's never ".service")
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
    for warning in warnings(live, module.params["options"]):
        module.warn(f"{path}: {warning}")
    users = open_users(path) if diffs else []
    dependents = active_dependents(module, module.params["unit"]) if diffs and module.params["unit"] else []
    module.exit_json(changed=False, mounted=True, source=live["source"], fstype=live["fstype"],
                     options=live["options"], differences=diffs, dependents=dependents,
                     users=[f"{u['pid']} ({u['comm']})" + (f" of {u['unit']}" if u["unit"] else "") for u in users],
                     # users a stop of the dependents would not end
                     other_users=[f"{u['pid']} ({u['comm']})" for u in users if u["unit"] not in dependents])


if __name__ == "__main__":
    main()
