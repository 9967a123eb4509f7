"""The checks of `kvprov validate`: a bundle and the desired state in, results out (pure).

Every check returns one Result: its id (`mount.transport`), category, status (pass, fail,
warn, skip), what was expected, what was found and, for failures, the fix. A file the
check needs that is missing or unusable makes that check fail with the file's problem;
the other checks are unaffected. Checks that cannot apply (no GPU, local storage,
nothing mounted) skip and say why.

Entry points: `evaluate_bundle(path)` (reads DIR/HOST) and `evaluate(bundle, desired)`.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from kvprov import mountstats
from kvprov.errors import EXIT_USAGE, KvprovError
from kvprov.validate import bundle as bf
from kvprov.validate import parsers
from kvprov.validate.bundle import Bundle, Desired, FileProblem, Instance
from kvprov.validate.parsers import ParseError, mount_state

PASS, FAIL, WARN, SKIP = "pass", "fail", "warn", "skip"
STATUSES = (PASS, FAIL, WARN, SKIP)
CATEGORIES = ("bundle", "mount", "rdma", "gds", "nixl", "engine", "packages", "summary")

LAYOUT_NAMES = {"files": "LAYOUT_NFSV4_1_FILES", "block": "LAYOUT_BLOCK_VOLUME"}
STORAGE_DIR_ENV = "SGLANG_HICACHE_NIXL_BACKEND_STORAGE_DIR"
SGLANG_FALLBACK_DIR = "/tmp/hicache_storage"
LOCAL_TMP = ("/tmp", "/var/tmp", "/dev/shm")


@dataclass
class Result:
    id: str
    category: str
    status: str  # pass | fail | warn | skip
    expected: str = ""
    found: str = ""
    fix: str = ""
    host: str = ""
    detail: str = ""  # several lines, e.g. a unified diff (audit)


def res(status: str, expected: str = "", found: str = "", fix: str = "") -> Result:
    """A result whose id and category the check runner fills in."""
    return Result("", "", status, expected, found, fix)


def show(value: Any, limit: int = 160) -> str:
    """A value from a captured file, safe to print: control characters escaped, length capped."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text[:limit + 1])
    return text if len(text) <= limit else text[:limit] + "..."


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
        if self.timed_out:
            secs = f" (no answer within {self.seconds:g} s)" if self.seconds is not None else ""
            return f"hard mount hung: server unreachable{secs}"
        return f"the write/read failed: {show(self.error or 'no error given')}"


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
        mp = self.d.mount_point.rstrip("/") or "/"

        def parse():
            try:
                return parsers.parse_mountinfo(self.mountinfo_text(), mp)
            except ParseError as e:
                raise FileProblem(bf.MOUNTINFO, f"unusable: {e}") from None
        return self.memo("live", parse)

    def stats(self) -> mountstats.MountStats:
        mounts = self.parsed(bf.MOUNTSTATS, parsers.parse_mountstats)
        found = mountstats.find(mounts, self.d.mount_point.rstrip("/") or "/")
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


# ---------------------------------------------------------------------------- bundle

@check("bundle.collect")
def bundle_collect(c: Context) -> Result:
    expected = "collect.json with no capture error"
    try:
        data = c.b.json_object(bf.COLLECT)
    except FileProblem as e:
        return res(WARN, expected, show(str(e), 300), "the bundle lacks its collector metadata; results below stand "
                                                     "on the files that are there")
    notes = []
    if data.get("format") != bf.FORMAT:
        notes.append(f"format {show(data.get('format'), 20)} (this kvprov reads {bf.FORMAT})")
    if data.get("host") != c.d.host:
        notes.append(f"collect.json names host {show(data.get('host'), 60)}, desired.json {c.d.host}: "
                     "files of two hosts mixed?")
    errors = data.get("errors")
    if isinstance(errors, dict) and errors:
        notes.append("the collector reported: " + "; ".join(f"{show(k, 60)}: {show(v, 120)}"
                                                           for k, v in list(errors.items())[:10]))
    if notes:
        return res(WARN, expected, " / ".join(notes), "the checks that need the files named here fail or skip; "
                                                     "fix the capture and collect again")
    return res(PASS, expected, f"collected {show(data.get('time', '?'), 40)} by kvprov "
                              f"{show(data.get('kvprov_version', '?'), 20)}")


# ---------------------------------------------------------------------------- mount

def _local_skip(c: Context) -> Result | None:
    if not c.d.is_nfs:
        return res(SKIP, "", f"storage profile local: {c.d.mount_point} is a local directory, no NFS mount")
    return None


def _mounted(c: Context) -> tuple[dict | None, Result | None]:
    """The live NFS mount, or the skip result of a check that needs it."""
    skip = _local_skip(c)
    if skip:
        return None, skip
    live = c.live()
    if live is None or live["fstype"] not in ("nfs", "nfs4"):
        return None, res(SKIP, "", f"no NFS mount on {c.d.mount_point} (see mount.present)")
    return live, None


@check("mount.present")
def mount_present(c: Context) -> Result:
    skip = _local_skip(c)
    if skip:
        return skip
    d, unit = c.d, c.d.mount_unit
    expected = f"an NFS mount of {d.source} on {d.mount_point}"
    fix = f"systemctl start {unit} (`journalctl -u {unit} -b` says why it failed), or {c.deploy('kvcache_mount')}"
    live = c.live()
    if live is None:
        elsewhere = [mp for mp, _, src in parsers.mounts_in(c.mountinfo_text()) if src == d.source]
        found = f"nothing is mounted on {d.mount_point}" + (
            f"; {d.source} is mounted on {show(', '.join(elsewhere))}" if elsewhere else "")
        if not c.mountinfo_text().endswith("\n"):
            return res(FAIL, expected, f"{found}, but {bf.MOUNTINFO} ends mid-line: a truncated capture, so this "
                                      "proves nothing", bf.RECOLLECT)
        return res(FAIL, expected, found, fix)
    if live["fstype"] not in ("nfs", "nfs4"):
        return res(FAIL, expected, f"{show(live['fstype'])} {show(live['source'])} is mounted on {d.mount_point}, "
                                  "not NFS: the KV cache would land on local storage",
                  f"unmount it (`umount {d.mount_point}`), then {fix}")
    return res(PASS, expected, f"{show(live['source'])} ({live['fstype']})")


