"""The bundle: one directory of captured files per host (the format is docs/bundle.md).

A bundle comes from `kvprov collect` (or a customer running the collector), and is read
here by `kvprov validate --bundle`. Any file may be missing, truncated, garbage, huge or
hostile, so every read goes through `Bundle`, which

- never follows a symlink (any component of the path inside the bundle),
- reads only regular files and at most a per-file size limit,
- refuses names that would leave the bundle (`..`, absolute paths from desired.json),
- rejects binary data in text files and JSON that is invalid or nested too deeply,

and raises `FileProblem` (the file's name, what is wrong with it, how to get a good one)
for the checks that need that file; other checks are unaffected.
"""

from __future__ import annotations

import importlib.util
import json
import os
import posixpath
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Mapping

from kvprov import paths
from kvprov.errors import EXIT_USAGE, KvprovError

FORMAT = 3  # desired.json's "format": the one this kvprov writes and reads (and 2, converted)
# collect.json's "format", the bundle format (the collector module writes the last): 2: before there was more
# than one engine (SGLang only); 3: the whole /etc/fstab; 4: /etc/fstab filtered, its credentials redacted
READABLE_FORMATS = (2, 3, 4)

# ---------------------------------------------------------------------------- file names

def _load_collector() -> ModuleType:
    """The collector module (plugins/modules/kvprov_collect.py): the bundle's file names are its."""
    path = paths.ROOT / "plugins" / "modules" / "kvprov_collect.py"
    spec = importlib.util.spec_from_file_location("kvprov_collect", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


collector = _load_collector()
DESIRED = "desired.json"  # the controller writes it (kvprov collect), never the collector module
COLLECT = collector.FILE_COLLECT
MOUNTINFO = collector.FILE_MOUNTINFO
MOUNTSTATS = collector.FILE_MOUNTSTATS
MODULES = collector.FILE_MODULES
RDMA_LINK = collector.FILE_RDMA_LINK
IP_ADDR = collector.FILE_IP_ADDR
IO_PROBE = collector.FILE_IO_PROBE
GDSCHECK = collector.FILE_GDSCHECK
GPU = collector.FILE_GPU
CUFILE = collector.FILE_CUFILE
UDEV = collector.FILE_UDEV
NIXL_PROBE = collector.FILE_NIXL_PROBE
STORAGE_DIRS = collector.FILE_STORAGE_DIRS
HEALTH = collector.FILE_HEALTH
PACKAGES = collector.FILE_PACKAGES
RESTART_PENDING = collector.FILE_RESTART_PENDING
FILE_MODES = collector.FILE_FILE_MODES
DEPLOY_LOCK = collector.FILE_DEPLOY_LOCK
DIR_MODES = collector.FILE_DIR_MODES
ENGINE_USER = collector.FILE_ENGINE_USER
NAMESPACES = collector.FILE_NAMESPACES
MANAGED_DIRS = collector.FILE_MANAGED_DIRS
VENVS = collector.FILE_VENVS
FILES_DIR = collector.DIR_FILES  # files/<absolute path>: live copies of managed config files
SYSTEMCTL_DIR = collector.DIR_SYSTEMCTL  # systemctl/<unit>.txt: `systemctl show <unit>`
METRICS_DIR = collector.DIR_METRICS  # metrics/<instance>.txt: the engine's cache counters

# Every fixed name, with what the collector puts there (docs/bundle.md describes each).
NAMES: dict[str, str] = {
    DESIRED: "the host's desired state, from the inventory (see Desired)",
    COLLECT: "collector metadata: format, host, time, kvprov version, per-file capture errors",
    MOUNTINFO: "cat /proc/self/mountinfo",
    MOUNTSTATS: "cat /proc/self/mountstats, captured after the I/O probe",
    MODULES: "cat /proc/modules",
    RDMA_LINK: "rdma link (iproute2)",
    IO_PROBE: "the forced small write + read on the KV mount, with a timeout",
    GDSCHECK: "gdscheck -p (GPU hosts only)",
    GPU: "whether an NVIDIA GPU and driver are present",
    CUFILE: "the live cufile.json (the file at the desired cufile path)",
    UDEV: "the KV tier's filesystem (mountinfo) and whether udev has a record of its block device (GPU hosts)",
    NIXL_PROBE: "import nixl and create the configured backend, in the NIXL venv",
    STORAGE_DIRS: "the mount point and each instance's NIXL storage directory: stat, owner, filesystem",
    HEALTH: "each engine instance's HTTP /health, or that it is not running",
    PACKAGES: "installed packages: name<TAB>version per line (dpkg-query -W / rpm -qa)",
    DEPLOY_LOCK: "who holds the host's deploy lock (/run/kvprov/deploy.lock), or null",
    FILE_MODES: "each managed file's permission bits, owner uid and whether it is a link (lstat)",
    RESTART_PENDING: "the engine units a deploy changed and has not restarted yet (its restart-pending notes)",
    DIR_MODES: "each directory deploy creates: whether it is one (lstat), its mode, owner and group",
    ENGINE_USER: "the engine user's account (uid, primary group, home, shell), or that it does not exist",
    NAMESPACES: "each shared namespace the host uses and the model's other namespaces beside it: size, last evictor run",
}

MiB = 1 << 20
DEFAULT_LIMIT = 1 * MiB
LIMITS = {MOUNTSTATS: 64 * MiB, MOUNTINFO: 16 * MiB, PACKAGES: 8 * MiB, MODULES: 4 * MiB}

RECOLLECT = "capture the bundle again (`kvprov collect INVENTORY --out DIR --limit HOST`)"


def limit_for(name: str) -> int:
    return LIMITS.get(name, DEFAULT_LIMIT)


def live_file(path: str) -> str:
    """The bundle name of the live copy of a host file: files/<absolute path>."""
    norm = posixpath.normpath(path)  # an absolute path keeps no ".." ("" becomes ".")
    if not norm.startswith("/") or norm.startswith("//"):
        raise FileProblem(f"{FILES_DIR}/{path}", f"{path!r} is not an absolute path, so it has no place in "
                          "the bundle", "give absolute paths in the inventory (and desired.json)")
    return FILES_DIR + norm


def systemctl_file(unit: str) -> str:
    """The bundle name of `systemctl show <unit>`: systemctl/<unit>.txt."""
    if not unit or "/" in unit or unit.startswith("."):
        raise FileProblem(f"{SYSTEMCTL_DIR}/{unit}.txt", f"{unit!r} is not a systemd unit name",
                          "fix the unit name in desired.json")
    return f"{SYSTEMCTL_DIR}/{unit}.txt"


def unit_file(unit: str) -> str:
    """The bundle name of the live unit file /etc/systemd/system/<unit>."""
    systemctl_file(unit)  # same name rules
    return live_file(f"/etc/systemd/system/{unit}")


# ---------------------------------------------------------------------------- reading

class FileProblem(Exception):
    """A bundle file that cannot be used: its name, what is wrong, how to get a good one."""

    def __init__(self, name: str, reason: str, fix: str = RECOLLECT, missing: bool = False):
        super().__init__(f"{name}: {reason}")
        self.name, self.reason, self.fix, self.missing = name, reason, fix, missing


def memo(cache: dict, key: str, fn):
    """fn() once per key; a FileProblem is remembered and raised again like a value."""
    if key not in cache:
        try:
            cache[key] = fn()
        except FileProblem as e:
            cache[key] = e
    value = cache[key]
    if isinstance(value, FileProblem):
        raise value
    return value


def _parts(name: str) -> list[str]:
    parts = name.split("/")
    if name.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise FileProblem(name, "not a plain relative name inside the bundle", "fix desired.json")
    return parts


class Bundle:
    """The files of one host's bundle, read safely and cached (errors too).

    `Bundle(root)` reads a directory; `Bundle(files={name: bytes|str})` holds files in memory
    (tests, or a collector that has them already). Both give the same checks."""

    def __init__(self, root: Path | str | None = None, files: Mapping[str, bytes | str] | None = None):
        self.root = Path(root) if root is not None else None
        self._files = dict(files) if files is not None else None
        self._cache: dict[str, bytes | FileProblem] = {}

    # --- raw bytes

    def raw(self, name: str) -> bytes:
        return memo(self._cache, name, lambda: self._read(name))

    def exists(self, name: str) -> bool:
        """Is there anything under this name (even something unreadable)?"""
        try:
            self.raw(name)
            return True
        except FileProblem as e:
            return not e.missing

    def _read(self, name: str) -> bytes:
        parts = _parts(name)
        limit = limit_for(name)
        if self._files is not None:
            if name not in self._files:
                raise self._missing(name)
            data = self._files[name]
            data = data.encode() if isinstance(data, str) else bytes(data)
            if len(data) > limit:
                raise self._too_big(name, len(data), limit)
            return data
        return self._read_disk(name, parts, limit)

    def _read_disk(self, name: str, parts: list[str], limit: int) -> bytes:
        assert self.root is not None
        path = self.root
        for i, part in enumerate(parts):
            path = path / part
            where = "/".join(parts[:i + 1])
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                raise self._missing(name) from None
            except NotADirectoryError:  # a component above it is a file (or a fifo, socket or device)
                raise FileProblem(name, f"{'/'.join(parts[:i])} is not a directory") from None
            except OSError as e:
                raise FileProblem(name, f"cannot read: {e.strerror or e}") from None
            if stat.S_ISLNK(st.st_mode):
                try:
                    target = os.readlink(path)
                except OSError:
                    target = "?"
                raise FileProblem(name, f"{where} is a symlink (to {target!r}); kvprov never follows links "
                                        "in a bundle: they could point at this machine's own files")
        if stat.S_ISDIR(st.st_mode):
            raise FileProblem(name, "is a directory, not a file")
        if not stat.S_ISREG(st.st_mode):
            raise FileProblem(name, "is not a regular file (a fifo, socket or device): not read")
        if st.st_size > limit:
            raise self._too_big(name, st.st_size, limit)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as fh:
                data = fh.read(limit + 1)
        except OSError as e:
            raise FileProblem(name, f"cannot read: {e.strerror or e}") from None
        if len(data) > limit:
            raise self._too_big(name, len(data), limit)
        return data

    def _too_big(self, name: str, size: int, limit: int) -> FileProblem:
        return FileProblem(name, f"is {size} bytes, more than the {limit // MiB} MiB limit for this file: "
                                 "not something the collector captures (a runaway or hostile file); not read")

    def _missing(self, name: str) -> FileProblem:
        note = self.collector_notes().get(name) if name != COLLECT else None
        reason = "missing from the bundle" + (f" (the collector said: {note})" if note else "")
        return FileProblem(name, reason, missing=True)

    def collector_notes(self) -> dict[str, str]:
        """What collect.json says about files: its "errors" and "skipped" ({} when unusable)."""
        try:
            data = self.json(COLLECT)
        except FileProblem:
            return {}
        notes: dict[str, str] = {}
        for key, prefix in (("skipped", "skipped: "), ("errors", "")):
            entries = data.get(key) if isinstance(data, dict) else None
            if isinstance(entries, dict):
                notes.update({str(k)[:200]: prefix + str(v)[:300] for k, v in entries.items()})
        return notes

    # --- decoded

    def text(self, name: str) -> str:
        data = self.raw(name)
        if b"\x00" in data:
            raise FileProblem(name, "holds binary data (NUL bytes), not the text the collector captures: "
                                    "a corrupt or wrong file")
        return data.decode("utf-8", errors="replace")

    def json(self, name: str) -> Any:
        text = self.text(name)
        try:
            return json.loads(text)
        except RecursionError:
            raise FileProblem(name, "JSON nested too deeply to read (hostile or corrupt)") from None
        except json.JSONDecodeError as e:
            raise FileProblem(name, f"not valid JSON ({e.msg} at line {e.lineno} column {e.colno}); "
                                    "truncated or corrupt") from None
        except ValueError as e:  # e.g. an integer with too many digits
            raise FileProblem(name, f"not valid JSON ({e})") from None

    def json_object(self, name: str) -> dict:
        data = self.json(name)
        if not isinstance(data, dict):
            raise FileProblem(name, f"must hold a JSON object, holds {type(data).__name__}")
        return data


# ---------------------------------------------------------------------------- desired state

PROFILES = ("netapp_pnfs_rdma", "nfs_tcp", "local")
LAYOUTS = ("files", "block", "none")
TRANSPORTS = ("rdma", "tcp", "none")
GDS_MODES = ("auto", "required", "disabled")


ENGINES = ("sglang_hicache", "vllm_offload", "lmcache_mp", "lmcache_inproc", "vllm_baseline")


@dataclass(frozen=True)
class Instance:
    """One engine instance: the unit serving its API (and, for lmcache_mp, its server's unit)."""

    name: str
    unit: str
    storage_dir: str
    port: int
    units: tuple[str, ...] = ()  # every unit of the instance, in start order
    lmcache_port: int | None = None  # lmcache_mp: the server's port and Prometheus port
    metrics_port: int | None = None

    @property
    def server_unit(self) -> str | None:
        """lmcache_mp's LMCache MP server unit."""
        return next((u for u in self.units if u != self.unit), None)


@dataclass(frozen=True)
class ManagedFile:
    """A file deploy writes, with the content the roles' templates render."""

    path: str
    mode: str
    role: str
    content: str


@dataclass(frozen=True)
class ManagedDir:
    """A directory deploy creates, with its mode and owner (the group is the owner's)."""

    path: str
    mode: str
    owner: str
    role: str


@dataclass(frozen=True)
class UnitWant:
    """A unit deploy enables (and starts, when active)."""

    unit: str
    enabled: bool
    active: bool


@dataclass(frozen=True)
class Desired:
    """What the inventory says this host should look like (desired.json)."""

    host: str
    profile: str  # netapp_pnfs_rdma | nfs_tcp | local
    server: str
    export: str
    mount_point: str
    mount_options: tuple[str, ...]  # exactly as the mount unit's Options= (role var _kvprov_storage_options)
    nfs_version: str
    pnfs_layout: str  # files | block | none
    transport: str  # rdma | tcp | none (local)
    gds_mode: str  # auto | required | disabled
    cufile_path: str
    allow_compat_mode: bool
    rdma_dev_addr_list: tuple[str, ...]
    nixl_config_path: str
    nixl_venv: str
    nixl_plugin: str  # the active [plugin.<name>] table, e.g. gds_mt, posix
    engine: str  # sglang_hicache | vllm_offload | lmcache_mp | lmcache_inproc | vllm_baseline
    engine_user: str
    engine_install: bool
    engine_venv: str
    engine_connect_host: str  # where the host itself reaches the engine's API
    instances: tuple[Instance, ...] = field(default_factory=tuple)
    files: tuple[ManagedFile, ...] = field(default_factory=tuple)
    units: tuple[UnitWant, ...] = field(default_factory=tuple)
    packages: tuple[str, ...] = field(default_factory=tuple)
    venvs: dict[str, dict[str, str | None]] = field(default_factory=dict)  # venv -> {dist: pinned version}
    # Optional (desired.json of kvprov before they were checked: not checked)
    dirs: tuple[ManagedDir, ...] = field(default_factory=tuple)
    engine_home: str | None = None
    engine_shell: str | None = None
    engine_uid: int | None = None  # None: the system picks it

    @property
    def is_nfs(self) -> bool:
        return self.profile != "local"

    @property
    def source(self) -> str:
        return f"{self.server}:{self.export}"

    @property
    def mount_unit(self) -> str:
        return systemd_escape_path(self.mount_point) + ".mount"

    @property
    def nixl_backend(self) -> str:
        """The NIXL backend name SGLang derives from the plugin table (gds_mt -> GDS_MT)."""
        return self.nixl_plugin.upper()

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"format": FORMAT}
        for key, attr, _ in _FIELDS:
            value = getattr(self, attr)
            if key in _OPTIONAL and value in (None, ()):  # as a desired.json that did not have them
                continue
            if attr in ("instances", "units"):
                value = [{k: list(v) if isinstance(v, tuple) else v for k, v in asdict(i).items()} for i in value]
            elif attr in ("files", "dirs"):
                value = {f.path: {k: v for k, v in asdict(f).items() if k != "path"} for f in value}
            elif isinstance(value, tuple):
                value = list(value)
            section, _, leaf = key.rpartition(".")
            (out.setdefault(section, {}) if section else out)[leaf] = value
        return out

    @classmethod
    def from_dict(cls, data: Any) -> "Desired":
        """Validate desired.json's content; DesiredError lists every problem."""
        if not isinstance(data, dict):
            raise DesiredError([f"must be a JSON object, not {type(data).__name__}"])
        problems: list[str] = []
        fmt = data.get("format")
        if fmt == 2 and isinstance(data.get("sglang"), dict):
            data, fmt = _from_format_2(data), FORMAT
        if fmt != FORMAT:
            problems.append(f"format: {fmt!r}; this kvprov reads bundle format {FORMAT}"
                            + (" (a newer kvprov wrote it: upgrade kvprov)" if isinstance(fmt, int) and fmt > FORMAT
                               else ""))
        values = {}
        for key, attr, kind in _FIELDS:
            value = _lookup(data, key)
            if value is _ABSENT:
                if key not in _OPTIONAL:
                    problems.append(f"{key}: missing")
                continue
            why = _type_problem(value, kind)
            if why:
                problems.append(f"{key}: {why}")
                continue
            values[attr] = value
        if problems:
            raise DesiredError(problems)
        values["mount_options"] = tuple(values["mount_options"])
        values["rdma_dev_addr_list"] = tuple(values["rdma_dev_addr_list"])
        values["instances"] = tuple(Instance(**{**i, "units": tuple(i["units"])}) for i in values["instances"])
        values["files"] = tuple(ManagedFile(path, **f) for path, f in values["files"].items())
        values["dirs"] = tuple(ManagedDir(path, **f) for path, f in values.get("dirs", {}).items())
        values["units"] = tuple(UnitWant(**u) for u in values["units"])
        values["packages"] = tuple(values["packages"])
        return cls(**values)


