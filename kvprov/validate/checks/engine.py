"""engine.<instance>.*: per engine instance, whatever the engine (@instance_check: ids
engine.<instance>.<suffix>, category engine):

- unit         its units are loaded and enabled, and the command line the process really
               runs with (the running process, else `systemctl show`, else the unit file)
               carries the engine's KV-tier configuration
- state        each unit runs where it should (servers before their clients)
- storage_env  the storage directory the engine is configured with is the instance's own,
               on the KV mount (not /tmp, not local disk); skipped for an engine without a
               KV tier (vllm_baseline)
- storage_dir  that directory exists, on the KV mount, writable by the service user; with
               the KV volume's space and inodes in use and the directory's size as the
               engine user sees them (a warning from FULL_PERCENT up, docs/capacity.md)
- health       /health answers (and lmcache_mp's server its /metrics)
- cache        the cache counters the engine exposes (vLLM's prefix and connector caches,
               LMCache MP's L1/L2): exposed, and the connector really consulted

What differs per engine (where the storage directory is set, what its command line must
carry) lives in checks/engine_<name>.py, registered in ENGINES.
"""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass
from typing import Callable

from kvprov.validate import bundle as bf
from kvprov.validate import parsers
from kvprov.validate.bundle import FileProblem, Instance
from kvprov.validate.context import Context, instance_check, under
from kvprov.validate.parsers import ParseError
from kvprov.validate.result import FAIL, PASS, SKIP, WARN, Result, res, show

# any engine: directories that are local disk, never the KV tier
LOCAL_TMP = ("/tmp", "/var/tmp", "/dev/shm")
TAGS = "engine"
# In the shared namespace the engine's directory is ${KVPROV_KV_DIR} (as the unit file says), which
# roles/engine/files/kvprov-kv-key.py sets at each start to <namespace>/fp-<12 hex> (the host's part
# of the key), or to /run/kvprov-kv/<unit>/off when it turned the tier off for that run.
KV_DIR_VARIABLE = "${KVPROV_KV_DIR}"
KEYED_SUBDIR = re.compile(r"fp-[0-9a-f]{12}")
TIER_OFF = re.compile(r"/run/kvprov-kv/[^/]+/off")


def keyed_parent(directory: str, namespace: str) -> str:
    """The namespace a directory stands for: the namespace itself for its keyed subdirectory (or
    the unexpanded variable); any other directory is itself."""
    d = posixpath.normpath(directory)
    ns = posixpath.normpath(namespace)
    if directory == KV_DIR_VARIABLE or (posixpath.dirname(d) == ns and KEYED_SUBDIR.fullmatch(posixpath.basename(d))):
        return ns
    return d


@dataclass(frozen=True)
class EngineRules:
    """What one engine's checks need to know (registered by checks/engine_<name>.py)."""

    # (the storage directory it is configured with or None, where that was read)
    storage_setting: Callable[[Context, Instance], tuple[str | None, str]]
    # what is wrong with the KV-tier configuration of the instance's live command lines
    config_problems: Callable[[Context, Instance], list[str]]
    # the instance's cache metrics: ({counter: value}, what they say) or None when not exposed
    cache: Callable[[Context, Instance], tuple[dict[str, float], list[str]] | None]
    fallback: str = ""  # what the engine does when the storage setting is missing


ENGINES: dict[str, EngineRules] = {}


# ---------------------------------------------------------------------------- live configuration

def live_argv(c: Context, unit: str) -> tuple[list[str], str]:
    """The command line `unit` really runs: the running process's, else what systemd
    would start (`systemctl show`), else the unit file's ExecStart."""
    def read():
        name = bf.systemctl_file(unit).replace(".txt", ".cmdline.json")
        if c.b.exists(name):
            argv = c.b.json(name)
            if isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv):
                return argv, "the running process"
        if c.b.exists(bf.systemctl_file(unit)) and c.show_unit(unit).get("ExecStart"):
            try:
                return parsers.exec_argv(c.show_unit(unit)["ExecStart"], from_show=True), "systemctl show"
            except ParseError:
                pass
        try:
            start = parsers.unit_value(parsers.parse_unit(c.unit_text(unit, TAGS)), "Service", "ExecStart")
            if not start:
                raise ParseError("no ExecStart= in [Service] (systemd refuses to start it)")
            return parsers.exec_argv(start, from_show=False), "the unit file"
        except ParseError as e:
            raise FileProblem(bf.unit_file(unit), f"unusable: {e}", c.deploy(TAGS)) from None
    return c.memo(f"argv:{unit}", read)


