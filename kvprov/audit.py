"""`kvprov audit INVENTORY [--limit P] [--json F] [--junit F] [--prom F] [--fix]`: config drift.

For each host, the desired state (kvprov.desired: the inventory and the roles' own
variables and templates) against the live state, gathered in one module call per host,
hosts in parallel (playbooks/collect.yml without its I/O and NIXL probes):

- every managed file, with a unified diff when it differs (secret values and secret files
  shown as `<redacted>`, kvprov.redact), its mode and owner; unmanaged kvprov files in the
  managed directories (warnings); every directory deploy creates (mode, owner, not a link)
  and the engine user's account (home, shell, group, uid);
- the live mount (source, options, transport) and its persistence (the mount unit);
- unit enabled/active states, required OS packages, pinned versions in the venvs, and the
  engine's storage directories;
- with the storage directories, the KV volume's space and inodes in use and each instance
  directory's size (a warning when the volume is nearly full; --prom exports the figures
  as gauges);
- the model's namespaces on the volume: beside each shared namespace a host uses, the old ones
  a keying change left (size, last evictor run), which the evictor retires after
  kvprov_engine_evict_retire_days: shown per host (console, --json, --prom), never drift.

Exit codes: 0 no drift (warnings allowed), 1 drift found, 2 bad inventory or usage,
3 a host could not be audited (unreachable or collector error; the others are reported).
With --fix, drifted hosts are re-deployed and audited again; the exit code is then the
second audit's.
"""

from __future__ import annotations

import argparse
import difflib
import posixpath
import sys
import time
from dataclasses import dataclass

from kvprov import check, inventory, lock, redact, runner, volume_namespaces
from kvprov.converge import converge
from kvprov.desired import run_with_states
from kvprov.errors import EXIT_CHECKS_FAILED, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, KvprovError
from kvprov.validate import bundle as bf
from kvprov.validate import parsers, report
from kvprov.validate.bundle import Bundle, Desired, FileProblem
from kvprov.validate.checks.engine import (  # (importing kvprov.validate.checks registers CHECKS)
    dir_usage,
    engine_storage_dir,
    volume_usage,
)
from kvprov.validate.collect import CAPTURE_TASK, bundle_files
from kvprov.validate.context import CHECKS, Context, run_check
from kvprov.validate.report import write_file, write_reports
from kvprov.validate.result import FAIL, PASS, SKIP, WARN, Result, res, show

MANAGED_DIRS = bf.MANAGED_DIRS  # the collector module names every captured file (bundle.py)
VENVS = bf.VENVS
# Configuration checks shared with validate: the live mount and its persistence.
MOUNT_CHECKS = ("mount.present", "mount.source", "mount.options", "mount.lookupcache", "mount.transport", "mount.unit")
MAX_DIFF_LINES = 60


# ---------------------------------------------------------------------------- checks (pure)

def file_check(c: Context, path: str, want: str, role: str, mode: str) -> Result:
    expected = f"the content `kvprov render` gives ({role} role), mode {mode}, owner root"
    if role == "gds" and c.d.gds_mode == "auto" and not c.gpu().present:
        return res(SKIP, "", "no NVIDIA GPU: the gds role writes this file only on GPU hosts")
    live = c.host_file(path, role)
    if live == want:
        st = c.b.json_object(bf.FILE_MODES).get(path) if c.b.exists(bf.FILE_MODES) else None
        if not isinstance(st, dict):  # a bundle from an older kvprov
            return res(PASS, expected, "identical content (mode not captured)")
        found = f"mode {show(st.get('mode'), 8)}, uid {show(st.get('uid'), 12)}" + (", a link" if st.get("link") else "")
        if (st.get("mode"), st.get("uid"), st.get("link")) != (mode, 0, False):
            return res(FAIL, expected, f"identical content; {found}", c.deploy(role))
        return res(PASS, expected, "identical")
    diff = list(difflib.unified_diff(want.splitlines(keepends=True), live.splitlines(keepends=True),
                                     f"{path} (desired)", f"{path} (live)", n=1))
    changed = sum(1 for line in diff[2:] if line.startswith(("+", "-")))
    diff, redacted = redact.redact_diff(diff, path)  # secrets never reach a terminal, JSON or JUnit
    result = res(FAIL, expected, f"{changed} line(s) differ" + (" (secret values redacted)" if redacted else ""),
                 c.deploy(role))
    shown = diff[:MAX_DIFF_LINES] + ([f"... {len(diff) - MAX_DIFF_LINES} more diff lines\n"]
                                     if len(diff) > MAX_DIFF_LINES else [])
    result.detail = "".join(line if line.endswith("\n") else line + "\n" for line in shown).rstrip("\n")
    return result


