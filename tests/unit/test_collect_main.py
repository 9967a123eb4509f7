"""The collector module's entry as Ansible runs it (a JSON-args module: Ansible writes the task's
arguments into the module's text, the module answers one JSON object): the arguments' types and
defaults reach collect(), check mode is supported, and what collect() returns is the task's
`files`. collect() itself is FAKED here (its capture is test_collect_module.py's)."""

import json
import subprocess
import sys

import pytest

from kvprov.validate import bundle as bf

collector = bf.collector


def run_main(monkeypatch, capsys, args: dict) -> tuple[dict, list]:
    """(the module's answer, collect()'s calls); its exit status is 0 exactly when it did not fail."""
    calls = []
    monkeypatch.setattr(collector, "collect", lambda *a: calls.append(a) or {"gpu.json": "{}"})
    with pytest.raises(SystemExit) as e:
        collector.main(json.dumps(args))
    out = json.loads(capsys.readouterr().out)
    assert e.value.code == (1 if out.get("failed") else 0)
    return out, calls


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
    ({"desired": {}, "io_bytes": True}, "io_bytes"),
    ({"desired": {}, "kvprov_version": 1.2}, "kvprov_version"),
    ({"desired": {}, "probes": "maybe"}, "probes"),
    ({"desired": {}, "timeout": "soon"}, "timeout"),
    ({"desired": {}, "surprise": 1}, "surprise"),
])
def test_bad_arguments_fail_the_task(monkeypatch, capsys, args, says):
    out, calls = run_main(monkeypatch, capsys, args)
    assert out["failed"] is True and says in out["msg"] and calls == []


def test_ansible_runs_it_as_a_json_args_module_that_imports_nothing_of_ansible(tmp_path):
    """Ansible's own module builder (executor.module_common) writes the arguments into the
    module's text, with no AnsiballZ wrapper; that text runs alone in a bare Python (-I -S:
    no site-packages, so no Ansible) and answers the task."""
    from ansible.executor import module_common
    from ansible.template import Templar

    desired = {"host": "h'\"\"\"x\\", "storage": {}, "nixl": {}, "engine": {}, "gds": {}}
    built = module_common.modify_module(module_name="kvprov_collect", module_path=bf.collector.__file__,
                                        module_args={"desired": desired, "probes": "no", "_ansible_check_mode": True},
                                        templar=Templar(loader=None),
                                        task_vars={"ansible_python_interpreter": sys.executable})
    assert built.module_style == "new" and b"ansible.module_utils" not in built.b_module_data
    text = built.b_module_data.decode()
    args = text.split("ARGUMENTS = r\"\"\"", 1)[1].split("\"\"\"\n", 1)[0]
    source = open(bf.collector.__file__).read()  # the module's own text, the arguments in place of the marker
    assert text.split("\n", 1)[1] == source.split("\n", 1)[1].replace("<<INCLUDE_ANSIBLE_MODULE_JSON_ARGS>>", args)
    assert json.loads(args)["desired"] == desired  # quotes of every kind survive the raw string
    script = tmp_path / "m.py"
    script.write_text(text.replace("\nif __name__", "\ncollect = lambda d, *a: {'got': json.dumps([d, *a])}\nif __name__"))
    out = subprocess.run([sys.executable, "-I", "-S", str(script)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    assert answer["changed"] is False and json.loads(answer["files"]["got"]) == [desired, False, 4 << 20, 30, "unknown", None]


@pytest.mark.parametrize("word, value", [(w, True) for w in ("yes", "on", "1", "true", "y", "t", "YES", "True")]
                         + [(w, False) for w in ("no", "off", "0", "false", "n", "f", "No", "FALSE")])
def test_probes_takes_the_words_ansiblemodule_takes_for_a_bool(monkeypatch, capsys, word, value):
    out, calls = run_main(monkeypatch, capsys, {"desired": {"host": "h"}, "probes": word})
    assert not out.get("failed") and calls[0][1] is value
