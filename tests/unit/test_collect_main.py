"""The collector module's entry as Ansible runs it (AnsibleModule reads the task's arguments,
the module answers one JSON object): the arguments' types and defaults reach collect(), check
mode is supported, and what collect() returns is the task's `files`. collect() itself is
FAKED here (its capture is test_collect_module.py's)."""

import json

import pytest
from ansible.module_utils import basic

from kvprov.validate import bundle as bf

collector = bf.collector


def run_main(monkeypatch, capsys, args: dict) -> tuple[dict, list]:
    calls = []
    monkeypatch.setattr(collector, "collect", lambda *a: calls.append(a) or {"gpu.json": "{}"})
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode())
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy", raising=False)
    with pytest.raises(SystemExit):
        collector.main()
    return json.loads(capsys.readouterr().out), calls


def test_the_defaults_reach_collect_and_the_files_come_back(monkeypatch, capsys):
    out, calls = run_main(monkeypatch, capsys, {"desired": {"host": "h"}})
    assert out["changed"] is False and out["files"] == {"gpu.json": "{}"} and not out.get("failed")
    assert calls == [({"host": "h"}, True, 4 << 20, 30, "unknown", None)]


def test_every_argument_and_check_mode(monkeypatch, capsys):
    out, calls = run_main(monkeypatch, capsys, {
        "desired": {"host": "h"}, "probes": "no", "io_bytes": "4096", "timeout": "7", "kvprov_version": "1.2",
        "restart_pending_dir": "/var/lib/kvprov/restart-pending", "_ansible_check_mode": True})
    assert not out.get("failed") and not out.get("skipped"), out
    assert calls == [({"host": "h"}, False, 4096, 7, "1.2", "/var/lib/kvprov/restart-pending")]


@pytest.mark.parametrize("args, says", [
    ({}, "missing required arguments: desired"),
    ({"desired": "not a mapping"}, "desired"),
    ({"desired": {}, "io_bytes": "many"}, "io_bytes"),
    ({"desired": {}, "probes": "maybe"}, "probes"),
    ({"desired": {}, "timeout": "soon"}, "timeout"),
    ({"desired": {}, "surprise": 1}, "surprise"),
])
def test_bad_arguments_fail_the_task(monkeypatch, capsys, args, says):
    out, calls = run_main(monkeypatch, capsys, args)
    assert out["failed"] is True and says in out["msg"] and calls == []
