"""Pure parsers for what the collector captures (text in, data out; ParseError on garbage).

/proc/self/mountstats is parsed by kvprov.mountstats and /proc/self/mountinfo by the
kvcache_mount role's own module (kvprov_mount_state, loaded from its file so deploy and
validate compare mount options the same way); the wrappers here only turn their
exceptions on garbage into ParseError.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import json
import re
import shlex
import tomllib
from dataclasses import dataclass
from types import ModuleType

from kvprov import mountstats, paths


class ParseError(ValueError):
    """The text is not what the parser expects (garbage, truncated, wrong file)."""


# ---------------------------------------------------------------------------- mounts

def _load_mount_state() -> ModuleType:
    path = paths.ROOT / "plugins" / "modules" / "kvprov_mount_state.py"
    spec = importlib.util.spec_from_file_location("kvprov_mount_state", path)
    assert spec and spec.loader, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


mount_state = _load_mount_state()


def _is_mountinfo_line(line: str) -> bool:
    fields = line.split()
    return "-" in fields and fields.index("-") >= 6 and len(fields) >= fields.index("-") + 3


def parse_mountinfo(text: str, path: str) -> dict | None:
    """The topmost mount on `path` ({source, fstype, options}) or None; ParseError on garbage."""
    if not any(_is_mountinfo_line(line) for line in text.splitlines()):
        raise ParseError("no mountinfo line (ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS ... - FSTYPE SOURCE "
                         "SUPEROPTIONS)")
    try:
        return mount_state.parse_mountinfo(text, path)
    except (ValueError, IndexError) as e:
        raise ParseError(f"unreadable mountinfo ({e})") from None


def mounts_in(text: str) -> list[tuple[str, str, str]]:
    """Every (mount point, fstype, source) of a mountinfo text, in order (lines that parse)."""
    out = []
    for line in text.splitlines():
        if not _is_mountinfo_line(line):
            continue
        fields = line.split()
        sep = fields.index("-")
        out.append((mount_state.unescape(fields[4]), fields[sep + 1], mount_state.unescape(fields[sep + 2])))
    return out


def parse_mountstats(text: str) -> list[mountstats.MountStats]:
    try:
        mounts = mountstats.parse(text)
    except (ValueError, IndexError) as e:
        raise ParseError(f"unreadable mountstats ({e})") from None
    if not mounts:
        raise ParseError("no `device ... mounted on ... with fstype ...` line")
    return mounts


def version_tuple(text: str) -> tuple[int, ...] | None:
    """"4.1" -> (4, 1); "4" -> (4, 0); garbage -> None."""
    if not re.fullmatch(r"\d{1,3}(\.\d{1,3})?", text or ""):
        return None
    parts = tuple(int(p) for p in text.split("."))
    return parts if len(parts) == 2 else (parts[0], 0)


# ---------------------------------------------------------------------------- /proc/modules, rdma link

def parse_modules(text: str) -> dict[str, str]:
    """/proc/modules: module name -> state (Live, Loading, Unloading)."""
    out = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 5 and words[1].isdigit() and re.fullmatch(r"[\w-]+", words[0]):
            out[words[0]] = words[4]
    if not out and text.strip():
        raise ParseError("no `NAME SIZE REFCOUNT DEPS STATE ADDRESS` line")
    return out


@dataclass(frozen=True)
class RdmaLink:
    name: str  # device/port, e.g. rxe_data0/1, mlx5_0/1
    state: str  # ACTIVE, DOWN, INIT ...
    physical_state: str  # LINK_UP, DISABLED, POLLING ...
    netdev: str  # "" when not shown (InfiniBand)


RDMA_LINK_KEYS = ("state", "physical_state", "netdev")


def parse_rdma_link(text: str) -> list[RdmaLink]:
    """`rdma link`: `link rxe_data0/1 state ACTIVE physical_state LINK_UP netdev data0`."""
    links = []
    for line in text.splitlines():
        words = line.split()
        if len(words) < 2 or words[0] != "link" or "/" not in words[1]:
            continue
        attrs = {}
        for i, word in enumerate(words[2:-1], start=2):
            if word in RDMA_LINK_KEYS and word not in attrs:
                attrs[word] = words[i + 1]
        links.append(RdmaLink(words[1], attrs.get("state", ""), attrs.get("physical_state", ""),
                              attrs.get("netdev", "")))
    if not links and text.strip():
        raise ParseError("no `link DEV/PORT state ...` line")
    return links


def parse_ip_addr(text: str) -> dict[str, str]:
    """`ip -o addr show`: address -> interface (`2: data0    inet 10.99.1.2/24 brd ... scope global data0`)."""
    out = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 4 and words[0].endswith(":") and words[2] in ("inet", "inet6"):
            try:
                address = str(ipaddress.ip_interface(words[3]).ip)
            except ValueError:
                continue
            out[address] = words[1].split("@")[0]
    if not out and text.strip():
        raise ParseError("no `N: IFACE inet ADDRESS/PREFIX ...` line of `ip -o addr show`")
    return out


# ---------------------------------------------------------------------------- systemd

def enabled_at_boot(unit_file_state: str) -> bool:
    """The one definition (validate, audit, the testinfra checks) of a unit that deploy enabled
    and that systemd starts at boot: UnitFileState `enabled`. Not `enabled-runtime` (gone at
    reboot), `static` (no [Install] section left), `generated` (made by a generator, e.g. from
    an /etc/fstab line), `linked`, `alias`, `indirect`, `disabled` or `masked`."""
    return unit_file_state == "enabled"


_SHOW_KEY = re.compile(r"[A-Z][A-Za-z0-9]*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_systemctl_show(text: str) -> dict[str, str]:
    """`systemctl show UNIT`: KEY=VALUE lines -> dict (values keep any further '=')."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and _SHOW_KEY.fullmatch(key):
            out[key] = value
    if not out:
        raise ParseError("no KEY=VALUE line of `systemctl show`")
    return out