def is_kvprov_file(directory: str, name: str) -> bool:
    """Would kvprov own a file of this name here? Every file of a kvprov directory, and
    files named kvprov* in shared directories (/etc/systemd/system, /etc/modules-load.d)."""
    return "kvprov" in directory.split("/") or name.startswith("kvprov")


def extra_files(c: Context, directory: str, managed: set[str]) -> Result:
    expected = "no kvprov file that the inventory does not manage"
    listing = c.b.json_object(MANAGED_DIRS).get(directory)
    if isinstance(listing, dict):
        raise FileProblem(MANAGED_DIRS, f"{directory}: {show(listing.get('error', 'unreadable'))}")
    if not isinstance(listing, list):
        raise FileProblem(MANAGED_DIRS, f"has no listing of {directory}")
    extra = sorted(posixpath.join(directory, n) for n in listing
                   if isinstance(n, str) and is_kvprov_file(directory, n)
                   and posixpath.join(directory, n) not in managed)
    if extra:
        return res(WARN, expected, "unmanaged: " + show(", ".join(extra), 400),
                  "left over from an earlier inventory (a removed instance?) or made by hand: remove it if "
                  "nothing needs it; kvprov does not delete files it no longer manages")
    return res(PASS, expected, f"{len(listing)} entries, none unmanaged")


def unit_check(c: Context, want: bf.UnitWant) -> Result:
    expected = "enabled" + (", active" if want.active else "")
    show_unit = c.show_unit(want.unit)
    load = show_unit.get("LoadState", "?")
    if load != "loaded":
        found = "not found: the unit file is gone" if load == "not-found" else \
            f"LoadState={show(load)}: systemd cannot use the unit file (`systemd-analyze verify {want.unit}`)"
        return res(FAIL, expected, found, c.deploy("configure"))
    state, active = show_unit.get("UnitFileState", "?"), show_unit.get("ActiveState", "?")
    problems = []
    if want.enabled and not parsers.enabled_at_boot(state):
        problems.append(f"UnitFileState={show(state)}")
    if want.active and active != "active":
        problems.append(f"ActiveState={show(active)} SubState={show(show_unit.get('SubState', '?'))}")
    if show_unit.get("NeedDaemonReload") == "yes":
        problems.append("the unit file changed on disk since systemd loaded it (NeedDaemonReload=yes)")
    found = f"UnitFileState={show(state)} ActiveState={show(active)}"
    if problems:
        return res(FAIL, expected, "; ".join(problems), c.deploy("configure"))
    if not want.active and show_unit.get("ConditionResult") == "no":
        found += " (skipped by its condition: no GPU)"
    return res(PASS, expected, found)


def dir_check(c: Context, d: bf.ManagedDir) -> Result:
    """A directory deploy creates: there, a directory (not a link), with deploy's mode and owner."""
    expected = f"a directory, mode {d.mode}, owner {d.owner}:{d.owner} ({d.role} role)"
    if not c.b.exists(bf.DIR_MODES):
        return res(SKIP, expected, "not captured (a bundle from an older kvprov)")
    e = c.b.json_object(bf.DIR_MODES).get(d.path)
    if not isinstance(e, dict):
        raise FileProblem(bf.DIR_MODES, f"has no entry for {show(d.path, 200)}")
    if e.get("error"):
        return res(FAIL, expected, f"the collector could not check it: {show(e['error'], 200)}",
                   "a hung stat() means the mount hung (see mount.io_probe); otherwise collect again")
    if e.get("exists") is not True:
        return res(FAIL, expected, "does not exist", c.deploy(d.role))
    if e.get("is_link") is True:
        return res(FAIL, expected, "a symbolic link: root never follows one there",
                   f"remove the link, then {c.deploy(d.role)}")
    if e.get("is_dir") is not True:
        return res(FAIL, expected, "not a directory", c.deploy(d.role))
    found = f"mode {show(e.get('mode'), 8)}, owner {show(e.get('owner'), 32)}:{show(e.get('group'), 32)}"
    if (e.get("mode"), e.get("owner"), e.get("group")) != (d.mode, d.owner, d.owner):
        return res(FAIL, expected, found, c.deploy(d.role))
    return res(PASS, expected, found)


