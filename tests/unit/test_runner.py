"""The runner's pure parts: what deploy prints from Ansible's events, and the environment of its runs."""

import io
from pathlib import Path

from kvprov import runner


def test_deploy_diffs_are_printed_as_unified_diffs():
    result = runner.RunResult(0, Path("/tmp"))
    result.diffs = [
        {"host": "h1", "task": "Write the unit", "diff": [{"before": "a\nb\n", "after": "a\nc\n",
                                                          "before_header": "/etc/x.service"}]},
        {"host": "h2", "task": "Create the dir", "diff": {"before": {"state": "absent"},
                                                         "after": {"state": "directory"}}},
        {"host": "h3", "task": "Nothing", "diff": {}},
    ]
    text = runner.format_diffs(result)
    assert "--- h1: Write the unit\n--- /etc/x.service (on the host)\n+++ what deploy writes\n" in text
    assert "-b\n+c" in text
    assert "--- h2: Create the dir\n  state: absent -> directory" in text
    assert "h3" not in text


def _no_user_config(monkeypatch, cwd):
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("HOME", str(cwd))  # no ~/.ansible.cfg
    for name in ("ANSIBLE_CONFIG", "ANSIBLE_COLLECTIONS_PATH", "ANSIBLE_HOST_KEY_CHECKING", *(n for n, _, _ in runner.LAYERED)):
        monkeypatch.delenv(name, raising=False)


def test_the_users_ansible_cfg_is_the_base_and_kvprov_fills_only_what_it_leaves_unset(tmp_path, monkeypatch):
    """#25: the runs read the user's ansible.cfg (found as Ansible finds it, from kvprov's working
    directory: the runs themselves start elsewhere); kvprov's settings only where it says nothing,
    and never host_key_checking."""
    _no_user_config(monkeypatch, tmp_path)
    (tmp_path / "ansible.cfg").write_text(
        "[defaults]\nforks = 7\nhost_key_checking = True\ncollections_path = mine:/opt/theirs\n"
        "[ssh_connection]\nssh_args = -o ControlMaster=auto -o ControlPath=/tmp/ours-%C\n")
    env = runner.ansible_env()
    assert env["ANSIBLE_CONFIG"] == str(tmp_path / "ansible.cfg")
    assert "ANSIBLE_FORKS" not in env and "ANSIBLE_SSH_ARGS" not in env  # theirs
    assert env["ANSIBLE_PIPELINING"] == "True" and env["ANSIBLE_PYTHON_INTERPRETER"] == "auto_silent"
    assert env["ANSIBLE_COLLECTIONS_PATH"].split(":") == [str(runner.COLLECTIONS), str(tmp_path / "mine"),
                                                          "/opt/theirs"]
    assert env["ANSIBLE_HOST_KEY_CHECKING"] == "True"  # theirs, passed on (ansible-runner would turn it off)
    monkeypatch.setenv("ANSIBLE_PIPELINING", "False")  # the environment counts as configuration too
    assert "ANSIBLE_PIPELINING" not in runner.ansible_env()


def test_without_a_user_config_kvprovs_settings_apply_and_verbose_says_so_once(tmp_path, monkeypatch):
    _no_user_config(monkeypatch, tmp_path)
    monkeypatch.setattr(runner, "_told", set())
    said = io.StringIO()
    env = runner.ansible_env(verbose=True, stream=said)
    runner.ansible_env(verbose=True, stream=said)
    assert "ANSIBLE_CONFIG" not in env and env["ANSIBLE_HOST_KEY_CHECKING"] == "True"  # Ansible's default
    assert {n: env[n] for n, _, _ in runner.LAYERED} == {n: v for n, v, _ in runner.LAYERED}
    assert said.getvalue().count("kvprov: ansible.cfg: none found") == 1, said.getvalue()
    assert "ANSIBLE_FORKS=50 (not set in your configuration)" in said.getvalue()


def test_the_runs_use_the_ansible_playbook_of_kvprovs_own_python(tmp_path, monkeypatch):
    """A venv's kvprov, not activated: its runs start the venv's ansible-playbook (whose plugins
    import this kvprov), not the first one on PATH."""
    import sys

    _no_user_config(monkeypatch, tmp_path)
    own = Path(sys.executable).parent
    monkeypatch.setenv("PATH", "/nowhere")
    env = runner.ansible_env()
    if (own / "ansible-playbook").exists():
        assert env["PATH"] == f"{own}:/nowhere"
    else:
        assert "PATH" not in env