# The engines' servers as a command line starts them: (module run with `python -m`) and
# (console script, subcommand) -> which server. A console script's running process reads
# `<venv>/bin/python3 <venv>/bin/vllm serve ...` in /proc/<pid>/cmdline, its unit `<venv>/bin/vllm serve ...`.
SERVER_MODULES = {"vllm.entrypoints.openai.api_server": "vllm", "sglang.launch_server": "sglang",
                  "lmcache.v1.multiprocess.server": "lmcache"}
SERVER_SCRIPTS = {("vllm", "serve"): "vllm", ("sglang", "serve"): "sglang", ("lmcache", "server"): "lmcache"}


def server_command(argv: list[str]) -> tuple[str | None, list[str]]:
    """(the engine server an argv starts: vllm, sglang, lmcache, or None; the server's own
    arguments). The forms: `python3 -m vllm.entrypoints.openai.api_server ARGS`, `vllm serve
    MODEL ARGS` (MODEL comes back as --model MODEL, as vLLM's serve command sets it),
    `python3 -m sglang.launch_server ARGS`, `sglang serve [--model-type T] ARGS` (the backend
    selector dropped, a positional model as --model-path, as SGLang's serve does),
    `python3 -m lmcache.v1.multiprocess.server ARGS`, `lmcache server ARGS`; each also behind
    the interpreter that runs a console script."""
    if not argv:
        return None, []
    rest = list(argv)
    if posixpath.basename(rest[0]).startswith("python"):
        if len(rest) > 2 and rest[1] == "-m":
            return SERVER_MODULES.get(rest[2]), rest[3:]
        rest = rest[1:]  # `python3 <venv>/bin/vllm serve ...`: the script follows
    if len(rest) < 2 or (posixpath.basename(rest[0]), rest[1]) not in SERVER_SCRIPTS:
        return None, []
    server, args = SERVER_SCRIPTS[posixpath.basename(rest[0]), rest[1]], rest[2:]
    if server == "sglang":
        kept, i = [], 0
        while i < len(args):
            if args[i] == "--model-type":
                i += 2
                continue
            if not args[i].startswith("--model-type="):
                kept.append(args[i])
            i += 1
        args = kept
    if server in ("vllm", "sglang") and args and not args[0].startswith("-"):
        args = ["--model" if server == "vllm" else "--model-path", *args]
    return server, args


def live_env(c: Context, unit: str) -> tuple[dict[str, str], str]:
    """The environment systemd runs `unit` with (`systemctl show`, else the unit file)."""
    if c.b.exists(bf.systemctl_file(unit)) and "Environment" in c.show_unit(unit):
        return parsers.split_environment(c.show_unit(unit)["Environment"]), "systemctl show"
    try:
        return parsers.unit_environment(parsers.parse_unit(c.unit_text(unit, TAGS))), "the unit file"
    except ParseError as e:
        raise FileProblem(bf.unit_file(unit), f"unusable: {e}", c.deploy(TAGS)) from None


def flag(argv: list[str], name: str) -> str | None:
    """The value of `--name VALUE` or `--name=VALUE` (the last one wins, as in argparse)."""
    value = None
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(name + "="):
            value = arg[len(name) + 1:]
    return value


def json_flag(argv: list[str], name: str) -> tuple[dict | None, str]:
    """A JSON-object flag: (value, "") or (None, why not)."""
    text = flag(argv, name)
    if text is None:
        return None, f"no {name}"
    try:
        value = json.loads(text)
    except ValueError as e:
        return None, f"{name} is not JSON ({e})"
    return (value, "") if isinstance(value, dict) else (None, f"{name} is not a JSON object")


def kv_transfer_config(c: Context, inst: Instance) -> tuple[dict | None, str, str]:
    """The vLLM unit's --kv-transfer-config: (value or None, why not, where read)."""
    argv, where = live_argv(c, inst.unit)
    value, why = json_flag(argv, "--kv-transfer-config")
    return value, why, where


def port_problems(c: Context, inst: Instance) -> list[str]:
    argv, where = live_argv(c, inst.unit)
    port = flag(argv, "--port")
    return [] if port == str(inst.port) else [f"--port {show(port)} ({where}), want {inst.port}"]