def user_check(c: Context) -> Result:
    """The engine user's account as deploy makes it (a changed shell or home is drift too)."""
    d = c.d
    want = {"group": d.engine_user, "home": d.engine_home, "shell": d.engine_shell, "uid": d.engine_uid}
    expected = f"system user {d.engine_user}: " + ", ".join(f"{k} {v}" for k, v in want.items() if v is not None)
    if not c.b.exists(bf.ENGINE_USER) or d.engine_home is None:
        return res(SKIP, expected, "not captured (a bundle from an older kvprov)")
    live = c.b.json_object(bf.ENGINE_USER)
    if live.get("exists") is not True:
        return res(FAIL, expected, "no such user", c.deploy("engine"))
    differ = [f"{k} {show(live.get(k), 200)}" for k, v in want.items() if v is not None and live.get(k) != v]
    if differ:
        return res(FAIL, expected, ", ".join(differ), c.deploy("engine"))
    return res(PASS, expected, f"uid {show(live.get('uid'), 12)}, as deployed")


def restart_check(c: Context) -> Result:
    """Engine units a deploy changed and did not restart (it stopped in between): they run the old
    configuration until the next deploy restarts them."""
    expected = "no engine restart owed by an earlier deploy"
    if not c.d.engine_install:
        return res(SKIP, expected, "the engine is not installed (config and units only): nothing to restart")
    if not c.b.exists(bf.RESTART_PENDING):
        return res(SKIP, expected, "not captured (a bundle from an older kvprov)")
    owed = c.b.json(bf.RESTART_PENDING)
    if isinstance(owed, dict):
        raise FileProblem(bf.RESTART_PENDING, show(owed.get("error", "unreadable")))
    owed = [n for n in owed if str(n).endswith(".service")]  # what deploy's restart step reads
    if owed:
        return res(FAIL, expected, f"owed for {show(', '.join(map(str, owed)), 300)}: a deploy changed their "
                                   "configuration and stopped before restarting them, so they run the old one",
                   "kvprov deploy INVENTORY --limit " + c.d.host)
    return res(PASS, expected, "none")


def lock_check(c: Context) -> Result:
    """A deploy lock on the host: a deploy is changing it now, or one was interrupted and may have
    left its changes half done."""
    expected = "no deploy lock held"
    if not c.b.exists(bf.DEPLOY_LOCK):
        return res(SKIP, expected, "not captured (a bundle from an older kvprov)")
    held = c.b.json(bf.DEPLOY_LOCK)
    if held is None:
        return res(PASS, expected, "none")
    if not isinstance(held, dict) or "error" in held:
        raise FileProblem(bf.DEPLOY_LOCK, show(held.get("error") if isinstance(held, dict) else held))
    return res(FAIL, expected, f"held by `{show(held.get('command', '?'), 60)}` from {show(held.get('owner', '?'), 200)} "
                               f"since {show(held.get('since', '?'), 40)}: a deploy running now, or one that was "
                               "interrupted with its changes half done",
               f"wait for the running deploy; after an interrupted one, kvprov deploy INVENTORY --limit {c.d.host} "
               "from the same controller and inventory (it takes the lock over)")


def package_check(c: Context, name: str) -> Result:
    pkgs = c.parsed(bf.PACKAGES, parsers.parse_packages)
    if name not in pkgs:
        return res(FAIL, "installed", "not installed", c.deploy("install"))
    return res(PASS, "installed", f"{name} {show(pkgs[name], 60)}")


def venv_check(c: Context, venv: str, dist: str, pinned: str | None) -> Result:
    expected = f"{dist}=={pinned}" if pinned else f"{dist} installed"
    installed = c.b.json_object(VENVS).get(venv)
    if not isinstance(installed, dict):
        raise FileProblem(VENVS, f"has no entry for {venv}")
    have = installed.get(dist.lower().replace("_", "-"))
    if have is None:
        return res(FAIL, expected, f"not installed in {venv}", c.deploy("install"))
    if pinned and have != pinned:
        return res(FAIL, expected, f"{dist} {show(have, 40)} in {venv}",
                  c.deploy("install") + " (reinstalls the pinned version)")
    return res(PASS, expected, f"{dist} {show(have, 40)}")


