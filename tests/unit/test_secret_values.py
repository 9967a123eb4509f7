"""#39: each one-line secret may be given as its value instead of a controller file
(kvprov_engine_api_key, kvprov_engine_admin_api_key, kvprov_engine_hf_token), the way Ansible
shops keep secrets: an inline `!vault` value or "{{ vault_... }}". check judges it without a word
of it, render gives what the key file gives, the engine role's own task writes it root-only,
deploy's rotation record follows it, and loadtest sends it. The lab deploys one for real
(tests/lab/test_5_engine.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

from kvprov import check, deployed_secrets, inventory
from kvprov import loadtest as lt
from kvprov.specs import read_specs
from tests.conftest import ROOT
from tests.unit.test_preflight import LAB_VALUES
from tests.unit.test_vault import INVENTORY, MODEL, PASSWORD, encrypt, kvprov, same_tree

KEY = "sk-value-0123456789abcdef"
SPECS = check.read_specs(inventory.roles_dir())
DEFAULTS = inventory.read_role_defaults(inventory.roles_dir())


def inline(value: str) -> str:
    return "!vault |\n" + "\n".join("  " + line for line in encrypt(value).splitlines())


def write(d: Path, group_vars: str) -> None:
    (d / "group_vars").mkdir(exist_ok=True)
    (d / "inv.yml").write_text(INVENTORY)
    (d / "group_vars/gpu_nodes.yml").write_text(
        f"kvprov_storage_profile: local\nkvprov_storage_pnfs_layout: none\nkvprov_engine_model_path: {MODEL}\n"
        + group_vars)
    (d / "pw").write_text(PASSWORD + "\n")


def host_problems(**values) -> list[str]:
    server = {"kvprov_storage_server": "10.0.0.5", "kvprov_engine_uid": 2001, "kvprov_engine_model_revision": "0123abc"}
    found = check.check_host_values(check.host_from_values("gpu1", {**server, **values}, DEFAULTS), SPECS)
    return [f"{p.severity} {p.variable}: {p.message}" for p in found]


def test_the_value_variables_are_no_log_strings_of_the_engine_role():
    specs = read_specs(inventory.roles_dir())
    for name, file in check.values.SECRET_VALUES.items():
        assert specs[name].no_log and specs[name].type == "str" and specs[name].role == "engine", name
        assert file in specs and not specs[file].no_log
    assert len(set(specs.values())) == len(specs)  # frozen, so hashable: kvprov's rules key sets by them


def test_a_secret_value_is_one_line_of_printable_ascii():
    assert check.values.secret_value("") == [] and check.values.secret_value(KEY) == []
    assert check.values.secret_value(f" {KEY}\n") == []  # trimmed, as the role trims it
    for bad in (f"{KEY} more", f"{KEY}\nmore", 'sk-"quoted"', "sk-$HOME", 12345678, None, [KEY]):
        [finding] = check.values.secret_value(bad)
        assert "the value is not shown" in finding.message and str(bad) not in finding.message, bad


def test_check_judges_a_value_without_showing_it(tmp_path):
    write(tmp_path, f"kvprov_engine_api_key: {inline(KEY)}\nkvprov_engine_hf_token: {inline('hf_' + KEY)}\n")
    r = kvprov(tmp_path, "check", "inv.yml", "--vault-password-file", "pw")
    assert r.returncode == 0, r.stdout + r.stderr
    bad = f"{KEY} second-word"  # a space: systemd's EnvironmentFile= would cut it
    write(tmp_path, f"kvprov_engine_api_key: {inline(bad)}\nkvprov_engine_admin_api_key: 12345678\n")
    r = kvprov(tmp_path, "check", "inv.yml", "--vault-password-file", "pw")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "kvprov_engine_api_key: must be the secret as a string of printable ASCII on one line" in r.stdout
    assert "kvprov_engine_admin_api_key: must be the secret as a string" in r.stdout  # a number: not shown either
    assert KEY[:10] not in r.stdout + r.stderr and "12345678" not in r.stdout + r.stderr
    assert "group_vars/gpu_nodes.yml" in r.stdout  # where it is set


def test_a_secret_given_twice_is_refused_and_a_value_is_an_api_key(tmp_path):
    key = tmp_path / "key"
    key.write_text(KEY + "\n")
    key.chmod(0o600)
    twice = host_problems(kvprov_engine_api_key=KEY, kvprov_engine_api_key_file=str(key))
    assert twice == [f"error kvprov_engine_api_key: given twice: as this value and in kvprov_engine_api_key_file "
                     f"({key}); keep one of the two"]
    assert all(KEY not in p for p in twice)
    # beyond loopback, the value is the API key the rule asks for (the clients' networks are still needed)
    exposed = host_problems(kvprov_engine_host="0.0.0.0", kvprov_engine_api_key=KEY)
    assert len(exposed) == 1 and "kvprov_engine_clients" in exposed[0], exposed
    assert "without an API key" in host_problems(kvprov_engine_host="0.0.0.0")[0]
    # SGLang's admin key, as a value, is SGLang's only
    [warning] = [p for p in host_problems(kvprov_engine="vllm_baseline", kvprov_engine_admin_api_key=KEY)
                 if "admin_api_key" in p]
    assert warning.startswith("warning kvprov_engine_admin_api_key: only engine sglang_hicache reads it"), warning


def test_a_vaulted_value_renders_as_the_plaintext_key_file(tmp_path):
    plain, vaulted = tmp_path / "plain", tmp_path / "vaulted"
    plain.mkdir()
    vaulted.mkdir()
    key = plain / "api.key"
    key.write_text(KEY + "\n")
    key.chmod(0o600)
    write(plain, f"kvprov_engine_api_key_file: {key}\n")
    write(vaulted, f"kvprov_engine_api_key: {inline(KEY)}\n")
    for d, args in ((plain, []), (vaulted, ["--vault-password-file", "pw"])):
        r = kvprov(d, "render", "inv.yml", "--out", "out", *args)
        assert r.returncode == 0, r.stdout + r.stderr
        assert KEY not in r.stdout + r.stderr
    assert same_tree(plain / "out", vaulted / "out") == []
    rendered = "".join(p.read_text(errors="replace") for p in (vaulted / "out").rglob("*") if p.is_file())
    assert KEY not in rendered and "sglang-api-key.yaml" in rendered  # SGLang's key: a credential, never in a file


def run_secrets_task(tmp_path: Path, engine: str, group_vars: dict, vault: bool = True) -> subprocess.CompletedProcess:
    """The engine role's own tasks/secrets.yml with ansible-playbook on this machine, its
    destinations moved into tmp_path (extra vars win over role vars)."""
    inv = tmp_path / "inventory.yml"
    inv.write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
        "children": {"gpu_nodes": {"vars": {**LAB_VALUES, "kvprov_engine": engine, **group_vars},
                                   "hosts": {"v1": {}}}}}}))
    play = tmp_path / "play.yml"
    play.write_text(textwrap.dedent("""\
        - name: The engine role's secrets, as deploy writes them
          hosts: gpu_nodes
          gather_facts: false
          roles: [preflight]
          tasks:
            - name: The secrets task file
              ansible.builtin.include_role:
                name: engine
                tasks_from: secrets.yml
        """))
    secrets = tmp_path / "secrets"
    moved = {"_kvprov_engine_secrets_env": f"{secrets}/engine.env",
             "_kvprov_engine_sglang_key_file": f"{secrets}/sglang-api-key.yaml",
             "_kvprov_engine_sglang_admin_file": f"{secrets}/sglang-admin.key"}
    (tmp_path / "pw").write_text(PASSWORD + "\n")
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
           "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run(["ansible-playbook", "-v", "-i", str(inv), str(play), "-e", json.dumps(moved),
                           *(["--vault-password-file", str(tmp_path / "pw")] if vault else [])],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)


class Vaulted(str):
    """An inline !vault value in the YAML inventory that yaml.safe_dump writes."""


yaml.SafeDumper.add_representer(Vaulted, lambda d, v: d.represent_scalar("!vault", encrypt(str(v)), style="|"))


def test_the_engine_role_writes_values_root_only_and_shows_none(tmp_path):
    vllm = tmp_path / "vllm"
    vllm.mkdir()
    r = run_secrets_task(vllm, "vllm_baseline", {"kvprov_engine_api_key": Vaulted(KEY),
                                                "kvprov_engine_hf_token": Vaulted("hf_" + KEY)})
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert f'"path": "{vllm}/secrets"' in r.stdout  # the destinations moved: nothing written to this machine's /etc
    env = vllm / "secrets/engine.env"
    assert env.read_text() == f"VLLM_API_KEY={KEY}\nHF_TOKEN=hf_{KEY}\n" and oct(env.stat().st_mode & 0o777) == "0o600"
    assert KEY not in r.stdout + r.stderr

    sglang = tmp_path / "sglang"
    sglang.mkdir()
    r = run_secrets_task(sglang, "sglang_hicache", {"kvprov_engine_api_key": Vaulted(KEY),
                                                    "kvprov_engine_admin_api_key": Vaulted("admin-" + KEY)})
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert yaml.safe_load((sglang / "secrets/sglang-api-key.yaml").read_text()) == {
        "api-key": KEY, "admin-api-key": "admin-" + KEY}
    assert not (sglang / "secrets/sglang-admin.key").exists()  # no key of the host's own: the given one
    assert KEY not in r.stdout + r.stderr


def test_the_preflight_refuses_a_value_given_twice_naming_no_value(tmp_path):
    key = tmp_path / "key"
    key.write_text(KEY + "\n")
    key.chmod(0o600)
    r = run_secrets_task(tmp_path, "vllm_baseline", {"kvprov_engine_api_key": KEY, "kvprov_engine_api_key_file": str(key)},
                         vault=False)
    assert r.returncode == 2 and "kvprov_engine_api_key: given twice" in r.stdout, r.stdout[-4000:]
    assert KEY not in r.stdout + r.stderr and not (tmp_path / "secrets").exists()


def test_deploys_rotation_record_follows_a_value(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    inv = tmp_path / "inv.yml"

    def digest(key: str) -> str | None:
        inv.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {
            "vars": {"kvprov_storage_server": "10.0.0.5", "kvprov_engine": "vllm_baseline"},
            "hosts": {"h": {"kvprov_engine_api_key": key}}}}}}))
        return deployed_secrets.digests([str(inv)], ["h"])["h"]

    one = digest("key-one")
    assert len(one) == 64 and digest("key-one") == one and digest("key-two") != one
    assert digest("{{ vault_engine_api_key }}") is None  # only Ansible can resolve it: converged every time
    assert digest("") == ""
    record = tmp_path / "state/kvprov/deployed-secrets"
    digest("key-three")
    deployed_secrets.save([str(inv)], ["h"])
    assert "key-three" not in "".join(p.read_text() for p in record.glob("*.json"))
    assert deployed_secrets.changed([str(inv)], ["h"]) == []
    digest("key-four")
    assert deployed_secrets.changed([str(inv)], ["h"]) == ["h"]


def test_loadtest_sends_the_value_or_a_vaulted_key_files_plain_key(tmp_path, monkeypatch):
    from ansible.parsing.vault import VaultSecret, VaultSecretsContext

    state = {"engine": {"name": "vllm_offload", "instances": [{"name": "main", "port": 8000}]}}
    hosts = {"a": {"ansible_host": "10.0.0.5", "kvprov_engine_host": "0.0.0.0", "kvprov_engine_api_key": KEY}}
    [ep] = lt.inventory_endpoints(hosts, {"a": state})
    assert ep.api_key == KEY and ep.problem is None
    vaulted = tmp_path / "key"
    vaulted.write_text(encrypt(KEY + "\n"))
    context = VaultSecretsContext.current(optional=True)
    if context is None:
        VaultSecretsContext.initialize(VaultSecretsContext([]))
        context = VaultSecretsContext.current()
    monkeypatch.setattr(context, "secrets", [("default", VaultSecret(PASSWORD.encode()))])
    hosts = {"a": {"ansible_host": "10.0.0.5", "kvprov_engine_host": "0.0.0.0", "kvprov_engine_api_key_file": str(vaulted)}}
    [ep] = lt.inventory_endpoints(hosts, {"a": state})
    assert ep.api_key == KEY and ep.problem is None