def _from_format_2(data: dict) -> dict:
    """A format-2 desired.json (kvprov before there was more than one engine: SGLang only)."""
    old = data["sglang"]
    instances = old.get("instances")
    if isinstance(instances, list):
        instances = [{**i, "units": [i.get("unit")], "lmcache_port": None, "metrics_port": None}
                     if isinstance(i, dict) else i for i in instances]
    engine = {"name": "sglang_hicache", "user": old.get("user"), "install": old.get("install"),
              "venv": "/opt/kvprov/sglang", "connect_host": "127.0.0.1", "instances": instances}
    return {**data, "engine": engine}  # from_dict reads neither "sglang" nor "format" of it


class DesiredError(KvprovError):
    """desired.json is missing or unusable: nothing can be compared (exit 2)."""

    def __init__(self, problems: list[str], where: str = DESIRED):
        self.problems = problems
        super().__init__(f"{where}: " + "; ".join(problems), EXIT_USAGE)


_ABSENT = object()
OPTIONAL_INT = (int, type(None))
INSTANCE_FIELDS = {"name": str, "unit": str, "storage_dir": str, "port": int, "units": list,
                   "lmcache_port": OPTIONAL_INT, "metrics_port": OPTIONAL_INT}
UNIT_FIELDS = {"unit": str, "enabled": bool, "active": bool}
FILE_FIELDS = {"mode": str, "role": str, "content": str}
DIR_FIELDS = {"mode": str, "owner": str, "role": str}
# (JSON key, Desired attribute, kind): kind is a type, a tuple of choices, "strs" or "instances".
_FIELDS: tuple[tuple[str, str, Any], ...] = (
    ("host", "host", str),
    ("storage.profile", "profile", PROFILES),
    ("storage.server", "server", str),
    ("storage.export", "export", str),
    ("storage.mount_point", "mount_point", str),
    ("storage.options", "mount_options", "strs"),
    ("storage.nfs_version", "nfs_version", str),
    ("storage.pnfs_layout", "pnfs_layout", LAYOUTS),
    ("storage.transport", "transport", TRANSPORTS),
    ("gds.mode", "gds_mode", GDS_MODES),
    ("gds.cufile_path", "cufile_path", str),
    ("gds.allow_compat_mode", "allow_compat_mode", bool),
    ("gds.rdma_dev_addr_list", "rdma_dev_addr_list", "strs"),
    ("nixl.config_path", "nixl_config_path", str),
    ("nixl.venv", "nixl_venv", str),
    ("nixl.plugin", "nixl_plugin", str),
    ("engine.name", "engine", ENGINES),
    ("engine.user", "engine_user", str),
    ("engine.install", "engine_install", bool),
    ("engine.venv", "engine_venv", str),
    ("engine.connect_host", "engine_connect_host", str),
    ("engine.instances", "instances", "instances"),
    ("files", "files", "files"),
    ("units", "units", "units"),
    ("packages", "packages", "strs"),
    ("venvs", "venvs", "venvs"),
    ("dirs", "dirs", "dirs"),
    ("engine.home", "engine_home", str),
    ("engine.shell", "engine_shell", str),
    ("engine.uid", "engine_uid", OPTIONAL_INT),
)
_OPTIONAL = {"dirs", "engine.home", "engine.shell", "engine.uid"}  # absent: the dataclass default


