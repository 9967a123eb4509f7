"""Exit codes under partial failure (#41 item 4): every command that contacts hosts x every
kind of outcome, in one table. Each cell runs the real CLI in this process (kvprov.cli.main)
and checks the exit code against README's "Exit codes" table and, in every report the
command offers (console, --json, --junit, --prom, collect's bundles, the retry file), the
set of hosts and which of them are reported as failed: an unreachable or failing host is
never dropped from any report.

What is faked, and why (each fake is labelled FAKE below): only what would run on the hosts.
Every command reaches its hosts through one function, kvprov.runner.run (ansible-runner
running a playbook: collect.yml, site.yml, bench.yml, storage.yml); the fake answers for
each host of the run as the real runner does from Ansible's events: a RunResult with the
per-host summary (HostSummary), the failures (Failure, unreachable or a failed task), the
capture task's results (collect.yml: the collector's files, from the fixture bundle
tests/fixtures/bundles/local_c1 renamed to the host; bench.yml: kvprov_bench_report;
storage.yml: knfsd's files), the desired states and, with --diff, the file diffs. It is
stateful as hosts are: a host converged by a (non-check) site.yml run is clean in the next
capture. The lab tests exercise the same paths against real unreachable and failing hosts
(tests/lab/test_2_deploy.py, test_4_audit.py, test_6_faults.py), but a matrix of 64 real
deploys, audits and benches would not fit CI's time. Everything else is real: the
inventories (written in tmp_path, parsed and checked by kvprov check), the commands' logic,
the audit and validate checks on the captures, the bench judgement, the storage rules, the
report writers, the lock, the retry files.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from kvprov import cli, desired, runner
from kvprov.errors import (
    EXIT_CHECKS_FAILED,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
)
from kvprov.validate.collect import CAPTURE_TASK
from tests.conftest import FIXTURES
from tests.unit.test_storage_knfsd import EXPORTFS, PORTLIST, STATFS, VERSIONS_LAB

OK, FAILED, USAGE, UNREACHABLE, INTERNAL = EXIT_OK, EXIT_CHECKS_FAILED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_INTERNAL

# ---------------------------------------------------------------------------- the table

# A scenario: what state each host is in (the first host is always good). "drift": the
# host's configuration differs from the desired state (a hand-edited NIXL TOML; on a storage
# system, NFS 4.1 switched off: a failed check); "failing": every task of the host fails (the
# capture, the deploy, the acceptance test, the storage read), the host answers; "down": it
# does not answer (unreachable).
SCENARIOS = {
    "all good": {},
    "drift": {1: "drift"},
    "one failing": {1: "failing"},
    "one unreachable": {2: "down"},
    "unreachable and drift": {1: "drift", 2: "down"},
    "unreachable and failing": {1: "failing", 2: "down"},
    "bad inventory": "bad inventory",  # kvprov check finds an error: nothing may run
    "internal error": "internal error",  # the host boundary raises a bug (RuntimeError)
}

# README "Exit codes": 0 success; 1 a check failed / threshold missed / drift found / a deploy
# task failed; 2 usage or inventory error (nothing touched); 3 unreachable hosts, winning
# over 1; 7 internal error. Notes on the cells that need one:
#  a) deploy and audit --fix converge the drift: the run succeeds (0).
#  b) deploy --check exits 0 when it would change a host: the diffs are its answer (Ansible's
#     check mode, and tests/lab/test_2_deploy.py asserts 0 on fresh hosts); `kvprov audit`
#     is the command whose exit code reports drift (README says so under "Exit codes").
#  c) collect and bench judge no configuration: a drifted host is captured / benched like a
#     good one. Storage "drift" is a failed check of the storage system (NFS 4.1 off).
#  d) audit: a host whose collector failed could not be audited: 3, as an unreachable one
#     (audit --help; README's row 3) — its drift is unknown, and --fix would not touch it.
# No cell is n/a: every command has a defined outcome in every scenario (c); what a command
# does not offer is a report (COMMANDS below).
EXPECTED = {  # all good, drift, one failing, one unreachable, unr.+drift, unr.+failing, bad inventory, internal
    "deploy":         (OK, OK,      FAILED,      UNREACHABLE, UNREACHABLE, UNREACHABLE, USAGE, INTERNAL),  # a
    "deploy --check": (OK, OK,      FAILED,      UNREACHABLE, UNREACHABLE, UNREACHABLE, USAGE, INTERNAL),  # b
    "validate":       (OK, FAILED,  FAILED,      UNREACHABLE, UNREACHABLE, UNREACHABLE, USAGE, INTERNAL),
    "audit":          (OK, FAILED,  UNREACHABLE, UNREACHABLE, UNREACHABLE, UNREACHABLE, USAGE, INTERNAL),  # d
    "audit --fix":    (OK, OK,      UNREACHABLE, UNREACHABLE, UNREACHABLE, UNREACHABLE, USAGE, INTERNAL),  # a, d
    "collect":        (OK, OK,      FAILED,      UNREACHABLE, UNREACHABLE, UNREACHABLE, USAGE, INTERNAL),  # c
    "bench":          (OK, OK,      FAILED,      UNREACHABLE, UNREACHABLE, UNREACHABLE, USAGE, INTERNAL),  # c
    "storage check":  (OK, FAILED,  FAILED,      UNREACHABLE, UNREACHABLE, UNREACHABLE, USAGE, INTERNAL),  # c
}

# The hosts a command reports as failed: failing and unreachable ones always; drifted ones
# where the command judges drift and does not fix it.
JUDGES_DRIFT = {"validate", "audit", "storage check"}

# The reports each command offers: the option that asks for it, or "n/a: why" where the
# command has none (test_the_report_options_are_those_each_command_offers holds this against
# each command's --help). The console (stdout and stderr) is every command's. "out": collect's
# DIR/<host>/ bundles. "retry": the retry file's name, as runner.print_summary writes it
# ($XDG_STATE_HOME/kvprov/retry/NAME.retry).
NA = "n/a: "


@dataclass
class Command:
    argv: list[str]
    json: str
    junit: str
    prom: str
    out: str
    retry: str
    storage: bool = False  # its hosts are the storage systems (group kv_storage), not the GPU nodes


def offered(option: str) -> bool:
    return not option.startswith(NA)


NO_JUNIT, NO_PROM, NO_OUT = NA + "no --junit option", NA + "no --prom option (audit's only)", NA + "no --out"
JUDGES = NA + "a judging command keeps no retry file: rerun it whole"
COMMANDS = {
    "deploy": Command(["deploy"], "--json", NO_JUNIT, NO_PROM, NO_OUT, "deploy"),
    "deploy --check": Command(["deploy", "--check"], "--json", NO_JUNIT, NO_PROM, NO_OUT, "deploy"),
    "validate": Command(["validate"], "--json", "--junit", NO_PROM, NO_OUT, JUDGES),
    "audit": Command(["audit"], "--json", "--junit", "--prom", NO_OUT, JUDGES),
    "audit --fix": Command(["audit", "--fix"], "--json", "--junit", "--prom", NO_OUT,
                           NA + "written only when the deploy it runs fails, which no scenario here makes happen"),
    "collect": Command(["collect"], "--json", NO_JUNIT, NO_PROM, "--out", "collect"),
    "bench": Command(["bench"], "--json", "--junit", NO_PROM, NO_OUT, JUDGES),
    "storage check": Command(["storage", "check"], "--json", "--junit", NO_PROM, NO_OUT, JUDGES, storage=True),
}

GPU = ["c1", "c2", "c3"]
NFS = ["nfs1", "nfs2", "nfs3"]


# ---------------------------------------------------------------------------- inventories

def gpu_inventory(path: Path, bad: bool = False) -> Path:
    """Three GPU nodes on the local storage profile, like the lab container local_c1 was captured on."""
    hosts = {h: {"ansible_host": "127.0.0.1", "ansible_port": 2201 + i} for i, h in enumerate(GPU)}
    if bad:
        hosts["c2"]["kvprov_storage_profile"] = "no_such_profile"
    path.write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_user": "root", "ansible_python_interpreter": "/usr/bin/python3"},
        "children": {"gpu_nodes": {
            "vars": {"kvprov_storage_profile": "local", "kvprov_storage_pnfs_layout": "none",
                     "kvprov_storage_mount_point": "/srv/kvcache", "kvprov_engine_install": False,
                     "kvprov_nixl_plugins": {"posix": {"active": True, "use_aio": False}},
                     "kvprov_bench_min_write_gbps": 0.005, "kvprov_bench_min_read_gbps": 0.005},
            "hosts": hosts}}}}))
    return path


def storage_inventory(path: Path, bad: bool = False) -> Path:
    """Three Linux NFS servers, each serving /kv to one GPU node over RDMA."""
    gpus = {f"g{i}": {"ansible_host": "127.0.0.1", "ansible_port": 2210 + i, "kvprov_storage_server": f"10.99.{i}.1"}
            for i in (1, 2, 3)}
    if bad:
        gpus["g2"]["kvprov_storage_profile"] = "no_such_profile"
    nfs = {f"nfs{i}": {"ansible_host": "127.0.0.1", "ansible_port": 2220 + i,
                       "kvprov_storage_data_addresses": [f"10.99.{i}.1"]} for i in (1, 2, 3)}
    path.write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_user": "root", "ansible_python_interpreter": "/usr/bin/python3"},
        "children": {"gpu_nodes": {"vars": {"kvprov_storage_export": "/kv"}, "hosts": gpus},
                     "kv_storage": {"vars": {"kvprov_storage_system": "linux"}, "hosts": nfs}}}}))
    return path


# ---------------------------------------------------------------------------- the fake hosts

BUNDLE = FIXTURES / "bundles/local_c1"
TOML = "files/etc/kvprov/nixl_backend_config.toml"
MiB = 1 << 20


def collector_answer(host: str, drifted: bool) -> tuple[dict, dict]:
    """collect.yml's capture task result for a host (the collector's files) and its desired
    state: the fixture bundle captured on the lab's container, as if captured on `host`."""
    files = {str(p.relative_to(BUNDLE)): p.read_text() for p in BUNDLE.rglob("*") if p.is_file()}
    desired = {**json.loads(files.pop("desired.json")), "host": host}
    files["collect.json"] = json.dumps({**json.loads(files["collect.json"]), "host": host})
    if drifted:  # a hand edit: no plugin active any more (audit: the file differs; validate: nixl.toml fails)
        files[TOML] = files[TOML].replace("active = true", "active = false")
    return {"changed": False, "files": files}, desired