@check("mount.source")
def mount_source(c: Context) -> Result:
    live, skip = _mounted(c)
    if skip:
        return skip
    expected = c.d.source
    if live["source"] != c.d.source:
        return res(FAIL, expected, f"{show(live['source'])} is mounted instead",
                  f"{c.deploy('kvcache_mount', ' --allow-remount')} (remounts from the inventory's server and "
                  "export once nothing uses the mount)")
    return res(PASS, expected, show(live["source"]))


@check("mount.options")
def mount_options(c: Context) -> Result:
    live, skip = _mounted(c)
    if skip:
        return skip
    expected = ",".join(c.d.mount_options)
    diffs = mount_state.differences(live, "", list(c.d.mount_options))
    if diffs:
        return res(FAIL, expected, show("; ".join(diffs), 400),
                  f"{c.deploy('kvcache_mount', ' --allow-remount')}: NFS transport options change only with an "
                  "unmount (`mount -o remount` ignores them); stop what uses the mount first")
    opts = live["options"]
    shown = [k if v is True else f"{k}={v}" for k, v in opts.items()
             if k in mount_state.KERNEL_VALUES or k in mount_state.KERNEL_FLAGS]
    return res(PASS, expected, show(",".join(shown), 300))


@check("mount.nfs_version")
def mount_nfs_version(c: Context) -> Result:
    live, skip = _mounted(c)
    if skip:
        return skip
    expected = "NFS 4.1 or later (sessions and pNFS)"
    vers = live["options"].get("vers")
    fix = ("set kvprov_storage_nfs_version to 4.1 or 4.2 and remount "
           f"({c.deploy('kvcache_mount', ' --allow-remount')}); disable NFSv4.0 on the SVM so clients cannot "
           "land on it (`vserver nfs modify -vserver SVM -v4.0 disabled`)")
    if not isinstance(vers, str):
        return res(FAIL, expected, "the live options have no vers=", fix)
    version = parsers.version_tuple(vers)
    if version is None or version < (4, 1):
        return res(FAIL, expected, f"vers={show(vers)}: no sessions, no pNFS layouts", fix)
    return res(PASS, expected, f"vers={vers}")


@check("mount.transport")
def mount_transport(c: Context) -> Result:
    live, skip = _mounted(c)
    if skip:
        return skip
    want = c.d.transport
    expected = f"every xprt: line of the mount is {want}"
    s = c.stats()
    protos = [t.protocol for t in s.transports]
    if not protos:
        raise FileProblem(bf.MOUNTSTATS, f"shows no xprt: line for {c.d.mount_point}: truncated capture?")
    listed = f"xprt: {show(', '.join(protos))} (options say proto={show(s.opts.get('proto', '?'))})"
    if all(p == want for p in protos):
        return res(PASS, expected, listed)
    unit = c.d.mount_unit
    if want == "rdma":
        found = (f"{listed}: the mount fell back to TCP. It still works, so nothing complains, but every byte "
                 "crosses the TCP stack at TCP speed and GPUDirect Storage cannot use it")
        fix = ("usual causes: rpcrdma was not loaded or the RDMA link was down when the mount came up, or the "
               "server's LIF has no RDMA (ONTAP: `vserver nfs modify -vserver SVM -rdma enabled`, LIF "
               "`-rdma-protocols roce`). Check `rdma link` and `grep rpcrdma /proc/modules`, then remount once "
               f"nothing uses it: `systemctl restart {unit}`")
    else:
        found = f"{listed}: not the transport of storage profile {c.d.profile}"
        fix = f"{c.deploy('kvcache_mount', ' --allow-remount')}"
    return res(FAIL, expected, found, fix)


@check("mount.io_probe")
def mount_io_probe(c: Context) -> Result:
    expected = f"a small write and read-back on {c.d.mount_point} completes"
    io = c.io()
    if io.ok:
        size = f"{io.bytes} bytes" if io.bytes is not None else "the probe file"
        secs = f" in {io.seconds:.2f} s" if io.seconds is not None else ""
        return res(PASS, expected, f"wrote and read back {size}{secs}")
    if io.timed_out:
        fix = (f"check the data path to {c.d.server or 'the server'}: `ping` it from the data interface, "
               "`rdma link`, the NetApp LIF (`network interface show`); with a hard mount every process that "
               f"touches {c.d.mount_point} hangs until the server answers")
        return res(FAIL, expected, io.failure(), fix if c.d.is_nfs else f"check the disk under {c.d.mount_point}")
    fix = (f"check permissions and space on {c.d.mount_point} (`df {c.d.mount_point}`; NetApp: export-policy "
           "rules and root squash, `vserver export-policy rule show`)")
    return res(FAIL, expected, io.failure(), fix)


def _layout_fix(c: Context) -> str:
    unit = c.d.mount_unit
    if c.d.pnfs_layout == "block":
        return ("start blkmapd (`systemctl enable --now nfs-blkmap.service`), load `blocklayoutdriver`, then "
                f"remount (`systemctl restart {unit}`)")
    return ("enable pNFS on the SVM (`vserver nfs modify -vserver SVM -v4.1-pnfs enabled`; referrals off), load "
            f"`nfs_layout_nfsv41_files`, then remount (`systemctl restart {unit}`)")


@check("mount.pnfs_layout")
def mount_pnfs_layout(c: Context) -> Result:
    live, skip = _mounted(c)
    if skip:
        return skip
    if c.d.pnfs_layout == "none":
        return res(SKIP, "", "kvprov_storage_pnfs_layout is none: no layout expected")
    want = LAYOUT_NAMES[c.d.pnfs_layout]
    expected = f"pnfs={want} (kvprov_storage_pnfs_layout: {c.d.pnfs_layout})"
    s = c.stats()
    if not s.nfsv4:
        return res(FAIL, expected, "no nfsv4: line for the mount in mountstats: NFS below 4.1, or a truncated "
                                  "capture", _layout_fix(c))
    value = s.nfsv4.get("pnfs", "")
    if value in ("", "not configured"):
        return res(FAIL, expected, f"pnfs={value or 'absent'}: the client negotiated no pNFS layout driver, so "
                                  "every byte goes through the one metadata server", _layout_fix(c))
    if value != want:
        return res(FAIL, expected, f"pnfs={show(value)}",
                  "set kvprov_storage_pnfs_layout to the layout the storage serves (files for ONTAP/AFX, block "
                  "for the kvprov lab)")
    return res(PASS, expected, f"pnfs={value}")