def audit(b: Bundle, d: Desired) -> list[Result]:
    """Every drift check on one host's capture (pure: reads only `b`)."""
    c = Context(b, d)
    checks: list[tuple[str, str, object]] = [
        (check_id, category, lambda fn=fn: fn(c)) for check_id, category, fn in CHECKS if check_id in MOUNT_CHECKS]
    managed = {f.path for f in d.files}
    checks += [(f"file:{f.path}", "file", lambda f=f: file_check(c, f.path, f.content, f.role, f.mode))
               for f in d.files]
    checks += [(f"extra:{dd}", "file", lambda dd=dd: extra_files(c, dd, managed))
               for dd in sorted({posixpath.dirname(p) for p in managed})]
    checks += [(f"dir:{dd.path}", "file", lambda dd=dd: dir_check(c, dd)) for dd in d.dirs]
    checks.append((f"user:{d.engine_user}", "engine", lambda: user_check(c)))
    checks += [(f"unit:{u.unit}", "unit", lambda u=u: unit_check(c, u)) for u in d.units]
    checks.append(("restarts", "unit", lambda: restart_check(c)))
    checks.append(("lock", "unit", lambda: lock_check(c)))
    checks += [(f"package:{p}", "package", lambda p=p: package_check(c, p)) for p in d.packages]
    checks += [(f"venv:{venv}:{dist}", "venv", lambda v=venv, n=dist, p=pin: venv_check(c, v, n, p))
               for venv, pins in sorted(d.venvs.items()) for dist, pin in pins.items()]
    checks += [(f"storage_dir:{i.name}", "engine", lambda i=i: engine_storage_dir(c, i)) for i in d.instances]
    results = [run_check(check_id, category, fn) for check_id, category, fn in checks]
    for r in results:
        r.host = d.host
    return results


@dataclass
class Gauge:
    """One capacity figure of a host for the Prometheus textfile."""

    name: str  # kvprov_storage_volume_used_bytes, ...
    labels: tuple[tuple[str, str], ...]
    value: int


VOLUME_GAUGES = (("size_bytes", "The KV volume's size as df counts it (used + available to users), bytes."),
                 ("used_bytes", "The KV volume's space in use, bytes."),
                 ("inodes", "The KV volume's inodes (0: the filesystem does not count them)."),
                 ("inodes_used", "The KV volume's inodes in use."))
DIR_GAUGES = (("bytes", "Space an engine instance's KV directory takes (du), bytes."),
              ("files", "Files in an engine instance's KV directory."),
              ("complete", "1 when the directory was walked to the end within the collector's timeout, else 0."))
NAMESPACE_GAUGES = (
    ("bytes", "Space a model's namespace on the KV volume takes (du), bytes (current false: an old one)."),
    ("files", "Files in a model's namespace on the KV volume."),
    ("complete", "1 when the namespace was walked to the end within the collector's timeout, else 0."),
    ("last_use_timestamp_seconds", "When any host's evictor last ran on the namespace (its .kvprov-in-use), "
                                   "Unix time; absent when none ever did."))


def capacity_gauges(b: Bundle, d: Desired) -> list[Gauge]:
    """The capacity figures of one host's capture (pure); none that were not measured."""
    c = Context(b, d)
    out: list[Gauge] = []
    try:
        vol = volume_usage(c) or {}
        dirs = {i: dir_usage(c, i) or {} for i in d.instances if i.storage_dir}
    except FileProblem:
        return []  # the capacity check reports it
    def figure(usage: dict, key: str) -> int | None:  # "complete" is a boolean, the rest counts
        value = usage.get(key)
        if key == "complete":
            return int(value) if isinstance(value, bool) else None
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

    labels = (("host", d.host), ("mount_point", d.mount_point))
    out += [Gauge(f"kvprov_storage_volume_{k}", labels, v) for k, _ in VOLUME_GAUGES
            if (v := figure(vol, k)) is not None]
    for inst, usage in dirs.items():
        labels = (("host", d.host), ("instance", inst.name), ("path", inst.storage_dir))
        out += [Gauge(f"kvprov_engine_storage_dir_{k}", labels, v) for k, _ in DIR_GAUGES
                if (v := figure(usage, k)) is not None]
    return out + namespace_gauges(volume_namespaces.parse(b, d))