def bench_report() -> dict:
    """bench.yml's kvprov_bench_report of a host whose test ran (thresholds met)."""
    def phase(gbps: float) -> dict:
        nbytes = 16 * 18 * MiB
        return {"files": 16, "bytes": nbytes, "seconds": nbytes / gbps / 1e9, "gbps": gbps,
                "lat_ms": {"p50": 90.1, "p90": 120.0, "p99": 150.2, "max": 151.0}}
    result = {"ok": True, "backend": "POSIX", "mem": "DRAM", "file_bytes": 18 * MiB, "concurrency": 8,
              "direct": True, "start": 1000.0, "write": phase(0.5), "read": phase(0.8), "verified": True}
    return {"result": result, "rc": 0, "stderr": "", "min_write_gbps": 0.005, "min_read_gbps": 0.005}


def knfsd_state(drifted: bool) -> dict:
    """storage.yml's capture of a Linux NFS server (drifted: NFS 4.1 switched off)."""
    def b64(text: str) -> dict:
        return {"content": base64.b64encode(text.encode()).decode()}
    versions = VERSIONS_LAB.replace("+4.1", "-4.1") if drifted else VERSIONS_LAB
    return {"ansible_facts": {"kvprov_storage_state": {
        "versions": b64(versions), "portlist": b64(PORTLIST), "exports": {"rc": 0, "stdout": EXPORTFS},
        "statfs": [{"item": "/kv", "rc": 0, "stdout": STATFS}]}}}