def connector_problems(c: Context, inst: Instance, connector: str) -> tuple[dict, list[str]]:
    """The vLLM side of every vLLM engine with a KV tier: its port and connector."""
    where = live_argv(c, inst.unit)[1]
    problems = port_problems(c, inst)
    kv, why, _ = kv_transfer_config(c, inst)
    if kv is None:
        return {}, problems + [f"{why} ({where}): vLLM runs without the KV tier"]
    if kv.get("kv_connector") != connector:
        problems.append(f"kv_connector {show(kv.get('kv_connector'))} ({where}), want {connector}")
    if kv.get("kv_role") != "kv_both":
        problems.append(f"kv_role {show(kv.get('kv_role'))}, want kv_both (store and load)")
    return kv, problems


def vllm_cache(c: Context, inst: Instance, external: bool = True) -> tuple[dict[str, float], list[str]] | None:
    """vLLM's prefix-cache counters (and the connector's, `external`) from /metrics."""
    m = metrics(c, f"metrics/{inst.name}.txt")
    if m is None:
        return None
    want = ["vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"]
    if external:
        want += ["vllm:external_prefix_cache_queries_total", "vllm:external_prefix_cache_hits_total"]
    problems = [f"{name} is not exposed" for name in want if name not in m]
    if external and not problems and m["vllm:prefix_cache_queries_total"] > 0 \
            and m["vllm:external_prefix_cache_queries_total"] == 0:
        problems.append("requests were served but the KV connector was never consulted "
                        "(vllm:external_prefix_cache_queries_total 0): the tier is configured but not used")
    return {k: m[k] for k in want if k in m}, problems


def metrics(c: Context, name: str) -> dict[str, float] | None:
    """Prometheus text -> {name: value summed over labels}; None when not captured. A comment
    line names no counter ("# HELP name ..." keys as "# HELP name"), a blank one has no value."""
    if not c.b.exists(name):
        return None
    out: dict[str, float] = {}
    for line in c.b.text(name).splitlines():
        key, _, value = line.rpartition(" ")
        try:
            out[key.split("{")[0]] = out.get(key.split("{")[0], 0.0) + float(value)
        except ValueError:
            continue
    return out


# ---------------------------------------------------------------------------- the checks

def rules(c: Context) -> EngineRules:
    return ENGINES[c.d.engine]


def _no_run_reason(c: Context, unit: str) -> str:
    """Why the unit should not run on this host ("" when it should)."""
    try:
        gpu = c.gpu().present
    except FileProblem:  # gpu.json unusable: the other reasons decide
        gpu = True
    needs_gpu = any(f.path == f"/etc/systemd/system/{unit}" and "ConditionPathExistsGlob=/dev/nvidia" in f.content
                    for f in c.d.files)
    if needs_gpu and not gpu:
        return "no GPU"
    return "" if c.d.engine_install else "kvprov_engine_install is false"


@instance_check("unit")
def engine_unit(c: Context, inst: Instance) -> Result:
    units = inst.units or (inst.unit,)
    expected = f"{', '.join(units)} loaded and enabled, running with the {c.d.engine} KV-tier configuration"
    problems, warnings = [], []
    for unit in units:
        c.unit_text(unit, TAGS)  # the unit file is on the host
        props = c.show_unit(unit)
        if props.get("LoadState") != "loaded":
            problems.append(f"{unit}: LoadState={show(props.get('LoadState', '?'))} (`systemctl daemon-reload`)")
        if not parsers.enabled_at_boot(props.get("UnitFileState")):
            problems.append(f"{unit}: UnitFileState={show(props.get('UnitFileState', '?'))}: not started at boot")
        if props.get("NeedDaemonReload") == "yes":
            warnings.append(f"{unit} changed since systemd read it: `systemctl daemon-reload`")
    problems += rules(c).config_problems(c, inst)
    if problems:
        return res(FAIL, expected, "; ".join(problems + warnings), c.deploy(TAGS))
    if warnings:
        return res(WARN, expected, "; ".join(warnings), f"systemctl daemon-reload && systemctl restart {inst.unit}")
    where = live_argv(c, inst.unit)[1]
    return res(PASS, expected, f"loaded, enabled; configuration read from {where}")


