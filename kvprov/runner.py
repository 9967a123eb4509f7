"""Run kvprov's playbooks through ansible-runner: live progress, a per-host summary, the
failing tasks' messages in plain words, and the run's artifacts kept on disk."""

from __future__ import annotations

import configparser
import difflib
import json
import os
import re
import shlex
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kvprov import ansible_cli, paths, vault
from kvprov.errors import EXIT_USAGE, KvprovError
from kvprov.inventory import limit_patterns, source_list
from kvprov.validate.report import refuse_link, write_file


@dataclass
class HostSummary:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0


@dataclass
class Failure:
    host: str
    task: str
    message: str
    unreachable: bool = False


@dataclass
class RunResult:
    rc: int
    artifacts: Path | None  # None: nothing was run
    hosts: dict[str, HostSummary] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    diffs: list[dict] = field(default_factory=list)
    captured: dict[str, dict] = field(default_factory=dict)  # host -> result of the capture task
    desired: dict[str, dict] = field(default_factory=dict)  # host -> desired state (DESIRED_TASK; kvprov.desired.run)
    seconds: float = 0.0
    listing: str = ""  # what ansible-playbook --list-hosts printed (list_hosts)

    @property
    def unreachable(self) -> list[str]:
        return sorted(h for h, s in self.hosts.items() if s.unreachable)

    @property
    def failed(self) -> list[str]:
        return sorted(h for h, s in self.hosts.items() if s.failed)


# ansible_collections/kvprov/kvprov here is paths.ROOT (a checkout's .collections links to the
# repository root; a wheel carries the collection there): the playbooks' FQCN names
# (kvprov.kvprov.<role>, .<module>) resolve to this kvprov's own collection, ahead of any copy
# installed elsewhere (ansible.cfg says the same for a plain ansible-playbook in a checkout).
COLLECTIONS = paths.collections_dir()


def collections_path(ini: configparser.ConfigParser | None = None, cfg: str | None = None) -> str:
    """This kvprov's collection first, then the user's own (their inventory plugins): from
    ANSIBLE_COLLECTIONS_PATH, else their ansible.cfg's collections_path, else Ansible's default."""
    rest = os.environ.get("ANSIBLE_COLLECTIONS_PATH")
    if rest is None and ini is not None and cfg:
        for key in ("collections_path", "collections_paths"):
            if ini.has_option("defaults", key):  # relative entries are relative to the file, as Ansible reads them
                rest = os.pathsep.join(os.path.join(os.path.dirname(cfg), os.path.expanduser(p))
                                       for p in ini.get("defaults", key).split(os.pathsep) if p)
                break
    return os.pathsep.join([str(COLLECTIONS), rest or "~/.ansible/collections:/usr/share/ansible/collections"])


# What kvprov's runs need where the user's configuration says nothing: (environment variable,
# value, where ansible.cfg would set it). The user's ansible.cfg (found as Ansible finds it,
# from kvprov's working directory) and environment come first; host key checking is never
# turned off here, as ansible-runner would by default (the lab's inventories turn it off for
# the lab's own hosts).
LAYERED = [
    ("ANSIBLE_FORKS", "50", [("defaults", "forks")]),
    ("ANSIBLE_PIPELINING", "True", [("defaults", "pipelining"), ("connection", "pipelining"),
                                    ("ssh_connection", "pipelining")]),
    ("ANSIBLE_SSH_ARGS", "-o ControlMaster=auto -o ControlPersist=120s", [("ssh_connection", "ssh_args")]),
    ("ANSIBLE_PYTHON_INTERPRETER", "auto_silent", [("defaults", "interpreter_python")]),
]
_told: set[str] = set()


