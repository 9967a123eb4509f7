"""S3 credentials for NIXL's OBJ plugin and LMCache's S3 backends: only through
kvprov_engine_s3_credentials_file (AWS-style KEY=value lines) into the root-only engine.env,
never in a rendered file, a check message or Ansible's output; `kvprov check` refuses them
anywhere else; the acceptance test skips obj and says why."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvprov import bench, check
from tests.conftest import ROOT, kvprov

KEY_ID = "AKIAKVPROVTEST00042"
SECRET = "kvprov/SecretAccess+Key=42"
TOKEN = "FwoGZXIvYXdzEKvprovSessionToken//42=="
VALUES = (KEY_ID, SECRET, TOKEN)
NEEDS_ROOT = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ansible-playbook") is None,
                                reason="a local Ansible run as root (the tasks chown to root)")


def creds(tmp_path: Path, text: str | None = None, mode: int = 0o600) -> Path:
    path = tmp_path / "s3.env"
    path.write_text(text if text is not None else
                    f"# S3 for NIXL OBJ\nAWS_ACCESS_KEY_ID={KEY_ID}\n\nAWS_SECRET_ACCESS_KEY={SECRET}\n"
                    f"AWS_SESSION_TOKEN={TOKEN}\n")
    path.chmod(mode)
    return path


def inventory(tmp_path: Path, host_vars: str, group_vars: str = "") -> Path:
    inv = tmp_path / "inv.yml"
    inv.write_text("all:\n  children:\n    gpu_nodes:\n      vars:\n        kvprov_storage_profile: local\n"
                   "        kvprov_storage_pnfs_layout: none\n" + group_vars +
                   "      hosts:\n        s1:\n" + host_vars)
    return inv


def problems(inv: Path) -> list[check.Problem]:
    return check.run(str(inv))[1]


def no_value_in(text: str) -> None:
    for v in VALUES + ("hunter2", "rawsecretline"):
        assert v not in text


# ---------------------------------------------------------------------------- kvprov check

@pytest.mark.parametrize("var, value, key", [
    ("kvprov_nixl_plugins", "{obj: {active: true, bucket: kv, access_key: AKIAX, Secret_Key: hunter2}}", "Secret_Key"),
    ("kvprov_nixl_backend_options", "{session_token: hunter2}", "session_token"),
    ("kvprov_lmcache_inproc_config", "{remote_url: 's3://kv.s3.example.com', extra_config: {nixl_backend_params: "
                                     "{SECRET_KEY: hunter2}}}", "SECRET_KEY"),
    ("kvprov_lmcache_inproc_config", "{aws_secret_access_key: hunter2}", "aws_secret_access_key"),
    ("kvprov_engine_environment", "{AWS_SECRET_ACCESS_KEY: hunter2, AWS_REGION: us-east-1}", "AWS_SECRET_ACCESS_KEY"),
])
def test_credentials_anywhere_but_the_file_are_refused(tmp_path, var, value, key):
    engine = "          kvprov_engine: lmcache_inproc\n" if "lmcache" in var else ""
    found = [p for p in problems(inventory(tmp_path, engine + f"          {var}: {value}\n"))
             if p.severity == "error" and p.variable == var and p.message.startswith(f"{key}:")]
    assert found, problems(inventory(tmp_path, f"          {var}: {value}\n"))
    assert "kvprov_engine_s3_credentials_file" in found[0].message
    no_value_in(found[0].message)


def test_a_good_credentials_file_passes_and_stays_unprinted(tmp_path):
    inv = inventory(tmp_path, f"          kvprov_engine_s3_credentials_file: {creds(tmp_path)}\n"
                              "          kvprov_nixl_plugins: {obj: {active: true, bucket: kv}}\n")
    assert problems(inv) == []
    r = kvprov("check", str(inv))
    assert r.returncode == 0, r.stdout + r.stderr
    no_value_in(r.stdout + r.stderr)


@pytest.mark.parametrize("text, fragment", [
    (f"AWS_ACCESS_KEY_ID={KEY_ID}\n", "has no AWS_SECRET_ACCESS_KEY line"),
    (f"export AWS_ACCESS_KEY_ID={KEY_ID}\nAWS_SECRET_ACCESS_KEY={SECRET}\n", "line 1: only AWS_ACCESS_KEY_ID"),
    (f"AWS_ACCESS_KEY_ID={KEY_ID}\nAWS_SECRET_ACCESS_KEY={SECRET}\nrawsecretline\n", "line 3: only"),
    (f"AWS_ACCESS_KEY_ID={KEY_ID}\nAWS_SECRET_ACCESS_KEY={SECRET}\nAWS_REGION=eu-west-1\n", "line 3: AWS_REGION: only"),
    (f"AWS_ACCESS_KEY_ID={KEY_ID}\nAWS_SECRET_ACCESS_KEY=\"{SECRET}\"\n", "line 2: the value of AWS_SECRET_ACCESS_KEY"),
    (f"AWS_ACCESS_KEY_ID={KEY_ID}\nAWS_SECRET_ACCESS_KEY={SECRET}\nAWS_ACCESS_KEY_ID={KEY_ID}\n",
     "line 3: AWS_ACCESS_KEY_ID a second time"),
])
def test_a_bad_credentials_file_is_refused_without_its_values(tmp_path, text, fragment):
    inv = inventory(tmp_path, f"          kvprov_engine_s3_credentials_file: {creds(tmp_path, text)}\n")
    found = [p for p in problems(inv) if p.variable == "kvprov_engine_s3_credentials_file"]
    assert any(p.severity == "error" and fragment in p.message for p in found), found
    no_value_in("\n".join(map(str, found)))


def test_credentials_file_missing_relative_or_readable_by_others(tmp_path):
    for value, fragment in ((tmp_path / "nope", "is not a file on this controller"),
                            ("s3.env", "absolute")):
        [p] = problems(inventory(tmp_path, f"          kvprov_engine_s3_credentials_file: {value}\n"))
        assert p.severity == "error" and fragment in p.message, p
    [p] = problems(inventory(tmp_path, f"          kvprov_engine_s3_credentials_file: {creds(tmp_path, mode=0o644)}\n"))
    assert p.severity == "warning" and "chmod 600" in p.message


def test_s3_without_a_credentials_file_is_a_warning_only(tmp_path):
    """An instance role may supply them: a warning, not an error."""
    inv = inventory(tmp_path, "          kvprov_nixl_plugins: {obj: {active: true, bucket: kv}}\n"
                              "        l1:\n          kvprov_engine: lmcache_inproc\n"
                              "          kvprov_lmcache_inproc_tier: local_disk\n"
                              "          kvprov_lmcache_inproc_config: {remote_url: 's3://kv.s3.example.com'}\n")
    found = {p.host: p for p in problems(inv)}
    assert set(found) == {"s1", "l1"} and all(p.severity == "warning" for p in found.values())
    assert "plugin obj" in found["s1"].message and "kvprov_engine_s3_credentials_file" in found["s1"].message
    assert "remote_url s3://" in found["l1"].message
    assert kvprov("check", str(inv)).returncode == 0


# ---------------------------------------------------------------------------- the desired state

def test_no_rendered_file_holds_a_credential(tmp_path):
    inv = inventory(tmp_path, "        m1:\n          kvprov_engine: lmcache_inproc\n"
                              "          kvprov_lmcache_inproc_tier: local_disk\n"
                              "          kvprov_lmcache_inproc_config: {remote_url: 's3://kv.s3.example.com'}\n",
                    group_vars=f"        kvprov_engine_s3_credentials_file: {creds(tmp_path)}\n"
                               "        kvprov_nixl_plugins: {obj: {active: true, bucket: kv}}\n")
    r = kvprov("render", str(inv), "--out", str(tmp_path / "out"))
    assert r.returncode == 0, r.stdout + r.stderr
    no_value_in(r.stdout + r.stderr)
    files = [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert files
    for p in files:
        no_value_in(p.read_text())
    toml = (tmp_path / "out/s1/etc/kvprov/nixl_backend_config.toml").read_text()
    assert "[plugin.obj]" in toml and "access_key" not in toml
    for unit in ("s1/etc/systemd/system/kvprov-sglang-main.service", "m1/etc/systemd/system/kvprov-vllm-main.service"):
        assert "EnvironmentFile=/etc/kvprov/secrets/engine.env" in (tmp_path / "out" / unit).read_text()


# ---------------------------------------------------------------------------- Ansible, for real

PLAY = """\
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Check the variables first, as the engine role does (its dependency)
      ansible.builtin.import_role:
        name: preflight
    - name: Load the engine role's variables
      ansible.builtin.import_role:
        name: engine
        tasks_from: vars
      when: false
    - name: The engine role's secrets tasks
      ansible.builtin.import_tasks: {tasks}
