"""`kvprov check INVENTORY`: validate an inventory before any host is contacted.

Types and choices come from the roles' meta/argument_specs.yml (the variable contract);
this module adds what a spec cannot say: misspelt names, ranges, paths, and rules that
span several variables or several hosts. Every problem names the file, line, host and
variable, and says how to fix it.

Three kinds of rules:
- setting rules look at one variable where it is set (a group or host, in the inventory
  file or in group_vars/host_vars), so a mistake in a group is reported once;
- host rules look at a target host's effective values (role defaults included);
- fleet rules look at all target hosts together (shared NIXL storage directories).

The roles' preflight (roles/preflight, the kvprov_preflight action plugin) runs the setting
and host rules of this module on each host's values as Ansible resolved them
(`check_host_values`), so a plain ansible-playbook run is held to the same rules; the
fleet rules and the rules on names and structure need the whole inventory and stay here.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import math
import posixpath
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import yaml

from kvprov import check_bounds, inventory, namespace, sinks
from kvprov.errors import EXIT_OK, EXIT_USAGE, KvprovError
from kvprov.inventory import Host, Inventory, InventoryError, Origin, Problem, Setting, Var

__all__ = ["Problem", "VarSpec", "check", "check_host_values", "host_from_values", "read_specs",
           "add_parser"]

NFS_PROFILES = ("netapp_pnfs_rdma", "nfs_tcp")
PROFILE_PROTOS = {"netapp_pnfs_rdma": ("rdma", "rdma6"), "nfs_tcp": ("tcp", "tcp6")}
NIXL_PLUGINS = ("gds_mt", "gds", "posix", "obj")
INSTANCE_KEYS = ("name", "port", "cuda_visible_devices", "storage_dir", "lmcache_port", "metrics_port")
LMCACHE_MP_INSTANCE_KEYS = ("lmcache_port", "metrics_port")
ENGINES = ("sglang_hicache", "vllm_offload", "lmcache_mp", "lmcache_inproc", "vllm_baseline")
TIERLESS_ENGINES = ("vllm_baseline",)  # no KV tier: nothing of theirs reaches the KV mount
# The variables only one engine reads (the vllm role's are read by the three vLLM engines).
ENGINE_PREFIXES = {"sglang_hicache": ("kvprov_sglang_",), "vllm_offload": ("kvprov_vllm_offload_",),
                   "lmcache_mp": ("kvprov_lmcache_mp_",), "lmcache_inproc": ("kvprov_lmcache_inproc_",)}
VLLM_ENGINES = ("vllm_offload", "lmcache_mp", "lmcache_inproc", "vllm_baseline")
# Names from before there was more than one engine: still honoured, with a warning.
DEPRECATED = {f"kvprov_sglang_{k}": f"kvprov_engine_{k}"
              for k in ("instances", "install", "user", "home", "model_path", "host", "extra_args")}
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
USER_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
INSTANCE_NAME = re.compile(r"[a-z0-9_-]+")
SIMPLE_PATH = re.compile(r"/[A-Za-z0-9_./-]*")
TOML_KEY = re.compile(r"[A-Za-z0-9_]+")
TRUE_FALSE_WORDS = {"true", "false", "yes", "no", "on", "off", "y", "n"}


# ---------------------------------------------------------------------------- specs

@dataclass(frozen=True)
class VarSpec:
    """One option of a role's argument spec."""

    name: str
    role: str
    type: str = "str"  # Ansible's default type
    elements: str | None = None
    choices: tuple[Any, ...] | None = None


def read_specs(roles: Path) -> dict[str, VarSpec]:
    """Every option of every role's meta/argument_specs.yml (all entry points)."""
    specs: dict[str, VarSpec] = {}
    for path in sorted(roles.glob("*/meta/argument_specs.y*ml")):
        data = yaml.safe_load(inventory.read_text(path)) or {}
        for entry in (data.get("argument_specs") or {}).values():
            for name, opt in ((entry or {}).get("options") or {}).items():
                opt = opt or {}
                choices = opt.get("choices")
                specs[name] = VarSpec(name, path.parent.parent.name, opt.get("type", "str"),
                                      opt.get("elements"), tuple(choices) if choices else None)
    return specs


# ---------------------------------------------------------------------------- describing values

def describe(value: Any, raw: str | None = None) -> str:
    """How a value reads in a message: the string "x", the integer 8, the boolean true ..."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"the boolean {raw or str(value).lower()}"
    if isinstance(value, str):
        return f'the string "{value}"'
    if isinstance(value, (int, float)):
        return f"the number {raw or value}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"the {type(value).__name__} {raw or value}"  # e.g. a YAML timestamp: the date 2024-01-01


def _raw(node: yaml.Node | None) -> str | None:
    return node.value if isinstance(node, yaml.ScalarNode) else None


def _item_node(var: Var, i: int) -> yaml.Node | None:
    """The YAML node of item i of a list value (None when the list was not written in YAML)."""
    node = var.node
    return node.value[i] if isinstance(node, yaml.SequenceNode) and i < len(node.value) else None


def is_template(value: Any) -> bool:
    """A Jinja expression: only Ansible knows its value, so kvprov does not judge it."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def type_error(value: Any, type_: str, raw: str | None = None) -> str | None:
    """Why `value` is not of Ansible spec type `type_`, with the fix; None when it is."""
    got = describe(value, raw)
    if type_ in ("str", "path"):
        if isinstance(value, str):
            return None
        if value is not None and raw is not None:  # a scalar YAML read as a number, boolean, date
            return f'expected a string, got {got}: quote it ("{raw}")'
        return f'expected a string, got {got}' + (': give a value, or "" for empty' if value is None else "")
    if type_ == "bool":
        if isinstance(value, bool):
            return None
        if isinstance(value, str) and value.strip().lower() in TRUE_FALSE_WORDS:
            return (f"expected a boolean, got {got} (a boolean given as a string): "
                    f"write {value.strip().lower()} without quotes")
        return f"expected a boolean (true or false), got {got}"
    if type_ == "int":
        if is_int(value):
            return None
        if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
            return f"expected an integer, got {got}: write {value.strip()} without quotes"
        return f"expected an integer, got {got}"
    if type_ == "float":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return None
        return f"expected a number, got {got}"
    if type_ == "list":
        if isinstance(value, list):
            return None
        if isinstance(value, str):
            return f"expected a list, got {got}: write [{value}]"
        return f"expected a list, got {got}"
    if type_ == "dict":
        return None if isinstance(value, dict) else f"expected a mapping, got {got}"
    return None  # raw, json, ...: anything goes


# ---------------------------------------------------------------------------- findings

@dataclass(frozen=True)
class Finding:
    """A problem with one variable's value; `path` leads to the offending element."""

    message: str
    path: tuple[str | int, ...] = ()
    severity: str = "error"


def spec_findings(var: Var, spec: VarSpec) -> list[Finding]:
    """Type, element type and choices, from the argument spec."""
    error = type_error(var.value, spec.type, _raw(var.node))
    if error:
        return [Finding(error)]
    out = []
    if spec.type == "list" and spec.elements:
        for i, item in enumerate(var.value):
            error = type_error(item, spec.elements, _raw(_item_node(var, i)))
            if error:
                out.append(Finding(f"item {i + 1}: {error}", (i,)))
    if not out and spec.choices and var.value not in spec.choices:
        choices = ", ".join(str(c) for c in spec.choices)
        out.append(Finding(f"must be one of {choices}; got {describe(var.value, _raw(var.node))}"
                           + _did_you_mean(str(var.value), [str(c) for c in spec.choices])))
    return out


def _did_you_mean(word: str, choices: list[str], cutoff: float = 0.75) -> str:
    lowered = {c.lower(): c for c in choices}
    if word.lower() in lowered:
        return f"; did you mean {lowered[word.lower()]}?"
    match = difflib.get_close_matches(word, choices, n=1, cutoff=cutoff)
    return f"; did you mean {match[0]}?" if match else ""


# ---- ranges

def int_range(lo: int, hi: int | None = None, multiple: int | None = None, note: str = "") -> Callable:
    def rule(value: int) -> list[Finding]:
        if value < lo or (hi is not None and value > hi):
            span = f"{lo}..{hi}" if hi is not None else f">= {lo}"
            return [Finding(f"{value} is out of range: must be {span}{note}")]
        if multiple and value % multiple:
            return [Finding(f"{value} is not a multiple of {multiple}: use e.g. "
                            f"{max(multiple, value // multiple * multiple)}")]
        return []
    return rule


def non_negative(value: Any) -> list[Finding]:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
        return [Finding(f"must be 0 or more, got {value}")]
    return []


# ---- paths

def absolute_path(value: str) -> list[Finding]:
    """An absolute, plain path: it lands in units (where systemd splits on spaces and expands
    % and $) and in file tasks run as root."""
    if not value.startswith("/"):
        return [Finding(f'"{value}" is not an absolute path: start it with /')]
    if ".." in value.split("/"):
        return [Finding(f'"{value}" must not contain ..')]
    if not SIMPLE_PATH.fullmatch(value):
        return [Finding(f'"{value}" may hold only letters, digits, _ . / - (no spaces, quotes, %, $)')]
    return []


def mount_point(value: str) -> list[Finding]:
    if value == "/" or not SIMPLE_PATH.fullmatch(value):
        return [Finding(f'"{value}" must be a plain absolute path other than / '
                        "(letters, digits, _ . / - only), e.g. /mnt/kvcache")]
    if ".." in value.split("/"):
        return [Finding(f'"{value}" must not contain ..')]
    if posixpath.normpath(value) != value:
        return [Finding(f'"{value}" is not written plainly: use {posixpath.normpath(value)}')]
    return []


# ---- storage settings

def parse_mount_options(items: list[str]) -> list[tuple[str, str | None, int]]:
    """(key, value or None, list index) of every option of kvprov_storage_extra_options."""
    out = []
    for i, item in enumerate(items):
        for option in item.split(","):
            option = option.strip()
            if option:
                key, sep, val = option.partition("=")
                out.append((key.strip().lower(), val.strip() if sep else None, i))
    return out


REPLACED_OPTIONS = {
    "vers": "kvprov_storage_nfs_version",
    "nfsvers": "kvprov_storage_nfs_version",
    "minorversion": "kvprov_storage_nfs_version",
    "port": "kvprov_storage_nfs_port",
    "rsize": "kvprov_storage_rsize",
    "wsize": "kvprov_storage_wsize",
    "lookupcache": "kvprov_storage_lookupcache",
}