@check("mount.layoutget")
def mount_layoutget(c: Context) -> Result:
    live, skip = _mounted(c)
    if skip:
        return skip
    if c.d.pnfs_layout == "none":
        return res(SKIP, "", "kvprov_storage_pnfs_layout is none: no layout expected")
    expected = "LAYOUTGET > 0 after the I/O probe's write and read"
    io = c.io()
    if not io.ok:
        return res(FAIL, expected, f"the layout counters prove nothing: the I/O probe did not complete "
                                  f"({io.failure()})",
                  "fix mount.io_probe first, then collect again: layout counters move only on real reads/writes")
    s = c.stats()
    n = s.op_count("LAYOUTGET")
    if "LAYOUTGET" not in s.ops:
        raise FileProblem(bf.MOUNTSTATS, f"has no per-op statistics for {c.d.mount_point}: truncated capture?")
    if n == 0:
        where = ("blkmapd (nfs-blkmap.service) running and the shared block device visible (`lsblk`)"
                 if c.d.pnfs_layout == "block" else
                 "every data LIF of the SVM reachable from this host, pNFS enabled on the SVM; ONTAP: "
                 "`statistics show -object nfsv4_1 -counter layoutget_total`")
        return res(FAIL, expected, "LAYOUTGET 0 after a successful write and read: the server handed out no "
                                  "layout, so the data went through the metadata server", f"check {where}")
    return res(PASS, expected, f"LAYOUTGET {n}, GETDEVICEINFO {s.op_count('GETDEVICEINFO')}, "
                              f"LAYOUTCOMMIT {s.op_count('LAYOUTCOMMIT')}")


@check("mount.unit")
def mount_unit(c: Context) -> Result:
    skip = _local_skip(c)
    if skip:
        return skip
    d, unit = c.d, c.d.mount_unit
    expected = f"/etc/systemd/system/{unit} enabled, mounting {d.source} on {d.mount_point} with the live options"
    fix = c.deploy("kvcache_mount")
    text = c.unit_text(unit, "kvcache_mount")
    try:
        parsed = parsers.parse_unit(text)
    except ParseError as e:
        return res(FAIL, expected, f"{unit}: {e}", fix)
    what = parsers.unit_value(parsed, "Mount", "What") or ""
    where = parsers.unit_value(parsed, "Mount", "Where") or ""
    options = parsers.unit_value(parsed, "Mount", "Options") or ""
    problems = []
    if posixpath.normpath(where or ".") != posixpath.normpath(d.mount_point):
        problems.append(f"Where={show(where)}")
    as_mounted = {"source": what, "options": mount_state.split_options(options)}
    problems += [f"unit vs inventory: {x.replace(': live ', ': unit has ', 1)}"
                 for x in mount_state.differences(as_mounted, d.source, list(d.mount_options))]
    live = c.live()
    if live is not None:
        problems += [f"live vs unit: {x}" for x in mount_state.differences(live, what, options.split(","))]
    state = ""
    if c.b.exists(bf.systemctl_file(unit)):
        state = c.show_unit(unit).get("UnitFileState", "")
        if state != "enabled":
            problems.append(f"UnitFileState={show(state) or 'unknown'}: not mounted at boot "
                            f"(`systemctl enable {unit}`)")
    if problems:
        return res(FAIL, expected, show("; ".join(problems), 500),
                  f"{fix} (add --allow-remount when the live mount differs)")
    warn = _fstab_duplicate(c)
    found = f"What={show(what)} Options={show(options, 200)}" + (f" UnitFileState={state}" if state else "")
    if warn:
        return res(WARN, expected, f"{found}; {warn}",
                  f"remove that line from /etc/fstab: kvprov manages the mount as {unit}")
    return res(PASS, expected, found)


def _fstab_duplicate(c: Context) -> str:
    name = bf.live_file("/etc/fstab")
    if not c.b.exists(name):
        return ""
    try:
        text = c.b.text(name)
    except FileProblem:
        return ""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 2 and not fields[0].startswith("#") and \
                posixpath.normpath(mount_state.unescape(fields[1])) == posixpath.normpath(c.d.mount_point):
            return f"/etc/fstab also mounts {show(fields[0])} on {c.d.mount_point}"
    return ""


@check("mount.local_dir")
def mount_local_dir(c: Context) -> Result:
    if c.d.is_nfs:
        return res(SKIP, "", f"storage profile {c.d.profile}: see mount.present")
    expected = f"{c.d.mount_point} is a directory"
    entry = c.storage_entry()
    if entry.get("error"):
        return res(FAIL, expected, f"the collector could not stat it: {show(entry['error'])}", bf.RECOLLECT)
    if entry.get("exists") is not True or entry.get("is_dir") is not True:
        return res(FAIL, expected, f"{c.d.mount_point} is {'not a directory' if entry.get('exists') else 'missing'}",
                  c.deploy("kvcache_mount"))
    return res(PASS, expected, f"{c.d.mount_point} on {show(entry.get('fstype', '?'))} {show(entry.get('device', ''))}")


# ---------------------------------------------------------------------------- rdma

def _rdma_skip(c: Context) -> Result | None:
    if c.d.transport != "rdma":
        return res(SKIP, "", f"storage profile {c.d.profile} does not use RDMA")
    return None


