"""Ansible Vault (#25): a vault-encrypted group_vars file and an inline `!vault` value give
the same `check` and `render` as the plaintext inventory, with every way Ansible takes the
password (--vault-password-file, --vault-id, -J/--ask-vault-pass, ANSIBLE_VAULT_PASSWORD_FILE,
vault_password_file in the user's ansible.cfg); without it, a clear error naming the file
(exit 2); a decrypted value never appears in check's messages. `render` runs ansible-playbook,
so the password reaches Ansible's own runs too."""

from __future__ import annotations

import filecmp
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.parsing.vault import VaultLib, VaultSecret

from tests.conftest import ROOT

PASSWORD = "kvprov-vault-pw"
MODEL = "/models/Vaulted-8B"
GROUP_VARS = "kvprov_storage_profile: local\nkvprov_storage_pnfs_layout: none\nkvprov_engine_host: 127.0.0.1\n"
INVENTORY = "all:\n  children:\n    gpu_nodes:\n      hosts:\n        v1:\n          ansible_host: 10.0.0.5\n"


def encrypt(text: str) -> str:
    return VaultLib([("default", VaultSecret(PASSWORD.encode()))]).encrypt(text).decode()


def write_inventory(d: Path, vaulted: bool, model: str = MODEL) -> Path:
    (d / "group_vars").mkdir(parents=True)
    (d / "inv.yml").write_text(INVENTORY)
    (d / "group_vars/gpu_nodes.yml").write_text(encrypt(GROUP_VARS) if vaulted else GROUP_VARS)
    if vaulted:  # an inline value in a plain file
        inline = "\n".join("  " + line for line in encrypt(model).splitlines())
        (d / "group_vars/all.yml").write_text(f"kvprov_engine_model_path: !vault |\n{inline}\n")
    else:
        (d / "group_vars/all.yml").write_text(f"kvprov_engine_model_path: {model}\n")
    (d / "pw").write_text(PASSWORD + "\n")
    return d / "inv.yml"