def ansible_env(verbose: bool = False, stream=None) -> dict[str, str]:
    """The environment of kvprov's ansible-playbook runs: the user's ansible.cfg (named by
    ANSIBLE_CONFIG, since the runs start elsewhere) with kvprov's necessities layered on top;
    with verbose, each layer is said once."""
    from ansible.config.manager import find_ini_config_file

    cfg = find_ini_config_file()
    ini = configparser.ConfigParser(interpolation=None, strict=False)
    if cfg:
        ini.read(cfg)
    env = {"ANSIBLE_COLLECTIONS_PATH": collections_path(ini, cfg), "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1"}
    said = [f"ansible.cfg: {cfg or 'none found (Ansible defaults)'}",
            f"collections path: kvprov's collection ({COLLECTIONS}) first"]
    if cfg:
        env["ANSIBLE_CONFIG"] = cfg
    # the ansible-playbook of kvprov's own Python (a venv's, not activated): the roles' plugins
    # import kvprov in that process, and must get this kvprov, not another install's
    own = Path(sys.executable).parent
    if (own / "ansible-playbook").exists():
        env["PATH"] = os.pathsep.join([str(own), os.environ.get("PATH", "")])
    # ansible-runner turns host key checking off unless told: say what Ansible itself would do
    env["ANSIBLE_HOST_KEY_CHECKING"] = os.environ.get("ANSIBLE_HOST_KEY_CHECKING") or next(
        (ini.get(section, "host_key_checking") for section in ("defaults", "ssh_connection")
         if ini.has_option(section, "host_key_checking")), "True")
    for name, value, keys in LAYERED:
        if name not in os.environ and not any(ini.has_option(section, key) for section, key in keys):
            env[name] = value
            said.append(f"{name}={value} (not set in your configuration)")
    # ansible-runner adds its own callback directory through ANSIBLE_CALLBACK_PLUGINS, which would hide
    # the configuration's callback_plugins (ARA, Splunk...): pass the configuration's on, the runner's after it
    if "ANSIBLE_CALLBACK_PLUGINS" not in os.environ and ini.has_option("defaults", "callback_plugins"):
        base = os.path.dirname(cfg)
        env["ANSIBLE_CALLBACK_PLUGINS"] = os.pathsep.join(
            os.path.join(base, os.path.expanduser(p.strip())) for p in ini.get("defaults", "callback_plugins").split(os.pathsep)
            if p.strip())
        said.append(f"your callback_plugins ({env['ANSIBLE_CALLBACK_PLUGINS']}) kept beside ansible-runner's")
    if user_fact_cache(ini):
        said.append("your fact cache kept (ansible-runner's own jsonfile cache not used)")
    if verbose and said[0] not in _told:
        _told.add(said[0])
        print("kvprov: " + "; ".join(said), file=stream or sys.stderr)
    return env


def user_fact_cache(ini: configparser.ConfigParser | None = None) -> bool:
    """Whether the user's configuration names a fact cache (fact_caching, ANSIBLE_CACHE_PLUGIN), which
    ansible-runner would otherwise replace with a jsonfile cache in each run's artifacts."""
    if ini is None:
        from ansible.config.manager import find_ini_config_file

        ini = configparser.ConfigParser(interpolation=None, strict=False)
        cfg = find_ini_config_file()
        if cfg:
            ini.read(cfg)
    return "ANSIBLE_CACHE_PLUGIN" in os.environ or ini.has_option("defaults", "fact_caching")


def runs_dir() -> Path:
    return Path(os.environ.get("KVPROV_RUNS_DIR", paths.state_dir() / "runs"))


RUN_NAME = re.compile(r"\d{8}-\d{6}-[a-z-]+-\d+")  # what run() names its directories
KEEP_RUNS, KEEP_SECONDS = 50, 86400


def prune_runs(directory: Path, keep: int = KEEP_RUNS, now: float | None = None) -> list[Path]:
    """Remove kvprov's own run directories beyond the newest `keep`, but none younger than a day
    (a run still going may be older than many newer ones). A fleet's artifacts are tens of MB a
    run. Removes nothing else: only directories named as run() names them, and no link."""
    import shutil

    def age(d: Path) -> float:  # another kvprov process may be pruning the same directory: gone is not old
        try:
            return now - d.stat().st_mtime
        except FileNotFoundError:
            return 0.0

    now = time.time() if now is None else now
    runs = sorted((d for d in directory.iterdir() if RUN_NAME.fullmatch(d.name) and not d.is_symlink() and d.is_dir()),
                  key=lambda d: d.name, reverse=True)
    old = [d for d in runs[keep:] if age(d) > KEEP_SECONDS]
    for d in old:
        shutil.rmtree(d, ignore_errors=True)
    return old