@check("rdma.module")
def rdma_module(c: Context) -> Result:
    skip = _rdma_skip(c)
    if skip:
        return skip
    expected = "rpcrdma loaded (NFS over RDMA)"
    mods = c.parsed(bf.MODULES, parsers.parse_modules)
    for name in ("rpcrdma", "xprtrdma"):
        if name in mods:
            return res(PASS, expected, f"{name} ({show(mods[name])})")
    if not mods:
        return res(WARN, expected, "/proc/modules is empty: a kernel without loadable modules (rpcrdma may be "
                                  "built in: look for /sys/module/rpcrdma)", "")
    return res(FAIL, expected, "rpcrdma is not loaded: this kernel cannot mount NFS over RDMA",
              "`modprobe rpcrdma` (kvprov's /etc/modules-load.d/kvprov-rdma.conf loads it at boot: "
              f"{c.deploy('rdma')}). On MOFED/DOCA hosts use NVIDIA's rpcrdma (mlnx-nfsrdma-dkms): the inbox one "
              "fails to load next to DOCA's ib_core, and mount.nfs then says \"incorrect mount option\"")


@check("rdma.link")
def rdma_link(c: Context) -> Result:
    skip = _rdma_skip(c)
    if skip:
        return skip
    expected = "at least one RDMA link in state ACTIVE"
    links = c.parsed(bf.RDMA_LINK, parsers.parse_rdma_link)
    active = [link for link in links if link.state == "ACTIVE"]
    if active:
        return res(PASS, expected, ", ".join(f"{show(x.name)} ACTIVE" + (f" ({show(x.netdev)})" if x.netdev else "")
                                            for x in active))
    if links:
        return res(FAIL, expected, "; ".join(f"{show(x.name)} {show(x.state)} {show(x.physical_state)}"
                                            for x in links[:8]),
                  "bring the RDMA port up: cable and switch port, `ibv_devinfo`, `ip link show NETDEV`; "
                  "soft-RoCE (labs): `systemctl restart kvprov-soft-roce.service`")
    return res(FAIL, expected, "`rdma link` lists no RDMA device",
              "install rdma-core and the NIC's driver (mlx5_ib for ConnectX); labs: set "
              "kvprov_rdma_soft_roce_netdevs")


# ---------------------------------------------------------------------------- gds

def _gds_skip(c: Context) -> Result | None:
    if c.d.gds_mode == "disabled":
        return res(SKIP, "", "kvprov_gds_mode is disabled")
    if not c.gpu().present:
        return res(SKIP, "", "no NVIDIA GPU")
    return None


def _gds_nfs_skip(c: Context) -> Result | None:
    skip = _gds_skip(c)
    if skip is None and c.d.transport != "rdma":
        skip = res(SKIP, "", f"GDS reads NFS only over RDMA; storage profile {c.d.profile} goes through cuFile's "
                            "POSIX path")
    return skip


@check("gds.gpu")
def gds_gpu(c: Context) -> Result:
    if c.d.gds_mode == "disabled":
        return res(SKIP, "", "kvprov_gds_mode is disabled")
    gpu = c.gpu()
    expected = f"an NVIDIA GPU (kvprov_gds_mode: {c.d.gds_mode})"
    if gpu.present:
        count = f"{gpu.count} GPU(s), " if gpu.count is not None else ""
        return res(PASS, expected, f"{count}NVIDIA driver {show(gpu.driver or '?')}")
    if c.d.gds_mode == "required":
        return res(FAIL, expected, "no NVIDIA GPU (/proc/driver/nvidia/gpus is missing: no GPU, or no driver)",
                  "check the NVIDIA driver (`nvidia-smi`), or set kvprov_gds_mode: auto for hosts without a GPU")
    return res(SKIP, expected, "no NVIDIA GPU")


@check("gds.nfs")
def gds_nfs(c: Context) -> Result:
    skip = _gds_nfs_skip(c)
    if skip:
        return skip
    expected = "gdscheck -p: NFS : Supported (or nvfs)"
    g = c.parsed(bf.GDSCHECK, parsers.parse_gdscheck)
    if g.nfs_supported:
        return res(PASS, expected, f"NFS : {show(g.nfs)}")
    found = f"NFS : {show(g.nfs)}" if g.nfs is not None else "gdscheck -p printed no NFS line"
    if g.errors:
        found += f" ({show(g.errors[0], 120)})"
    return res(FAIL, expected, found,
              "GDS over NFS/RDMA needs the nvidia-fs driver (`nvidia-gds`; /proc/driver/nvidia-fs/version) and "
              "NVIDIA's rpcrdma: MOFED >= 5.1, or DOCA-OFED with mlnx-nfsrdma-dkms (never both)")


@check("gds.peerdirect")
def gds_peerdirect(c: Context) -> Result:
    skip = _gds_nfs_skip(c)
    if skip:
        return skip
    expected = "gdscheck -p: Mellanox PeerDirect : Enabled"
    g = c.parsed(bf.GDSCHECK, parsers.parse_gdscheck)
    if (g.peerdirect or "").lower() == "enabled":
        return res(PASS, expected, "Mellanox PeerDirect : Enabled")
    return res(FAIL, expected, f"Mellanox PeerDirect : {show(g.peerdirect or 'not shown')}",
              "load GPU peer memory for the RDMA NIC (`modprobe nvidia-peermem`; MOFED/DOCA provide it): without "
              "it the NIC cannot reach GPU memory")


@check("gds.platform")
def gds_platform(c: Context) -> Result:
    skip = _gds_skip(c)
    if skip:
        return skip
    expected = "gdscheck -p: Platform verification succeeded"
    g = c.parsed(bf.GDSCHECK, parsers.parse_gdscheck)
    if g.platform_verified:
        return res(PASS, expected, "Platform verification succeeded")
    if g.platform_verified is None:
        return res(WARN, expected, "no platform verification line (truncated output?)", bf.RECOLLECT)
    return res(FAIL, expected, show("; ".join(g.errors[:3]) or "platform verification failed", 300),
              "run `gdscheck -p` on the host and fix what it lists (IOMMU on, driver not loaded, ...)")