@instance_check("state")
def engine_state(c: Context, inst: Instance) -> Result:
    results = [_unit_state(c, unit) for unit in (inst.units or (inst.unit,))]
    worst = next((r for s in (FAIL, WARN, PASS, SKIP) for r in results if r.status == s), results[0])
    if len(results) == 1:
        return worst
    return res(worst.status, "; ".join(r.expected for r in results), "; ".join(r.found for r in results),
               worst.fix)


def _unit_state(c: Context, unit: str) -> Result:
    props = c.show_unit(unit)
    active, sub = props.get("ActiveState", "?"), props.get("SubState", "?")
    cond, restarts_text = props.get("ConditionResult"), props.get("NRestarts", "")
    restarts = int(restarts_text) if restarts_text.isdigit() and len(restarts_text) < 10 else 0
    state = f"{unit}: ActiveState={show(active, 30)} SubState={show(sub, 30)} NRestarts={restarts}"
    logs = f"`journalctl -u {unit} -b -n 200`"
    reason = _no_run_reason(c, unit)
    if active == "failed" or sub == "auto-restart" or (restarts > 0 and active != "active"):
        expected = "active (running)" if not reason else "inactive (skipped), never failed or restarting"
        return res(FAIL, expected, f"{state}: failed or in a restart loop",
                   f"read {logs}, fix, then `systemctl restart {unit}`")
    if reason:
        expected = f"inactive: {reason}, so the service does not run (and never fails)"
        if active == "inactive":
            if cond == "no" and props.get("ConditionTimestamp"):
                return res(PASS, expected, f"{state} ConditionResult=no: {reason}: service skipped by its "
                                          "condition (ConditionPathExistsGlob=/dev/nvidia[0-9]*)")
            return res(SKIP, expected, f"{state}: {reason}: not started")
        return res(WARN, expected, f"{state} although {reason}", f"look at {logs}")
    expected = f"{unit} active (running), no restarts"
    if active == "active" and sub == "running":
        if restarts:
            return res(WARN, expected, f"{state}: it crashed and was restarted", f"read {logs}")
        return res(PASS, expected, state)
    if active == "activating":
        return res(WARN, expected, f"{state}: still starting (loading the model can take minutes)",
                   f"collect again later; {logs}")
    return res(FAIL, expected, f"{state}: not running", f"`systemctl start {unit}`; {logs}")


def _no_tier(c: Context) -> Result:
    return res(SKIP, "no storage directory", f"engine {c.d.engine} has no KV tier: nothing of it reaches the KV mount")


@instance_check("storage_env")
def engine_storage_env(c: Context, inst: Instance) -> Result:
    if not inst.storage_dir:
        return _no_tier(c)
    mp = c.d.mount_point
    expected = f"the {c.d.engine} storage directory {inst.storage_dir} (on the KV mount {mp})"
    fix = c.deploy(TAGS)
    value, where = rules(c).storage_setting(c, inst)
    if not value:
        return res(FAIL, expected, f"no storage directory is set ({where}){rules(c).fallback}", fix)
    dirs = [x.strip() for x in value.split(",") if x.strip()]
    problems = []
    if len(set(dirs)) != len(dirs):
        problems.append("a directory is listed twice"
                        + (": SGLang refuses to start" if c.d.engine == "sglang_hicache" else ""))
    for d in dirs:
        if TIER_OFF.fullmatch(posixpath.normpath(d)):
            problems.append(f"{show(d)}: kvprov-kv-key turned the tier off at the engine's start (the storage did "
                            "not answer, or the namespace's subdirectory could not be made; its journal says why): "
                            "restart the engine once the storage answers")
        elif d == KV_DIR_VARIABLE:
            continue  # the unit's own words (no process to read): set at each start, below the namespace
        elif not d.startswith("/"):
            problems.append(f"{show(d)} is relative: it resolves against the service's working directory")
        elif any(under(d, t) for t in LOCAL_TMP):
            problems.append(f"{show(d)} is on local /tmp: the third tier lands on local disk (and in the "
                            "service's private /tmp)")
        elif not under(d, mp):
            problems.append(f"{show(d)} is not under the KV mount {mp}: local disk")
    if not problems and [keyed_parent(d, inst.storage_dir) for d in dirs] != [posixpath.normpath(inst.storage_dir)]:
        others = [i.name for i in c.d.instances if i.name != inst.name and i.storage_dir in dirs]
        problems.append(f"{show(value)}, not the inventory's {inst.storage_dir}"
                        + (f": the directory of instance {others[0]} (a clear() or cleaner would wipe both)"
                           if others else ""))
    if problems:
        return res(FAIL, expected, f"{show(value)} ({where}): " + "; ".join(problems), fix)
    return res(PASS, expected, f"{show(value)} ({where})")