def _message(res: dict) -> str:
    """The most useful words from a failed or unreachable result."""
    results = res.get("results")
    if isinstance(results, list) and any(isinstance(r, dict) and r.get("failed") for r in results):
        return "; ".join(_message(r) for r in results if isinstance(r, dict) and r.get("failed"))
    msg = res.get("msg") or ""
    for key in ("stderr", "module_stderr", "stdout"):
        if not msg and res.get(key):
            msg = res[key]
    if isinstance(msg, list):
        msg = "; ".join(map(str, msg))
    return " ".join(str(msg).split())


class _Printer:
    """Progress for people: each task once, then only what changed or failed per host."""

    def __init__(self, stream, result: RunResult, verbose: bool, capture: str | None = None):
        self.stream, self.result, self.verbose, self.capture = stream, result, verbose, capture
        self.t0 = time.monotonic()

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.t0:6.1f}s] {text}", file=self.stream, flush=True)

    def __call__(self, event: dict) -> bool:
        kind = event.get("event", "")
        data = event.get("event_data", {})
        host = data.get("host", "")
        task = data.get("task", "")
        if kind == "playbook_on_task_start":
            self.say(f"TASK {data.get('role', '') + ' : ' if data.get('role') else ''}{task}")
        elif kind == "runner_on_ok":
            if self.capture and task == self.capture:
                self.result.captured[host] = data.get("res", {})
            if task == DESIRED_TASK and "kvprov_desired" in (data.get("res", {}).get("ansible_facts") or {}):
                self.result.desired[host] = data["res"]["ansible_facts"]["kvprov_desired"]
            if data.get("res", {}).get("changed"):
                self.say(f"  changed: {host}")
            for warning in data.get("res", {}).get("warnings") or []:
                self.say(f"  warning: {host}: {' '.join(str(warning).split())}")
        elif kind == "runner_on_failed" and not data.get("ignore_errors"):
            failure = Failure(host, task, _message(data.get("res", {})))
            self.result.failures.append(failure)
            self.say(f"  FAILED:  {host}: {failure.message}")
        elif kind == "runner_on_unreachable":
            failure = Failure(host, task, _message(data.get("res", {})), unreachable=True)
            self.result.failures.append(failure)
            self.say(f"  UNREACHABLE: {host}: {failure.message}")
        elif kind == "runner_on_file_diff":
            self.result.diffs.append({"host": host, "task": task, "diff": data.get("diff")})
        elif kind == "playbook_on_stats":
            for key, attr in (("ok", "ok"), ("changed", "changed"), ("failures", "failed"),
                              ("dark", "unreachable"), ("skipped", "skipped")):
                for h, n in (data.get(key) or {}).items():
                    setattr(self.result.hosts.setdefault(h, HostSummary()), attr, n)
        return True  # keep the event in the artifacts


# The extra var that names the hosts' desired states written ahead (kvprov.desired.run) for a
# playbook that imports tasks/desired.yml for each host otherwise (collect.yml); the task of
# tasks/desired.yml whose result is a host's desired state (RunResult.desired).
DESIRED_DIR = "kvprov_desired_dir"
DESIRED_TASK = "Compute the desired state"


def run(playbook: str, inventory: str | Path | list[str], *, name: str, extravars: dict | None = None,
        limit: str | None = None, tags: str | None = None, skip_tags: str | None = None, check: bool = False,
        diff: bool = False, stream=None, verbose: bool = False, capture: str | None = None) -> RunResult:
    """Run a playbook on the inventory sources (each passed as -i, in order); `capture` names
    a task whose per-host results are kept in `captured`."""
    return _run(playbook, inventory, name=name, extravars=extravars, limit=limit, tags=tags, skip_tags=skip_tags,
                check=check, diff=diff, stream=stream, verbose=verbose, capture=capture)


# ansible-playbook's options that read the playbooks and the inventory and run nothing
LISTINGS = ("--list-hosts", "--list-tasks", "--list-tags", "--syntax-check")


def list_hosts(playbooks: list[str], inventory: str | Path | list[str], *, name: str, extravars: dict | None = None,
               limit: str | None = None, tags: str | None = None, skip_tags: str | None = None,
               listing: str = "--list-hosts") -> str:
    """What `ansible-playbook --list-hosts` (or another of LISTINGS) prints for each playbook,
    with every option a run of it would get: the plays, their patterns and the hosts each would
    touch (after --limit); their tasks; their tags; or that their syntax is sound. It reads the
    inventory and the playbooks only; no task runs and no host is contacted."""
    out = []
    for playbook in playbooks:
        result = _run(playbook, inventory, name=name, extravars=extravars, limit=limit, tags=tags, skip_tags=skip_tags,
                      check=False, diff=False, stream=None, verbose=False, capture=None, listing=listing)
        if result.rc != 0:
            raise KvprovError(f"ansible-playbook {listing} {playbook} failed: "
                              f"{result.failures[0].message if result.failures else f'rc {result.rc}'}", EXIT_USAGE)
        out.append(result.listing)
    return "\n".join(out)