@check("gds.compat_mode")
def gds_compat_mode(c: Context) -> Result:
    skip = _gds_skip(c)
    if skip:
        return skip
    allow = c.d.allow_compat_mode
    expected = "no compat mode (kvprov_gds_allow_compat_mode: false)" if not allow else \
        "compat mode allowed (kvprov_gds_allow_compat_mode: true)"
    g = c.parsed(bf.GDSCHECK, parsers.parse_gdscheck)
    signs = []
    if g.use_compat_mode:
        signs.append("properties.use_compat_mode : true")
    if g.nfs_in_compat:
        signs.append(f"NFS : {show(g.nfs)}")
    if not signs:
        if g.use_compat_mode is None and not g.nfs:
            return res(WARN, expected, "gdscheck -p shows neither properties.use_compat_mode nor an NFS line",
                      bf.RECOLLECT)
        return res(PASS, expected, "properties.use_compat_mode : false")
    found = ", ".join(signs) + ": cuFile may fall back to POSIX I/O through the page cache without any error"
    if allow:
        return res(WARN, expected, found, "set kvprov_gds_allow_compat_mode: false once GDS works, so a broken GDS "
                                         "path fails loudly")
    return res(FAIL, expected, found,
              f"the live cuFile setting differs from the inventory: check properties.allow_compat_mode in "
              f"{c.d.cufile_path} ({c.deploy('gds')}) and CUFILE_ALLOW_COMPAT_MODE / CUFILE_FORCE_COMPAT_MODE / "
              "CUFILE_ENV_PATH_JSON in the service environment; `NFS : nvfs, compat` means nvidia-fs cannot serve "
              "this mount (see gds.nfs)")


def _mount_table_entry(c: Context) -> tuple[Any, str]:
    """cufile.json's fs.nfs.mount_table[mount point] and a problem ("" when well shaped)."""
    cf = c.cufile()
    fs = cf.get("fs")
    nfs = fs.get("nfs") if isinstance(fs, dict) else None
    table = nfs.get("mount_table") if isinstance(nfs, dict) else None
    if not isinstance(table, dict):
        return None, "fs.nfs.mount_table is missing or not an object"
    mp = c.d.mount_point
    if mp not in table:
        keys = ", ".join(show(k, 60) for k in list(table)[:5]) or "none"
        return None, f"fs.nfs.mount_table has no entry for {mp} (entries: {keys})"
    entry = table[mp]
    if not isinstance(entry, dict) or set(entry) != {"rdma_dev_addr_list"} or \
            not isinstance(entry["rdma_dev_addr_list"], list) or \
            not all(isinstance(a, str) for a in entry["rdma_dev_addr_list"]):
        return entry, (f"fs.nfs.mount_table[{mp}] is {show(entry, 100)}: cuFile accepts only "
                       '{"rdma_dev_addr_list": ["IP", ...]} and fails with "json type mismatch" otherwise')
    return entry, ""


@check("gds.udev")
def gds_udev(c: Context) -> Result:
    skip = _gds_skip(c)
    if skip:
        return skip
    data = c.b.json_object(bf.UDEV)
    fstype, dev, record = data.get("fstype"), data.get("dev"), data.get("record")
    if fstype in ("nfs", "nfs4"):
        return res(SKIP, "", "NFS: cuFile finds it through cufile.json's mount table, not udev")
    expected = "udev's record of the block device under the KV tier (cuFile reads its volume attributes)"
    if not isinstance(dev, str) or not dev.split(":")[0].isdigit() or dev.split(":")[0] == "0":
        return res(FAIL, expected, f"{c.d.mount_point} is on {show(fstype)} (device {show(dev)}), no block device: "
                                   "cuFile cannot register files there", "put the KV tier on NFS or a block device")
    if data.get("exists") is not True:
        where = "no /run/udev/data at all (no udevd, or a container without /run/udev)" \
            if data.get("udev_dir") is False else f"{show(record)} is missing"
        return res(FAIL, expected, f"{where}: cuFile cannot read the volume attributes of {show(fstype)} "
                                   f"{show(data.get('device'))} and registers no file (NIXL GDS/GDS_MT fail with "
                                   "NIXL_ERR_BACKEND, cuFile error 5027), even in compat mode",
                   "run systemd-udevd on the host (`udevadm trigger`), or bind-mount the host's /run/udev "
                   "read-only into the container")
    return res(PASS, expected, f"{show(record)} for {show(fstype)} {show(data.get('device'))}")


@check("gds.cufile_mount_table")
def gds_cufile_mount_table(c: Context) -> Result:
    skip = _gds_nfs_skip(c)
    if skip:
        return skip
    expected = f'fs.nfs.mount_table = {{"{c.d.mount_point}": {{"rdma_dev_addr_list": [...]}}}}'
    entry, problem = _mount_table_entry(c)
    if problem:
        return res(FAIL, expected, problem, c.deploy("gds"))
    return res(PASS, expected, f"{c.d.mount_point}: {show(entry, 120)}")


@check("gds.cufile_rdma_addrs")
def gds_cufile_rdma_addrs(c: Context) -> Result:
    skip = _gds_nfs_skip(c)
    if skip:
        return skip
    want = sorted(c.d.rdma_dev_addr_list)
    expected = f"rdma_dev_addr_list {want} in properties and in the mount table"
    cf = c.cufile()
    props = cf.get("properties") if isinstance(cf.get("properties"), dict) else {}
    problems = []
    live = props.get("rdma_dev_addr_list")
    if not isinstance(live, list) or sorted(map(str, live)) != want:
        problems.append(f"properties.rdma_dev_addr_list is {show(live, 100)}")
    entry, problem = _mount_table_entry(c)
    if not problem and sorted(entry["rdma_dev_addr_list"]) != want:
        problems.append(f"mount_table[{c.d.mount_point}].rdma_dev_addr_list is {show(entry['rdma_dev_addr_list'])}")
    if problems:
        return res(FAIL, expected, "; ".join(problems), c.deploy("gds"))
    if not want:
        return res(WARN, expected, "the list is empty: cuFile has no RDMA NIC address to use for NFS",
                  "set kvprov_gds_rdma_dev_addr_list to the host's RDMA NIC addresses")
    return res(PASS, expected, ", ".join(want))


