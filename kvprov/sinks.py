"""Where inventory values land on a host, and the one format each place takes (pure).

Every inventory value that kvprov writes into a unit or a mount goes through one of these
sinks twice: when `kvprov check` (and the preflight role) reads the inventory, and when the
roles render the file (plugins/filter/sinks.py calls these same functions on the value as
Jinja produced it, so a value that is itself a template is checked after templating).

  sink           lands in                                   format
  unit word      ExecStart=, ExecStartPre=, Environment=     one word, quoted with systemd's rules
                                                            (`\\` and `"` escaped), `%` as `%%`, and
                                                            `$` as `$$` on command lines
  unit path      ReadWritePaths=, RequiresMountsFor=,        a plain absolute path: letters, digits
                 WorkingDirectory=, the evictor's argument   and _ . / - (nothing to quote or split)
  mount option   the mount unit's Options=                   an NFS option kvprov knows; never one that
                                                            gives back what nosuid,nodev,noexec take
                                                            (suid, dev, exec, defaults, user...) nor
                                                            an x-systemd.* dependency
  mount source   the mount unit's What=                      SERVER:EXPORT, address and path characters
  netdev         the soft-RoCE unit's shell command          a Linux interface name (a safe shell word)
  TOML key/value the NIXL backend TOML                       a bare key; a finite scalar or a list of
                                                            them, strings escaped to TOML's rules
  every string   everywhere                                 no control character, no Unicode line or
                                                            paragraph separator, at most MAX_LENGTH
"""

from __future__ import annotations

import json
import math
import re
import unicodedata

# Control characters (C0, DEL, C1 including U+0085 NEXT LINE) and the Unicode line and
# paragraph separators: systemd, Python's str.splitlines and terminals break lines on some of them.
# Control characters and line separators (a new line in a unit or file), and the invisible
# zero-width and bidirectional-override characters (text that reads otherwise than it parses).
BREAKS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064"
                    r"\u2066-\u2069\ufeff]")
MAX_LENGTH = 4096
PLAIN_WORD = re.compile(r"[A-Za-z0-9_@+=:,./-]+")  # a unit word that needs no quotes
PLAIN_PATH = re.compile(r"/[A-Za-z0-9_./-]*")
TOML_KEY = re.compile(r"[A-Za-z0-9_]+")  # bare: a dot would start another table (a second active plugin)
NETDEV = re.compile(r"[A-Za-z0-9_.-]{1,15}")  # a Linux interface name (IFNAMSIZ), safe in a shell word
MOUNT_SOURCE = re.compile(r"(?:[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\]):/[A-Za-z0-9_./-]*")
# Options that undo the mount's nosuid,nodev,noexec, let users mount it, or pull other units in.
REFUSED_OPTIONS = {
    "suid": "it lets a setuid binary another host planted on the shared volume run as its owner",
    "dev": "it lets a device node another host planted on the shared volume open that device",
    "exec": "no engine runs programs from the KV volume; a program another host planted there could run",
    "defaults": "it stands for suid,dev,exec (and undoes nosuid,nodev,noexec)",
    "user": "it lets unprivileged users mount and unmount the KV volume",
    "users": "it lets unprivileged users mount and unmount the KV volume",
    "owner": "it lets unprivileged users mount and unmount the KV volume",
    "group": "it lets unprivileged users mount and unmount the KV volume",
}
# What every KV mount gets (roles/kvcache_mount/vars/main.yml).
HARDENING_OPTIONS = ("nosuid", "nodev", "noexec")


class SinkError(ValueError):
    """A value that the place it lands in cannot take as it is."""


def describe_character(ch: str) -> str:
    name = unicodedata.name(ch, "") or {"\n": "newline", "\r": "carriage return", "\t": "tab"}.get(ch, "a control character")
    return f"U+{ord(ch):04X} ({name.lower()})"


def shown(value: str, limit: int = 80) -> str:
    """A value as a message shows it: every invisible or line-breaking character escaped."""
    text = "".join(f"\\u{ord(c):04x}" if BREAKS.fullmatch(c) else c for c in value)
    return text if len(text) <= limit else text[:limit] + "…"


def string_problem(value: str) -> str | None:
    """What no string may hold anywhere kvprov writes it, or None."""
    m = BREAKS.search(value)
    if m:
        return (f'"{shown(value)}" contains {describe_character(m.group())}: it would start a new line in the units '
                "and files rendered from it (or hide text from a reader); remove it")
    if len(value) > MAX_LENGTH:
        return f"is {len(value)} characters long; at most {MAX_LENGTH}"
    return None


def _checked(value, sink: str, problem: str | None) -> str:
    if problem:
        raise SinkError(f"{sink}: {problem}")
    return value


