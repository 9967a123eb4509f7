"""What every validate check reads: the Context (a bundle and the desired state, each parsed
file cached, problems too), the typed captures (IoProbe, Gpu, NixlProbe), and the check
registry (@check, @instance_check, run_check).

A file a check needs that is missing or unusable raises FileProblem; run_check turns it
into that check's failure, so the other checks are unaffected. The checks themselves
register on import of kvprov.validate.checks.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any, Callable

from kvprov import mountstats
from kvprov.validate import bundle as bf
from kvprov.validate import parsers
from kvprov.validate.bundle import Bundle, Desired, FileProblem, Instance
from kvprov.validate.parsers import ParseError
from kvprov.validate.result import FAIL, Result, res, show


def under(path: str, directory: str) -> bool:
    """Is `path` the directory itself or inside it (lexically)?"""
    path, directory = posixpath.normpath(path), posixpath.normpath(directory)
    return path == directory or path.startswith(directory.rstrip("/") + "/")


# ---------------------------------------------------------------------------- captured data, typed

@dataclass(frozen=True)
class IoProbe:
    ok: bool
    timed_out: bool
    seconds: float | None
    error: str | None
    bytes: int | None

    def failure(self) -> str:
        if self.not_answering:
            why = ((f"no answer within {self.seconds:g} s" if self.seconds is not None else "no answer")
                   if self.timed_out else f"the soft mount gave up: {show(self.error or '')}")
            return (f"the storage does not answer ({why}); the KV tier is degraded: the engines serve without it "
                    "until the server answers again")
        return f"the write/read failed: {show(self.error or 'no error given')}"

    @property
    def not_answering(self) -> bool:
        """The probe got no answer in time (a hung mount), or a soft NFS mount's answer when its server
        does not give one (EIO; ETIMEDOUT with softerr)."""
        return self.timed_out or bool(bf.collector.NOT_ANSWERING.search(self.error or ""))


@dataclass(frozen=True)
class Gpu:
    present: bool
    driver: str | None
    count: int | None


@dataclass(frozen=True)
class NixlProbe:
    import_ok: bool
    version: str | None
    plugins: list[str] | None
    backend: str | None
    backend_ok: bool
    error: str | None


def _field(data: dict, name: str, key: str, kinds: tuple, required: bool = False, default: Any = None) -> Any:
    if key not in data:
        if required:
            raise FileProblem(name, f"has no {key!r}")
        return default
    value = data[key]
    if value is None and not required:
        return default
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        want = " or ".join(k.__name__ for k in kinds)
        raise FileProblem(name, f"{key!r} must be {want}, is {show(value, 40)}")
    return value


# ---------------------------------------------------------------------------- context

class Context:
    """A bundle and the desired state, with each parsed file cached (problems too)."""

    def __init__(self, bundle: Bundle, desired: Desired):
        self.b, self.d = bundle, desired
        self._memo: dict[str, Any] = {}

    def memo(self, key: str, fn: Callable[[], Any]) -> Any:
        return bf.memo(self._memo, key, fn)

    def parsed(self, name: str, parser: Callable[[str], Any]) -> Any:
        def parse():
            try:
                return parser(self.b.text(name))
            except ParseError as e:
                raise FileProblem(name, f"unusable: {e}") from None
        return self.memo(f"parsed:{name}", parse)

    def host_file(self, path: str, tags: str) -> str:
        """The text of a file kvprov deploys; missing means missing on the host."""
        name = bf.live_file(path)
        if not self.b.exists(name):
            note = self.b.collector_notes().get(name)
            raise FileProblem(name, f"{path} is not on the host (not in the bundle)"
                                    + (f"; the collector said: {show(note)}" if note else ""), self.deploy(tags))
        return self.b.text(name)

    def unit_text(self, unit: str, tags: str) -> str:
        """The live unit file /etc/systemd/system/<unit> (the unit name checked first)."""
        bf.unit_file(unit)
        return self.host_file(f"/etc/systemd/system/{unit}", tags)

    def deploy(self, tags: str, more: str = "") -> str:
        return f"kvprov deploy INVENTORY --limit {self.d.host} --tags {tags}{more}"

    # --- mounts

    def mountinfo_text(self) -> str:
        return self.b.text(bf.MOUNTINFO)

    def live(self) -> dict | None:
        """The live mount on the mount point (mountinfo), or None."""
        def parse():
            try:
                return parsers.parse_mountinfo(self.mountinfo_text(), posixpath.normpath(self.d.mount_point))
            except ParseError as e:
                raise FileProblem(bf.MOUNTINFO, f"unusable: {e}") from None
        return self.memo("live", parse)

    def stats(self) -> mountstats.MountStats:
        mounts = self.parsed(bf.MOUNTSTATS, parsers.parse_mountstats)
        found = mountstats.find(mounts, posixpath.normpath(self.d.mount_point))
        if found is None:
            raise FileProblem(bf.MOUNTSTATS, f"has no entry for {self.d.mount_point} although mountinfo shows "
                                             "it mounted: captured at another time, or truncated")
        return found

    def io(self) -> IoProbe:
        def parse():
            data = self.b.json_object(bf.IO_PROBE)
            n = bf.IO_PROBE
            return IoProbe(_field(data, n, "ok", (bool,), True), _field(data, n, "timed_out", (bool,), default=False),
                           _field(data, n, "seconds", (int, float)), _field(data, n, "error", (str,)),
                           _field(data, n, "bytes", (int,)))
        return self.memo("io", parse)

    # --- other captures

    def gpu(self) -> Gpu:
        def parse():
            data = self.b.json_object(bf.GPU)
            gpus = _field(data, bf.GPU, "gpus", (list,))
            return Gpu(_field(data, bf.GPU, "present", (bool,), True), _field(data, bf.GPU, "driver", (str,)),
                       len(gpus) if gpus is not None else None)
        return self.memo("gpu", parse)

    def nixl_probe(self) -> NixlProbe:
        def parse():
            data, n = self.b.json_object(bf.NIXL_PROBE), bf.NIXL_PROBE
            plugins = _field(data, n, "plugins", (list,))
            return NixlProbe(_field(data, n, "import_ok", (bool,), True), _field(data, n, "version", (str,)),
                             [str(p) for p in plugins] if plugins is not None else None,
                             _field(data, n, "backend", (str,)), _field(data, n, "backend_ok", (bool,), default=False),
                             _field(data, n, "error", (str,)))
        return self.memo("nixl_probe", parse)

    def show_unit(self, unit: str) -> dict[str, str]:
        return self.parsed(bf.systemctl_file(unit), parsers.parse_systemctl_show)

    def toml(self) -> dict:
        def parse():
            text = self.host_file(self.d.nixl_config_path, "nixl")
            try:
                return parsers.parse_toml(text)
            except ParseError as e:
                raise FileProblem(bf.live_file(self.d.nixl_config_path), f"unusable: {e}",
                                  self.deploy("nixl")) from None
        return self.memo("toml", parse)

    def cufile(self) -> dict:
        return self.parsed(bf.CUFILE, parsers.parse_cufile)

    def storage_entry(self, name: str | None = None) -> dict:
        """storage_dirs.json's entry for the mount point, or for instance `name`."""
        data = self.b.json_object(bf.STORAGE_DIRS)
        if name is None:
            entry, what = data.get("mount_point"), "mount_point"
        else:
            instances = data.get("instances")
            entry, what = (instances.get(name) if isinstance(instances, dict) else None), f"instances.{name}"
        if not isinstance(entry, dict):
            raise FileProblem(bf.STORAGE_DIRS, f"has no {what} entry (an object)")
        return entry

    def on_kv_mount(self, path: str) -> bool:
        """Is `path` on the KV mount, judged from mountinfo (the longest mount point above it)?"""
        if not self.d.is_nfs:
            return under(path, self.d.mount_point)
        mounts = [mp for mp, _, _ in parsers.mounts_in(self.mountinfo_text()) if under(path, mp)]
        return bool(mounts) and posixpath.normpath(max(mounts, key=len)) == posixpath.normpath(self.d.mount_point)


# ---------------------------------------------------------------------------- check registry

Check = Callable[[Context], Result]
InstanceCheck = Callable[[Context, Instance], Result]
CHECKS: list[tuple[str, str, Check]] = []
INSTANCE_CHECKS: list[tuple[str, InstanceCheck]] = []


def check(check_id: str) -> Callable[[Check], Check]:
    def register(fn: Check) -> Check:
        CHECKS.append((check_id, check_id.split(".")[0], fn))
        return fn
    return register


def instance_check(suffix: str) -> Callable[[InstanceCheck], InstanceCheck]:
    def register(fn: InstanceCheck) -> InstanceCheck:
        INSTANCE_CHECKS.append((suffix, fn))
        return fn
    return register


def run_check(check_id: str, category: str, fn: Callable[[], Result]) -> Result:
    try:
        result = fn()
    except FileProblem as e:
        result = res(FAIL, "usable captured data", show(str(e), 400), e.fix)
    result.id, result.category = check_id, category
    return result