@instance_check("storage_dir")
def engine_storage_dir(c: Context, inst: Instance) -> Result:
    if not inst.storage_dir:
        return _no_tier(c)
    user = c.d.engine_user
    expected = f"{inst.storage_dir} exists, on the KV mount {c.d.mount_point}, writable by {user}"
    e = c.storage_entry(inst.name)
    if e.get("error"):
        return res(FAIL, expected, f"the collector could not check it: {show(e['error'], 200)}",
                   "a hung stat() means the mount hung (see mount.io_probe); otherwise collect again")
    path = e.get("path") if isinstance(e.get("path"), str) else inst.storage_dir
    if e.get("exists") is not True:
        return res(FAIL, expected, f"{show(path)} does not exist", c.deploy(TAGS))
    if e.get("is_link") is True:
        return res(FAIL, expected, f"{show(path)} is a symbolic link, not a directory: on a shared volume a link can "
                                   "point root's work at anyone's files", f"remove the link, then {c.deploy(TAGS)}")
    if e.get("is_dir") is False:
        return res(FAIL, expected, f"{show(path)} is not a directory", c.deploy(TAGS))
    where = f"{show(e.get('fstype', '?'), 20)} {show(e.get('device', '?'), 80)}"
    on_mount = e.get("is_on_kv_mount")
    if not isinstance(on_mount, bool):  # older collectors: judge from mountinfo
        on_mount = c.on_kv_mount(path)
    if not on_mount:
        return res(FAIL, expected, f"{show(path)} is on {where} (mounted on {show(e.get('mount', '?'), 80)}), not on "
                                   f"the KV mount: it was created while {c.d.mount_point} was not mounted",
                   f"stop {inst.unit}, mount {c.d.mount_point} (`systemctl start {c.d.mount_unit}`), then "
                   f"{c.deploy(TAGS)}")
    owner = f"{show(e.get('owner', '?'), 32)}:{show(e.get('group', '?'), 32)} {show(e.get('mode', '?'), 8)}"
    if e.get("writable_by_service_user") is not True:
        return res(FAIL, expected, f"{show(path)} ({owner}) is not writable by {user}: every store of the tier "
                                   "fails while /health stays green",
                   f"`chown {user}:{user} {path} && chmod 0750 {path}` (with root squash on the export, create it "
                   f"as {user}), or {c.deploy(TAGS)}")
    figures, warning = capacity(c, inst)
    found = f"{show(path)} ({owner}) on {where}" + (f"; {figures}" if figures else "")
    return res(WARN if warning else PASS, expected, found, warning)


# ---------------------------------------------------------------------------- capacity

FULL_PERCENT = 95  # of the KV volume's space or inodes: warn (stores fail once it is full)


def human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024:
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} PiB"


def _ints(d: dict, *keys: str) -> tuple[int, ...] | None:
    values = tuple(d.get(k) for k in keys)
    return values if all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values) else None


def volume_usage(c: Context) -> dict | None:
    """The KV volume's figures (storage_dirs.json, mount_point.usage): size_bytes, used_bytes,
    inodes, inodes_used; None when not captured (an older collector)."""
    usage = c.storage_entry().get("usage")
    if usage is None:
        return None
    if not isinstance(usage, dict):
        raise FileProblem(bf.STORAGE_DIRS, "mount_point.usage is not an object")
    return usage


def dir_usage(c: Context, inst: Instance) -> dict | None:
    """The instance directory's size (instances.<name>.usage): bytes, files, complete."""
    usage = c.storage_entry(inst.name).get("usage")
    if usage is not None and not isinstance(usage, dict):
        raise FileProblem(bf.STORAGE_DIRS, f"instances.{inst.name}.usage is not an object")
    return usage