@check("gds.cufile_compat")
def gds_cufile_compat(c: Context) -> Result:
    skip = _gds_skip(c)
    if skip:
        return skip
    want = c.d.allow_compat_mode
    expected = f"properties.allow_compat_mode: {json.dumps(want)} (a JSON boolean)"
    cf = c.cufile()
    props = cf.get("properties") if isinstance(cf.get("properties"), dict) else {}
    if "allow_compat_mode" not in props:
        if want:
            return res(PASS, expected, "not set (cuFile's default: true)")
        return res(FAIL, expected, "not set: cuFile's default is true, so GDS may silently fall back to POSIX",
                  c.deploy("gds"))
    value = props["allow_compat_mode"]
    if not isinstance(value, bool):
        return res(FAIL, expected, f"{show(json.dumps(value), 40)}, not a JSON boolean", c.deploy("gds"))
    if value != want:
        return res(FAIL, expected, json.dumps(value), c.deploy("gds"))
    return res(PASS, expected, json.dumps(value))


# ---------------------------------------------------------------------------- nixl

@check("nixl.import")
def nixl_import(c: Context) -> Result:
    expected = f"`import nixl` works in {c.d.nixl_venv}"
    p = c.nixl_probe()
    if p.import_ok:
        return res(PASS, expected, f"nixl {show(p.version or '?', 40)}")
    return res(FAIL, expected, f"import failed: {show(p.error or 'no error given', 300)}",
              f"{c.deploy('nixl')} (installs nixl-cuXX into {c.d.nixl_venv}); try "
              f"`{c.d.nixl_venv}/bin/python3 -c 'import nixl'` on the host")


@check("nixl.backend")
def nixl_backend(c: Context) -> Result:
    want = c.d.nixl_backend
    expected = f"NIXL creates the {want} backend (plugin {c.d.nixl_plugin})"
    p = c.nixl_probe()
    if not p.import_ok:
        return res(SKIP, expected, "nixl does not import (see nixl.import)")
    problems = []
    if p.plugins is not None and want not in p.plugins:
        problems.append(f"NIXL found no {want} plugin (it has: {show(', '.join(p.plugins), 120) or 'none'})")
    if p.backend != want:
        problems.append(f"the probe created {show(p.backend or 'no backend')}, not {want}")
    elif not p.backend_ok:
        problems.append(f"creating {want} failed: {show(p.error or 'no error given', 200)}")
    if not problems:
        return res(PASS, expected, f"{want} backend created")
    fix = f"check NIXL_PLUGIN_DIR and the wheel flavour (nixl-cu12/cu13) in {c.d.nixl_venv}"
    if want.startswith("GDS"):
        fix += "; GDS backends need an NVIDIA GPU and libcufile: use the posix plugin on hosts without a GPU"
    return res(FAIL, expected, "; ".join(problems), fix)


@check("nixl.config")
def nixl_config(c: Context) -> Result:
    path = c.d.nixl_config_path
    expected = "an absolute path to a TOML file that parses"
    if not path.startswith("/"):
        return res(FAIL, expected, f"{show(path)} is relative: SGLang opens @path against the service's working "
                                  "directory", "set kvprov_nixl_config_path to an absolute path")
    toml = c.toml()
    tables = toml.get("plugin")
    n = len(tables) if isinstance(tables, dict) else 0
    return res(PASS, expected, f"{path}: {n} [plugin.*] table(s)")


@check("nixl.active_plugin")
def nixl_active_plugin(c: Context) -> Result:
    want = c.d.nixl_plugin
    expected = f"exactly one [plugin.*] table with active = true (a boolean): [plugin.{want}]"
    fix = f"{c.deploy('nixl')} (writes active = true, a TOML boolean, in [plugin.{want}] only)"
    if not c.d.nixl_config_path.startswith("/"):
        return res(SKIP, expected, "see nixl.config")
    tables = c.toml().get("plugin")
    if not isinstance(tables, dict) or not tables:
        return res(FAIL, expected, "no [plugin.<name>] table: SGLang finds no active plugin and crashes at start "
                                  "(UnboundLocalError)", fix)
    strings = [(name, t["active"]) for name, t in tables.items() if isinstance(t, dict)
               and isinstance(t.get("active"), str)]
    if strings:
        name, value = strings[0]
        return res(FAIL, expected, f"[plugin.{show(name, 40)}] active = {show(json.dumps(value), 40)} is a string, "
                                  "not a boolean: kvprov writes typed booleans (a string like \"ture\" or "
                                  "\"yes\" silently deactivates the plugin in SGLang)", fix)
    active = [name for name, t in tables.items() if isinstance(t, dict) and t.get("active") is True]
    if not active:
        return res(FAIL, expected, "no [plugin.*] table has active = true: SGLang crashes at its first start "
                                  "(UnboundLocalError)", fix)
    if len(active) > 1:
        return res(FAIL, expected, f"{len(active)} active tables ({show(', '.join(active), 80)}): SGLang takes the "
                                  "first, an accident of file order", fix)
    if active[0] != want:
        return res(FAIL, expected, f"[plugin.{show(active[0], 40)}] is active, the inventory says {want}", fix)
    return res(PASS, expected, f"[plugin.{want}] active = true")


@check("nixl.options")
def nixl_options(c: Context) -> Result:
    expected = "use_direct_io / l3_cleaner_enabled, where set, are booleans"
    if not c.d.nixl_config_path.startswith("/"):
        return res(SKIP, expected, "see nixl.config")
    toml = c.toml()
    problems, shown = [], []
    for key in ("use_direct_io", "l3_cleaner_enabled"):
        if key not in toml:
            continue
        value = toml[key]
        if isinstance(value, bool):
            shown.append(f"{key} = {json.dumps(value)}")
        else:
            problems.append(f"{key} = {show(json.dumps(value, default=str), 40)} is not a boolean: SGLang reads it "
                            "with bool(), so the string \"false\" means true")
    if problems:
        return res(FAIL, expected, "; ".join(problems),
                  f"write real booleans (kvprov_nixl_backend_options: {{use_direct_io: true}}), then "
                  f"{c.deploy('nixl')}")
    return res(PASS, expected, ", ".join(shown) or "not set (SGLang's defaults)")


# ---------------------------------------------------------------------------- engine (per instance)