def add_list_hosts_arg(parser, *, all_listings: bool = False) -> None:
    """--list-hosts; with all_listings (deploy, whose playbook is the user's to inspect) the
    other LISTINGS too, one of them at a time."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--list-hosts", action="store_true",
                       help="print the hosts the run would touch (after --limit), as ansible-playbook --list-hosts "
                            "prints them, and exit 0: no host is contacted")
    if all_listings:
        group.add_argument("--list-tasks", action="store_true",
                           help="print the tasks the run would run (after --tags/--skip-tags), as ansible-playbook "
                                "--list-tasks does, and exit 0: no host is contacted")
        group.add_argument("--list-tags", action="store_true",
                           help="print the tags of the playbook's tasks, as ansible-playbook --list-tags does, and "
                                "exit 0: no host is contacted")
        group.add_argument("--syntax-check", action="store_true",
                           help="check the playbook's syntax with ansible-playbook --syntax-check and exit 0 "
                                "(2 when it fails): no host is contacted")


def chosen_listing(args) -> str | None:
    """The one of LISTINGS given on the command line, or None."""
    return next((o for o in LISTINGS if getattr(args, o[2:].replace("-", "_"), False)), None)


def print_list_hosts(args, playbooks: list[str], inventory: str | Path | list[str], *, name: str, **kw) -> int:
    """A command's --list-hosts (or another of LISTINGS): ansible-playbook's output for its
    playbooks on stdout (exit 0); nothing else is written (no --json: there is no result)."""
    listing = chosen_listing(args) or "--list-hosts"
    for option in ("json", "junit", "prom"):
        if getattr(args, option, None):
            raise KvprovError(f"{listing} prints what the run would do and runs nothing: leave out --{option}",
                              EXIT_USAGE)
    extra = {} if listing == "--list-hosts" else {"listing": listing}
    sys.stdout.write(list_hosts(playbooks, inventory, name=name, limit=getattr(args, "limit", None), **kw, **extra))
    return 0


def _run(playbook: str, inventory: str | Path | list[str], *, name: str, extravars: dict | None, limit: str | None,
         tags: str | None, check: bool, diff: bool, stream, verbose: bool, capture: str | None,
         skip_tags: str | None = None, listing: str = "") -> RunResult:
    import ansible_runner

    stream = stream or sys.stderr
    limit = limit_patterns(limit)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    private = runs_dir() / f"{stamp}-{name}-{os.getpid()}"
    private.mkdir(parents=True, exist_ok=True)
    prune_runs(private.parent, int(os.environ.get("KVPROV_RUNS_KEEP", KEEP_RUNS)))
    result = RunResult(rc=-1, artifacts=private)
    printer = _Printer(stream, result, verbose, capture)
    cmdline = shlex.join([*(["--check"] if check else []), *(["--diff"] if diff else []),
                          *([listing] if listing else []), *vault.playbook_args(), *ansible_cli.playbook_args()])
    t0 = time.monotonic()
    r = ansible_runner.run(
        private_data_dir=str(private),
        project_dir=str(paths.playbooks_dir()),
        playbook=str(paths.playbooks_dir() / playbook),
        inventory=[str(Path(s).resolve()) if os.path.exists(s) else s for s in source_list(inventory)],
        extravars=extravars or {},
        limit=limit,
        tags=tags,
        skip_tags=skip_tags,
        cmdline=cmdline or None,
        envvars=ansible_env(verbose or ansible_cli.verbose()),
        fact_cache_type=None if user_fact_cache() else "jsonfile",
        event_handler=printer,
        quiet=True,
    )
    result.rc = r.rc
    result.seconds = time.monotonic() - t0
    scrub_environment(private)
    if listing:
        result.listing = "".join(p.read_text(errors="replace") for p in (private / "artifacts").glob("*/stdout"))
    if r.rc != 0 and not result.failures:  # ansible-playbook itself stopped (syntax, crash, timeout)
        tail = (private / "artifacts").glob("*/stdout")
        text = "".join(p.read_text(errors="replace")[-3000:] for p in tail)
        result.failures.append(Failure("-", "ansible-playbook", f"run {r.status}: {text.strip()}"))
    return result


# Names of the controller's environment whose values are credentials though they name no key, token or
# password: personal access tokens, data source names, auth strings, cookies, sessions.
_CREDENTIAL_ENV = re.compile(r"(?:^|_)(?:PAT|DSN|AUTH|AUTHORIZATION|COOKIE|SESSION|BEARER)(?:_|$)", re.I)


def scrub_environment(private: Path) -> None:
    """What ansible-runner keeps of a run never holds a controller secret (#38): in each run's
    artifacts/*/command (the controller's whole environment) every value whose name is a secret's
    (kvprov.redact: *TOKEN*, *KEY*, *PASS*..., and *_PAT, *_DSN, *_AUTH...) is replaced, a URL's
    password in any value too; in it and in the job events, every value Vault decrypted for this
    command is shown as <vaulted>."""
    from kvprov.redact import REDACTED, SECRET_NAME, redact_line

    secret = re.compile(SECRET_NAME, re.I)

    def scrubbed(name: str, value):
        if secret.fullmatch(name) or _CREDENTIAL_ENV.search(name):
            return REDACTED
        return vault.hide(redact_line(value)) if isinstance(value, str) else value

    for path in (private / "artifacts").glob("*/command"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        env = data.get("env") or {}
        clean = {k: scrubbed(k, v) for k, v in env.items()}
        if clean != env:
            data["env"] = clean
            path.write_text(json.dumps(data))
    if vault.has_secrets():
        for path in (private / "artifacts").glob("*/job_events/*.json"):
            try:
                text = path.read_text()
            except OSError:
                continue
            hidden = vault.hide(text)
            if hidden != text:
                try:
                    json.loads(hidden)
                except ValueError:  # a value so short it was hidden inside the JSON's own syntax
                    hidden = json.dumps({"event": "removed by kvprov: it held a value Vault decrypted"})
                path.write_text(hidden)


def write_json(result: RunResult, path: str | Path, clean: list[str] = (), extra: dict | None = None) -> None:
    """The run's summary (deploy --json FILE, or - for stdout); `clean`: hosts not run because
    the audit found them clean (zero counts); `extra`: the command's own fields. It names hosts
    and their failures: written 0600 through a new file in FILE's directory renamed over it
    (report.write_file), never through a link."""
    if str(path) != "-":
        refuse_link(path, "--json")
    hosts = {**{h: HostSummary() for h in clean}, **result.hosts}
    data = {"rc": result.rc, "seconds": round(result.seconds, 1),
            "artifacts": str(result.artifacts) if result.artifacts else None,
            "hosts": {h: asdict(s) for h, s in sorted(hosts.items())}, "clean": sorted(clean),
            "failures": [asdict(f) for f in result.failures], "diffs": result.diffs, **(extra or {})}
    text = json.dumps(data, indent=2) + "\n"
    if str(path) == "-":
        sys.stdout.write(text)
    else:
        write_file(str(path), text)


def format_diffs(result: RunResult) -> str:
    """The file changes Ansible reported (check mode shows what it would write), as unified
    diffs under a `HOST: TASK` line each."""
    out = []
    for entry in result.diffs:
        diffs = entry["diff"] if isinstance(entry["diff"], list) else [entry["diff"]]
        for d in diffs:
            if not isinstance(d, dict):
                continue
            if "prepared" in d:
                text = str(d["prepared"])
            elif isinstance(d.get("before"), str) and isinstance(d.get("after"), str):
                text = "".join(difflib.unified_diff(
                    d["before"].splitlines(keepends=True), d["after"].splitlines(keepends=True),
                    f"{d.get('before_header') or 'new file'} (on the host)", "what deploy writes"))
            else:
                text = "".join(f"  {k}: {d.get('before', {}).get(k) if isinstance(d.get('before'), dict) else '?'}"
                               f" -> {v}\n" for k, v in (d.get("after") or {}).items()) if isinstance(d.get("after"), dict) else ""
            if text.strip():
                out.append(f"--- {entry['host']}: {entry['task']}\n{text.rstrip()}\n")
    return "\n".join(out)


# What differs between hosts failing for the same reason: addresses, ports, times, the host's name.
_VARIABLE = [(re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}\b"), "ADDR"),
             (re.compile(r"(?<![\w:])(?:[0-9a-fA-F]{0,4}:){2,7}[0-9a-fA-F]{0,4}(?![\w:])"), "ADDR"),
             (re.compile(r"\bport \d+"), "port N"),
             (re.compile(r"(?<=ADDR|HOST):\d+\b"), ":N")]


def normalise(message: str, hosts: list[str]) -> str:
    """The message with host names, addresses and ports replaced: the same error on different
    hosts reads the same."""
    for name in sorted(hosts, key=len, reverse=True):
        message = re.sub(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", "HOST", message)
    for pattern, word in _VARIABLE:
        message = pattern.sub(word, message)
    return message


def failure_groups(result: RunResult) -> list[tuple[str, list[str], str]]:
    """(what, hosts, one original message) per reason: unreachable, or a task that failed, with
    the same normalised message; the largest group first."""
    names = sorted({*result.hosts, *(f.host for f in result.failures)})
    groups: dict[tuple[str, str], tuple[list[str], str]] = {}
    for f in sorted(result.failures, key=lambda f: f.host):
        what = "unreachable" if f.unreachable else f"task '{f.task}' failed"
        hosts, _ = groups.setdefault((what, normalise(f.message, names)), ([], f.message))
        if f.host not in hosts:
            hosts.append(f.host)
    return sorted(((what, hosts, example) for (what, _), (hosts, example) in groups.items()),
                  key=lambda g: (-len(g[1]), g[0]))


def shorten(hosts: list[str], shown: int = 8) -> str:
    """The first `shown` host names, and how many more."""
    return ", ".join(hosts[:shown]) + (f" (+{len(hosts) - shown} more)" if len(hosts) > shown else "")


def format_failures(result: RunResult, shown: int = 8) -> str:
    """One line per reason, naming the hosts (the first `shown` of them); every host's own message
    is in the run's artifacts and in `--json`."""
    lines = []
    for what, hosts, example in failure_groups(result):
        if hosts == ["-"]:  # ansible-playbook itself stopped
            lines.append(f"{what}: {example}")
            continue
        lines.append(f"{what} ({len(hosts)} host{'s' if len(hosts) > 1 else ''}): {example} \u2014 "
                     f"{shorten(hosts, shown)}")
    return "\n".join(lines)


def retry_hosts(result: RunResult) -> list[str]:
    return sorted({*result.failed, *result.unreachable, *(f.host for f in result.failures)} - {"-"})


def write_retry(result: RunResult, command: str) -> Path | None:
    """As Ansible's retry files: the failed and unreachable hosts, one a line, in
    $XDG_STATE_HOME/kvprov/retry/COMMAND.retry (`--limit @FILE` reads it); None when no host failed."""
    hosts = retry_hosts(result)
    if not hosts:
        return None
    path = paths.state_dir() / "retry" / f"{command}.retry"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{h}\n" for h in hosts))
    return path


def print_summary(result: RunResult, stream=None, rerun: list[str] | None = None) -> None:
    """The per-host table, the failures grouped by reason and, given the command's words
    (`rerun`, e.g. deploy INVENTORY), a retry file with the failed hosts and how to rerun them."""
    stream = stream or sys.stdout
    if result.hosts:
        width = max(12, *(len(h) for h in result.hosts))
        print(f"\n{'HOST':{width}}  {'ok':>5} {'changed':>7} {'failed':>6} {'unreachable':>11} {'skipped':>7}",
              file=stream)
        for h in sorted(result.hosts):
            s = result.hosts[h]
            print(f"{h:{width}}  {s.ok:5} {s.changed:7} {s.failed:6} {s.unreachable:11} {s.skipped:7}", file=stream)
    if result.failures:
        print(f"\n{format_failures(result)}", file=stream)
    retry = write_retry(result, rerun[0]) if rerun else None
    if retry:
        print(f"\nrerun the failed hosts: kvprov {shlex.join([*rerun, '--limit', f'@{retry}'])}", file=stream)
    print(f"\nartifacts: {result.artifacts}  ({result.seconds:.1f}s)", file=stream)