FAILING_TASK = {"collect.yml": CAPTURE_TASK, "site.yml": "Mount the KV-cache volume",
                "bench.yml": "Run the acceptance test", "storage.yml": "Read /proc/fs/nfsd/versions"}


class Hosts:
    """FAKE: the hosts, as kvprov.runner.run would find them through ansible-runner. Each run
    answers for the hosts of its --limit (all GPU nodes without one) by their state."""

    def __init__(self, inventory: Path, states: dict[str, str], runs: Path):
        self.inventory, self.states, self.runs = str(inventory), states, runs
        self.calls: list[tuple[str, str | None, bool]] = []  # (playbook, limit, check)
        self.problems: list[str] = []  # what the fake was asked that a real run would not be
        self.crash = False

    def run(self, playbook, inventory, *, name, extravars=None, limit=None, tags=None, skip_tags=None, check=False,
            diff=False, stream=None, verbose=False, capture=None):
        self.calls.append((playbook, limit, check))
        if self.crash:  # FAKE: a bug below the command (e.g. in the event handler)
            raise RuntimeError("FAKE: the event handler met an event it did not expect")
        if runner.source_list(inventory) != [self.inventory]:
            self.problems.append(f"{playbook}: inventory {inventory!r}, not {self.inventory}")
        if playbook not in FAILING_TASK:
            self.problems.append(f"unexpected playbook {playbook}")
        targets = limit.split(",") if limit else [h for h in GPU if h in self.states]
        if playbook == "storage.yml" and not limit:
            self.problems.append("storage.yml without --limit")
        artifacts = self.runs / f"{name}-{len(self.calls)}"
        artifacts.mkdir(parents=True)
        result = runner.RunResult(rc=0, artifacts=artifacts)
        for host in targets:
            state = self.states.get(host)
            if state in (None, "not a target"):
                self.problems.append(f"{playbook}: --limit names {host}, not a host of this run")
                continue
            if state == "down":
                result.hosts[host] = runner.HostSummary(unreachable=1)
                result.failures.append(runner.Failure(host, "Gathering Facts", "Failed to connect to the host via "
                                                      f"ssh: ssh: connect to host 127.0.0.1 port 22{host[-1]}: "
                                                      "Connection refused", unreachable=True))
                result.rc = 4
            elif state == "failing":
                result.hosts[host] = runner.HostSummary(ok=2, failed=1)
                result.failures.append(runner.Failure(host, FAILING_TASK[playbook], f"{host}: Input/output error"))
                result.rc = result.rc or 2
            elif playbook == "collect.yml":
                result.hosts[host] = runner.HostSummary(ok=3)
                result.captured[host], result.desired[host] = collector_answer(host, state == "drift")
            elif playbook == "bench.yml":
                result.hosts[host] = runner.HostSummary(ok=5)
                result.captured[host] = {"ansible_facts": {"kvprov_bench_report": bench_report()}}
            elif playbook == "storage.yml":
                result.hosts[host] = runner.HostSummary(ok=4)
                result.captured[host] = knfsd_state(state == "drift")
            elif state == "drift":  # site.yml: the file is written again (check mode: would be)
                result.hosts[host] = runner.HostSummary(ok=40, changed=1)
                if diff:
                    result.diffs.append({"host": host, "task": "Write the NIXL backend config", "diff": {
                        "before": "active = false\n", "after": "active = true\n", "before_header": TOML[5:]}})
                if not check:
                    self.states[host] = "good"
            else:  # site.yml on a clean host
                result.hosts[host] = runner.HostSummary(ok=41)
        return result