def capacity(c: Context, inst: Instance) -> tuple[str, str]:
    """The capacity figures as text ("" when not captured: an older collector), and the fix
    when the volume is nearly full or could not be measured ("" otherwise)."""
    vol, d = volume_usage(c), dir_usage(c, inst)
    if vol is None and d is None:
        return "", ""
    found, full, unmeasured = [], [], []
    v = _ints(vol or {}, "size_bytes", "used_bytes", "inodes", "inodes_used")
    if v:
        size, used, inodes, inodes_used = v
        space_pct = 100 * used / size if size else 0.0
        inode_pct = 100 * inodes_used / inodes if inodes else 0.0
        found.append(f"volume {space_pct:.1f}% of {human_bytes(size)} used, inodes "
                     + (f"{inode_pct:.1f}% of {inodes}" if inodes else "not counted"))
        full += [f"space {space_pct:.1f}%"] if space_pct >= FULL_PERCENT else []
        full += [f"inodes {inode_pct:.1f}%"] if inode_pct >= FULL_PERCENT else []
    else:
        unmeasured.append(f"the volume: {show((vol or {}).get('error', 'no figures'), 200)}")
    n = _ints(d or {}, "bytes", "files")
    if n:
        found.append(f"directory {human_bytes(n[0])} in {n[1]} files"
                     + ("" if (d or {}).get("complete", True) is True else " so far (the walk ran out of time)"))
    else:
        unmeasured.append(f"the directory: {show((d or {}).get('error', 'no figures'), 200)}")
    text = "; ".join(found + [f"could not measure {u}" for u in unmeasured])
    evictor = f"kvprov-evict-{inst.name}"
    if full:
        return text, (f"the KV volume is nearly full ({', '.join(full)}): stores fail once it is full while /health "
                      f"stays green. Where kvprov runs an evictor, read `journalctl -u {evictor}.service` and "
                      f"`systemctl status {evictor}.timer`; lower kvprov_engine_evict_high_percent or set "
                      "kvprov_engine_evict_max_bytes (docs/capacity.md); otherwise grow the volume")
    if unmeasured:
        return text, ("a hung or slow mount? see mount.io_probe, then collect again (a larger --timeout lets a "
                      "huge directory be walked)")
    return text, ""


@instance_check("health")
def engine_health(c: Context, inst: Instance) -> Result:
    expected = f"HTTP /health on port {inst.port} answers 200" + (
        f", the LMCache server's /metrics on {inst.metrics_port} too" if inst.server_unit else "")
    if c.show_unit(inst.unit).get("ActiveState") != "active":
        return res(SKIP, expected, f"service not running (see engine.{inst.name}.state)")
    data = c.b.json_object(bf.HEALTH)
    found, failed = [], []
    for key in [inst.name] + ([f"{inst.name}/server"] if inst.server_unit else []):
        h = data.get(key)
        if not isinstance(h, dict):
            raise FileProblem(bf.HEALTH, f"has no {key!r} entry (an object)")
        url = show(h.get("url") or f"http://127.0.0.1:{inst.port}/health", 100)
        if h.get("ok") is True:
            found.append(f"GET {url}: {show(h.get('status', 200), 10)}")
        else:
            what = h.get("status") if h.get("status") is not None else h.get("error") or "not running"
            failed.append(f"GET {url}: {show(what, 200)}")
    if failed:
        return res(FAIL, expected, "; ".join(failed + found),
                   f"read `journalctl -u {inst.unit} -b -n 200`" + (
                       f" and `journalctl -u {inst.server_unit} -b -n 200`" if inst.server_unit else ""))
    return res(PASS, expected, "; ".join(found))


@instance_check("cache")
def engine_cache(c: Context, inst: Instance) -> Result:
    expected = "the engine's cache counters exposed on /metrics, the KV connector consulted"
    if c.show_unit(inst.unit).get("ActiveState") != "active":
        return res(SKIP, expected, f"service not running (see engine.{inst.name}.state)")
    got = rules(c).cache(c, inst)
    if got is None:
        return res(SKIP, expected, f"{c.d.engine} exposes no cache counters kvprov reads (or they were not "
                                   "collected: `kvprov audit` does not probe)")
    values, problems = got
    figures = ", ".join(f"{k} {v:g}" for k, v in values.items())
    if problems:
        return res(FAIL, expected, "; ".join(problems) + (f" ({figures})" if figures else ""),
                   f"read `journalctl -u {inst.unit} -b -n 200`")
    return res(PASS, expected, figures)
