"""SGLang's admin routes get their own key (#38): kvprov_engine_admin_api_key_file, else one of the
host's own. SGLang 0.5.23 guards /hicache/storage-backend/clear (which deletes every file of the
instance's directory), /flush_cache, /update_weights_from_disk and the rest of its ADMIN_OPTIONAL
routes with --admin-api-key when set, else with the inference key, else with nothing.

Run with what runs on a host: the engine role's own task writes the credential YAML (as root, to
a temporary directory), SGLang's own --config merger reads it, and SGLang's own route table
(read from its http_server.py: the module needs CUDA's stack to import) and auth decision
(sglang.srt.utils.auth.decide_request_auth) say which key opens which route."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from kvprov.validate.parsers import exec_argv, parse_unit
from tests.conftest import ROOT, render_one_host
from tests.unit.test_engine_parsers import _sglang_python

KEY, ADMIN = "sk-inference-0123456789", "sk-admin-9876543210"
# In SGLang's venv: its parser reads the YAML; its route table and auth decision judge each key.
DECIDE = r'''
import ast, json, sys, pathlib
import sglang.srt.entrypoints as ep
from sglang.srt.server_args import prepare_server_args
from sglang.srt.utils.auth import AuthLevel, decide_request_auth
sa = prepare_server_args(["--model-path", "/m", "--config", sys.argv[1]])
levels = {}  # route path -> SGLang's auth level, from its http_server.py decorators
tree = ast.parse((pathlib.Path(ep.__path__[0]) / "http_server.py").read_text())
for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
    paths = [d.args[0].value for d in fn.decorator_list if isinstance(d, ast.Call) and d.args
             and isinstance(d.args[0], ast.Constant) and str(d.args[0].value).startswith("/")]
    level = [ast.unparse(d.args[0]) for d in fn.decorator_list if isinstance(d, ast.Call)
             and getattr(d.func, "id", "") == "auth_level"]
    for p in paths:
        levels[p] = level[0].rsplit(".", 1)[-1] if level else "NORMAL"
out = {"api_key": sa.api_key, "admin_api_key": sa.admin_api_key, "decisions": {}}
for path in ("/hicache/storage-backend/clear", "/flush_cache", "/update_weights_from_disk", "/v1/completions"):
    for who, token in (("inference", sys.argv[2]), ("admin", sys.argv[3]), ("none", None)):
        d = decide_request_auth(method="POST", path=path, authorization_header=f"Bearer {token}" if token else None,
                                api_key=sa.api_key, admin_api_key=sa.admin_api_key,
                                auth_level=AuthLevel[levels.get(path, "NORMAL")])
        out["decisions"][f"{path} {who}"] = d.allowed
print(json.dumps(out))
'''


def written_yaml(tmp_path, **files) -> str:
    """The engine role's own task (roles/engine/tasks/secrets.yml), run by ansible-playbook as
    deploy runs it, writing into tmp_path: the SGLang credential YAML it writes. `files`: the
    controller files, by name (api.key: kvprov_engine_api_key_file, admin_api.key: ...)."""
    for name, text in files.items():
        (tmp_path / name).write_text(text + "\n")
        (tmp_path / name).chmod(0o600)
    out = tmp_path / "sglang-api-key.yaml"
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump([{"name": "secrets", "hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "The engine role's secrets", "ansible.builtin.include_role": {"name": "engine", "tasks_from": "secrets"}}]}]))
    from tests.unit.test_preflight import LAB_VALUES  # the role's preflight runs first: the lab's SGLang host

    extra = {**LAB_VALUES, "kvprov_engine": "sglang_hicache", "_kvprov_engine_sglang_key_file": str(out),
             "_kvprov_engine_sglang_admin_file": str(tmp_path / "sglang-admin.key"),
             "_kvprov_engine_secrets_env": str(tmp_path / "secrets/engine.env"),
             **{f"kvprov_engine_{n.replace('.', '_')}_file": str(tmp_path / n) for n in files}}
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
           "ANSIBLE_NOCOLOR": "1"}
    r = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", str(play), "-e", json.dumps(extra),
                        "-e", f"ansible_python_interpreter={sys.executable}"],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert KEY not in r.stdout + r.stderr and ADMIN not in r.stdout + r.stderr  # no_log
    assert oct(out.stat().st_mode & 0o777) == "0o600"
    return out.read_text()


@pytest.mark.parametrize("files", ["api and admin", "api only", "none"])
def test_the_admin_routes_take_the_admin_key_alone_and_are_closed_without_one(tmp_path, files):
    """With kvprov_engine_admin_api_key_file its key; without it a key of the host's own (made once by
    the role, kept by the next deploy): either way the admin routes take that key alone, never the
    inference key nor nothing, while inference takes the API key (or nothing, without one)."""
    python = _sglang_python()
    if python is None:
        pytest.skip("no SGLang venv (scripts/install-deps builds /var/lib/kvprov/sglang-parse-venv)")
    given = {"api and admin": {"api.key": KEY, "admin_api.key": ADMIN}, "api only": {"api.key": KEY}, "none": {}}[files]
    text = written_yaml(tmp_path, **given)
    admin = ADMIN if "admin_api.key" in given else (tmp_path / "sglang-admin.key").read_text().strip()
    assert yaml.safe_load(text) == {**({"api-key": KEY} if "api.key" in given else {}), "admin-api-key": admin}
    if "admin_api.key" not in given:  # the host's own: random, root-only, kept by the next deploy
        assert len(admin) == 48 and admin.isalnum() and oct((tmp_path / "sglang-admin.key").stat().st_mode & 0o777) == "0o600"
        assert written_yaml(tmp_path, **given) == text and (tmp_path / "sglang-admin.key").read_text().strip() == admin
    r = subprocess.run([python, "-c", DECIDE, str(tmp_path / "sglang-api-key.yaml"), KEY, admin],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout)
    assert (got["api_key"], got["admin_api_key"]) == (KEY if "api.key" in given else None, admin)
    d = got["decisions"]
    for route in ("/hicache/storage-backend/clear", "/flush_cache", "/update_weights_from_disk"):
        assert (d[f"{route} inference"], d[f"{route} admin"], d[f"{route} none"]) == (False, True, False), route
    # inference: its own key, or open without one (an engine on loopback, kvprov check's rule beyond)
    assert (d["/v1/completions inference"], d["/v1/completions none"]) == (True, "api.key" not in given)


def test_the_unit_hands_the_credential_over_with_an_admin_key_alone(tmp_path):
    """An admin key without an API key: SGLang still reads the credential (--config), and the
    admin routes are closed to anyone without it."""
    (tmp_path / "admin.key").write_text(ADMIN + "\n")
    (tmp_path / "admin.key").chmod(0o600)
    host = render_one_host(tmp_path, None, kvprov_engine_admin_api_key_file=str(tmp_path / "admin.key"))
    unit = parse_unit((host / "etc/systemd/system/kvprov-sglang-main.service").read_text())
    argv = exec_argv(dict(unit["Service"])["ExecStart"], from_show=False)
    assert argv[argv.index("--config") + 1] == "%d/sglang-api-key.yaml"
    assert ("LoadCredential", "sglang-api-key.yaml:/etc/kvprov/secrets/sglang-api-key.yaml") in unit["Service"]
    assert ADMIN not in "".join(p.read_text() for p in host.rglob("*") if p.is_file())


def test_check_says_only_sglang_reads_an_admin_key_and_checks_it_as_a_secret_file(tmp_path):
    from tests.unit.test_check_host_values import private_file, problems

    key, admin = private_file(tmp_path, "api.key", KEY), private_file(tmp_path, "admin.key", ADMIN)
    exposed = {"kvprov_engine": "sglang_hicache", "kvprov_engine_host": "0.0.0.0",
               "kvprov_engine_clients": ["10.0.0.0/8"], "kvprov_engine_api_key_file": key}
    assert not [p for p in problems(**exposed) if "admin" in p]  # its admin routes get a key of the host's own
    other = problems(kvprov_engine="vllm_offload", kvprov_vllm_offload_cpu_bytes_to_use=1 << 30,
                     kvprov_engine_admin_api_key_file=admin)
    assert any(p.startswith("warning kvprov_engine_admin_api_key_file: only engine sglang_hicache reads it")
               for p in other), other
    assert [p for p in problems(kvprov_engine_admin_api_key_file=str(tmp_path / "nope"))
            if p.startswith("error kvprov_engine_admin_api_key_file:")]  # checked as a secret file
