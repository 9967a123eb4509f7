"""kvprov check: the rules on one variable's value (its spec type, then its own format:
VALUE_RULES), and the setting rules that apply them where a variable is set (pure)."""

from __future__ import annotations

import difflib
import ipaddress
import math
import posixpath
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import yaml

from kvprov import namespace, sinks, vault
from kvprov.check import bounds
from kvprov.inventory import Problem, Setting, Var
from kvprov.specs import VarSpec, is_int, is_template, typed

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
TRUE_FALSE_WORDS = {"true", "false", "yes", "no", "on", "off", "y", "n"}


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
    "hard": "kvprov_storage_soft",
    "soft": "kvprov_storage_soft",
    "softerr": "kvprov_storage_soft",
    "softreval": "kvprov_storage_soft",
    "nosoftreval": "kvprov_storage_soft",
    "timeo": "kvprov_storage_timeo",
    "retrans": "kvprov_storage_retrans",
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
    if not isinstance(key, str) or not sinks.TOML_KEY.fullmatch(key):
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


ADDRESS = re.compile(r"\[?[A-Za-z0-9_.:-]+\]?")  # an IPv4/IPv6 address or a DNS name


def address(value: str) -> list[Finding]:
    return [] if ADDRESS.fullmatch(value) else [Finding(f'"{value}" is not an IP address or a DNS name')]


def addresses(value: list) -> list[Finding]:
    return [Finding(f"item {i + 1}: {f.message}", (i,)) for i, v in enumerate(value) if isinstance(v, str)
            for f in address(v)]



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


DNS_DOMAIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*")


def pep440_version(value: str) -> list[Finding]:
    """A release pip can pin (`name==VERSION`): a PEP 440 version."""
    from packaging.version import InvalidVersion, Version

    try:
        Version(value)
    except InvalidVersion:
        return [Finding(f'"{sinks.shown(value)}" is not a version pip can pin (PEP 440, e.g. 1.5.1 or 0.5.6.post1)')]
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
        data = path.read_bytes()
        lines = (vault.decrypted(data) if vault.is_encrypted(data) else data.decode()).splitlines()
    except (OSError, UnicodeDecodeError, ValueError) as e:
        return None, [Finding(f'"{value}" cannot be read: {getattr(e, "strerror", None) or e}')]
    if path.stat().st_mode & 0o077 and not vault.is_encrypted(data):
        return lines, [Finding(f'"{value}" can be read by others on this controller: chmod 600 it', severity="warning")]
    return lines, []


# The secrets that may be given as a value instead of a controller file: {value variable: file variable}.
SECRET_VALUES = {"kvprov_engine_api_key": "kvprov_engine_api_key_file",
                 "kvprov_engine_admin_api_key": "kvprov_engine_admin_api_key_file",
                 "kvprov_engine_hf_token": "kvprov_engine_hf_token_file"}


def secret_value(value: Any) -> list[Finding]:
    """A secret given as its value (a no_log variable): a string of one line the secret files
    hold (secret_file). The value is never printed."""
    if value == "" or isinstance(value, str) and SECRET_VALUE.fullmatch(value.strip()):
        return []
    return [Finding("must be the secret as a string of printable ASCII on one line, without spaces, quotes, "
                    "backslashes, $ or ` (systemd's EnvironmentFile= would rewrite it); the value is not shown")]


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


def _pem(value: str, what: str, load: Callable[[bytes], Any]) -> tuple[Any, list[Finding]]:
    """A controller PEM file loaded with `load` (cryptography): (the object or None, findings).
    Its content is never printed."""
    if not value:
        return None, []
    lines, out = _secret_lines(value, what)
    if lines is None:
        return None, out
    try:
        return load("\n".join(lines).encode()), out
    except (ValueError, TypeError) as e:
        reason = "it is encrypted: give the key without a passphrase (it stays root-only on the host)" \
            if "password" in str(e).lower() or "encrypted" in str(e).lower() else "it does not parse"
        return None, [Finding(f'"{value}" is not {what} in PEM form: {reason}')] + out


def tls_cert_file(value: str) -> list[Finding]:
    """The engine's TLS certificate (PEM, the leaf first): parses and has not expired."""
    from cryptography import x509

    cert, out = _pem(value, "a certificate", lambda b: x509.load_pem_x509_certificates(b)[0])
    if cert is not None:
        import datetime

        now = datetime.datetime.now(datetime.timezone.utc)
        if cert.not_valid_after_utc < now:
            out.insert(0, Finding(f'"{value}": the certificate expired on {cert.not_valid_after_utc:%Y-%m-%d}'))
        elif cert.not_valid_before_utc > now:
            out.insert(0, Finding(f'"{value}": the certificate is not valid before {cert.not_valid_before_utc:%Y-%m-%d}'))
    return out


