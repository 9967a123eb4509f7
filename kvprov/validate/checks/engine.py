"""engine.<instance>.*: per engine instance, its unit, state, storage directory setting, the
storage directory itself, and /health when running (@instance_check: ids
engine.<instance>.<suffix>, category engine).

Today's only engine is SGLang HiCache (its storage directory comes from
SGLANG_HICACHE_NIXL_BACKEND_STORAGE_DIR, its unit passes the NIXL TOML with
--hicache-storage-backend-extra-config). Checks for another engine go in
checks/engine_<name>.py, registered with @instance_check and imported after this module
in kvprov/validate/checks/__init__.py.
"""

from __future__ import annotations

from kvprov.validate import bundle as bf
from kvprov.validate import parsers
from kvprov.validate.bundle import FileProblem, Instance
from kvprov.validate.context import Context, instance_check, under
from kvprov.validate.parsers import ParseError
from kvprov.validate.result import FAIL, PASS, SKIP, WARN, Result, res, show

# SGLang HiCache
STORAGE_DIR_ENV = "SGLANG_HICACHE_NIXL_BACKEND_STORAGE_DIR"
SGLANG_FALLBACK_DIR = "/tmp/hicache_storage"
# any engine: directories that are local disk, never the KV tier
LOCAL_TMP = ("/tmp", "/var/tmp", "/dev/shm")


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