def split_environment(value: str) -> dict[str, str]:
    """An Environment= value (`A=1 "B=two words"`) -> {A: 1, B: two words}."""
    try:
        words = shlex.split(value)
    except ValueError:  # unbalanced quotes: take it word by word
        words = value.split()
    env = {}
    for word in words:
        key, sep, val = word.partition("=")
        if sep and _ENV_NAME.fullmatch(key):
            env[key] = val
    return env


def parse_unit(text: str) -> dict[str, list[tuple[str, str]]]:
    """A systemd unit file: section -> [(key, value)] in order (continuations joined)."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    pending = ""
    for raw in text.split("\n"):  # systemd's lines: not str.splitlines, which also breaks on U+2028 and the like
        stripped = raw.strip()
        if not pending and (not stripped or stripped[0] in "#;"):
            continue
        line = pending + stripped
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1].strip(), [])
            continue
        key, sep, value = line.partition("=")
        if sep and current is not None:
            current.append((key.strip(), value.strip()))
    if pending and current is not None:  # a file that ends in a continuation: keep what is there
        key, sep, value = pending.partition("=")
        if sep:
            current.append((key.strip(), value.strip()))
    if not sections:
        raise ParseError("no [Section] of a systemd unit")
    return sections


def unit_value(unit: dict[str, list[tuple[str, str]]], section: str, key: str) -> str | None:
    """The last value of KEY in [SECTION] (systemd: later assignments win), or None."""
    values = [v for k, v in unit.get(section, []) if k == key]
    return values[-1] if values else None


_SHOW_ARGV = re.compile(r"argv\[\]=(.*?) ; ignore_errors=")


def exec_argv(value: str, from_show: bool) -> list[str]:
    """The argv of an ExecStart= value: a unit file's line (quoted like a shell), or
    `systemctl show`'s `{ path=... ; argv[]=ARGS ; ignore_errors=... }`, where systemd
    joins the arguments with single spaces and quotes nothing (strv_join): split on the
    spaces, so a JSON argument keeps its quotes (an argument holding a space cannot be
    told apart there: the running process's command line has it right)."""
    if from_show:
        m = _SHOW_ARGV.search(value)
        if not m:
            raise ParseError(f"no argv[] in ExecStart={value[:80]}")
        return m.group(1).split(" ")
    try:  # kvprov quotes like a shell's double quotes (kvprov/sinks.py); %% and $$ are systemd's escapes
        return [w.replace("%%", "%").replace("$$", "$") for w in shlex.split(value)]
    except ValueError as e:
        raise ParseError(f"ExecStart: {e}") from None


def unit_environment(unit: dict[str, list[tuple[str, str]]]) -> dict[str, str]:
    """The environment a unit's Environment= lines set ([Service]; an empty one resets)."""
    env: dict[str, str] = {}
    for key, value in unit.get("Service", []):
        if key != "Environment":
            continue
        if not value:
            env = {}
        env.update({k: v.replace("%%", "%") for k, v in split_environment(value).items()})  # the unit file's %%
    return env


# ---------------------------------------------------------------------------- gdscheck -p

@dataclass(frozen=True)
class GdsCheck:
    """`gdscheck -p`: its `KEY : VALUE` lines (keys lower-cased, leading dashes dropped)."""

    entries: dict[str, str]
    errors: list[str]  # lines that report an error or failure
    platform_verified: bool | None  # "Platform verification succeeded" / "... error"; None: not shown

    def get(self, key: str) -> str | None:
        return self.entries.get(key.lower())

    @property
    def nfs(self) -> str | None:
        """"Supported", "Unsupported", or newer builds' "nvfs" / "nvfs, compat"."""
        return self.get("NFS")

    @property
    def nfs_supported(self) -> bool:
        value = (self.nfs or "").lower()
        return value == "supported" or value.startswith("nvfs")

    @property
    def peerdirect(self) -> str | None:
        return self.get("Mellanox PeerDirect")

    @property
    def use_compat_mode(self) -> bool | None:
        value = (self.get("properties.use_compat_mode") or "").lower()
        return {"true": True, "false": False}.get(value)

    @property
    def nfs_in_compat(self) -> bool:
        return "compat" in (self.nfs or "").lower()


def parse_gdscheck(text: str) -> GdsCheck:
    entries: dict[str, str] = {}
    errors = []
    platform = None
    for raw in text.splitlines():
        line = raw.strip()
        low = line.lower()
        if "platform verification" in low:
            platform = "succeeded" in low
        if ("error" in low or "fail" in low) and "succeeded" not in low:
            errors.append(line)
        key, sep, value = line.partition(":")
        key = " ".join(key.strip().lstrip("-").split()).lower()
        if sep and key and not key.startswith("="):
            entries.setdefault(key, value.strip())
    if "nfs" not in entries and not any(k.startswith("properties.") for k in entries):
        raise ParseError("no `NFS : ...` or `properties.*` line: not the output of `gdscheck -p`"
                         + (f" (it says: {errors[0][:200]})" if errors else ""))
    return GdsCheck(entries, errors, platform)


# ---------------------------------------------------------------------------- TOML, cufile.json, packages

def parse_toml(text: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ParseError(f"not valid TOML: {e}") from None
    except RecursionError:
        raise ParseError("TOML nested too deeply to read") from None


_STRING_OR_COMMENT = re.compile(r'"(?:\\.|[^"\\])*"|//[^\n]*')


def strip_json_comments(text: str) -> str:
    """Drop `// ...` comments outside strings (cuFile accepts them; JSON does not)."""
    return _STRING_OR_COMMENT.sub(lambda m: m[0] if m[0].startswith('"') else "", text)


def parse_cufile(text: str) -> dict:
    try:
        data = json.loads(strip_json_comments(text))
    except RecursionError:
        raise ParseError("JSON nested too deeply to read") from None
    except json.JSONDecodeError as e:
        raise ParseError(f"not valid JSON even without // comments ({e.msg} at line {e.lineno} "
                         f"column {e.colno})") from None
    except ValueError as e:
        raise ParseError(f"not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise ParseError(f"must be a JSON object, is {type(data).__name__}")
    return data


def parse_packages(text: str) -> dict[str, str]:
    """`NAME<TAB>VERSION` lines (dpkg-query -W, or rpm -qa --qf '%{NAME}\\t%{VERSION}'); arch dropped."""
    out = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 1 and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9+._:-]*", words[0]):
            out[words[0].split(":")[0]] = words[1] if len(words) > 1 else ""
    if not out:
        raise ParseError("no `NAME VERSION` line" + ("" if text.strip() else ": the file is empty"))
    return out
