"""Partial failure at scale: the runner's failures grouped by reason (not one block per host),
the retry file with the failed hosts, and deploy's exit code for a mix of failures. Pure logic
on RunResult/Failure built directly, as the runner builds them from Ansible's events."""

import io
import json
from dataclasses import asdict
from pathlib import Path

import pytest

from kvprov import converge, runner
from kvprov.errors import EXIT_CHECKS_FAILED, EXIT_UNREACHABLE

MOUNT = "Mount the KV-cache volume"


def fleet(tmp_path: Path) -> runner.RunResult:
    """100 hosts: 10 unreachable (each its own address and port), 5 failing the mount task with
    a message that names the host and its storage server, 85 fine."""
    result = runner.RunResult(rc=2, artifacts=tmp_path / "artifacts")
    for i in range(100):
        result.hosts[f"gpu{i:03}"] = runner.HostSummary(ok=20)
    for i in range(0, 100, 10):  # gpu000, gpu010, ... gpu090
        host = f"gpu{i:03}"
        result.hosts[host] = runner.HostSummary(unreachable=1)
        result.failures.append(runner.Failure(
            host, "Gathering Facts", f"Failed to connect to the host via ssh: ssh: connect to host 10.1.0.{i} "
                                     f"port {2200 + i}: Connection refused", unreachable=True))
    for i in (3, 17, 44, 58, 71):
        host = f"gpu{i:03}"
        result.hosts[host] = runner.HostSummary(ok=7, failed=1)
        result.failures.append(runner.Failure(
            host, MOUNT, f"{host}: mount.nfs: mounting 192.168.7.{i}:/kv on /mnt/kvcache failed: "
                         f"Connection timed out (server 192.168.7.{i}:2049)"))
    return result


UNREACHABLE = [f"gpu{i:03}" for i in range(0, 100, 10)]
FAILED = ["gpu003", "gpu017", "gpu044", "gpu058", "gpu071"]


def test_ten_unreachable_and_five_failed_hosts_make_two_lines(tmp_path):
    result = fleet(tmp_path)
    groups = runner.failure_groups(result)
    assert [(what, hosts) for what, hosts, _ in groups] == [("unreachable", UNREACHABLE),
                                                            (f"task '{MOUNT}' failed", FAILED)]
    # one original message is shown per group: the first host's, word for word
    assert groups[0][2] == result.failures[0].message
    assert groups[1][2] == "gpu003: mount.nfs: mounting 192.168.7.3:/kv on /mnt/kvcache failed: " \
                           "Connection timed out (server 192.168.7.3:2049)"
    assert runner.format_failures(result).splitlines() == [
        f"unreachable (10 hosts): {result.failures[0].message} \u2014 "
        "gpu000, gpu010, gpu020, gpu030, gpu040, gpu050, gpu060, gpu070 (+2 more)",
        f"task '{MOUNT}' failed (5 hosts): {groups[1][2]} \u2014 gpu003, gpu017, gpu044, gpu058, gpu071",
    ]
    assert runner.format_failures(result, shown=5).splitlines()[1].endswith(" \u2014 gpu003, gpu017, gpu044, "
                                                                           "gpu058, gpu071")  # all shown: no (+0 more)


def test_print_summary_prints_the_table_then_the_groups_not_a_block_per_host(tmp_path):
    out = io.StringIO()
    runner.print_summary(fleet(tmp_path), out)
    text = out.getvalue()
    assert len([line for line in text.splitlines() if line.startswith("gpu")]) == 100  # the table
    assert text.count("Connection refused") == 1 and text.count("Connection timed out") == 1
    assert "unreachable (10 hosts)" in text and f"task '{MOUNT}' failed (5 hosts)" in text
    assert "rerun the failed hosts" not in text  # no command given: no retry file


def test_different_reasons_for_the_same_task_stay_apart(tmp_path):
    result = runner.RunResult(rc=2, artifacts=tmp_path)
    result.failures = [runner.Failure("a", MOUNT, "a: No route to host"),
                       runner.Failure("b", MOUNT, "b: access denied by server while mounting 10.0.0.5:/kv"),
                       runner.Failure("c", MOUNT, "c: No route to host"),
                       runner.Failure("d", "Install NIXL", "d: No route to host")]
    assert [(what, hosts) for what, hosts, _ in runner.failure_groups(result)] == [
        (f"task '{MOUNT}' failed", ["a", "c"]),  # the largest group first, then by task
        ("task 'Install NIXL' failed", ["d"]),
        (f"task '{MOUNT}' failed", ["b"]),
    ]
    assert runner.format_failures(result).splitlines()[2] == (
        f"task '{MOUNT}' failed (1 host): b: access denied by server while mounting 10.0.0.5:/kv \u2014 b")