# ---------------------------------------------------------------------------- reading the reports

ROW = re.compile(r"^(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)$")  # runner.print_summary's table
VERDICT = re.compile(r"^(\S+): (ok|FAILED) \(\d+ failed, ")  # report.format_table's line per host
CLEAN = re.compile(r"host\(s\) audited clean, not run \(--full runs them too\): (.+)$")


def console(name: str, out: str, err: str, bundles: Path | None) -> tuple[set, set]:
    """(the hosts the console names, those it names as failed or unreachable)."""
    hosts, bad = set(), set()
    for line in (out + err).splitlines():
        if m := ROW.match(line):
            hosts.add(m[1])
            if int(m[4]) or int(m[5]):
                bad.add(m[1])
        elif name.startswith("deploy") and (m := CLEAN.search(line)):
            hosts.update(m[1].split(", "))
    if name == "collect":
        hosts.update(Path(line).name for line in out.splitlines() if Path(line).parent == bundles)
    elif not name.startswith("deploy"):  # the table (stdout; audit --fix: the table after the fix)
        for line in out.splitlines():
            if m := VERDICT.match(line):
                hosts.add(m[1])
                if m[2] == "FAILED":
                    bad.add(m[1])
    return hosts, bad


def json_report(name: str, path: Path) -> tuple[set, set]:
    data = json.loads(path.read_text())
    if name.startswith("deploy") or name == "collect":  # the run's summary (runner.write_json)
        bad = {h for h, s in data["hosts"].items() if s["failed"] or s["unreachable"]}
        assert {f["host"] for f in data["failures"]} == bad, data["failures"]
        if name == "collect":  # a bundle for each host captured, none for the others
            assert set(data["bundles"]) == set(data["hosts"]) - bad, data["bundles"]
        return set(data["hosts"]), bad
    return set(data["hosts"]), {h for h, v in data["hosts"].items() if not v["ok"]}