def namespace_gauges(rows: list[volume_namespaces.Namespace]) -> list[Gauge]:
    """The figures of a model's namespaces on the volume (pure); none that were not measured."""
    out: list[Gauge] = []
    for r in rows:
        labels = (("host", r.host), ("engine", r.engine), ("namespace", r.name), ("current", str(r.current).lower()))
        values = {"bytes": r.bytes, "files": r.files, "complete": None if r.complete is None else int(r.complete),
                  "last_use_timestamp_seconds": None if r.last_use is None else round(r.last_use)}
        out += [Gauge(f"kvprov_engine_namespace_{k}", labels, values[k]) for k, _ in NAMESPACE_GAUGES
                if values[k] is not None]
    return out


def unreachable_result(host: str, message: str) -> Result:
    return Result("host.reachable", "host", FAIL, "the host answers over Ansible", show(message, 400),
                  "check ssh to the host (`ansible -i INVENTORY HOST -m ping`), then audit again", host)


def drifted(results: list[Result]) -> list[str]:
    """Reachable hosts with at least one drift (a failed check)."""
    down = {r.host for r in results if r.id == "host.reachable"}
    return sorted({r.host for r in results if r.status == FAIL} - down)


def to_prom(results: list[Result], now: float, gauges: list[Gauge] = ()) -> str:
    """Prometheus textfile (node_exporter's textfile collector): drift per host and check, and
    the capacity figures; prometheus_client's registry formats and escapes it (cmd_audit writes
    it atomically without following links: report.write_file)."""
    import prometheus_client

    registry = prometheus_client.CollectorRegistry()

    def family(name: str, help_: str, labels: tuple[str, ...]) -> prometheus_client.Gauge:
        return prometheus_client.Gauge(name, help_, labels, registry=registry)

    per_host: dict[str, list[Result]] = report.by_host(results)
    drift = family("kvprov_audit_drift", "1 when kvprov audit found this check drifted on this host, else 0.",
                   ("host", "check"))
    for host, rs in per_host.items():
        for r in rs:
            if r.status != SKIP and r.id != "host.reachable":
                drift.labels(host, r.id).set(int(r.status == FAIL))
    for name, help_, value in (
            ("drift_count", "Number of drifted checks on this host.", lambda rs: sum(r.status == FAIL for r in rs)),
            ("warnings", "Number of audit warnings on this host (e.g. unmanaged files).",
             lambda rs: sum(r.status == WARN for r in rs)),
            ("up", "1 when the host could be audited, else 0.",
             lambda rs: int(not any(r.id == "host.reachable" for r in rs)))):
        per = family(f"kvprov_audit_{name}", help_, ("host",))
        for h, rs in per_host.items():
            per.labels(h).set(value(rs))
    family("kvprov_audit_last_run_timestamp_seconds", "When kvprov audit ran.", ()).set(round(now))
    for prefix, figures in (("kvprov_storage_volume_", VOLUME_GAUGES), ("kvprov_engine_storage_dir_", DIR_GAUGES),
                            ("kvprov_engine_namespace_", NAMESPACE_GAUGES)):
        for key, help_ in figures:
            these = [g for g in gauges if g.name == prefix + key]
            if these:  # no family without a sample
                per = family(prefix + key, help_, tuple(k for k, _ in these[0].labels))
                for g in these:
                    per.labels(*(v for _, v in g.labels)).set(g.value)
    return prometheus_client.generate_latest(registry).decode()


def format_before_after(before: list[Result], after: list[Result], hosts: list[str]) -> str:
    old = {(r.host, r.id) for r in before if r.status == FAIL}
    new = {(r.host, r.id) for r in after if r.status == FAIL}
    lines = ["", "audit --fix: before -> after"]
    for h in hosts:
        fixed = sorted(i for hh, i in old - new if hh == h)
        left = sorted(i for hh, i in new if hh == h)
        lines.append(f"{h}: {sum(hh == h for hh, _ in old)} drifted -> {len(left)} drifted"
                     + (f"; fixed: {', '.join(fixed)}" if fixed else "")
                     + (f"; still drifted: {', '.join(left)}" if left else ""))
    return "\n".join(lines)


# ---------------------------------------------------------------------------- live (I/O)

Namespaces = list[volume_namespaces.Namespace]