def _no_run_reason(c: Context) -> str:
    """Why the engine should not run on this host ("" when it should)."""
    if not c.d.sglang_install:
        try:
            gpu = c.gpu().present
        except FileProblem:  # gpu.json unusable: the install flag alone decides
            gpu = True
        return "no GPU" if not gpu else "kvprov_sglang_install is false"
    return "" if c.gpu().present else "no GPU"


@instance_check("unit")
def engine_unit(c: Context, inst: Instance) -> Result:
    expected = f"/etc/systemd/system/{inst.unit} loaded and enabled, passing @{c.d.nixl_config_path}"
    text = c.unit_text(inst.unit, "sglang")
    try:
        parsed = parsers.parse_unit(text)
    except ParseError as e:
        return res(FAIL, expected, f"{inst.unit}: {e}", c.deploy("sglang"))
    problems, warnings = [], []
    start = parsers.unit_value(parsed, "Service", "ExecStart") or ""
    if f"--hicache-storage-backend-extra-config @{c.d.nixl_config_path}" not in " ".join(start.split()):
        problems.append(f"ExecStart does not pass --hicache-storage-backend-extra-config @{c.d.nixl_config_path}")
    props = c.show_unit(inst.unit)
    if props.get("LoadState") != "loaded":
        problems.append(f"LoadState={show(props.get('LoadState', '?'))} (`systemctl daemon-reload`)")
    if props.get("UnitFileState") != "enabled":
        problems.append(f"UnitFileState={show(props.get('UnitFileState', '?'))}: not started at boot")
    if props.get("NeedDaemonReload") == "yes":
        warnings.append("the unit file changed since systemd read it: `systemctl daemon-reload`")
    if problems:
        return res(FAIL, expected, "; ".join(problems + warnings), c.deploy("sglang"))
    if warnings:
        return res(WARN, expected, "; ".join(warnings), f"systemctl daemon-reload && systemctl restart {inst.unit}")
    return res(PASS, expected, "loaded, enabled")


@instance_check("state")
def engine_state(c: Context, inst: Instance) -> Result:
    props = c.show_unit(inst.unit)
    active, sub = props.get("ActiveState", "?"), props.get("SubState", "?")
    cond, restarts_text = props.get("ConditionResult", ""), props.get("NRestarts", "0")
    restarts = int(restarts_text) if restarts_text.isdigit() and len(restarts_text) < 10 else 0
    state = f"ActiveState={show(active, 30)} SubState={show(sub, 30)} NRestarts={restarts}"
    logs = f"`journalctl -u {inst.unit} -b -n 200`"
    reason = _no_run_reason(c)
    running_expected = not reason
    if active == "failed" or sub == "auto-restart" or (restarts > 0 and active != "active"):
        expected = "active (running)" if running_expected else "inactive (skipped), never failed or restarting"
        return res(FAIL, expected, f"{state}: failed or in a restart loop", f"read {logs}, fix, then "
                                                                           f"`systemctl restart {inst.unit}`")
    if not running_expected:
        expected = f"inactive: {reason}, so the service does not run (and never fails)"
        if active == "inactive":
            if cond == "no" and props.get("ConditionTimestamp"):
                return res(PASS, expected, f"{state} ConditionResult=no: {reason}: service skipped by its "
                                          "condition (ConditionPathExistsGlob=/dev/nvidia[0-9]*)")
            return res(SKIP, expected, f"{state}: {reason}: not started")
        return res(WARN, expected, f"{state} although {reason}", f"look at {logs}")
    expected = "active (running), no restarts"
    if active == "active" and sub == "running":
        if restarts:
            return res(WARN, expected, f"{state}: it crashed and was restarted", f"read {logs}")
        return res(PASS, expected, state)
    if active == "activating":
        return res(WARN, expected, f"{state}: still starting (loading the model can take minutes)",
                  f"collect again later; {logs}")
    return res(FAIL, expected, f"{state}: not running", f"`systemctl start {inst.unit}`; {logs}")


def _storage_env(c: Context, inst: Instance) -> tuple[str | None, str]:
    """The storage directory setting systemd runs the service with, and where it was read."""
    name = bf.systemctl_file(inst.unit)
    live = None
    if c.b.exists(name):
        props = c.show_unit(inst.unit)
        if "Environment" in props:
            live = parsers.split_environment(props["Environment"]).get(STORAGE_DIR_ENV)
            return live, "systemctl show"
    text = c.unit_text(inst.unit, "sglang")
    try:
        unit = parsers.parse_unit(text)
    except ParseError as e:
        raise FileProblem(bf.unit_file(inst.unit), f"unusable: {e}", c.deploy("sglang")) from None
    return parsers.unit_environment(unit).get(STORAGE_DIR_ENV), "the unit file"


@instance_check("storage_env")
def engine_storage_env(c: Context, inst: Instance) -> Result:
    mp = c.d.mount_point
    expected = f"{STORAGE_DIR_ENV}={inst.storage_dir} (on the KV mount {mp})"
    fix = c.deploy("sglang")
    value, where = _storage_env(c, inst)
    if not value:
        return res(FAIL, expected, f"{STORAGE_DIR_ENV} is not set ({where}): SGLang silently falls back to "
                                  f"{SGLANG_FALLBACK_DIR}, so the third tier lands on local disk (and in the "
                                  "service's private /tmp)", fix)
    dirs = [x.strip() for x in value.split(",") if x.strip()]
    problems = []
    if len(set(dirs)) != len(dirs):
        problems.append("a directory is listed twice: SGLang refuses to start")
    for d in dirs:
        if not d.startswith("/"):
            problems.append(f"{show(d)} is relative: it resolves against the service's working directory")
        elif any(under(d, t) for t in LOCAL_TMP):
            problems.append(f"{show(d)} is on local /tmp: the third tier lands on local disk (and in the "
                            "service's private /tmp)")
        elif not under(d, mp):
            problems.append(f"{show(d)} is not under the KV mount {mp}: local disk")
    if not problems and dirs != [inst.storage_dir]:
        others = [i.name for i in c.d.instances if i.name != inst.name and i.storage_dir in dirs]
        problems.append(f"{show(value)}, not the inventory's {inst.storage_dir}"
                        + (f": the directory of instance {others[0]} (NIXL's clear() would wipe both)"
                           if others else ""))
    if problems:
        return res(FAIL, expected, f"{STORAGE_DIR_ENV}={show(value)} ({where}): " + "; ".join(problems), fix)
    return res(PASS, expected, f"{STORAGE_DIR_ENV}={show(value)} ({where})")


