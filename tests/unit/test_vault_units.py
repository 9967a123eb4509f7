"""kvprov/vault.py in-process (#41 item 1; test_vault.py runs the CLI end to end, too slow to
run per mutant): the command line's vault sources as ansible-playbook gets them, the prompted
password's private file, Ansible's DataLoader and inline values given the passwords, whole
files decrypted, and every decrypted value hidden however a message escapes it."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import stat

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.parsing.vault import EncryptedString, VaultLib, VaultSecret, VaultSecretsContext

from kvprov import vault


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    """Each test its own remembered secrets, command-line sources and Ansible vault context (process state)."""
    monkeypatch.setattr(vault, "_secrets", set())
    monkeypatch.setattr(vault, "_cli_ids", [])
    monkeypatch.setattr(VaultSecretsContext, "_current", VaultSecretsContext._current)  # restored after the test


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    vault.add_args(p)
    return p.parse_args(list(argv))


def encrypt(text: str, password: str, label: str = "default") -> bytes:
    return VaultLib([(label, VaultSecret(password.encode()))]).encrypt(text)


def test_the_command_lines_sources_reach_ansible_playbook_as_vault_ids(tmp_path, monkeypatch):
    (tmp_path / "pw").write_text("x\n")
    monkeypatch.chdir(tmp_path)
    asked = []
    monkeypatch.setattr(vault.getpass, "getpass", lambda prompt: asked.append(prompt) or "typed")
    monkeypatch.setattr(vault.atexit, "register", lambda *a: None)
    vault.configure(parse("--vault-id", "dev@pw", "--vault-id", "/nowhere/script", "--vault-pass-file", "pw",
                          "--vault-id", "ops@prompt", "-J"))
    args = vault.playbook_args()
    assert args[0::2] == ["--vault-id"] * 5
    ids = args[1::2]
    # --vault-id's in order, then the password files, then -J; existing files made absolute
    assert [ids[0], ids[1], ids[3]] == [f"dev@{tmp_path}/pw", "/nowhere/script", f"{tmp_path}/pw"]
    assert ids[2].startswith("ops@/") and "@" not in ids[4]
    assert asked == ["Vault password (ops): ", "Vault password: "]  # each prompt once, the label named
    prompted = (ids[2].partition("@")[2], ids[4])
    assert [open(p).read() for p in prompted] == ["typed\n", "typed\n"]
    for p in prompted:
        shutil.rmtree(os.path.dirname(p))
    vault.configure(parse())  # a later command without sources: none left over
    assert vault.playbook_args() == []
    monkeypatch.setattr(vault.getpass, "getpass", lambda prompt: pytest.fail("asked"))
    vault.configure(argparse.Namespace())  # a command without the vault options: nothing asked, nothing given
    assert vault.playbook_args() == []


def test_a_prompted_password_lives_in_a_root_only_file_in_a_private_directory_removed_at_exit(monkeypatch):
    at_exit = []
    monkeypatch.setattr(vault.atexit, "register", lambda *a: at_exit.append(a))
    path = vault.password_file("s3cret")
    try:
        assert open(path).read() == "s3cret\n"
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
        [(fn, *args)] = at_exit
        fn(*args)
        assert not os.path.exists(os.path.dirname(path))
        fn(*args)  # already gone (removed by hand): the exit still goes quietly
    finally:
        if os.path.exists(path):
            os.unlink(path)


def test_the_loader_and_inline_values_decrypt_with_labelled_and_plain_sources(tmp_path, capfd):
    (tmp_path / "dev-pw").write_text("dev-password\n")
    (tmp_path / "plain-pw").write_text("plain-password\n")
    vault.configure(parse("--vault-id", f"dev@{tmp_path}/dev-pw", "--vault-password-file", f"{tmp_path}/plain-pw"))
    loader = DataLoader()
    vault.set_secrets(loader)
    (tmp_path / "a.yml").write_bytes(encrypt("a: 1\n", "dev-password", "dev"))
    (tmp_path / "b.yml").write_bytes(encrypt("b: 2\n", "plain-password"))
    assert "vault" not in capfd.readouterr().err  # every source taken as given: no warning from Ansible
    # cache="none": DataLoader's cache (class-wide) would answer for a file another loader decrypted
    assert loader.load_from_file(str(tmp_path / "a.yml"), cache="none") == {"a": 1}
    assert loader.load_from_file(str(tmp_path / "b.yml"), cache="none") == {"b": 2}
    assert vault.decrypted(encrypt("API_KEY=k1\n", "plain-password")) == "API_KEY=k1\n"
    inline = EncryptedString(ciphertext=encrypt("inline-value", "dev-password", "dev").decode())
    assert vault.revealed(inline) == "inline-value" and vault.hide("x inline-value y") == "x <vaulted> y"
    assert vault.revealed("plain") == "plain" and vault.revealed(3) == 3


def test_a_file_decrypts_only_with_a_password_given(tmp_path, monkeypatch):
    monkeypatch.setattr(VaultSecretsContext, "_current", None)
    with pytest.raises(ValueError, match="no vault password was given"):
        vault.decrypted(encrypt("x", "pw"))
    monkeypatch.setattr(VaultSecretsContext, "_current", VaultSecretsContext([]))
    with pytest.raises(ValueError, match="no vault password was given"):
        vault.decrypted(encrypt("x", "pw"))
    monkeypatch.setattr(VaultSecretsContext, "_current", VaultSecretsContext([("default", VaultSecret(b"other"))]))
    with pytest.raises(ValueError, match="no vault password given decrypts it"):
        vault.decrypted(encrypt("x", "pw"))
    assert not vault.has_secrets()


def test_a_decrypted_file_hides_its_text_lines_and_secret_values_only(monkeypatch):
    monkeypatch.setattr(VaultSecretsContext, "_current", VaultSecretsContext([("default", VaultSecret(b"pw"))]))
    assert not vault.has_secrets()
    vault.decrypted(encrypt("HOST=gpu.example\nAPI_KEY = abc123\nhf_token=t0k9\nplain words\n", "pw"))
    assert vault.has_secrets()
    assert vault.hide("key abc123, token t0k9") == "key <vaulted>, token <vaulted>"
    assert vault.hide("host gpu.example") == "host gpu.example"  # not a secret's value: shown
    assert vault.hide("line: HOST=gpu.example") == "line: <vaulted>"  # a whole line of the file: hidden
    assert vault.hide("plain words") == "<vaulted>"


def test_a_secret_is_hidden_however_a_message_escapes_it():
    secret = 'pa"ss\tw\\rd\u2028end'
    vault._remember(secret)
    assert vault.hide(secret) == "<vaulted>"
    assert vault.hide(json.dumps(secret)) == '"<vaulted>"'
    assert vault.hide(repr(secret)) == "'<vaulted>'"
    from kvprov.sinks import shown
    assert vault.hide(f"[{shown(secret)}]") == "[<vaulted>]"
    long = "x" * 100 + "\n"
    vault._remember(long)
    assert vault.hide(shown(long, limit=10**6)) == "<vaulted>"
    vault._remember("")
    assert "" not in vault._secrets


def test_the_longest_secret_is_hidden_first():
    vault._remember("abc")
    vault._remember("abcdef")
    assert vault.hide("abcdef abc") == "<vaulted> <vaulted>"


def test_strings_of_a_whole_file_encrypted_vars_file_are_hidden_from_4_characters_on(tmp_path, monkeypatch):
    """vault.from_encrypted_file: a value Ansible loaded from an `ansible-vault encrypt`-ed file is
    remembered once it has 4 characters; from a plain or missing file, or not a string, never.
    Whether a file is encrypted is read once."""
    monkeypatch.setattr(vault, "_encrypted", {})
    sealed, plain = tmp_path / "sealed.yml", tmp_path / "plain.yml"
    sealed.write_text("$ANSIBLE_VAULT;1.1;AES256\n6162\n")
    plain.write_text("x: abcd\n")
    for value, path in (("abc", sealed), ("abcd", plain), ("efgh", tmp_path / "missing"), (1234, sealed),
                        ("ijkl", None)):
        vault.from_encrypted_file(value, str(path) if path else None)
    assert not vault.has_secrets() and vault._encrypted == {str(plain): False, str(tmp_path / "missing"): False}
    vault.from_encrypted_file("abcd", str(sealed))
    assert vault.hide("see abcd, abc") == "see <vaulted>, abc"
    sealed.write_text("plain now\n")
    vault.from_encrypted_file("wxyz", str(sealed))  # read once: still the encrypted file's
    assert vault.hide("wxyz") == "<vaulted>"


def test_an_inventorys_whole_file_encrypted_vars_are_remembered_nested_ones_too(tmp_path, monkeypatch):
    """kvprov.inventory.load: every string of a vault-encrypted group_vars file (in mappings and
    lists too, not the mappings' keys) is hidden from kvprov's messages; a plain file's are not."""
    from kvprov import inventory

    monkeypatch.setattr(vault, "_encrypted", {})
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "inv.yml").write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n        h1:\n"
                                      "          ansible_host: 127.0.0.1\n")
    sealed = "name_a: top-secret-1\nname_b: {inner-key: [nested-secret-2]}\nname_c: abc\n"
    (tmp_path / "group_vars/all.yml").write_text(
        VaultLib([("default", VaultSecret(b"pw-1234"))]).encrypt(sealed).decode())
    (tmp_path / "host_vars/h1.yml").write_text("name_d: plain-value-3\n")
    (tmp_path / "pw").write_text("pw-1234\n")
    vault.configure(parse("--vault-password-file", str(tmp_path / "pw")))
    inventory.load(str(tmp_path / "inv.yml"))
    assert vault.hide("top-secret-1 nested-secret-2 inner-key abc plain-value-3 127.0.0.1") == \
        "<vaulted> <vaulted> inner-key abc plain-value-3 127.0.0.1"