def gather(sources: str | list[str], limit: str | None, timeout: int) -> tuple[list[Result], list[Gauge], Namespaces]:
    """Capture every host in one module call each (hosts in parallel), then audit each capture:
    the results, the hosts' capacity figures, and the model's namespaces on the volume."""
    result = run_with_states("collect.yml", sources, name="audit", limit=limit, stream=sys.stderr,
                        capture=CAPTURE_TASK,
                        extravars={"kvprov_collect_timeout": timeout, "kvprov_collect_probes": False})
    results: list[Result] = []
    gauges: list[Gauge] = []
    namespaces: Namespaces = []
    for host, captured in sorted(result.captured.items()):
        b = Bundle(files=bundle_files(captured, result.desired.get(host)))
        try:
            desired = bf.load_desired(b)
            results += audit(b, desired)
            gauges += capacity_gauges(b, desired)
            namespaces += volume_namespaces.parse(b, desired)
        except bf.DesiredError as e:
            results.append(unreachable_result(host, f"the collector returned no usable desired state: {e}"))
    for f in result.failures:
        results.append(unreachable_result(f.host, ("unreachable: " if f.unreachable else "collect failed: ")
                                          + f.message))
    if not results and result.rc != 0:
        raise KvprovError(f"audit: ansible-playbook failed (artifacts: {result.artifacts})", EXIT_UNREACHABLE)
    return results, gauges, namespaces


def add_parser(sub) -> None:
    p = sub.add_parser("audit", help="config drift: desired (inventory + roles) vs live, per host",
                       description=__doc__.split("\n\n", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    inventory.add_inventory_args(p)
    inventory.add_limit_arg(p)
    p.add_argument("--timeout", type=int, default=30, metavar="S", help="seconds for each host-side probe")
    p.add_argument("--json", metavar="F", help="also write the results as JSON to F ('-': to stdout, no table)")
    p.add_argument("--junit", metavar="F", help="also write JUnit XML to F (a testcase per check)")
    p.add_argument("--prom", metavar="F", help="also write a Prometheus textfile to F (node_exporter)")
    p.add_argument("--fix", action="store_true", help="re-deploy the drifted hosts, then audit them again")
    p.add_argument("--allow-remount", action="store_true",
                   help="with --fix: let deploy remount a KV mount whose options drifted (only if unused)")
    runner.add_list_hosts_arg(p)
    p.set_defaults(func=cmd_audit)


def _outputs(args, results: list[Result], gauges: list[Gauge], namespaces: Namespaces = ()) -> None:
    write_reports(args, results, "kvprov audit", everything=args.verbose,
                  host_fields=volume_namespaces.json_fields(list(namespaces)),
                  appendix=volume_namespaces.format_section(list(namespaces)))
    if args.prom:
        write_file(args.prom, to_prom(results, time.time(), gauges), mode=0o644)  # node_exporter reads it


def _exit_code(results: list[Result]) -> int:
    if any(r.id == "host.reachable" for r in results):
        return EXIT_UNREACHABLE
    return EXIT_CHECKS_FAILED if drifted(results) else EXIT_OK


def cmd_audit(args) -> int:
    if args.allow_remount and not args.fix:
        raise KvprovError("--allow-remount goes with --fix", EXIT_USAGE)
    sources = inventory.from_args(args)
    check.require_valid(sources)
    if getattr(args, "list_hosts", False):
        return runner.print_list_hosts(args, ["collect.yml"], sources, name="audit-list-hosts")
    t0 = time.monotonic()
    results, gauges, namespaces = gather(sources, args.limit, args.timeout)
    summary = (f"audit: {len({r.host for r in results})} host(s) in {time.monotonic() - t0:.1f}s; "
               f"drift on: {', '.join(drifted(results)) or 'none'}")
    if not (args.fix and drifted(results)):
        _outputs(args, results, gauges, namespaces)
        print(summary, file=sys.stderr if args.json == "-" else sys.stdout)
        return _exit_code(results)

    hosts = drifted(results)
    print(report.format_table(results, everything=args.verbose), file=sys.stderr)
    print(f"{summary}\naudit --fix: deploying {', '.join(hosts)}", file=sys.stderr)
    with lock.inventory_lock(sources, "audit --fix"):
        deployed = converge(sources, "audit --fix", ",".join(hosts), allow_remount=args.allow_remount)
    runner.print_summary(deployed, sys.stderr, rerun=["audit", "--fix", *inventory.argv(sources)])
    again, again_gauges, again_namespaces = gather(sources, ",".join(hosts), args.timeout)
    after = [r for r in results if r.host not in hosts] + again
    _outputs(args, after, [g for g in gauges if dict(g.labels)["host"] not in hosts] + again_gauges,
             [n for n in namespaces if n.host not in hosts] + again_namespaces)
    print(format_before_after(results, again, hosts), file=sys.stderr if args.json == "-" else sys.stdout)
    return _exit_code(after)
