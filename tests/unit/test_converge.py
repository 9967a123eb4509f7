"""kvprov/converge.py (#41 item 1): what `kvprov deploy` and `audit --fix` hand ansible-playbook
(the host lock's owner, the rollout's play keywords from the inventory, the remount switches)
and the exit code a run's result gives. ansible-playbook itself is FAKE here (runner.run
recorded); the lab tests converge for real."""

from __future__ import annotations

import textwrap

import pytest

from kvprov import converge, runner
from kvprov.errors import EXIT_BUSY, EXIT_CHECKS_FAILED, EXIT_OK, EXIT_UNREACHABLE


def inventory(tmp_path, host_vars: str = "{}", group_vars: str = "", hosts: tuple[str, ...] = ("a", "b")) -> str:
    inv = tmp_path / "inv.yml"
    inv.write_text(textwrap.dedent(f"""\
        all:
          children:
            gpu_nodes:
              vars: {{kvprov_storage_server: 10.0.0.5, kvprov_engine: vllm_baseline{group_vars}}}
              hosts:
        """) + "".join(f"        {h}: {host_vars}\n" for h in hosts))
    return str(inv)


def test_the_rollout_passes_only_what_the_inventory_sets(tmp_path):
    assert converge.rollout(inventory(tmp_path)) == {}  # the role defaults: Ansible's own
    got = converge.rollout(inventory(tmp_path, group_vars=", kvprov_deploy_serial: 2, "
                                                           "kvprov_deploy_max_fail_percentage: 0"))
    assert got == {"kvprov_deploy_serial": 2, "kvprov_deploy_max_fail_percentage": 0}
    assert converge.rollout([inventory(tmp_path, host_vars='{kvprov_deploy_serial: "50%"}')]) == \
        {"kvprov_deploy_serial": "50%"}
    assert converge.rollout(inventory(tmp_path, host_vars="{kvprov_deploy_max_fail_percentage: 25}", hosts=("a",))) \
        == {"kvprov_deploy_max_fail_percentage": 25}  # one target host: its values


@pytest.fixture
def ran(monkeypatch):
    calls = []

    def run(playbook, sources, **kw):
        calls.append((playbook, sources, kw))
        return runner.RunResult(rc=0, artifacts=None)

    monkeypatch.setattr(runner, "run", run)
    return calls


def test_converge_runs_site_under_the_host_lock_with_the_rollout(tmp_path, ran):
    inv = inventory(tmp_path, group_vars=", kvprov_deploy_serial: 1")
    result = converge.converge([inv], "audit --fix", "a", check=True, diff=True, tags="engine")
    assert result.rc == 0
    [(playbook, sources, kw)] = ran
    assert (playbook, sources) == ("site.yml", [inv])
    assert kw["name"] == "audit-fix" and kw["limit"] == "a" and kw["tags"] == "engine"
    assert kw["check"] is True and kw["diff"] is True
    extra = kw["extravars"]
    assert extra["kvprov_lock_command"] == "kvprov audit --fix" and extra["kvprov_lock_owner"].endswith(inv)
    assert extra["kvprov_deploy_serial"] == 1
    assert "kvprov_storage_allow_remount" not in extra and "kvprov_storage_stop_dependents" not in extra


def test_a_remount_is_allowed_only_when_asked_and_stops_engines_only_when_asked(tmp_path, ran):
    inv = inventory(tmp_path)
    converge.converge([inv], "deploy", None, allow_remount=True)
    converge.converge([inv], "deploy", None, allow_remount=True, stop_engines=True)
    converge.converge([inv], "deploy", None)
    extras = [kw["extravars"] for _, _, kw in ran]
    assert [(e.get("kvprov_storage_allow_remount"), e.get("kvprov_storage_stop_dependents")) for e in extras] == \
        [(True, False), (True, True), (None, None)]
    assert [kw["check"] for _, _, kw in ran] == [False] * 3 and ran[0][2]["limit"] is None
    assert [kw["diff"] for _, _, kw in ran] == [False] * 3 and ran[0][2]["tags"] is None


def result(rc=0, failures=(), unreachable=()) -> runner.RunResult:
    r = runner.RunResult(rc=rc, artifacts=None, failures=[runner.Failure(h, t, "m") for h, t in failures])
    for h in unreachable:
        r.hosts[h] = runner.HostSummary(unreachable=1)
    return r


@pytest.mark.parametrize("r, code", [
    (result(), EXIT_OK),
    (result(rc=2), EXIT_CHECKS_FAILED),  # ansible-playbook failed without a task failure
    (result(rc=2, failures=[("a", converge.HOST_LOCK_TASK)]), EXIT_BUSY),
    (result(rc=2, failures=[("a", "Take the host's deploy lock"), ("b", "Take the host's deploy lock")]), EXIT_BUSY),
    (result(rc=2, failures=[("a", "Take the host's deploy lock"), ("b", "Install vLLM")]), EXIT_CHECKS_FAILED),
    (result(rc=0, failures=[("b", "Install vLLM")]), EXIT_CHECKS_FAILED),
    (result(rc=4, failures=[("a", "Take the host's deploy lock")], unreachable=["b"]), EXIT_UNREACHABLE),
])
def test_the_exit_code_says_unreachable_first_then_busy_only_when_every_failure_is_the_lock(r, code):
    assert converge.exit_code(r) == code


def test_skip_tags_reach_the_run_only_when_given(tmp_path, ran):
    """deploy --skip-tags (#39): ansible-playbook's --skip-tags, through ansible-runner's skip_tags."""
    inv = inventory(tmp_path)
    converge.converge([inv], "deploy", None, tags="engine", skip_tags="gds,nixl")
    converge.converge([inv], "deploy", None)
    assert [(kw["tags"], kw["skip_tags"]) for _, _, kw in ran] == [("engine", "gds,nixl"), (None, None)]