def junit_report(path: Path) -> tuple[set, set]:
    suites = ET.parse(path).getroot().findall("testsuite")
    return {s.get("name") for s in suites}, {s.get("name") for s in suites if int(s.get("failures"))}


def prom_report(path: Path) -> tuple[set, set]:
    samples = re.findall(r'^(kvprov_audit_\w+)\{host="([^"]*)"\} (\S+)$', path.read_text(), re.M)
    up = {h: float(v) for metric, h, v in samples if metric == "kvprov_audit_up"}
    drift = {h: float(v) for metric, h, v in samples if metric == "kvprov_audit_drift_count"}
    assert set(up) == set(drift)
    return set(up), {h for h in up if not up[h] or drift[h]}


# ---------------------------------------------------------------------------- the matrix

CELLS = [pytest.param(name, scenario, EXPECTED[name][i], id=f"{name}|{scenario}")
         for name in COMMANDS for i, scenario in enumerate(SCENARIOS)]


@contextlib.contextmanager
def no_states_ahead(inventory, limit=None):
    """No desired states written ahead: the FAKE collect.yml returns each host's own (as the real
    one does for a small fleet)."""
    yield None


@pytest.mark.parametrize("name, scenario, code", CELLS)
def test_exit_code_and_hosts_in_every_report(name, scenario, code, tmp_path, monkeypatch, capsys):
    cmd = COMMANDS[name]
    how = SCENARIOS[scenario]
    names = NFS if cmd.storage else GPU
    make = storage_inventory if cmd.storage else gpu_inventory
    inv = make(tmp_path / "inventory.yml", bad=how == "bad inventory")
    states = {h: "good" for h in names}
    if isinstance(how, dict):
        states.update({names[i]: state for i, state in how.items()})
    if cmd.storage:  # the GPU nodes are the storage check's clients, never its targets
        states.update({f"g{i}": "not a target" for i in (1, 2, 3)})
    initial = dict(states)  # (the fake changes a host's state when it converges it)
    hosts = Hosts(inv, states, tmp_path / "runs")
    hosts.crash = how == "internal error"
    monkeypatch.setattr(runner, "run", hosts.run)  # FAKE: see Hosts
    monkeypatch.setattr(desired, "written", no_states_ahead)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    for var in ("KVPROV_DEBUG", "KVPROV_LOCK_DIR", "KVPROV_RUNS_DIR"):
        monkeypatch.delenv(var, raising=False)

    reports = {"json": tmp_path / "report.json", "junit": tmp_path / "report.xml", "prom": tmp_path / "report.prom"}
    argv = [*cmd.argv, str(inv)]
    for kind, path in reports.items():
        if offered(getattr(cmd, kind)):
            argv += [getattr(cmd, kind), str(path)]
    out_dir = tmp_path / "bundles"
    if offered(cmd.out):
        argv += [cmd.out, str(out_dir)]

    rc = cli.main(argv)
    out, err = capsys.readouterr()
    shown = f"kvprov {' '.join(argv)} -> {rc}\n--- stdout\n{out[-4000:]}\n--- stderr\n{err[-4000:]}"
    if rc == INTERNAL and code != INTERNAL:  # a bug met on the way: its traceback
        shown += "".join(p.read_text() for p in (tmp_path / "state/kvprov/crashes").iterdir())
    assert rc == code, shown
    assert not hosts.problems, hosts.problems
    assert "Traceback" not in out + err, shown
    retry = tmp_path / "state/kvprov/retry" / f"{cmd.retry}.retry" if offered(cmd.retry) else None

    if how == "bad inventory":  # nothing touched: no host run, no report, no bundle, no retry file
        assert hosts.calls == [], hosts.calls
        assert "no_such_profile" in err and "no host was contacted" in err, shown
        assert not [p for p in (*reports.values(), out_dir, retry) if p and p.exists()]
        return
    if how == "internal error":  # one line, the traceback saved (root-only), not spilled
        lines = [line for line in err.splitlines() if line.startswith("kvprov: ")]
        assert len(lines) == 1 and lines[0].startswith("kvprov: internal error: RuntimeError: FAKE: "), shown
        [saved] = (tmp_path / "state/kvprov/crashes").iterdir()
        assert f"traceback saved in {saved} " in lines[0] and saved.stat().st_mode & 0o777 == 0o600
        assert "RuntimeError: FAKE:" in saved.read_text()
        return

    # every host in every report, the failed ones named as failed
    failed_states = {"failing", "down"} | ({"drift"} if name in JUDGES_DRIFT else set())
    every, bad = set(names), {h for h in names if initial[h] in failed_states}
    got = {"console": console(name, out, err, out_dir if offered(cmd.out) else None)}
    if offered(cmd.json):
        got["json"] = json_report(name, reports["json"])
    if offered(cmd.junit):
        got["junit"] = junit_report(reports["junit"])
    if offered(cmd.prom):
        got["prom"] = prom_report(reports["prom"])
    for kind, (seen, seen_bad) in got.items():
        assert (seen, seen_bad) == (every, bad), f"{kind}: hosts {sorted(seen)}, failed {sorted(seen_bad)}; " \
                                                 f"want {sorted(every)}, failed {sorted(bad)}\n{shown}"
    for h in bad:  # and the console says why
        assert any(h in line and re.search(r"FAIL|fail|unreachable", line) for line in (out + err).splitlines()), \
            f"the console does not name {h} as failed or unreachable\n{shown}"
    if offered(cmd.out):  # a bundle for each host captured, none for the others
        captured = {h for h in names if initial[h] not in ("failing", "down")}
        assert {p.name for p in out_dir.iterdir()} == captured, shown
        assert all((out_dir / h / "desired.json").is_file() for h in captured)
    if offered(cmd.retry):  # the retry file names exactly the failed hosts, as `--limit @FILE` takes it
        assert (set(retry.read_text().split()) if retry.exists() else set()) == bad, shown
    if name in ("deploy", "audit --fix"):  # converged: the drifted host, and the ones the audit could not read
        converged = {h for playbook, limit, check in hosts.calls if playbook == "site.yml" for h in limit.split(",")}
        assert converged == {h for h in names if initial[h] in (("drift",) if name == "audit --fix" else
                                                                 ("drift", "failing", "down"))}, hosts.calls


def test_the_report_options_are_those_each_command_offers():
    """COMMANDS says which reports each command offers; its --help must say the same (a command
    that gains --junit or --prom gets a column here)."""
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices
    for name, cmd in COMMANDS.items():
        p = sub[cmd.argv[0]]
        if cmd.argv[0] == "storage":
            p = next(a for a in p._actions if a.dest == "storage_command").choices["check"]
        options = {o for a in p._actions for o in a.option_strings}
        for option in ("--json", "--junit", "--prom", "--out"):
            claimed = getattr(cmd, option[2:])
            assert (option in options) == offered(claimed), f"{name}: {option}: {claimed}"
            assert claimed == option or not offered(claimed), f"{name}: {option}: {claimed}"


def test_the_table_covers_every_command_and_scenario():
    assert set(EXPECTED) == set(COMMANDS)
    assert all(len(codes) == len(SCENARIOS) for codes in EXPECTED.values())
    # README's rule: 3 wins over 1 wherever a host was unreachable, whatever else failed
    for codes in EXPECTED.values():
        for i, scenario in enumerate(SCENARIOS):
            if "unreachable" in scenario:
                assert codes[i] == UNREACHABLE