def extra_options(value: list) -> list[Finding]:
    out = []
    for key, val, i in parse_mount_options([v for v in value if isinstance(v, str)]):
        if key not in REPLACED_OPTIONS:
            continue
        option = key if val is None else f"{key}={val}"
        msg = f'"{option}" is set by {REPLACED_OPTIONS[key]}: remove it from the extra options and set that variable'
        if (key in ("vers", "nfsvers") and val in ("4", "4.0")) or (key == "minorversion" and val == "0"):
            msg += " (\"4.1\" or \"4.2\"); NFSv4.0 cannot do pNFS" + (
                " and vers=4 can land on 4.0" if val == "4" else "")
        out.append(Finding(msg, (i,)))
    return out


def storage_server(value: str) -> list[Finding]:
    if "/" in value or value.endswith(":"):
        return [Finding(f'"{value}" must be only the server address (the NetApp data LIF); '
                        "put the path in kvprov_storage_export")]
    if value and not ADDRESS.fullmatch(value):
        return [Finding(f'"{value}" is not an address or DNS name (letters, digits, . - : and [IPv6]); it is the mount '
                        "unit's What=")]
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return []
    if address.version == 6:
        return [Finding(f'"{value}" is an IPv6 address: write it in brackets, "[{value}]" '
                        "(the mount source is SERVER:EXPORT)")]
    return []


# ---- NIXL

def nixl_plugins(value: dict) -> list[Finding]:
    out = []
    for name, table in value.items():
        if name not in NIXL_PLUGINS:
            out.append(Finding(f'unknown NIXL plugin "{name}" (known: {", ".join(NIXL_PLUGINS)})'
                               + _did_you_mean(str(name), list(NIXL_PLUGINS)), (name,)))
        if not isinstance(table, dict):
            out.append(Finding(f"[plugin.{name}] must be a table of settings (a mapping), got "
                               f"{describe(table)}", (name,)))
            continue
        out += _plugin_table(name, table)
    active = [n for n, t in value.items() if isinstance(t, dict) and t.get("active") is True]
    if not active:
        out.append(Finding("no plugin has active: true: SGLang crashes at start with no active plugin; "
                           "set active: true on exactly one (e.g. gds_mt)"))
    elif len(active) > 1:
        out.append(Finding(f"plugins {' and '.join(active)} all have active: true: exactly one may be "
                           "active; set active: false on the others", (active[1], "active")))
    return out


def toml_scalar(where: str, key: Any, value: Any, path: tuple) -> list[Finding]:
    """A key and value kvprov writes into the NIXL TOML: a bare key (a dotted one would make
    another table, e.g. a second active plugin) and a finite scalar."""
    if not isinstance(key, str) or not TOML_KEY.fullmatch(key):
        return [Finding(f'{where}"{key}" is not a plain TOML key ([A-Za-z0-9_]+: a dot would start another '
                        "table, e.g. a second active plugin)", path)]
    if value is None or isinstance(value, (list, dict)):
        return [Finding(f"{where}{key}: values must be scalars (string, number, boolean), got {describe(value)}",
                        path)]
    if isinstance(value, float) and not math.isfinite(value):
        return [Finding(f"{where}{key}: {value} is not a number NIXL or SGLang can read", path)]
    return []


def _plugin_table(name: str, table: dict) -> list[Finding]:
    out = []
    for key, v in table.items():
        out += toml_scalar(f"[plugin.{name}] ", key, v, (name, key))
    if "active" in table and not isinstance(table["active"], bool):
        out.append(Finding(f"[plugin.{name}] active: {type_error(table['active'], 'bool')}",
                           (name, "active")))
    count = table.get("thread_count")
    if "thread_count" in table and not (is_int(count) and count > 0):
        out.append(Finding(f"[plugin.{name}] thread_count: expected a positive integer, got "
                           f"{describe(count)}", (name, "thread_count")))
    return out


def nixl_backend_options(value: dict) -> list[Finding]:
    out = []
    for key, v in value.items():
        if key in ("use_direct_io", "l3_cleaner_enabled") and not isinstance(v, bool):
            out.append(Finding(f"{key}: {type_error(v, 'bool')}", (key,)))
        elif isinstance(v, list):
            out += [f for item in v for f in toml_scalar("", key, item, (key,))]
        else:
            out += toml_scalar("", key, v, (key,))
    return out


# ---- engine instances

def engine_instances(value: list) -> list[Finding]:
    if not value:
        return [Finding("no instances: list at least one ({name: main, port: 8000})")]
    out: list[Finding] = []
    names: dict[str, int] = {}
    ports: dict[int, int] = {}
    for i, inst in enumerate(value):
        if isinstance(inst, dict):
            out += _instance(i, inst, names, ports)
    return out


def _instance(i: int, inst: dict, names: dict[str, int], ports: dict[int, int]) -> list[Finding]:
    """One instance's keys; `names`/`ports` collect what earlier instances use."""
    n = i + 1
    name, port = inst.get("name"), inst.get("port")
    valid_name = isinstance(name, str) and INSTANCE_NAME.fullmatch(name) is not None
    label = f"instance {name}" if valid_name and name not in names else f"instance {n}"
    out = [Finding(f'{label}: unknown key "{key}" (known: {", ".join(INSTANCE_KEYS)})'
                   + _did_you_mean(str(key), list(INSTANCE_KEYS)), (i, key))
           for key in inst if key not in INSTANCE_KEYS]
    if "name" not in inst:
        out.append(Finding(f"{label}: no name (it names the units, e.g. kvprov-vllm-<name>.service)", (i,)))
    elif not valid_name:
        out.append(Finding(f"{label}: name must be lower-case letters, digits, _ or - "
                           f"(it names the unit and the storage directory), got {describe(name)}", (i, "name")))
    elif name in names:
        out.append(Finding(f'{label}: name "{name}" is already used by instance {names[name]}', (i, "name")))
    else:
        names[name] = n
    if "port" not in inst:
        out.append(Finding(f"{label}: no port (the --port it serves on)", (i,)))
    elif not is_int(port):
        out.append(Finding(f"{label}: port: {type_error(port, 'int')}", (i, "port")))
    elif not 1 <= port <= 65535:
        out.append(Finding(f"{label}: port {port} is out of range: must be 1..65535", (i, "port")))
    elif port in ports:
        out.append(Finding(f"{label}: port {port} is already used by instance {ports[port]}", (i, "port")))
    else:
        ports[port] = n
    for key in LMCACHE_MP_INSTANCE_KEYS:
        if key in inst and not (is_int(inst[key]) and 1 <= inst[key] <= 65535):
            out.append(Finding(f"{label}: {key}: expected a port 1..65535, got {describe(inst[key])}", (i, key)))
    devices = inst.get("cuda_visible_devices")
    if "cuda_visible_devices" in inst and not isinstance(devices, str):
        error = type_error(devices, "str", _plain(devices))
        out.append(Finding(f"{label}: cuda_visible_devices: {error}", (i, "cuda_visible_devices")))
    elif isinstance(devices, str) and not re.fullmatch(r"[A-Za-z0-9,-]*", devices):
        out.append(Finding(f'{label}: cuda_visible_devices "{devices}" must be GPU indexes or UUIDs separated by '
                           'commas, e.g. "0,1"', (i, "cuda_visible_devices")))
    if "storage_dir" in inst:
        out += [Finding(f"{label}: storage_dir {m}", (i, "storage_dir")) for m in storage_dir_errors(inst["storage_dir"])]
    return out


def _plain(value: Any) -> str | None:
    return str(value).lower() if isinstance(value, bool) else (str(value) if isinstance(value, (int, float)) else None)


def storage_dir_errors(value: Any) -> list[str]:
    """What is wrong with an instance's storage_dir on its own (the host rules do the rest)."""
    if not isinstance(value, str):
        return [type_error(value, "str") or ""]
    if not value.startswith("/"):
        return [f'"{value}" is not an absolute path: start it with / (it must lie under '
                "kvprov_storage_mount_point)"]
    if ".." in value.split("/"):
        return [f'"{value}" must not contain ..']
    if not re.fullmatch(r"[A-Za-z0-9_./-]+", value):
        return [f'"{value}" may hold only letters, digits and _ . / - (it is written into unit lines and the '
                "evictor's command line)"]
    return []


# ---- engines

def user_name(value: str) -> list[Finding]:
    if value == "root":
        return [Finding("the engine must not run as root: name a system user (kvprov creates it)")]
    if not USER_NAME.fullmatch(value):
        return [Finding(f'"{value}" is not a valid user name (lower-case letters, digits, _ and -)')]
    return []


def listen_address(value: str) -> list[Finding]:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return [Finding(f'"{value}" is not an IP address to listen on (e.g. 127.0.0.1, or 0.0.0.0 for every '
                        "interface)")]
    return []


def networks(value: list) -> list[Finding]:
    out = []
    for i, item in enumerate(value):
        try:
            ipaddress.ip_network(str(item), strict=False)
        except ValueError:
            out.append(Finding(f'item {i + 1}: "{item}" is not an address or CIDR (e.g. 10.0.0.0/8)', (i,)))
    return out


def model_path(value: str) -> list[Finding]:
    if not value or re.search(r"[\s'\"\\$%]", value):
        return [Finding(f'"{value}" must be a Hugging Face id or an absolute directory without spaces, quotes, '
                        "backslashes, $ or %")]
    if value.startswith("/") and ".." in value.split("/"):
        return [Finding(f'"{value}" must not contain ..')]
    return []


# A secret value systemd's EnvironmentFile= takes as it is: printable ASCII but quotes, $, \ and `.
SECRET_VALUE = re.compile(r"[!#%&(-\[\]-_a-~]+")


def _secret_lines(value: str, what: str) -> tuple[list[str] | None, list[Finding]]:
    """A controller file of secrets: (its lines, or None when it cannot be used; findings). Its
    content is never printed."""
    found = absolute_path(value)
    if found:
        return None, found
    path = Path(value)
    if not path.is_file():
        return None, [Finding(f'"{value}" is not a file on this controller (deploy copies {what} from it)')]
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        return None, [Finding(f'"{value}" cannot be read: {getattr(e, "strerror", None) or e}')]
    if path.stat().st_mode & 0o077:
        return lines, [Finding(f'"{value}" can be read by others on this controller: chmod 600 it', severity="warning")]
    return lines, []


def secret_file(value: str) -> list[Finding]:
    """A controller file holding one secret line (read here, never printed)."""
    if not value:
        return []
    lines, out = _secret_lines(value, "the secret")
    if lines is None:
        return out
    lines = "\n".join(lines).strip().splitlines()
    if len(lines) != 1 or not SECRET_VALUE.fullmatch(lines[0]):
        out.insert(0, Finding(f'"{value}" must hold the secret on one line of printable ASCII without spaces, quotes, '
                              "backslashes, $ or ` (systemd's EnvironmentFile= would rewrite it)"))
    return out


# ---- S3 credentials (NIXL's OBJ plugin, LMCache's S3 backends)