"""


def play(tmp_path: Path, credentials: Path, *extra: str) -> tuple[subprocess.CompletedProcess, Path]:
    """roles/engine/tasks/secrets.yml on this machine, writing a scratch engine.env (-vvv --diff)."""
    book = tmp_path / "play.yml"
    book.write_text(PLAY.format(tasks=ROOT / "roles/engine/tasks/secrets.yml"))
    env_file = tmp_path / "secrets" / "engine.env"
    r = subprocess.run(["ansible-playbook", "-i", "localhost,", str(book), "-vvv", "--diff", *extra,
                        "-e", f"ansible_python_interpreter={sys.executable}",
                        "-e", f"kvprov_engine_s3_credentials_file={credentials}",
                        "-e", "kvprov_storage_profile=local", "-e", "kvprov_storage_pnfs_layout=none",
                        # a host tier this machine's memory holds (the preflight weighs it against MemTotal)
                        "-e", '{"kvprov_sglang_hicache_size": 1}',
                        "-e", f"_kvprov_engine_secrets_env={env_file}",
                        # SGLang's credential (its admin routes' key of the host's own) beside it
                        "-e", f"_kvprov_engine_sglang_key_file={env_file.parent / 'sglang-api-key.yaml'}",
                        "-e", f"_kvprov_engine_sglang_admin_file={env_file.parent / 'sglang-admin.key'}"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env={**os.environ, "ANSIBLE_ROLES_PATH": str(ROOT / "roles"), "ANSIBLE_NOCOLOR": "1"})
    return r, env_file


@NEEDS_ROOT
def test_deploy_writes_only_the_aws_lines_root_only_and_logs_none(tmp_path):
    credentials = creds(tmp_path)
    r, env_file = play(tmp_path, credentials, "--check")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    no_value_in(r.stdout + r.stderr)
    assert not env_file.exists()
    r, env_file = play(tmp_path, credentials)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    no_value_in(r.stdout + r.stderr)
    assert env_file.read_text().splitlines() == [f"AWS_ACCESS_KEY_ID={KEY_ID}", f"AWS_SECRET_ACCESS_KEY={SECRET}",
                                                 f"AWS_SESSION_TOKEN={TOKEN}"]
    assert env_file.stat().st_mode & 0o777 == 0o600 and env_file.parent.stat().st_mode & 0o777 == 0o700


@NEEDS_ROOT
def test_deploy_refuses_a_bad_credentials_file_naming_no_value(tmp_path):
    credentials = creds(tmp_path, f"AWS_ACCESS_KEY_ID={KEY_ID}\nrawsecretline\nPATH=/x\n"
                                  f"AWS_SECRET_ACCESS_KEY={SECRET}\n")
    r, env_file = play(tmp_path, credentials)
    assert r.returncode != 0 and "kvprov_engine_s3_credentials_file" in r.stdout
    assert "line 2: only AWS_ACCESS_KEY_ID" in r.stdout and "line 3: only AWS_ACCESS_KEY_ID" in r.stdout
    no_value_in(r.stdout + r.stderr)
    assert not env_file.exists()


# ---------------------------------------------------------------------------- the acceptance test

def test_bench_judges_a_skipped_run_as_skip():
    [r] = bench.judge("h1", {"result": {"skipped": "the active NIXL plugin is obj"}, "rc": -1})
    assert r.status == "skip" and "obj" in r.found


@NEEDS_ROOT
def test_bench_skips_obj_and_says_why(tmp_path):
    """The real `kvprov bench` on this machine: the obj plugin is not run (no S3, no secrets)."""
    inv = inventory(tmp_path, f"          ansible_connection: local\n"
                              f"          ansible_python_interpreter: {sys.executable}\n",
                    group_vars=f"        kvprov_storage_mount_point: {tmp_path}\n"
                               f"        kvprov_engine_s3_credentials_file: {creds(tmp_path)}\n"
                               "        kvprov_nixl_plugins: {obj: {active: true, bucket: kv}}\n"
                               "        kvprov_sglang_hicache_size: 1\n")  # what this machine's memory holds
    inv.write_text(inv.read_text().replace("        s1:\n", "        localhost:\n"))
    r = kvprov("bench", str(inv), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "bench.run" in r.stdout and "skip" in r.stdout and "obj" in r.stdout
    no_value_in(r.stdout + r.stderr)