def test_a_playbook_that_stopped_is_shown_as_it_is(tmp_path):
    result = runner.RunResult(rc=4, artifacts=tmp_path)
    result.failures = [runner.Failure("-", "ansible-playbook", "run failed: ERROR! the playbook could not be found")]
    assert runner.format_failures(result) == "task 'ansible-playbook' failed: run failed: ERROR! the playbook " \
                                             "could not be found"
    assert runner.write_retry(result, "deploy") is None  # no host to retry


@pytest.mark.parametrize("message, normal", [
    ("ssh: connect to host 10.0.0.7 port 22: Connection refused",
     "ssh: connect to host ADDR port N: Connection refused"),
    ("ssh: connect to host fe80::1:2 port 2222: No route", "ssh: connect to host ADDR port N: No route"),
    ("gpu7: mount 10.0.0.5:/kv failed", "HOST: mount ADDR:/kv failed"),
    ("gpu7.example.com:8000 refused", "HOST:N refused"),
    ("gpu70 is not gpu7", "gpu70 is not HOST"),  # a longer name that only starts with a host's name stays
    ("rack-gpu7 is not gpu7", "rack-gpu7 is not HOST"),  # and one that ends with it
])
def test_normalise_replaces_host_names_addresses_and_ports(message, normal):
    assert runner.normalise(message, ["gpu7", "gpu7.example.com"]) == normal


def test_the_retry_file_holds_exactly_the_failed_and_unreachable_hosts(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    out = io.StringIO()
    runner.print_summary(fleet(tmp_path), out, rerun=["deploy", "inv.yml", "-i", "more dir"])
    path = tmp_path / "state/kvprov/retry/deploy.retry"
    assert path.read_text().splitlines() == sorted(UNREACHABLE + FAILED)
    assert f"rerun the failed hosts: kvprov deploy inv.yml -i 'more dir' --limit @{path}\n" in out.getvalue()


def test_no_retry_file_when_every_host_is_fine(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    result = runner.RunResult(rc=0, artifacts=tmp_path, hosts={"a": runner.HostSummary(ok=3)})
    out = io.StringIO()
    runner.print_summary(result, out, rerun=["deploy", "inv.yml"])
    assert not (tmp_path / "state").exists() and "rerun" not in out.getvalue()


def test_the_json_report_keeps_every_hosts_own_message(tmp_path):
    result = fleet(tmp_path)
    runner.write_json(result, str(tmp_path / "r.json"))
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["failures"] == [{"host": f.host, "task": f.task, "message": f.message, "unreachable": f.unreachable}
                                for f in result.failures]
    assert len(data["failures"]) == 15


def test_deploy_exits_3_for_a_mix_of_unreachable_and_failed_hosts_1_for_failed_only(tmp_path):
    result = fleet(tmp_path)
    assert converge.exit_code(result) == EXIT_UNREACHABLE
    result.failures = [f for f in result.failures if not f.unreachable]
    for host in UNREACHABLE:
        result.hosts[host] = runner.HostSummary(ok=20)
    assert converge.exit_code(result) == EXIT_CHECKS_FAILED


def test_a_host_that_fails_twice_for_one_reason_counts_once(tmp_path):
    """A rescued task's failure is reported too (runner_on_failed), so one host can fail twice."""
    result = runner.RunResult(rc=2, artifacts=tmp_path)
    result.failures = [runner.Failure("a", MOUNT, "a: No route to host"),
                       runner.Failure("a", MOUNT, "a: No route to host"),
                       runner.Failure("b", MOUNT, "b: No route to host")]
    assert [(what, hosts) for what, hosts, _ in runner.failure_groups(result)] == [(f"task '{MOUNT}' failed",
                                                                                   ["a", "b"])]
    assert runner.retry_hosts(result) == ["a", "b"]


def test_json_lists_the_hosts_the_audit_found_clean_with_zero_counts(tmp_path):
    result = runner.RunResult(rc=0, artifacts=tmp_path, hosts={"gpu2": runner.HostSummary(ok=40, changed=2)})
    runner.write_json(result, tmp_path / "r.json", clean=["gpu3", "gpu1"])
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["clean"] == ["gpu1", "gpu3"]
    assert data["hosts"]["gpu2"]["changed"] == 2 and data["hosts"]["gpu1"] == asdict(runner.HostSummary())
    runner.write_json(runner.RunResult(rc=0, artifacts=None), tmp_path / "none.json", clean=["gpu1"])
    assert json.loads((tmp_path / "none.json").read_text())["artifacts"] is None  # nothing was run
