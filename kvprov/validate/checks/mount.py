"""mount.*: the KV mount: present, source, options, NFS version, RDMA transport, a real I/O
probe, the pNFS layout and LAYOUTGET, the mount unit; or the local directory."""

from __future__ import annotations

import posixpath

from kvprov.validate import bundle as bf
from kvprov.validate import parsers
from kvprov.validate.bundle import FileProblem
from kvprov.validate.context import Context, check, under
from kvprov.validate.parsers import ParseError, mount_state
from kvprov.validate.result import FAIL, PASS, SKIP, WARN, Result, res, show

LAYOUT_NAMES = {"files": "LAYOUT_NFSV4_1_FILES", "block": "LAYOUT_BLOCK_VOLUME"}


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
    shown = ",".join(k if v is True else f"{k}={v}" for k, v in live["options"].items())
    warnings = mount_state.warnings(live, list(c.d.mount_options))
    if warnings:
        return res(WARN, expected, show(f"{shown}; " + "; ".join(warnings), 500),
                  "an option nobody asked for stays until the next remount: add it to "
                  "kvprov_storage_extra_options if it is wanted, else remount "
                  f"(`systemctl restart {c.d.mount_unit}` once nothing uses the mount)")
    return res(PASS, expected, show(shown, 300))


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
    if io.not_answering:
        fix = (f"bring the storage back: check {c.d.server or 'the server'} and the data path to it (`ping` it from "
               "the data interface, `rdma link`, the NetApp LIF: `network interface show`); a soft mount answers "
               "again by itself and the engines use the tier again with no restart (on a hard mount every process "
               f"that touches {c.d.mount_point} hangs until the server answers)")
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
    if posixpath.normpath(where) != posixpath.normpath(d.mount_point):  # "" normalises to "."
        problems.append(f"Where={show(where)}")
    as_mounted = {"source": what, "options": mount_state.as_shown([options])}  # it splits at the commas
    problems += [f"unit vs inventory: {x.replace(': live ', ': unit has ')}"
                 for x in mount_state.differences(as_mounted, d.source, list(d.mount_options))]
    live = c.live()
    if live is not None:
        problems += [f"live vs unit: {x}" for x in mount_state.differences(live, what, [options])]
    state = c.show_unit(unit).get("UnitFileState", "")  # not captured: FAIL, never "enabled" by absence
    if not parsers.enabled_at_boot(state):
        problems.append(f"UnitFileState={show(state) or 'unknown'}: not mounted at boot "
                        f"(`systemctl enable {unit}`)")
    if problems:
        return res(FAIL, expected, show("; ".join(problems), 500),
                  f"{fix} (add --allow-remount when the live mount differs)")
    found = f"What={show(what)} Options={show(options, 200)} UnitFileState={state}"
    duplicate = _fstab_duplicate(c)
    if duplicate:
        return res(WARN, expected, f"{found}; {duplicate[0]}", duplicate[1])
    return res(PASS, expected, found)


def _fstab_duplicate(c: Context) -> tuple[str, str] | None:
    """A warning about /etc/fstab and its fix; None when it does not mount the KV mount point
    too. Unreadable is not "no duplicate"."""
    name = bf.live_file("/etc/fstab")
    try:
        text = c.b.text(name)
    except FileProblem as e:
        if e.missing and name not in c.b.collector_notes():
            return None  # the host has no /etc/fstab
        return f"/etc/fstab could not be checked for a second mount of {c.d.mount_point}: {e.reason}", e.fix
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 2 and not fields[0].startswith("#") and \
                posixpath.normpath(mount_state.unescape(fields[1])) == posixpath.normpath(c.d.mount_point):
            return (f"/etc/fstab also mounts {show(fields[0])} on {c.d.mount_point}",
                    f"remove that line from /etc/fstab: kvprov manages the mount as {c.d.mount_unit}")
    return None


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


@check("mount.lookupcache")
def mount_lookupcache(c: Context) -> Result:
    """The engines find a KV file another host stored by its name (exists/stat/open): a miss
    the NFS client cached before the file existed must not hide it (lookupcache=all does, until
    the directory's attributes expire: about 30 s measured, benchmarks/results/visibility.json)."""
    live, skip = _mounted(c)
    if skip:
        return skip
    own = posixpath.join(c.d.mount_point, c.d.host)
    dirs = [i for i in c.d.instances if i.storage_dir and under(i.storage_dir, c.d.mount_point)]
    if not dirs:
        return res(SKIP, "", f"engine {c.d.engine} keeps no KV files on {c.d.mount_point}")
    shared = [i for i in dirs if not under(i.storage_dir, own)]
    expected = "lookupcache=positive or none where other hosts write the directory"
    value = live["options"].get("lookupcache", "all")  # the kernel shows pos and none, never its default
    if value in ("pos", "none"):
        return res(PASS, expected, f"lookupcache={value}: a miss is asked again, another host's file is found "
                                   "once closed")
    if not shared:
        return res(PASS, expected, f"lookupcache={value}; only this host writes "
                                   f"{', '.join(sorted({i.storage_dir for i in dirs}))} (below {own})")
    names = ", ".join(f"{i.name} ({i.storage_dir})" for i in shared)
    return res(FAIL, expected,
               f"lookupcache={value} (the kernel's default when none is shown): instance {names} may be written by "
               "other hosts, and a KV file they store stays missing here for up to acdirmax seconds after this "
               "host looked for it (a prefix miss)",
               "set kvprov_storage_lookupcache: positive (the default) and remount: "
               f"{c.deploy('kvcache_mount', ' --allow-remount')}")