def _lookup(data: dict, key: str) -> Any:
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _ABSENT
        node = node[part]
    return node


def _is(value: Any, kind: type | tuple) -> bool:
    if isinstance(kind, tuple):
        return any(_is(value, k) for k in kind)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is list:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    return isinstance(value, kind)


def _type_problem(value: Any, kind: Any) -> str | None:
    if kind == OPTIONAL_INT:
        return None if _is(value, kind) else f"must be an integer or null, got {json.dumps(value)[:60]}"
    if isinstance(kind, tuple):
        return None if value in kind else f"{value!r} is not one of {', '.join(kind)}"
    if kind == "strs":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return None if ok else "must be a list of strings"
    if kind in ("instances", "units"):
        fields = INSTANCE_FIELDS if kind == "instances" else UNIT_FIELDS
        if not isinstance(value, list):
            return "must be a list of {" + ", ".join(fields) + "}"
        return _records_problem(dict(enumerate(value)), fields)
    if kind in ("files", "dirs"):
        fields = FILE_FIELDS if kind == "files" else DIR_FIELDS
        if not isinstance(value, dict) or not all(isinstance(k, str) and k.startswith("/") for k in value):
            return "must map absolute paths to {" + ", ".join(fields) + "}"
        return _records_problem(value, fields)
    if kind == "venvs":
        ok = isinstance(value, dict) and all(
            isinstance(pins, dict) and all(isinstance(v, str) or v is None for v in pins.values())
            for pins in value.values())
        return None if ok else "must map venv paths to {distribution: pinned version or null}"
    return None if _is(value, kind) else f"must be {'a boolean' if kind is bool else 'a string'}, " \
                                          f"got {json.dumps(value)[:60]}"