def unit_word(value, command_line: bool = True) -> str:
    """One word of a unit's command line (command_line) or Environment= assignment, as systemd
    reads it back: quoted when it is not plain, `\\` and `"` escaped inside the quotes, `%`
    doubled (specifiers), `$` doubled on command lines (variable expansion; Environment= does
    not expand it)."""
    value = str(value)
    sink = "unit command-line word" if command_line else "unit Environment= assignment"
    _checked(value, sink, string_problem(value))
    value = value.replace("%", "%%")
    if command_line:
        value = value.replace("$", "$$")
    if PLAIN_WORD.fullmatch(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def unit_path_problem(value: str) -> str | None:
    problem = string_problem(value)
    if problem:
        return problem
    if not PLAIN_PATH.fullmatch(value) or "/../" in value + "/" or "/./" in value + "/":
        return (f'"{value}" must be a plain absolute path: letters, digits and _ . / - only, no . or .. '
                "components (it is written into unit lines that split on spaces and quotes)")
    return None


def unit_path(value) -> str:
    """A path in ReadWritePaths=, RequiresMountsFor=, WorkingDirectory= or the evictor's
    command line: plain, so nothing needs quoting and nothing can split it."""
    value = str(value)
    return _checked(value, "unit path", unit_path_problem(value))


def mount_option_problem(option: str, known) -> str | None:
    """One option of the mount unit's Options= (`known(option)`: kvprov can compare it with the
    live mount, kvprov_mount_state.expectations)."""
    problem = string_problem(option)
    if problem:
        return problem
    key = option.partition("=")[0].strip().lower()
    if key in REFUSED_OPTIONS:
        return f'"{option}" is refused: {REFUSED_OPTIONS[key]} (kvprov mounts the KV volume {",".join(HARDENING_OPTIONS)})'
    if key.startswith("x-"):
        return (f'"{option}" is refused: an x-systemd.* or other x- option makes the mount pull in or wait for '
                "other units; kvprov's mount unit says what it needs")
    if not re.fullmatch(r"[A-Za-z0-9_.=:/+-]+", option):
        return f'"{option}" may hold only letters, digits and _ . = : / + - (it is written into the mount unit\'s Options=)'
    if known(option) is None:
        return (f'"{option}" is not an NFS option kvprov knows (it could neither compare it with the live mount nor '
                "vouch for it); see nfs(5) and docs for the options kvprov takes")
    return None


def mount_options(options: list, known) -> str:
    """The mount unit's Options= line, every option checked."""
    words = [o.strip() for item in options for o in str(item).split(",") if o.strip()]
    for word in words:
        _checked(word, "mount option", mount_option_problem(word, known))
    return ",".join(words)


def mount_source(value) -> str:
    """The mount unit's What=: SERVER:EXPORT (an address or DNS name, a plain path)."""
    value = str(value)
    problem = string_problem(value) or (None if MOUNT_SOURCE.fullmatch(value) else (
        f'"{value}" must be SERVER:/EXPORT: an address, a DNS name or [IPv6] and a plain path '
        "(letters, digits and _ . / -)"))
    return _checked(value, "mount source", problem)


def plain_name(value) -> str:
    """A name systemd or a configuration file takes as it is, unquoted: User=, Group=, a unit name
    in After=/Requires=/Unit=, idmapd.conf's Domain."""
    value = str(value)
    return _checked(value, "name", string_problem(value) or (None if PLAIN_WORD.fullmatch(value) else (
        f'"{shown(value)}" is not a plain name (letters, digits, _ @ + = : , . / -)')))


def unit_text(value) -> str:
    """Free text on one unit line (Description=): no line break or control character; % doubled
    (systemd's specifiers)."""
    value = str(value)
    return _checked(value, "unit text", string_problem(value)).replace("%", "%%")


def netdev(value) -> str:
    """An interface name inside the soft-RoCE unit's `sh -c '...'`."""
    value = str(value)
    return _checked(value, "network interface", None if NETDEV.fullmatch(value) else (
        f'"{shown(value)}" is not a network interface name (1 to 15 letters, digits, _ . -)'))


def toml_key(value) -> str:
    """A key of the NIXL TOML: bare, so it names one key of the table it is in."""
    value = str(value)
    return _checked(value, "TOML key", None if TOML_KEY.fullmatch(value) else (
        f'"{shown(value)}" is not a plain TOML key ([A-Za-z0-9_]+: a dot would start another table)'))


def _toml_string(value: str) -> str:
    # JSON's escapes are TOML's, but for a character beyond U+FFFF: TOML takes \UXXXXXXXX, not a
    # surrogate pair; a lone surrogate is no character at all
    if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise SinkError(f'TOML value: "{shown(value)}" holds a lone surrogate, which no TOML reader takes')
    text = json.dumps(value)
    return re.sub(r"\\(?:u(d[89ab][0-9a-f]{2})\\u(d[c-f][0-9a-f]{2})|.)",
                  lambda m: m.group() if not m.group(1) else
                  f"\\U{0x10000 + ((int(m.group(1), 16) - 0xD800) << 10) + int(m.group(2), 16) - 0xDC00:08x}", text)


def toml_value(value) -> str:
    """A value of the NIXL TOML: a boolean, a finite number, a string, or a list of them, written
    so that a TOML reader (SGLang's tomllib) reads back exactly the value."""
    if isinstance(value, list):
        if any(isinstance(v, list) for v in value):
            raise SinkError("TOML value: a list inside a list is not taken")
        return "[" + ", ".join(map(toml_value, value)) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SinkError(f"TOML value: {value} is not a number a TOML reader takes")
        return repr(float(value))
    if isinstance(value, str):
        _checked(value, "TOML value", string_problem(value))
        return _toml_string(value)
    raise SinkError(f"TOML value: a {type(value).__name__} is not a TOML scalar (string, number, boolean)")