S3_CREDENTIAL_NAMES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
# Keys that would put S3 credentials into a rendered file: NIXL OBJ's backend parameters
# (access_key, secret_key, session_token) and LMCache's S3 L2 adapter's static keys. Both fall
# back to the AWS SDK's default chain, i.e. the AWS_* variables of S3_CREDENTIAL_NAMES.
S3_SECRET_KEYS = frozenset({"access_key", "secret_key", "session_token", "aws_access_key_id",
                            "aws_secret_access_key", "aws_session_token"})
S3_HINT = ("put them in the controller file named by kvprov_engine_s3_credentials_file (lines AWS_ACCESS_KEY_ID=..., "
           "AWS_SECRET_ACCESS_KEY=..., optional AWS_SESSION_TOKEN=...): deploy writes them to the root-only "
           "/etc/kvprov/secrets/engine.env and NIXL and LMCache read them from the environment")


def s3_secrets_in(value: Any, path: tuple = ()) -> list[Finding]:
    """S3 credentials in a value rendered into a config file (any key, at any depth, in any case)."""
    out = []
    if isinstance(value, dict):
        for key, v in value.items():
            if str(key).lower() in S3_SECRET_KEYS:
                out.append(Finding(f"{key}: S3 credentials must not be written into a config file (0644/0640, "
                                   f"collected in bundles, shown in audit diffs); {S3_HINT}", path + (key,)))
            else:
                out += s3_secrets_in(v, path + (key,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += s3_secrets_in(v, path + (i,))
    return out


def s3_secrets_in_environment(value: dict) -> list[Finding]:
    """AWS credentials as plain environment: an Environment= line of a 0644 unit."""
    return [Finding(f"{key}: an Environment= line of the unit is readable by every user (and in `systemctl "
                    f"show`); {S3_HINT}", (key,)) for key in value if str(key).upper() in S3_CREDENTIAL_NAMES]


def s3_credentials_file(value: str) -> list[Finding]:
    """The controller file of S3 credentials: AWS-style KEY=value lines (values never printed)."""
    if not value:
        return []
    lines, warnings = _secret_lines(value, "the credentials")
    if lines is None:
        return warnings
    out: list[Finding] = []
    seen: list[str] = []
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, val = line.partition("=")
        where = f'"{value}" line {n}: '
        if name not in S3_CREDENTIAL_NAMES or not sep:  # the name only when it is an AWS_ one (never a value)
            shown = f"{name}: " if sep and re.fullmatch(r"AWS_[A-Z0-9_]+", name) else ""
            out.append(Finding(f"{where}{shown}only {', '.join(S3_CREDENTIAL_NAMES)} may be set, as NAME=value "
                               "(no export, no other variables: the file goes into every engine's environment; "
                               "region and endpoint belong in the [plugin.obj] table)"))
        elif name in seen:
            out.append(Finding(f"{where}{name} a second time"))
        elif not SECRET_VALUE.fullmatch(val):
            out.append(Finding(f"{where}the value of {name} must be printable ASCII without spaces, quotes, "
                               "backslashes, $ or ` (systemd's EnvironmentFile= would rewrite it)"))
        seen.append(name)
    missing = [n for n in S3_CREDENTIAL_NAMES[:2] if n not in seen]
    if missing:
        out.append(Finding(f'"{value}" has no {" and no ".join(missing)} line (both are needed; '
                           "AWS_SESSION_TOKEN is optional)"))
    return out + warnings


def all_of(*rules: Callable[[Any], list[Finding]]) -> Callable[[Any], list[Finding]]:
    """Several value rules on one variable."""
    return lambda value: [f for rule in rules for f in rule(value)]


def environment(value: dict) -> list[Finding]:
    out = []
    for key, v in value.items():
        if not ENV_NAME.fullmatch(str(key)):
            out.append(Finding(f'"{key}" is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)', (key,)))
        elif v is None or isinstance(v, (list, dict)):
            out.append(Finding(f"{key}: give a string or a number, got {describe(v)}", (key,)))
    return out


def positive_number(value: Any) -> list[Finding]:
    return [] if value > 0 else [Finding(f"must be more than 0, got {value}")]


def fraction(value: Any) -> list[Finding]:
    return [] if 0 < value <= 1 else [Finding(f"must be in (0, 1], got {value}")]


def absolute_or_empty(value: str) -> list[Finding]:
    return absolute_path(value) if value else []


# LMCache 0.5.6's configuration keys (lmcache.v1.config._CONFIG_DEFINITIONS; a unit test
# compares them with the installed LMCache), and its renamed ones. LMCache only logs an
# unknown key and drops it.
LMCACHE_KEYS = frozenset({
    "app_id", "audit_actual_remote_url", "blend_check_layers", "blend_min_tokens", "blend_recompute_ratios",
    "blend_special_str", "blend_thresholds", "blocking_timeout_secs", "cache_policy", "chunk_size",
    "chunk_statistics_auto_exit_target_unique_chunks", "chunk_statistics_auto_exit_timeout_hours",
    "chunk_statistics_auto_start_statistics", "chunk_statistics_strategy", "controller_pull_url",
    "controller_reply_url", "enable_async_loading", "enable_blending", "enable_chunk_statistics",
    "enable_controller", "enable_hidden_state_cache", "enable_kv_events", "enable_lazy_memory_allocator",
    "enable_p2p", "enable_pd", "enable_scheduler_bypass_lookup", "external_lookup_client", "extra_config",
    "gds_backend", "gds_buffer_size", "gds_path", "gds_path_sharding", "hidden_state_layers",
    "hidden_states_retrieve_mode", "hit_miss_ratio", "internal_api_server_enabled",
    "internal_api_server_host", "internal_api_server_include_index_list", "internal_api_server_port_start",
    "internal_api_server_socket_path_prefix", "lazy_memory_expand_trigger_ratio",
    "lazy_memory_initial_ratio", "lazy_memory_safe_size", "lazy_memory_step_ratio", "lmcache_instance_id",
    "lmcache_worker_heartbeat_delay_time", "lmcache_worker_heartbeat_time", "lmcache_worker_ids",
    "lmcache_worker_ports", "local_cpu", "local_cpu_use_hugepages", "local_disk",
    "local_disk_path_sharding", "lookup_server_worker_ids", "lookup_timeout_ms", "maru_path",
    "maru_pool_size", "max_hidden_state_cpu_size", "max_local_cpu_size", "max_local_disk_size",
    "min_retrieve_tokens", "mp_host", "mp_port", "nixl_backends", "nixl_buffer_device", "nixl_buffer_size",
    "numa_mode", "p2p_host", "p2p_init_ports", "p2p_lookup_ports", "pd_allocation_timeout_sec",
    "pd_backend_mode", "pd_bidirectional", "pd_buffer_device", "pd_buffer_size",
    "pd_condition_poll_interval_sec", "pd_max_prefill_len", "pd_peer_alloc_port", "pd_peer_host",
    "pd_peer_init_port", "pd_peer_query_port", "pd_proxy_host", "pd_proxy_port", "pd_role",
    "pd_shutdown_timeout_sec", "pd_skip_proxy_notification", "pin_check_interval_sec", "pin_timeout_sec",
    "pre_caching_hash_algorithm", "priority_limit", "py_enable_gc", "remote_config_url", "remote_serde",
    "remote_storage_plugins", "remote_url", "reserve_local_cpu_size", "retrieve_locations",
    "run_script_api_enabled", "runtime_plugin_locations", "save_decode_cache", "save_unfull_chunk",
    "script_allowed_imports", "storage_plugins", "store_location", "transfer_channel", "use_gds",
    "use_gpu_connector_v3", "use_layerwise"})
LMCACHE_RENAMED = {
    "cufile_buffer_size": "gds_buffer_size (cufile_buffer_size is ignored with only a warning)",
    "enable_xpyd": "enable_pd",
    "nixl_peer_host": "pd_peer_host",
    "nixl_peer_init_port": "pd_peer_init_port",
    "nixl_peer_alloc_port": "pd_peer_alloc_port",
    "nixl_proxy_host": "pd_proxy_host",
    "nixl_proxy_port": "pd_proxy_port",
    "nixl_role": "pd_role",
    "controller_url": "controller_pull_url",
    "lmcache_worker_port": "lmcache_worker_ports",
    "plugin_locations": "runtime_plugin_locations",
    "external_backends": "storage_plugins",
}


def lmcache_config(value: dict) -> list[Finding]:
    out = []
    for key, v in value.items():
        if key in LMCACHE_RENAMED:
            out.append(Finding(f"{key}: LMCache no longer reads it; use {LMCACHE_RENAMED[key]}", (key,)))
        elif key not in LMCACHE_KEYS:
            out.append(Finding(f'{key}: not an LMCache setting (LMCache ignores unknown keys silently)'
                               + _did_you_mean(str(key), sorted(LMCACHE_KEYS)), (key,)))
        elif isinstance(v, str) and v.strip().lower() in TRUE_FALSE_WORDS:
            out.append(Finding(f"{key}: {type_error(v, 'bool')}", (key,)))
        elif key == "remote_url" and isinstance(v, str) and re.match(r"[a-z]+:///", v):
            out.append(Finding(f'remote_url "{v}" has no host: LMCache\'s parser rejects it and runs without '
                               "the tier (only a warning); write e.g. fs://localhost:0/path, or use "
                               "kvprov_lmcache_inproc_tier: local_disk", (key,)))
    return out


# ---- GDS

def ip_addresses(value: list) -> list[Finding]:
    out = []
    for i, item in enumerate(value):
        try:
            ipaddress.ip_address(str(item))
        except ValueError:
            out.append(Finding(f'item {i + 1}: "{item}" is not an IP address (cuFile wants the IP '
                               "addresses of the host's RDMA NICs)", (i,)))
    return out


def netdevs(value: list) -> list[Finding]:
    return [Finding(f'item {i + 1}: "{v}" is not a network interface name (letters, digits, _ . -, at most 15)', (i,))
            for i, v in enumerate(value) if isinstance(v, str) and not sinks.NETDEV.fullmatch(v)]


def serial(value: Any) -> list[Finding]:
    """Ansible's serial: a positive number of hosts, a percentage "N%", or a list of them."""
    items = value if isinstance(value, list) else [value]
    bad = [v for v in items if not ((is_int(v) and v > 0) or (isinstance(v, str) and re.fullmatch(r"([1-9]\d?|100)%", v)))]
    if not items or bad:
        return [Finding(f"{describe(bad[0] if bad else value)} is not a batch size: give a number of hosts (10), a "
                        'percentage ("25%") or a list of them ([1, "10%", "100%"])')]
    return []


def mount_option_words(value: list) -> list[Finding]:
    """Mount options land in the mount unit's Options=: each one an NFS option kvprov knows,
    none that undoes nosuid,nodev,noexec (sinks.mount_option_problem)."""
    from kvprov.validate.parsers import mount_state
    out = extra_options(value)
    for i, item in enumerate(value):
        if isinstance(item, str) and not is_template(item):
            out += [Finding(f"item {i + 1}: {problem}", (i,)) for option in item.split(",")
                    if option.strip() and option.partition("=")[0].strip().lower() not in REPLACED_OPTIONS
                    for problem in [sinks.mount_option_problem(option.strip(), mount_state.expectations)] if problem]
    return out


# One variable's own rules (after its spec type has been checked).
VALUE_RULES: dict[str, Callable[[Any], list[Finding]]] = {
    "kvprov_storage_nfs_port": int_range(0, 65535, note=" (0 takes the profile's port: 20049 RDMA, 2049 TCP)"),
    "kvprov_storage_rsize": int_range(4096, 1048576, 4096),
    "kvprov_storage_wsize": int_range(4096, 1048576, 4096),
    "kvprov_storage_max_connect": int_range(1, 16),
    "kvprov_storage_nconnect": int_range(0, 16, note=" (0 leaves nconnect unset)"),
    "kvprov_storage_mount_timeout": int_range(1, note=" (seconds)"),
    "kvprov_host_memory_mb": int_range(0, note=" (MiB of host memory, MemTotal; 0: read on the host by the preflight)"),
    "kvprov_sglang_tp_size": int_range(1),
    "kvprov_sglang_page_size": int_range(1),
    "kvprov_sglang_hicache_size": int_range(0, note=" (GB of host DRAM per TP rank)"),
    "kvprov_bench_model_layers": int_range(1),
    "kvprov_bench_model_kv_heads": int_range(1),
    "kvprov_bench_model_head_dim": int_range(1),
    "kvprov_bench_files": int_range(1),
    "kvprov_bench_seconds": int_range(1, note=" (seconds per pass)"),
    "kvprov_bench_concurrency": int_range(0, 1024, note=" (0 takes the NIXL plugin's thread_count)"),
    "kvprov_bench_min_write_gbps": non_negative,
    "kvprov_bench_min_read_gbps": non_negative,
    "kvprov_bench_dir": absolute_path,
    "kvprov_storage_mount_point": mount_point,
    "kvprov_storage_server": storage_server,
    "kvprov_storage_extra_options": mount_option_words,
    "kvprov_rdma_soft_roce_netdevs": netdevs,
    "kvprov_nixl_config_path": absolute_path,
    "kvprov_nixl_venv": absolute_path,
    "kvprov_sglang_venv": absolute_path,
    "kvprov_engine_home": absolute_path,
    "kvprov_engine_user": all_of(user_name, check_bounds.engine_user),
    "kvprov_engine_uid": int_range(0, 2**31 - 1, note=" (0: any)"),
    "kvprov_engine_host": listen_address,
    "kvprov_engine_api_key_file": secret_file,
    "kvprov_engine_hf_token_file": secret_file,
    "kvprov_engine_s3_credentials_file": s3_credentials_file,
    "kvprov_engine_model_path": model_path,
    "kvprov_engine_environment": all_of(environment, s3_secrets_in_environment, check_bounds.secret_environment),
    "kvprov_engine_extra_args": check_bounds.secret_arguments,
    "kvprov_engine_hash_seed": int_range(0, 4294967295),
    "kvprov_engine_namespace": lambda v: [] if v == "" or namespace.NAMESPACE.fullmatch(v) else [Finding(
        f'"{v}" is not a namespace name: 1 to 128 letters, digits, . _ - (not starting with . _ -); it is a '
        "directory on the shared volume")],
    "kvprov_deploy_serial": serial,
    "kvprov_deploy_max_fail_percentage": int_range(0, 100, note=" (percent of a batch)"),
    "kvprov_engine_find_links": absolute_or_empty,
    "kvprov_engine_wheelhouse": absolute_or_empty,
    "kvprov_vllm_venv": absolute_path,
    "kvprov_vllm_block_size": int_range(1),
    "kvprov_vllm_tensor_parallel_size": int_range(1),
    "kvprov_vllm_max_model_len": int_range(0, note=" (0: the model's own)"),
    "kvprov_vllm_gpu_memory_utilization": fraction,
    "kvprov_vllm_offload_cpu_bytes_to_use": int_range(0),
    "kvprov_vllm_offload_block_size": int_range(1),
    "kvprov_vllm_offload_read_threads": int_range(1),
    "kvprov_vllm_offload_write_threads": int_range(1),
    "kvprov_vllm_offload_shm_headroom_bytes": int_range(0),
    "kvprov_lmcache_mp_l1_size_gb": positive_number,
    "kvprov_lmcache_mp_host": listen_address,
    "kvprov_lmcache_mp_metrics_allow": networks,
    "kvprov_engine_clients": networks,
    "kvprov_lmcache_mp_l2_size_gb": non_negative,
    "kvprov_lmcache_mp_nixl_file_size": int_range(4096, note=" (bytes; at least one KV chunk)"),
    "kvprov_lmcache_mp_nixl_pool_size": int_range(1),
    "kvprov_lmcache_mp_l2_eviction_watermark": fraction,
    "kvprov_lmcache_mp_l2_eviction_ratio": fraction,
    "kvprov_lmcache_inproc_chunk_size": int_range(1),
    "kvprov_lmcache_inproc_max_local_cpu_size": non_negative,
    "kvprov_lmcache_inproc_max_local_disk_size": positive_number,
    "kvprov_lmcache_inproc_nixl_pool_size": int_range(1),
    "kvprov_lmcache_inproc_gds_buffer_size": int_range(1, note=" (MiB)"),
    "kvprov_lmcache_inproc_config": all_of(lmcache_config, s3_secrets_in),
    "kvprov_gds_cufile_path": absolute_path,
    "kvprov_nixl_plugins": all_of(nixl_plugins, s3_secrets_in),
    "kvprov_nixl_backend_options": all_of(nixl_backend_options, s3_secrets_in),
    "kvprov_engine_instances": engine_instances,
    "kvprov_gds_rdma_dev_addr_list": ip_addresses,
}


# ---------------------------------------------------------------------------- setting rules

def check_setting(setting: Setting, specs: dict[str, VarSpec]) -> list[Problem]:
    """One variable where it is set: its name, its type, its own value rules."""
    var = setting.var
    name = var.name
    if name.startswith("kvprov_lab_"):  # the lab's informational variables
        return []
    if not name.startswith("kvprov_"):
        return [_problem(setting, f) for f in misnamed_variable(name, specs)]
    renamed = []
    if name in DEPRECATED:
        name = DEPRECATED[name]
        renamed = [Finding(f"renamed {name} (the old name still works; every engine reads the new one)",
                           severity="warning")]
    spec = specs.get(name)
    if spec is None:
        return [_problem(setting, Finding("not a variable of any kvprov role (Ansible would silently "
                                          "ignore it)" + _did_you_mean(name, list(specs))))]
    findings = control_characters(var.value)
    if is_template(var.value):  # the rest when the roles render it: their sink filters (kvprov/sinks.py)
        return [_problem(setting, f) for f in renamed + findings]
    findings = findings or spec_findings(var, spec)
    if not findings and name in VALUE_RULES:
        findings = VALUE_RULES[name](var.value)
    return [_problem(setting, f) for f in renamed + findings]


def control_characters(value: Any, path: tuple = ()) -> list[Finding]:
    """What no string (keys too) may hold anywhere kvprov writes it (sinks.string_problem): a
    control character or a Unicode line separator would add lines to the rendered units and
    files; a string over sinks.MAX_LENGTH is not a setting."""
    if isinstance(value, str):
        problem = sinks.string_problem(value)
        return [Finding(problem, path)] if problem else []
    if isinstance(value, dict):
        return [f for k, v in value.items() for f in control_characters(k, path) + control_characters(v, path + (k,))]
    if isinstance(value, list):
        return [f for i, v in enumerate(value) for f in control_characters(v, path + (i,))]
    return []


def misnamed_variable(name: str, specs: dict[str, VarSpec]) -> list[Finding]:
    """A non-kvprov_ name that looks like a kvprov variable (kvprv_..., storage_server, _kvprov_...)."""
    if name.startswith("_kvprov_"):
        return [Finding("the roles' internal variables (roles/*/vars/main.yml) cannot be set from the "
                        "inventory (role vars win); set the kvprov_* variables instead")]
    if f"kvprov_{name}" in specs:
        return [Finding(f"did you mean kvprov_{name}? (kvprov's variables start with kvprov_)", severity="warning")]
    match = difflib.get_close_matches(name.lower(), list(specs), n=1, cutoff=0.88)
    if match:
        return [Finding(f"not a kvprov variable, but close to one: did you mean {match[0]}?")]
    return []


def _problem(setting: Setting, finding: Finding) -> Problem:
    var = setting.var
    return Problem(var.origin.file, var.line_of(*finding.path), setting.host, var.name,
                   finding.message, finding.severity)


# ---------------------------------------------------------------------------- host rules

class HostView:
    """A target host's effective values, each usable only if it has its spec's type."""

    def __init__(self, host: Host, specs: dict[str, VarSpec]):
        self.host, self.specs = host, specs

    def get(self, name: str) -> Any:
        """The value, or None when it is missing, a template, or of the wrong type."""
        var = self.host.var(name)
        if var is None or is_template(var.value):
            return None
        spec = self.specs.get(DEPRECATED.get(name, name))
        if spec and spec_findings(var, spec):
            return None
        return var.value

    def location(self, name: str, *path: str | int) -> tuple[str, int]:
        """Where the variable is set, or where the host is declared when it is a role default."""
        var = self.host.var(name)
        if var is None or var.origin.default:
            return self.host.origin.file, self.host.origin.line
        return var.origin.file, var.line_of(*path)

    def problem(self, name: str, message: str, *path: str | int, severity: str = "error") -> Problem:
        file, line = self.location(name, *path)
        return Problem(file, line, self.host.name, name, message, severity)


def check_host(host: Host, specs: dict[str, VarSpec]) -> list[Problem]:
    """The rules that span several of one host's variables (storage dirs: see storage_dirs)."""
    h = HostView(host, specs)
    profile = h.get("kvprov_storage_profile")
    out: list[Problem] = []
    if profile in NFS_PROFILES:
        out += _nfs_server_and_export(h, profile)
        out += _protocol(h, profile)
        out += _nconnect_and_trunking(h)
    out += engine_rules(h)
    out += _bench_file_size(h)
    out += _ansible_host(h)
    if profile == "local" and h.get("kvprov_storage_pnfs_layout") not in (None, "none"):
        out.append(h.problem("kvprov_storage_pnfs_layout",
                             f"{h.get('kvprov_storage_pnfs_layout')} has no meaning for profile local "
                             "(no NFS): set kvprov_storage_pnfs_layout: none", severity="warning"))
    return out


def _ansible_host(h: HostView) -> list[Problem]:
    """ansible_host is an address or a DNS name: loadtest and validate build URLs from it (and
    send the API key there), so a port, path or query in it would send the key elsewhere."""
    var = h.host.var("ansible_host")
    value = var.value if var else None
    if not isinstance(value, str) or is_template(value):
        return []
    try:
        ipaddress.ip_address(value.removeprefix("[").removesuffix("]"))
        return []
    except ValueError:
        pass
    if re.fullmatch(r"[A-Za-z0-9_.-]{1,253}", value):
        return []
    return [h.problem("ansible_host", f'"{sinks.shown(value)}" is not an address or a DNS name (a port goes in '
                                      "ansible_port): kvprov builds URLs from it and sends the engine's API key there")]


def _bench_file_size(h: HostView) -> list[Problem]:
    """The acceptance test writes KV-page-shaped files with O_DIRECT: their size (the model
    geometry, the page size, the TP size and the HiCache layout) must be a multiple of 4096."""
    names = ("kvprov_bench_model_layers", "kvprov_sglang_page_size", "kvprov_bench_model_kv_heads",
             "kvprov_sglang_tp_size", "kvprov_bench_model_head_dim", "kvprov_bench_kv_dtype_bytes")
    layers, page, heads, tp, head_dim, dtype = (h.get(n) for n in names)
    layout = h.get("kvprov_sglang_hicache_mem_layout")
    if not all(is_int(v) and v > 0 for v in (layers, page, heads, tp, head_dim, dtype)) or not isinstance(layout, str):
        return []
    size = layers * page * max(1, heads // tp) * head_dim * dtype * (1 if layout.startswith("page_first") else 2)
    if size % 4096 == 0:
        return []
    return [h.problem("kvprov_sglang_page_size",
                      f"the acceptance test's KV files would be {size} bytes (layers x page size x KV heads per TP "
                      "rank x head dim x dtype bytes, x2 unless the layout is page_first*), not a multiple of 4096 "
                      "as O_DIRECT needs: check the kvprov_bench_model_* geometry against the model's config.json, "
                      "or use a larger power-of-two page size (e.g. 256)")]


def _nfs_server_and_export(h: HostView, profile: str) -> list[Problem]:
    out = []
    server = h.get("kvprov_storage_server")
    if isinstance(server, str) and not server.strip():
        unset = " (not set in the inventory)" if h.host.is_default("kvprov_storage_server") else ""
        out.append(h.problem("kvprov_storage_server",
                             f"empty{unset}, but profile {profile} mounts NFS: set it to the NFS server "
                             "(the NetApp data LIF's IP address or DNS name)"))
    export = h.get("kvprov_storage_export")
    if isinstance(export, str) and not export.startswith("/"):
        out.append(h.problem("kvprov_storage_export",
                             f'"{export}" is not an absolute path: the junction path starts with / (e.g. /kvcache)'))
    elif isinstance(export, str) and absolute_path(export):  # it lands in the mount unit's What=
        out.append(h.problem("kvprov_storage_export", absolute_path(export)[0].message))
    return out


def _options(h: HostView) -> list[tuple[str, str | None, int]]:
    items = h.get("kvprov_storage_extra_options") or []
    return parse_mount_options([v for v in items if not is_template(v)])  # h.get: a list of strings


def _protocol(h: HostView, profile: str) -> list[Problem]:
    """proto= belongs to the profile; the kvcache_mount role rejects it in the extra options."""
    out = []
    own, ipv6 = PROFILE_PROTOS[profile]
    other = "nfs_tcp" if profile == "netapp_pnfs_rdma" else "netapp_pnfs_rdma"
    for key, val, i in _options(h):
        if key != "proto":
            continue
        if val == own:
            msg = f'"proto={val}" is already set by profile {profile}: remove it from the extra options'
        elif val == ipv6:
            msg = (f'"proto={val}" (IPv6) cannot be given here: the kvcache_mount role sets proto={own} '
                   "itself and rejects proto= in the extra options")
        elif val in PROFILE_PROTOS[other]:
            msg = (f'"proto={val}" contradicts profile {profile} (proto={own}): remove it, or set '
                   f"kvprov_storage_profile: {other}")
        else:
            msg = f'"proto={val}" contradicts profile {profile} (proto={own}): remove it'
        out.append(h.problem("kvprov_storage_extra_options", msg, i))
    return out


def _nconnect_and_trunking(h: HostView) -> list[Problem]:
    """nconnect and session trunking exclude each other; the extra options must not bypass
    or duplicate the variables (the role adds nconnect=/max_connect=/trunkdiscovery itself)."""
    out = []
    nconnect, trunking = h.get("kvprov_storage_nconnect"), h.get("kvprov_storage_trunking")
    if nconnect is None or trunking is None:
        return out
    # What the role puts on the mount: auto = none with nconnect, else max_connect/trunkdiscovery by OS.
    role_trunking = ("none" if nconnect > 0 else "max_connect or trunkdiscovery") if trunking == "auto" else trunking
    extra = {key: (val, i) for key, val, i in _options(h) if key in ("nconnect", "max_connect", "trunkdiscovery")}
    var = "kvprov_storage_extra_options"
    if "nconnect" in extra:
        val, i = extra["nconnect"]
        if nconnect > 0:
            out.append(h.problem(var, f'"nconnect={val}" conflicts with kvprov_storage_nconnect: {nconnect} '
                                      "(the mount would get both): remove it from the extra options", i))
        elif role_trunking != "none":
            out.append(h.problem(var, f'"nconnect={val}" is combined with session trunking '
                                      f"(kvprov_storage_trunking: {trunking} gives {role_trunking}): set "
                                      f"kvprov_storage_nconnect: {val} instead (auto trunking then turns off)", i))
    for key in ("max_connect", "trunkdiscovery"):
        if key in extra and role_trunking != "none":
            val, i = extra[key]
            option = key if val is None else f"{key}={val}"
            fix = f"kvprov_storage_trunking: {key}" + (f" and kvprov_storage_max_connect: {val}" if val else "")
            out.append(h.problem(var, f'"{option}" conflicts with kvprov_storage_trunking: {trunking} (the '
                                      f"role adds {role_trunking} itself): set {fix} instead", i))
    explicit = trunking in ("max_connect", "trunkdiscovery")
    extra_trunking = [k for k in ("max_connect", "trunkdiscovery") if k in extra]
    if nconnect > 0 and (explicit or extra_trunking):
        how = (f"kvprov_storage_trunking: {trunking}" if explicit
               else f'"{extra_trunking[0]}" in kvprov_storage_extra_options')
        out.append(h.problem("kvprov_storage_nconnect",
                             f"nconnect {nconnect} together with session trunking ({how}): use one or the "
                             "other (NetApp: with both, only the metadata server benefits); set "
                             "kvprov_storage_trunking: none to keep nconnect, or kvprov_storage_nconnect: 0"))
    return out


# ---- engines

def instances_var(h: HostView) -> str:
    """The instance list's variable in effect: the old name when the inventory sets it."""
    return "kvprov_sglang_instances" if h.host.var("kvprov_sglang_instances") else "kvprov_engine_instances"


def engine_rules(h: HostView) -> list[Problem]:
    """Each engine's settings that only make sense together, and settings of another engine."""
    engine = h.get("kvprov_engine")
    if engine not in ENGINES:
        return []
    out = _other_engines_settings(h, engine) + _exposure(h) + _s3_without_credentials(h) + _evict_marks(h) + _sharing(h)
    instances = h.get(instances_var(h)) or []
    out += _instance_ports(h, engine, instances)
    rules = {"vllm_offload": _vllm_offload, "lmcache_mp": _lmcache_mp, "lmcache_inproc": _lmcache_inproc}
    if engine in rules:
        out += rules[engine](h)
    from kvprov import check_tiers  # the tiers' sizes: host memory, storage below DRAM
    return out + check_tiers.rules(h) + check_bounds.rules(h)


def _exposure(h: HostView) -> list[Problem]:
    """An API beyond loopback is closed by default: it needs an API key and the networks of its
    clients (the unit's IPAddressAllow=; vLLM's key does not guard POST /invocations)."""
    host = h.get("kvprov_engine_host")
    if not host or listen_address(host) or host in ("127.0.0.1", "::1"):
        return []
    out = []
    if not h.get("kvprov_engine_api_key_file"):
        out.append(h.problem("kvprov_engine_host", f"the engine listens on {host} without an API key: anyone who "
                                                    "reaches it can use the model and fill the KV cache; set "
                                                    "kvprov_engine_api_key_file"))
    if not h.get("kvprov_engine_clients"):
        out.append(h.problem("kvprov_engine_host", f"the engine listens on {host} for any address: name its clients' "
                                                    "networks in kvprov_engine_clients (e.g. [10.0.0.0/8]); vLLM's API "
                                                    "key does not guard every route (POST /invocations serves without "
                                                    "it), the unit's IPAddressAllow= does"))
    return out


def _s3_without_credentials(h: HostView) -> list[Problem]:
    """S3 in use with no credentials file: the AWS SDK's default chain applies (an instance
    role, ~/.aws of the engine user), which may be meant; say so."""
    if h.get("kvprov_engine_s3_credentials_file"):
        return []
    engine = h.get("kvprov_engine")
    obj = (h.get("kvprov_nixl_plugins") or {}).get("obj")
    remote = (h.get("kvprov_lmcache_inproc_config") or {}).get("remote_url")
    if engine == "sglang_hicache" and isinstance(obj, dict) and obj.get("active") is True:
        var, path, what = "kvprov_nixl_plugins", ("obj", "active"), "the active NIXL plugin obj"
    elif engine == "lmcache_inproc" and isinstance(remote, str) and remote.startswith("s3://"):
        var, path, what = "kvprov_lmcache_inproc_config", ("remote_url",), "LMCache's remote_url s3://"
    else:
        return []
    return [h.problem(var, f"{what} talks to S3 and kvprov_engine_s3_credentials_file is not set: the AWS SDK "
                           "then takes credentials from its default chain (an instance role, ~/.aws of the engine "
                           "user); set kvprov_engine_s3_credentials_file unless the hosts have such a role",
                      *path, severity="warning")]


def _other_engines_settings(h: HostView, engine: str) -> list[Problem]:
    """Mixing engines: a variable only another engine reads is set for this host."""
    out = []
    for name in sorted(h.host.vars):
        var = h.host.var(name)
        if var.origin.default or name in DEPRECATED:
            continue
        owner = next((e for e, prefixes in ENGINE_PREFIXES.items() if name.startswith(prefixes)), None)
        if name.startswith("kvprov_vllm_") and not name.startswith("kvprov_vllm_offload_") or name == "kvprov_lmcache_version":
            owner = None if engine in VLLM_ENGINES else "a vLLM engine"
        if owner and owner != engine:
            out.append(h.problem(name, f"only engine {owner} reads it, but this host's kvprov_engine is {engine}: "
                                       "it has no effect here; remove it or set it on the groups of that engine",
                                 severity="warning"))
    return out


def _instance_ports(h: HostView, engine: str, instances: list) -> list[Problem]:
    """lmcache_mp's server ports: only for lmcache_mp, and no port used twice on the host;
    a storage_dir for an engine without a KV tier."""
    out, ports = [], []
    name = instances_var(h)
    for i, inst in enumerate(instances):
        if isinstance(inst, dict) and "storage_dir" in inst and engine in TIERLESS_ENGINES:
            out.append(h.problem(name, f"instance {inst.get('name')}: engine {engine} has no KV tier and never "
                                       "reads storage_dir: it has no effect; remove it", i, "storage_dir",
                                 severity="warning"))
        if not isinstance(inst, dict) or not is_int(inst.get("port")):
            continue
        for key in LMCACHE_MP_INSTANCE_KEYS:
            if key in inst and engine != "lmcache_mp":
                out.append(h.problem(name, f"instance {inst.get('name')}: {key} belongs to engine lmcache_mp, but "
                                           f"this host's kvprov_engine is {engine}: one instance runs one engine",
                                     i, key))
            elif engine == "lmcache_mp":
                ports.append((inst.get(key, inst["port"] + (10000 if key == "lmcache_port" else 11000)), i, key, inst))
    used = {inst["port"]: f"the port of instance {inst.get('name')}" for inst in instances
            if isinstance(inst, dict) and is_int(inst.get("port"))}
    for port, i, key, inst in ports:
        if port in used:
            given = "" if key in inst else " (its default: set it)"
            out.append(h.problem(name, f"instance {inst.get('name')}: {key} {port}{given} is already {used[port]}",
                                 i, key))
        used.setdefault(port, f"the {key} of instance {inst.get('name')}")
    return out


def _vllm_offload(h: HostView) -> list[Problem]:
    out = []
    if h.get("kvprov_vllm_offload_cpu_bytes_to_use") == 0:
        out.append(h.problem("kvprov_vllm_offload_cpu_bytes_to_use",
                             "engine vllm_offload needs cpu_bytes_to_use: the bytes of host memory for its CPU tier, "
                             "total over all workers (e.g. 107374182400 for 100 GiB)"))
    block, gpu_block = h.get("kvprov_vllm_offload_block_size"), h.get("kvprov_vllm_block_size")
    if is_int(block) and is_int(gpu_block) and gpu_block > 0 and block % gpu_block:
        out.append(h.problem("kvprov_vllm_offload_block_size",
                             f"{block} is not a multiple of kvprov_vllm_block_size {gpu_block} (vLLM's GPU block): "
                             f"use e.g. {max(gpu_block, block // gpu_block * gpu_block)}"))
    return out


def _lmcache_mp(h: HostView) -> list[Problem]:
    out = []
    if h.get("kvprov_lmcache_mp_transfer_mode") == "lmcache_driven" and h.get("kvprov_engine_require_gpu") is False:
        out.append(h.problem("kvprov_lmcache_mp_transfer_mode",
                             "lmcache_driven makes a CPU vLLM worker hang at start for ever (no handler for "
                             "register_kv_cache_engine_driven_context): use auto"))
    if h.get("kvprov_lmcache_mp_host") not in (None, "127.0.0.1", "::1"):
        out.append(h.problem("kvprov_lmcache_mp_host", "the LMCache MP server has no authentication: listening "
                             "beyond loopback lets any host on that network read and write the KV cache",
                             severity="warning"))
    l2 = h.get("kvprov_lmcache_mp_l2_type")
    if l2 == "fs_native" and h.get("kvprov_lmcache_mp_l2_size_gb") == 0:
        out.append(h.problem("kvprov_lmcache_mp_l2_size_gb",
                             "0 leaves fs_native without max_capacity_gb and its eviction block: LMCache never "
                             "evicts from L2 and only kvprov's evictor (kvprov_engine_evict) bounds the directory; "
                             "set the L2 capacity in GB", severity="warning"))
    l1 = h.get("kvprov_lmcache_mp_l1_size_gb")
    if l2 in ("nixl_store", "nixl_store_dynamic") and isinstance(l1, (int, float)) and int(l1 * (1 << 30)) % 4096:
        out.append(h.problem("kvprov_lmcache_mp_l1_size_gb",
                             f"{l1} GiB is {int(l1 * (1 << 30))} bytes, not a multiple of LMCache's 4096-byte L1 "
                             f"page: {l2} registers the L1 with NIXL page by page and the server fails at start "
                             "(NIXL_ERR_NOT_FOUND in prepXferDlist); use e.g. "
                             f"{max(round(l1 * 4) / 4, 0.25)}"))
    if l2 != "nixl_store":
        return out
    pool, size = h.get("kvprov_lmcache_mp_nixl_pool_size"), h.get("kvprov_lmcache_mp_nixl_file_size")
    if is_int(size) and size >= 4096 and size % 4096:
        out.append(h.problem("kvprov_lmcache_mp_nixl_file_size",
                             f"{size} is not a multiple of LMCache's 4096-byte L1 page: nixl_store refuses it at "
                             f"start (\"file_size ({size}) must be a multiple of page_size (4096)\"); use "
                             f"{size // 4096 * 4096}"))
    want = h.get("kvprov_lmcache_mp_l2_size_gb")
    if is_int(pool) and is_int(size) and isinstance(want, (int, float)) and pool * size < want * 1e9:
        need = -(-int(want * 1e9) // size)
        out.append(h.problem("kvprov_lmcache_mp_nixl_pool_size",
                             f"pool_size {pool} x file_size {size} = {pool * size / 1e9:.3g} GB is less than "
                             f"kvprov_lmcache_mp_l2_size_gb {want}: stores fail with \"Insufficient NIXL storage "
                             f"capacity\" once it is full; set pool_size to at least {need}"))
    return out


def _lmcache_inproc(h: HostView) -> list[Problem]:
    out = []
    if h.get("kvprov_lmcache_inproc_tier") == "nixl" and h.get("kvprov_lmcache_inproc_max_local_cpu_size") == 0:
        out.append(h.problem("kvprov_lmcache_inproc_max_local_cpu_size",
                             "the nixl tier stages through LMCache's host DRAM pool (nixl_buffer_device cpu): "
                             "LMCache refuses max_local_cpu_size 0 (\"requires max_local_cpu_size > 0\")"))
    extra = h.get("kvprov_lmcache_inproc_config") or {}
    owned = {"local_disk", "max_local_disk_size", "gds_path", "gds_buffer_size", "chunk_size", "local_cpu",
             "max_local_cpu_size", "extra_config", "nixl_buffer_device"}
    if h.get("kvprov_lmcache_inproc_tier") == "fs":
        owned.add("remote_url")
    for key in sorted(set(extra) & owned):
        why = ("kvprov writes it for the fs tier (kvprov_lmcache_inproc_tier: fs): remove it here or choose "
               "another tier" if key == "remote_url" else
               "is set by kvprov's own variables (kvprov_lmcache_inproc_*): remove it here")
        out.append(h.problem("kvprov_lmcache_inproc_config", f"{key} {why}", key))
    return out


# ---- capacity (kvprov-evict, docs/capacity.md)

def _evict_marks(h: HostView) -> list[Problem]:
    """The evictor starts at the high mark and stops under the low one: low must be below high."""
    high, low = h.get("kvprov_engine_evict_high_percent"), h.get("kvprov_engine_evict_low_percent")
    if is_int(high) and is_int(low) and 0 < high <= low < 100:  # else: the range rules report
        return [h.problem("kvprov_engine_evict_low_percent",
                          f"{low} is not below kvprov_engine_evict_high_percent {high}: the evictor stops under the "
                          f"low mark once the high one is reached; set it lower, e.g. {max(high - 10, 0)}")]
    return []


VALUE_RULES.update({
    "kvprov_engine_evict_high_percent": int_range(1, 100, note=" (percent of the volume, and of the limit)"),
    "kvprov_engine_evict_low_percent": int_range(0, 99, note=" (percent, below the high mark)"),
    "kvprov_engine_evict_max_bytes": int_range(0, note=" (bytes per storage directory; 0: the volume's marks only)"),
    "kvprov_engine_evict_interval_s": int_range(10, 86400, note=" (seconds between runs)"),
    "kvprov_engine_evict_keep_minutes": int_range(0, 43200, note=" (minutes a file used that recently is never "
                                                              "removed; 0: no guard; at most 30 days)"),
})


# ---- NIXL storage directories

@dataclass
class StorageDir:
    """One engine instance's storage directory on a host."""

    host: str
    instance: str
    path: str  # normalized absolute path on the host
    volume: tuple[str, str]  # ("nfs", server) or ("local", host): who else can see it
    volume_path: str  # the path within that volume's namespace (server path for NFS)
    export: str
    location: tuple[str, int]  # file, line to report at
    problems: list[Problem]
    variable: str  # the instance list's variable (instances_var)
    engine: str = "sglang_hicache"
    shared: bool = False  # the engine's tier may be shared with other instances (kvprov/namespace.py)
    view: "HostView | None" = None


def storage_dirs(h: HostView) -> list[StorageDir]:
    """Every valid instance's storage dir, with the problems of the dir on its own."""
    profile, mount = h.get("kvprov_storage_profile"), h.get("kvprov_storage_mount_point")
    name_var = instances_var(h)
    instances = h.get(name_var)
    if (profile is None or not isinstance(mount, str) or mount_point(mount) or not instances
            or h.get("kvprov_engine") in TIERLESS_ENGINES):
        return []
    server = str(h.get("kvprov_storage_server") or "").strip().lower()
    export = posixpath.normpath(h.get("kvprov_storage_export") or "/")
    engine = h.get("kvprov_engine") or "sglang_hicache"
    shares = namespace.shares(engine, h.get)
    default_dir = (namespace.namespace_dir(mount, engine, namespace.namespace(_model_getter(h))) if shares
                   else None)
    out = []
    seen = set()
    for i, inst in enumerate(instances):
        name, given = inst.get("name"), inst.get("storage_dir")
        if not (isinstance(name, str) and INSTANCE_NAME.fullmatch(name)) or name in seen:
            continue  # reported by the setting rules
        seen.add(name)
        if "storage_dir" in inst and storage_dir_errors(given):
            continue
        path = posixpath.normpath(given or default_dir or namespace.instance_dir(mount, h.host.name, name))
        at = (i, "storage_dir") if given else (i,)
        d = StorageDir(h.host.name, name, path, ("local", h.host.name), path, export,
                       h.location(name_var, *at), [], name_var, engine,
                       namespace.per_instance_reason(engine, h.get) is None and engine in namespace.KEYING, h)
        rel = posixpath.relpath(path, mount)
        if rel == "." or rel.startswith(".."):
            d.problems.append(_outside_mount(h, name_var, name, given, path, mount, rel == ".", at))
            out.append(d)
            continue
        if profile in NFS_PROFILES:
            d.volume, d.volume_path = ("nfs", server), posixpath.join(export, rel)
        out.append(d)
    return out


def _model_getter(h: HostView) -> Callable[[str], Any]:
    """h.get, with the model path under its old name where the host still uses it."""
    return lambda n: (h.get("kvprov_sglang_model_path") or h.get(n)) if n == "kvprov_engine_model_path" else h.get(n)


def _sharing(h: HostView) -> list[Problem]:
    """kvprov_engine_storage_sharing: namespace only where the engine's tier can be shared."""
    engine = h.get("kvprov_engine") or "sglang_hicache"
    if h.get("kvprov_engine_storage_sharing") != "namespace" or engine in TIERLESS_ENGINES:
        return []
    reason = namespace.per_instance_reason(engine, h.get)
    if reason is None:
        return []
    return [h.problem("kvprov_engine_storage_sharing", f"namespace: this engine's tier cannot be shared: {reason}; "
                                                       "use auto or instance")]


def _outside_mount(h: HostView, var: str, name: str, given: str | None, path: str, mount: str, is_mount: bool,
                   at: tuple) -> Problem:
    shown = f'"{given}"' if given == path else f'"{given}" (that is {path})'
    if is_mount:
        msg = (f"instance {name}: storage_dir {shown} is the mount point itself: NIXL's clear() would wipe "
               f"the whole volume; use a directory below it, e.g. {mount}/{h.host.name}/{name}")
    else:
        msg = (f"instance {name}: storage_dir {shown} is not under kvprov_storage_mount_point {mount}: "
               f"the engine's third tier would be on local disk; use e.g. {mount}/{h.host.name}/{name} "
               "or drop storage_dir")
    return h.problem(var, msg, *at)


def shared_storage_dirs(dirs: list[StorageDir]) -> list[Problem]:
    """Two instances whose storage dirs are the same or nested on the same volume: NIXL's
    clear() in one wipes the other's files. Different NFS servers with the same export path
    may be LIFs of one SVM: a warning."""
    out = []
    usable = [d for d in dirs if not d.problems]
    by_volume: dict[tuple[str, str], list[StorageDir]] = {}
    for d in usable:
        by_volume.setdefault(d.volume, []).append(d)
    for group in by_volume.values():
        out += [_shared(a, b, "error") for a, b in _overlapping(group, lambda d: d.volume_path)
                if not _one_namespace(a, b)]
    by_export: dict[str, list[StorageDir]] = {}
    for d in usable:
        if d.volume[0] == "nfs":
            by_export.setdefault(d.export, []).append(d)
    for group in by_export.values():
        out += [_shared(a, b, "warning") for a, b in _overlapping(group, lambda d: d.volume_path)
                if a.volume != b.volume and not _one_namespace(a, b)]
    return out


def _one_namespace(a: StorageDir, b: StorageDir) -> bool:
    """The same directory, used by two instances of one engine whose tier is shared by design."""
    return a.volume_path == b.volume_path and a.shared and b.shared and a.engine == b.engine


def namespace_keys(dirs: list[StorageDir]) -> list[Problem]:
    """Hosts sharing one namespace must agree on everything that names its files (model, hash
    seed, block/chunk size, dtype, versions, keying engine arguments) and on the engine user's
    uid (the files' owner): else a host never hits another's pages, or cannot read them."""
    out = []
    by_namespace: dict[tuple, list[StorageDir]] = {}
    for d in dirs:
        if not d.problems and d.shared and d.view is not None:
            # one export path on several servers: data LIFs of one SVM, as shared_storage_dirs assumes
            volume = ("nfs", "") if d.volume[0] == "nfs" else d.volume
            by_namespace.setdefault((volume, d.volume_path, d.engine), []).append(d)
    for (volume, _, engine), group in by_namespace.items():
        first = group[0]
        where = f"on {first.volume[1]}:{first.export}" if volume[0] == "nfs" else "on the local disk"
        for d in group[1:]:
            if d.host == first.host:
                continue  # one host's instances read the same variables
            a, b = first.view, d.view
            names = [n for n in (*namespace.KEYING[engine], "kvprov_engine_uid")
                     if not (n == "kvprov_engine_hash_seed" and engine in HASHED_ENGINES and volume[0] == "nfs")]
            for name in names:  # (the hash seed of those engines: hash_seeds, per volume)
                if a.host.var(name) is None or b.host.var(name) is None:
                    continue
                va, vb = a.get(name), b.get(name)
                if va is None or vb is None or va == vb:
                    continue  # a template or a wrong type: not compared (the setting rules report the latter)
                out.append(b.problem(name, f"{vb!r} differs from host {first.host}'s {va!r}{_set_at(a, name)}, which "
                                           f"shares the namespace {d.path} {where}: {_KEYING_WHY.get(name, _KEYED)}; "
                                           "make them equal, or give these hosts their own kvprov_engine_namespace"))
            args_a, args_b = (namespace.keying_args(v.get("kvprov_engine_extra_args")) for v in (a, b))
            for flag in sorted(set(args_a) | set(args_b)):
                if args_a.get(flag) != args_b.get(flag):
                    out.append(b.problem("kvprov_engine_extra_args",
                                         f"{flag} {args_b.get(flag, '(not given)')} differs from host {first.host}'s "
                                         f"{args_a.get(flag, '(not given)')}{_set_at(a, 'kvprov_engine_extra_args')}, "
                                         "which shares the "
                                         f"namespace {d.path} {where}: {_KEYED}; make them equal, or give these "
                                         "hosts their own kvprov_engine_namespace"))
    return out


def _set_at(h: HostView, name: str) -> str:
    """ (file:line) where the host's value is set, (a role default), or nothing when not known."""
    var = h.host.var(name)
    if var is not None and var.origin.default:
        return " (a role default)"
    file, line = h.location(name)
    return f" ({file}:{line})" if file else ""


_KEYED = "the engine names its files by it, so neither host would ever hit the other's pages"
_KEYING_WHY = {"kvprov_engine_uid": "the engine user's uid owns the namespace's files, so one host could not "
                                    "read or evict the other's"}


def _overlapping(dirs: list[StorageDir], key: Callable[[StorageDir], str]):
    """Pairs (a, b) where b's path equals a's or lies inside it."""
    items = sorted(dirs, key=lambda d: key(d).split("/"))
    for i, a in enumerate(items):
        for b in items[i + 1:]:
            pa, pb = key(a), key(b)
            if pb != pa and not pb.startswith(pa + "/"):  # pa is never /: a storage dir lies below its mount
                break
            yield a, b


def _shared(a: StorageDir, b: StorageDir, severity: str) -> Problem:
    if a.volume[0] == "local":
        where = "on the local disk"
    elif severity == "error":
        where = f"on {a.volume[1]}:{a.export}"
    else:
        where = (f"on {b.volume[1]}:{b.export} and {a.volume[1]}:{a.export}, the same volume if both "
                 "servers are data LIFs of one SVM")
    other = f"host {a.host} instance {a.instance}'s storage dir"
    same = a.volume_path == b.volume_path
    relation = f"is also {other}" if same else f"lies inside {other} {a.path}"
    unshared = next((d for d in (b, a) if not d.shared), None)
    if same and unshared is None:
        why = f"engines {a.engine} and {b.engine} name their files differently: a namespace holds one engine's"
    elif unshared is not None and unshared.engine != "sglang_hicache" and unshared.view is not None:
        why = namespace.per_instance_reason(unshared.engine, unshared.view.get) or ""
    else:
        why = "NIXL's clear() would wipe the other's files"
    msg = (f"instance {b.instance}: storage dir {b.path} {relation} {where}: {why}; give every instance its own "
           "directory (without storage_dir each gets <mount point>/<host>/<name>, or the engine's shared "
           "namespace where its tier can be shared)")
    return Problem(b.location[0], b.location[1], b.host, b.variable, msg, severity)


# ---- prefix hash seeds

HASHED_ENGINES = ("vllm_offload", "lmcache_inproc")  # prefix keys hash with Python's hash()


def hash_seeds(hosts: list[HostView]) -> list[Problem]:
    """vLLM's native offloading and LMCache in-process key pages by hashes that depend on
    PYTHONHASHSEED: hosts sharing a volume with different seeds never hit each other's pages."""
    first: dict[tuple, tuple[str, Any]] = {}
    out = []
    for h in hosts:
        server, export, seed = (h.get(n) for n in ("kvprov_storage_server", "kvprov_storage_export",
                                                   "kvprov_engine_hash_seed"))
        if (h.get("kvprov_engine") not in HASHED_ENGINES or h.get("kvprov_storage_profile") not in NFS_PROFILES
                or None in (server, export, seed)):  # a template (only Ansible knows it) or a wrong type
            continue
        volume = (server.lower(), posixpath.normpath(export))
        other = first.setdefault(volume, (h.host.name, seed))
        if seed != other[1]:
            out.append(h.problem("kvprov_engine_hash_seed",
                                 f"{seed} differs from host {other[0]}'s {other[1]} on the same volume "
                                 f"{volume[0]}:{volume[1]}: prefix keys differ, so neither host ever hits the "
                                 "other's pages; use one seed for every host"))
    return out


def rollout_settings(hosts: list[HostView]) -> list[Problem]:
    """serial and max_fail_percentage are play keywords, one value for the whole run: a host
    (or group) with another value than the first host's would be silently ignored."""
    out = []
    for name in ("kvprov_deploy_serial", "kvprov_deploy_max_fail_percentage"):
        valid = [h for h in hosts if h.get(name) is not None and not VALUE_RULES[name](h.get(name))]
        first = valid[0] if valid else None
        for h in valid:
            if h.get(name) != first.get(name):
                out.append(h.problem(name, f"{h.get(name)!r} differs from host {first.host.name}'s "
                                           f"{first.get(name)!r}: a rollout setting is one value for the whole "
                                           "run; set it for all GPU nodes (e.g. in group_vars/gpu_nodes)"))
    return out


# ---------------------------------------------------------------------------- storage systems

# The variables of the storage systems (group kv_storage, read by `kvprov storage check`;
# their defaults: kvprov/storage/systems.py; docs/storage-check.md), and a GPU node's own
# address as the storage's export rules see it.
STORAGE_SPECS: dict[str, VarSpec] = {s.name: s for s in (
    VarSpec("kvprov_storage_system", inventory.STORAGE_GROUP, choices=("ontap", "linux")),
    VarSpec("kvprov_storage_svm", inventory.STORAGE_GROUP),
    VarSpec("kvprov_storage_credentials_file", inventory.STORAGE_GROUP, "path"),
    VarSpec("kvprov_storage_ca_bundle", inventory.STORAGE_GROUP, "path"),
    VarSpec("kvprov_storage_validate_certs", inventory.STORAGE_GROUP, "bool"),
    VarSpec("kvprov_storage_api_port", inventory.STORAGE_GROUP, "int"),
    VarSpec("kvprov_storage_api_timeout", inventory.STORAGE_GROUP, "int"),
    VarSpec("kvprov_storage_data_addresses", inventory.STORAGE_GROUP, "list", "str"),
    VarSpec("kvprov_storage_min_free_percent", inventory.STORAGE_GROUP, "float"),
    VarSpec("kvprov_storage_min_free_inodes_percent", inventory.STORAGE_GROUP, "float"),
    VarSpec("kvprov_storage_client_address", inventory.TARGET_GROUP),
)}
ADDRESS = re.compile(r"\[?[A-Za-z0-9_.:-]+\]?")  # an IPv4/IPv6 address or a DNS name


def storage_credentials_file(value: str) -> list[Finding]:
    """The ONTAP credentials file: root-only, username= and password= lines (never printed)."""
    from kvprov.storage import credentials

    if not value:
        return []
    try:
        credentials.read(value)
    except credentials.CredentialsError as e:
        return [Finding(str(e))]
    return []


def controller_file(value: str) -> list[Finding]:
    if not value:
        return []
    return absolute_path(value) or ([] if Path(value).is_file() else
                                    [Finding(f'"{value}" is not a file on this controller')])


def address(value: str) -> list[Finding]:
    return [] if ADDRESS.fullmatch(value) else [Finding(f'"{value}" is not an IP address or a DNS name')]


def addresses(value: list) -> list[Finding]:
    return [Finding(f"item {i + 1}: {f.message}", (i,)) for i, v in enumerate(value) if isinstance(v, str)
            for f in address(v)]


def percent(value: Any) -> list[Finding]:
    return [] if 0 <= value < 100 else [Finding(f"must be a percentage from 0 to under 100, got {value}")]


VALUE_RULES.update({
    "kvprov_storage_credentials_file": storage_credentials_file,
    "kvprov_storage_ca_bundle": controller_file,
    "kvprov_storage_api_port": int_range(1, 65535),
    "kvprov_storage_api_timeout": int_range(1, note=" (seconds per request)"),
    "kvprov_storage_data_addresses": addresses,
    "kvprov_storage_min_free_percent": percent,
    "kvprov_storage_min_free_inodes_percent": percent,
    "kvprov_storage_client_address": address,
})


def storage_rules(inv: Inventory, specs: dict[str, VarSpec]) -> list[Problem]:
    """What each storage system needs, and storage-system variables set where they do nothing."""
    out: list[Problem] = []
    for host in inv.storage_hosts:
        h = HostView(host, specs)
        kind = h.get("kvprov_storage_system")
        if host.var("kvprov_storage_system") is None:
            out.append(h.problem("kvprov_storage_system", "not set: say what this storage system is, ontap "
                                                          "(checked over its REST API) or linux (knfsd, over ssh)"))
        elif kind == "ontap":
            for name, what in (("kvprov_storage_svm", "the SVM that serves the KV-cache export"),
                               ("kvprov_storage_credentials_file", "a root-only file on this controller with "
                                                                   "username= and password= lines")):
                if not h.get(name):
                    out.append(h.problem(name, f"not set, but an ONTAP system needs it: {what}"))
            if h.get("kvprov_storage_validate_certs") is False:
                out.append(h.problem("kvprov_storage_validate_certs", "the cluster's certificate is not verified "
                                     "(anyone on the path can read the password): give the CA that signed it in "
                                     "kvprov_storage_ca_bundle instead", severity="warning"))
        elif kind == "linux":
            out += [h.problem(name, "has no meaning for a Linux server (reached over ssh)", severity="warning")
                    for name in ("kvprov_storage_svm", "kvprov_storage_credentials_file") if h.get(name)]
    storage_groups = set(_descendants(inv.groups, inventory.STORAGE_GROUP))
    storage_hosts = {h.name for h in inv.storage_hosts}
    for s in inv.settings:
        name = s.var.name
        if name not in STORAGE_SPECS or s.group == "all":
            continue
        on_storage = s.host in storage_hosts if s.host else s.group in storage_groups
        gpu_side = name == "kvprov_storage_client_address"
        if on_storage == gpu_side:
            where = ("the GPU nodes (group gpu_nodes)" if gpu_side
                     else f"the storage systems (group {inventory.STORAGE_GROUP})")
            out.append(_problem(s, Finding(f"a variable of {where}: it has no effect here", severity="warning")))
    return out


def _descendants(groups: dict, name: str) -> list[str]:
    if name not in groups:
        return []
    return [name, *(d for child in groups[name].children for d in _descendants(groups, child))]


# ---------------------------------------------------------------------------- check

def check(inv: Inventory, specs: dict[str, VarSpec] | None = None) -> list[Problem]:
    """Every problem of an inventory, sorted by file and line. Contacts no host."""
    specs = {**(specs if specs is not None else read_specs(inv.roles)), **STORAGE_SPECS}
    problems = list(inv.issues) + storage_rules(inv, specs)
    for setting in inv.settings:
        problems += check_setting(setting, specs)
    dirs: list[StorageDir] = []
    for host in inv.hosts:
        host_problems, host_dirs = _host_rules(host, specs)
        problems += host_problems
        dirs += host_dirs
    problems += shared_storage_dirs(dirs) + namespace_keys(dirs)
    views = [HostView(host, specs) for host in inv.hosts]
    problems += hash_seeds(views) + rollout_settings(views)
    return sorted(_unique(problems), key=lambda p: (p.file or "", p.line or 0, p.host or "", p.message))


def _host_rules(host: Host, specs: dict[str, VarSpec]) -> tuple[list[Problem], list[StorageDir]]:
    """One host's host rules and its storage dirs (with the problems of each dir on its own)."""
    dirs = storage_dirs(HostView(host, specs))
    return check_host(host, specs) + [p for d in dirs for p in d.problems], dirs


# ---------------------------------------------------------------------------- one host (the roles' preflight)

def host_from_values(name: str, values: dict[str, Any], defaults: dict[str, Var]) -> Host:
    """A target host from its kvprov_* values as Ansible resolved them: the roles' defaults,
    overlaid with every value that differs from its default. Ansible does not say where a
    value was set, so the origins are unknown: problems name the host and the variable."""
    unknown = Origin(None, None)  # type: ignore[arg-type]
    merged = {n: v for n, v in defaults.items() if n.startswith("kvprov_")}
    for n, value in values.items():
        default = defaults.get(n)
        if default is None or default.value != value:
            merged[n] = Var(n, value, unknown)
    return Host(name, unknown, ["all"], merged)


def check_host_values(host: Host, specs: dict[str, VarSpec]) -> list[Problem]:
    """One host's own problems, from its effective values: the setting rules on every value
    that is not a role default (as if set on the host), the host rules and its storage dirs'
    own problems. The roles' preflight runs this for each host (roles/preflight)."""
    problems = [p for name, var in sorted(host.vars.items())
                if not var.origin.default and DEPRECATED.get(name, name) in specs
                for p in check_setting(Setting(var, host=host.name), specs)]
    problems += _host_rules(host, specs)[0]
    return _unique(problems)


def _unique(problems: list[Problem]) -> list[Problem]:
    return list(dict.fromkeys(problems))


def has_errors(problems: list[Problem]) -> bool:
    return any(p.severity == "error" for p in problems)


# ---------------------------------------------------------------------------- output

def format_lines(problems: list[Problem], max_hosts: int = 5) -> list[str]:
    """One line per problem; the same problem on several hosts (a group setting) is one line."""
    merged: dict[Problem, list[str]] = {}
    for p in problems:
        key = Problem(p.file, p.line, None, p.variable, p.message, p.severity, p.column)
        merged.setdefault(key, [])
        if p.host:
            merged[key].append(p.host)
    lines = []
    for p, hosts in merged.items():
        label = None
        if hosts:
            label = ("host " if len(hosts) == 1 else "hosts ") + ", ".join(hosts[:max_hosts])
            if len(hosts) > max_hosts:
                label += f" and {len(hosts) - max_hosts} more"
        lines.append(p.format(label))
    return lines


def summary(path: str | list[str], hosts: list[str], problems: list[Problem]) -> str:
    errors = sum(p.severity == "error" for p in problems)
    warnings = len(problems) - errors
    verdict = "OK" if not errors else "fix the errors before deploying"
    return (f"{inventory.describe(path)}: {len(hosts)} host(s) checked, {errors} error(s), {warnings} warning(s): {verdict}")


def run(path: str | list[str]) -> tuple[list[str], list[Problem]]:
    """Load and check an inventory: (target host names, problems). Never raises for a bad inventory."""
    try:
        inv = inventory.load(path)
    except InventoryError as e:
        return [], e.problems
    return inv.host_names, check(inv)


def require_valid(path: str | list[str]) -> list[str]:
    """What deploy, render and collect run first: print the problems, and stop (exit 2)
    before any host is contacted if there is an error. Returns the target host names."""
    hosts, problems = run(path)
    for line in format_lines(problems):
        print(line, file=sys.stderr)
    if has_errors(problems):
        raise KvprovError(summary(path, hosts, problems) + "; no host was contacted", EXIT_USAGE)
    return hosts


def add_parser(sub) -> None:
    p = sub.add_parser("check", help="validate an inventory (contacts no host)",
                       description="Check an inventory against the roles' variable contract and "
                                   "kvprov's rules; one line per problem. Contacts no host. "
                                   "Exit 0: no errors (warnings allowed); 2: errors.")
    inventory.add_inventory_args(p)
    p.add_argument("--json", action="store_true", help='print {"ok", "hosts", "problems"} as JSON')
    p.set_defaults(func=cmd_check)


def cmd_check(args) -> int:
    sources = inventory.from_args(args)
    hosts, problems = run(sources)
    ok = not has_errors(problems)
    if args.json:
        print(json.dumps({"ok": ok, "hosts": hosts, "problems": [asdict(p) for p in problems]}, indent=2))
    else:
        for line in format_lines(problems):
            print(line)
        print(summary(sources, hosts, problems))
    return EXIT_OK if ok else EXIT_USAGE