def _records_problem(records: dict, fields: dict[str, type]) -> str | None:
    """Why a record of `records` lacks exactly `fields` with their types; None when all are fine."""
    names = {int: "an integer", bool: "a boolean", str: "a string", list: "a list of strings",
             OPTIONAL_INT: "an integer or null"}
    for n, item in records.items():
        if not isinstance(item, dict) or set(item) != set(fields):
            return f"[{n!r}] must have exactly the keys {', '.join(fields)}"
        for k, t in fields.items():
            if not _is(item[k], t):
                return f"[{n!r}].{k}: must be {names[t]}"
    return None


def load_desired(bundle: Bundle) -> Desired:
    """desired.json of a bundle; DesiredError (exit 2) when missing or unusable."""
    try:
        data = bundle.json(DESIRED)
    except FileProblem as e:
        raise DesiredError([e.reason + "; the bundle cannot be validated without the desired state"]) from None
    return Desired.from_dict(data)


def write_desired(directory: Path | str, desired: Desired) -> Path:
    """Write DIRECTORY/desired.json (for the collector)."""
    path = Path(directory) / DESIRED
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(desired.to_dict(), indent=2) + "\n")
    return path


def systemd_escape_path(path: str) -> str:
    """`systemd-escape --path PATH`: /mnt/kv-cache -> mnt-kv\\x2dcache."""
    norm = "/".join(p for p in path.split("/") if p)
    if not norm:
        return "-"
    out = []
    for i, ch in enumerate(norm):
        if ch == "/":
            out.append("-")
        elif (ch.isascii() and ch.isalnum()) or ch in ":_" or (ch == "." and i > 0):
            out.append(ch)
        else:
            out.extend(f"\\x{b:02x}" for b in ch.encode())
    return "".join(out)