def kvprov(cwd: Path, *args: str, env: dict | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_VAULT")}
    return subprocess.run([sys.executable, "-m", "kvprov", *args], cwd=cwd, env={**clean, **(env or {})},
                          input=stdin, capture_output=True, text=True, timeout=600)


def same_tree(a: Path, b: Path) -> list[str]:
    """Files that differ or exist on one side only."""
    cmp = filecmp.dircmp(a, b)
    out = [*cmp.left_only, *cmp.right_only, *cmp.diff_files, *cmp.funny_files]
    for sub in cmp.common_dirs:
        out += [f"{sub}/{x}" for x in same_tree(a / sub, b / sub)]
    return out


@pytest.fixture(scope="module")
def plain_render(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("plain")
    write_inventory(d, vaulted=False)
    r = kvprov(d, "render", "inv.yml", "--out", "out")
    assert r.returncode == 0, r.stdout + r.stderr
    assert MODEL in (d / "out/v1/etc/systemd/system/kvprov-sglang-main.service").read_text()
    return d / "out"


WAYS = {
    "--vault-password-file": (["--vault-password-file", "pw"], {}, None, None),
    "--vault-id": (["--vault-id", "prod@pw"], {}, None, None),
    "-J (asked once)": (["-J"], {}, PASSWORD + "\n", None),
    "ANSIBLE_VAULT_PASSWORD_FILE": ([], {"ANSIBLE_VAULT_PASSWORD_FILE": "pw"}, None, None),
    "the user's ansible.cfg": ([], {}, None, "[defaults]\nvault_password_file = pw\n"),
}


@pytest.mark.parametrize("way", WAYS)
def test_a_vaulted_inventory_checks_and_renders_as_the_plaintext_one(tmp_path, plain_render, way):
    args, env, stdin, cfg = WAYS[way]
    write_inventory(tmp_path, vaulted=True)
    if cfg:
        (tmp_path / "ansible.cfg").write_text(cfg)  # Ansible reads ./ansible.cfg; kvprov passes its password on
        env = {**env, "ANSIBLE_CONFIG": str(tmp_path / "ansible.cfg")}
    if "ANSIBLE_VAULT_PASSWORD_FILE" in env:
        env = {**env, "ANSIBLE_VAULT_PASSWORD_FILE": str(tmp_path / env["ANSIBLE_VAULT_PASSWORD_FILE"])}
    temp = tmp_path / "tmp"  # kvprov's own temporary directory (other tests run at the same time)
    temp.mkdir()
    env = {**env, "TMPDIR": str(temp)}
    r = kvprov(tmp_path, "check", "inv.yml", *args, env=env, stdin=stdin)
    assert r.returncode == 0, r.stdout + r.stderr
    r = kvprov(tmp_path, "render", "inv.yml", "--out", "out", *args, env=env, stdin=stdin)
    assert r.returncode == 0, r.stdout + r.stderr
    assert same_tree(plain_render, tmp_path / "out") == []
    assert not list(temp.glob("kvprov-vault-*")), "the prompted password's file stays behind"


def test_without_the_password_the_error_names_the_file_and_nothing_is_rendered(tmp_path):
    write_inventory(tmp_path, vaulted=True)
    for command in (["check", "inv.yml"], ["render", "inv.yml", "--out", "out"]):
        r = kvprov(tmp_path, *command)
        assert r.returncode == 2, r.stdout + r.stderr
        out = r.stdout + r.stderr
        assert re.search(r"group_vars/(all|gpu_nodes)\.yml(:1)?: cannot decrypt", out) and "--vault-password-file" in out
        assert "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()
    r = kvprov(tmp_path, "check", "inv.yml", "--vault-password-file", str(ROOT / "README.md"))  # the wrong one
    assert r.returncode == 2 and "Decryption failed" in r.stdout + r.stderr, r.stdout + r.stderr


def test_check_never_shows_a_decrypted_value(tmp_path):
    bad = "/models/Vaulted\tsecret-name"  # refused (a tab), and shown escaped in the message
    write_inventory(tmp_path, vaulted=True, model=bad)
    r = kvprov(tmp_path, "check", "inv.yml", "--vault-password-file", "pw")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "kvprov_engine_model_path" in r.stdout and "<vaulted>" in r.stdout, r.stdout
    assert "secret-name" not in r.stdout + r.stderr


def test_check_never_shows_a_value_of_a_whole_file_encrypted_vars_file(tmp_path):
    """Ansible decrypts a vaulted vars file whole and its values carry no mark of it (#39): every
    string of 4+ characters in it counts as a secret in kvprov's messages (a short one, a flag or a
    small number, stays shown), nested ones too; the same value from a plain file is shown."""
    write_inventory(tmp_path, vaulted=True)
    secret = "/etc/kvprov/s3cr3t-key-file-name"
    extra = f"kvprov_engine_api_key_file: {secret}\nkvprov_engine_environment: {{HF_HOME: \"a\\tnested-s3cr3t\"}}\n"
    (tmp_path / "group_vars/gpu_nodes.yml").write_text(encrypt(GROUP_VARS + extra))
    r = kvprov(tmp_path, "check", "inv.yml", "--vault-password-file", "pw")
    assert r.returncode == 2, r.stdout + r.stderr
    assert 'kvprov_engine_api_key_file: "<vaulted>" is not a file' in r.stdout, r.stdout
    assert "kvprov_engine_environment" in r.stdout and "s3cr3t" not in r.stdout + r.stderr, r.stdout
    (tmp_path / "group_vars/gpu_nodes.yml").write_text(GROUP_VARS + extra)  # not encrypted: shown as it is
    r = kvprov(tmp_path, "check", "inv.yml", "--vault-password-file", "pw")
    assert secret in r.stdout and "nested-s3cr3t" in r.stdout, r.stdout


def test_a_vault_encrypted_extra_vars_file_is_read_like_an_inventory_file(tmp_path):
    write_inventory(tmp_path, vaulted=True)
    (tmp_path / "extra.yml").write_text(encrypt("kvprov_sglang_tp_size: 0\n"))
    r = kvprov(tmp_path, "check", "inv.yml", "-e", "@extra.yml", "--vault-password-file", "pw")
    assert r.returncode == 2 and "-e (extra vars): kvprov_sglang_tp_size: 0 is out of range" in r.stdout, r.stdout
    r = kvprov(tmp_path, "check", "inv.yml", "-e", "@extra.yml")
    assert r.returncode == 2 and "-e @extra.yml" in r.stderr and "Traceback" not in r.stderr, r.stderr


KEY = "sk-vaulted-0123456789abcdef"


def test_a_vault_encrypted_secret_file_is_checked_decrypted_and_never_shown(tmp_path):
    """#39: kvprov_engine_api_key_file (and the S3 and ONTAP credentials files) may be
    `ansible-vault encrypt`-ed, as Ansible's file lookup that deploy copies them with decrypts
    them; check reads the plain text (any mode: the file is encrypted) and never prints it."""
    write_inventory(tmp_path, vaulted=True)
    key = tmp_path / "api.key"
    key.write_text(encrypt(KEY + "\n"))
    key.chmod(0o644)
    with open(tmp_path / "group_vars/all.yml", "a") as f:
        f.write(f"kvprov_engine_api_key_file: {key}\n")
    r = kvprov(tmp_path, "check", "inv.yml", "--vault-password-file", "pw")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "api.key" not in r.stdout, r.stdout  # no finding, not even "readable by others"

    key.write_text(encrypt(f"{KEY}\nsecond line {KEY[:12]}\n"))  # refused by the one-line rule, on the plain text
    r = kvprov(tmp_path, "check", "inv.yml", "--vault-password-file", "pw")
    assert r.returncode == 2 and f'"{key}" must hold the secret on one line' in r.stdout, r.stdout
    assert KEY[:12] not in r.stdout + r.stderr

    (tmp_path / "group_vars/gpu_nodes.yml").write_text(GROUP_VARS)  # no password needed for the inventory
    (tmp_path / "group_vars/all.yml").write_text(f"kvprov_engine_model_path: {MODEL}\nkvprov_engine_api_key_file: {key}\n")
    r = kvprov(tmp_path, "check", "inv.yml")
    assert r.returncode == 2 and "vault-encrypted and no vault password was given" in r.stdout, r.stdout
    r = kvprov(tmp_path, "check", "inv.yml", "--vault-password-file", str(ROOT / "LICENSE"))
    assert r.returncode == 2 and "no vault password given decrypts it" in r.stdout, r.stdout


def test_ontap_credentials_may_be_vault_encrypted(tmp_path):
    from ansible.parsing.vault import VaultSecretsContext

    from kvprov import vault
    from kvprov.storage import credentials

    path = tmp_path / "ontap.cred"
    path.write_text(encrypt(f"username=admin\npassword={KEY}\n"))
    path.chmod(0o644)
    context = VaultSecretsContext.current(optional=True)
    saved = context.secrets if context else None
    try:
        if context is None:
            VaultSecretsContext.initialize(VaultSecretsContext([]))
        VaultSecretsContext.current().secrets = []
        with pytest.raises(credentials.CredentialsError, match="no vault password was given"):
            credentials.read(str(path))
        VaultSecretsContext.current().secrets = [("default", VaultSecret(PASSWORD.encode()))]
        got = credentials.read(str(path))
        assert (got.username, got.password) == ("admin", KEY)
        assert vault.hide(f"password {KEY}") == "password <vaulted>"
        path.write_text(f"username=admin\npassword={KEY}\n")  # a plain one still must be 0600
        with pytest.raises(credentials.CredentialsError, match="chmod 600"):
            credentials.read(str(path))
    finally:
        VaultSecretsContext.current().secrets = saved or []


def test_the_deploy_preflight_and_copy_read_a_vaulted_key_file(tmp_path):
    """ansible-playbook, as deploy runs it: the roles' preflight accepts the vaulted key file and
    the engine role's lookup (roles/engine/tasks/secrets.yml) copies the plain key."""
    from tests.unit.test_preflight import LAB_VALUES

    key = tmp_path / "api.key"
    key.write_text(encrypt(KEY + "\n"))
    (tmp_path / "pw").write_text(PASSWORD + "\n")
    inv = tmp_path / "inventory.yml"
    inv.write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
        "children": {"gpu_nodes": {"vars": {**LAB_VALUES, "kvprov_engine_api_key_file": str(key)},
                                   "hosts": {"v1": {}}}}}}))
    out = tmp_path / "copied"
    play = tmp_path / "play.yml"
    play.write_text(f"""- name: Preflight and the key's copy
  hosts: gpu_nodes
  gather_facts: false
  roles: [preflight]
  tasks:
    - name: Copy the key as the engine role does
      ansible.builtin.copy:
        content: "VLLM_API_KEY={{{{ lookup('ansible.builtin.file', kvprov_engine_api_key_file) | trim }}}}\\n"
        dest: {out}
        mode: "0600"
""")
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
           "ANSIBLE_NOCOLOR": "1"}
    r = subprocess.run(["ansible-playbook", "-i", str(inv), str(play), "--vault-password-file", str(tmp_path / "pw")],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert out.read_text() == f"VLLM_API_KEY={KEY}\n"