def tls_key_file(value: str) -> list[Finding]:
    """The engine's TLS private key (PEM, no passphrase)."""
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    return _pem(value, "a private key", lambda b: load_pem_private_key(b, password=None))[1]


def tls_ca_file(value: str) -> list[Finding]:
    """CA certificates (PEM) the controller's clients verify the engine with (public: any mode)."""
    from cryptography import x509

    found = absolute_path(value) if value else []
    if found or not value:
        return found
    try:
        x509.load_pem_x509_certificates(Path(value).read_bytes())
    except OSError as e:
        return [Finding(f'"{value}" cannot be read on this controller: {e.strerror or e}')]
    except ValueError:
        return [Finding(f'"{value}" holds no PEM certificate')]
    return []


def tls_pair_mismatch(cert_file: str, key_file: str) -> str | None:
    """Why the certificate and key do not belong together (None: they do, or either is unusable,
    which their own rules report)."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat, load_pem_private_key

    try:
        cert = x509.load_pem_x509_certificates(Path(cert_file).read_bytes())[0]
        key = load_pem_private_key(Path(key_file).read_bytes(), password=None)
    except (OSError, ValueError, TypeError):
        return None
    public = [k.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo) for k in (cert.public_key(), key.public_key())]
    return None if public[0] == public[1] else "the private key does not belong to the certificate"


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
    "kvprov_storage_timeo": int_range(1, 600, note=" (tenths of a second, as nfs(5) counts them)"),
    "kvprov_storage_retrans": int_range(0, 10),
    "kvprov_host_memory_mb": int_range(0, note=" (MiB of host memory, MemTotal; 0: read on the host by the preflight)"),
    "kvprov_sglang_tp_size": int_range(1),
    "kvprov_sglang_page_size": int_range(1),
    "kvprov_sglang_hicache_size": int_range(0, note=" (GB of host DRAM per TP rank)"),
    "kvprov_sglang_hicache_prefetch_timeout_base": positive_number,
    "kvprov_sglang_hicache_prefetch_timeout_per_ki_token": lambda v: [] if v >= 0 else [Finding(f"must be 0 or more, got {v}")],
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
    "kvprov_engine_user": all_of(user_name, bounds.engine_user),
    "kvprov_engine_uid": int_range(0, 2**31 - 1, note=" (0: any)"),
    "kvprov_engine_host": listen_address,
    "kvprov_engine_api_key_file": secret_file,
    "kvprov_engine_hf_token_file": secret_file,
    "kvprov_engine_admin_api_key_file": secret_file,
    "kvprov_engine_tls_cert_file": tls_cert_file,
    "kvprov_engine_tls_key_file": tls_key_file,
    "kvprov_engine_tls_ca_file": tls_ca_file,
    "kvprov_engine_s3_credentials_file": s3_credentials_file,
    "kvprov_engine_model_path": model_path,
    "kvprov_engine_model_revision": lambda v: [] if v == "" or re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,127}", v) else [
        Finding(f'"{v}" is not a revision: a commit, tag or branch (1 to 128 letters, digits, . _ / -)')],
    "kvprov_engine_environment": all_of(environment, s3_secrets_in_environment, bounds.secret_environment),
    "kvprov_engine_extra_args": bounds.secret_arguments,
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
    "kvprov_lmcache_mp_l2_lookup_timeout": int_range(0, 3600, note=" seconds (0: LMCache's adapter alone, no bound)"),
    "kvprov_lmcache_mp_l2_probe_interval": all_of(positive_number, int_range(0, 3600, note=" seconds")),
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
    "kvprov_storage_idmap_domain": lambda v: [] if DNS_DOMAIN.fullmatch(v) else [Finding(
        f'"{sinks.shown(v)}" is not a DNS domain (letters, digits, - and dots; the NFSv4 id-mapping domain, '
        "written into idmapd.conf's Domain)")],
    "kvprov_nixl_wheelhouse": absolute_or_empty,
    **dict.fromkeys(("kvprov_nixl_version", "kvprov_sglang_version", "kvprov_vllm_version", "kvprov_lmcache_version"),
                    pep440_version),
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
    if spec.no_log:  # a secret: judged without a word of its value
        return [_problem(setting, f) for f in renamed + ([] if is_template(var.value) else secret_value(var.value))]
    findings = control_characters(var.value)
    if is_template(var.value):  # the rest when the roles render it: their sink filters (kvprov/sinks.py)
        return [_problem(setting, f) for f in renamed + findings]
    var = replace(var, value=typed(var.value, spec))  # "8" for an int: 8, as Ansible converts it
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