@instance_check("storage_dir")
def engine_storage_dir(c: Context, inst: Instance) -> Result:
    user = c.d.sglang_user
    expected = f"{inst.storage_dir} exists, on the KV mount {c.d.mount_point}, writable by {user}"
    e = c.storage_entry(inst.name)
    if e.get("error"):
        return res(FAIL, expected, f"the collector could not check it: {show(e['error'], 200)}",
                  "a hung stat() means the mount hung (see mount.io_probe); otherwise collect again")
    path = e.get("path") if isinstance(e.get("path"), str) else inst.storage_dir
    if e.get("exists") is not True:
        return res(FAIL, expected, f"{show(path)} does not exist", c.deploy("sglang"))
    if e.get("is_dir") is False:
        return res(FAIL, expected, f"{show(path)} is not a directory", c.deploy("sglang"))
    where = f"{show(e.get('fstype', '?'), 20)} {show(e.get('device', '?'), 80)}"
    on_mount = e.get("is_on_kv_mount")
    if not isinstance(on_mount, bool):  # older collectors: judge from mountinfo
        on_mount = c.on_kv_mount(path)
    if not on_mount:
        return res(FAIL, expected, f"{show(path)} is on {where} (mounted on {show(e.get('mount', '?'), 80)}), not on "
                                  f"the KV mount: it was created while {c.d.mount_point} was not mounted",
                  f"stop {inst.unit}, mount {c.d.mount_point} (`systemctl start {c.d.mount_unit}`), then "
                  f"{c.deploy('sglang')}")
    owner = f"{show(e.get('owner', '?'), 32)}:{show(e.get('group', '?'), 32)} {show(e.get('mode', '?'), 8)}"
    if e.get("writable_by_service_user") is not True:
        return res(FAIL, expected, f"{show(path)} ({owner}) is not writable by {user}",
                  f"`chown {user}:{user} {path} && chmod 0750 {path}` (with root squash on the export, create it "
                  f"as {user}), or {c.deploy('sglang')}")
    return res(PASS, expected, f"{show(path)} ({owner}) on {where}")


@instance_check("health")
def engine_health(c: Context, inst: Instance) -> Result:
    expected = f"HTTP /health on port {inst.port} answers 200"
    props = c.show_unit(inst.unit)
    if props.get("ActiveState") != "active":
        return res(SKIP, expected, f"service not running (see engine.{inst.name}.state)")
    data = c.b.json_object(bf.HEALTH)
    h = data.get(inst.name)
    if not isinstance(h, dict):
        raise FileProblem(bf.HEALTH, f"has no {inst.name!r} entry (an object)")
    url = show(h.get("url") or f"http://127.0.0.1:{inst.port}/health", 100)
    if h.get("ok") is True:
        return res(PASS, expected, f"GET {url}: {show(h.get('status', 200), 10)}")
    what = h.get("status") if h.get("status") is not None else h.get("error") or "not running"
    return res(FAIL, expected, f"GET {url}: {show(what, 200)}",
              f"`curl -s {url}`; read `journalctl -u {inst.unit} -b -n 200`")


# ---------------------------------------------------------------------------- packages

@check("packages.required")
def packages_required(c: Context) -> Result:
    need: list[tuple[str, ...]] = []
    if c.d.is_nfs:
        need.append(("nfs-common", "nfs-utils"))
    if c.d.transport == "rdma":
        need.append(("rdma-core",))
    if not need:
        return res(SKIP, "", "storage profile local needs no client package")
    expected = "installed: " + ", ".join(" or ".join(alts) for alts in need)
    pkgs = c.parsed(bf.PACKAGES, parsers.parse_packages)
    missing = [" or ".join(alts) for alts in need if not any(a in pkgs for a in alts)]
    if missing:
        return res(FAIL, expected, "not installed: " + ", ".join(missing), c.deploy("kvcache_mount,rdma"))
    return res(PASS, expected, ", ".join(f"{a} {show(pkgs[a], 40)}" for alts in need for a in alts if a in pkgs))


# ---------------------------------------------------------------------------- running them

def _instance_results(c: Context) -> Iterator[Result]:
    if not c.d.instances:
        yield Result("engine.instances", "engine", SKIP, "", "no engine instance in the inventory")
        return
    for inst in c.d.instances:
        for suffix, fn in INSTANCE_CHECKS:
            yield run_check(f"engine.{inst.name}.{suffix}", "engine", lambda fn=fn, inst=inst: fn(c, inst))


def summarize(results: list[Result]) -> Result:
    counts = {s: sum(r.status == s for r in results) for s in STATUSES}
    found = ", ".join(f"{counts[s]} {s}" for s in STATUSES)
    status = FAIL if counts[FAIL] else PASS
    fix = "fix the failed checks above, then collect and validate again" if counts[FAIL] else ""
    host = results[0].host if results else ""
    return Result("summary", "summary", status, "no failed check", found, fix, host)


def evaluate(bundle: Bundle, desired: Desired) -> list[Result]:
    """Every check on one host's bundle, then the summary (pure: reads only `bundle`)."""
    c = Context(bundle, desired)
    results = [run_check(check_id, category, lambda fn=fn: fn(c)) for check_id, category, fn in CHECKS]
    results += list(_instance_results(c))
    for r in results:
        r.host = desired.host
    results.append(summarize(results))
    return results


def evaluate_bundle(path: Path | str) -> list[Result]:
    """Read DIR/HOST and evaluate it. KvprovError (exit 2) when it is no bundle or lacks desired.json."""
    root = Path(path)
    if not root.is_dir():
        raise KvprovError(f"{path}: no such bundle directory (give DIR/HOST as written by `kvprov collect`)",
                          EXIT_USAGE)
    b = Bundle(root)
    try:
        desired = bf.load_desired(b)
    except bf.DesiredError as e:
        raise KvprovError(f"{path}: {e}", EXIT_USAGE) from None
    return evaluate(b, desired)
