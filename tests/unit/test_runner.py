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


def test_the_run_artifacts_keep_no_controller_secret(tmp_path, monkeypatch):
    """#38 (Low): ansible-runner keeps the controller's environment (artifacts/*/command) and every
    task's event: credentials by name (*_PAT, *_DSN, *_AUTH too), URL passwords and the values
    Vault decrypted for this command never stay there; the rest does, and the JSON stays JSON."""
    import json

    from kvprov import vault

    monkeypatch.setattr(vault, "_secrets", {"vaulted-s3cr3t-77"})
    run = tmp_path / "artifacts/abc"
    (run / "job_events").mkdir(parents=True)
    env = {"GITHUB_PAT": "ghp_x1", "SENTRY_DSN": "https://k@o1.example/1", "PROXY_AUTH": "u:p", "HF_TOKEN": "hf_x",
           "DATABASE_URL": "postgres://app:pw123@db/x", "NOTE": "has vaulted-s3cr3t-77 in it", "PATH": "/usr/bin",
           "PATCH_LEVEL": "3", "AUTHOR": "kv"}
    (run / "command").write_text(json.dumps({"command": ["ansible-playbook"], "env": env}))
    (run / "job_events/1-a.json").write_text(json.dumps({"event_data": {"res": {"msg": "vaulted-s3cr3t-77"}}}))
    (run / "job_events/2-b.json").write_text(json.dumps({"event_data": {"res": {"msg": "nothing secret"}}}))
    runner.scrub_environment(tmp_path)
    kept = json.loads((run / "command").read_text())["env"]
    assert {k for k, v in kept.items() if v == "<redacted>"} == {"GITHUB_PAT", "SENTRY_DSN", "PROXY_AUTH", "HF_TOKEN"}
    assert kept["DATABASE_URL"] == "postgres://app:<redacted>@db/x" and kept["NOTE"] == "has <vaulted> in it"
    assert (kept["PATH"], kept["PATCH_LEVEL"], kept["AUTHOR"]) == ("/usr/bin", "3", "kv")
    assert json.loads((run / "job_events/1-a.json").read_text())["event_data"]["res"]["msg"] == "<vaulted>"
    assert json.loads((run / "job_events/2-b.json").read_text())["event_data"]["res"]["msg"] == "nothing secret"


CALLBACK = '''
from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "kvtrace"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_stats(self, stats):
        with open("TRACE", "a") as f:
            f.write("a run of ansible-playbook\\n")
'''


def test_the_users_callbacks_and_fact_cache_survive_ansible_runner(tmp_path):
    """#39: a callback from the ansible.cfg's callback_plugins (as ARA, Splunk or Logstash are
    installed) runs in kvprov's own ansible-playbook runs, beside ansible-runner's; a fact cache the
    configuration names is not replaced by ansible-runner's jsonfile cache."""
    import json
    import os
    import subprocess
    import sys

    (tmp_path / "cb").mkdir()
    (tmp_path / "cb/kvtrace.py").write_text(CALLBACK.replace('"TRACE"', repr(str(tmp_path / "TRACE"))))
    (tmp_path / "ansible.cfg").write_text("[defaults]\ncallback_plugins = cb\ncallbacks_enabled = kvtrace\n"
                                          "fact_caching = memory\n")
    (tmp_path / "inv.yml").write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n        h1:\n"
                                      "          ansible_host: 10.0.0.5\n          kvprov_storage_profile: local\n"
                                      "          kvprov_storage_pnfs_layout: none\n")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}, "KVPROV_RUNS_DIR": str(tmp_path / "runs")}
    r = subprocess.run([sys.executable, "-m", "kvprov", "render", "inv.yml", "--out", "out"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "TRACE").read_text().count("a run of ansible-playbook") >= 1
    [command] = (tmp_path / "runs").glob("*/artifacts/*/command")
    recorded = json.loads(command.read_text())["env"]
    assert recorded["ANSIBLE_CALLBACK_PLUGINS"].startswith(f"{tmp_path}/cb:")  # then ansible-runner's own
    assert "ANSIBLE_CACHE_PLUGIN" not in recorded and recorded["ANSIBLE_CONFIG"] == str(tmp_path / "ansible.cfg")
    assert (tmp_path / "out/h1").is_dir()
