"""Ansible Vault for every command, with Ansible's own mechanisms.

The passwords come from what ansible-playbook itself takes: `--vault-id [LABEL@]SOURCE`,
`--vault-password-file FILE`, `-J/--ask-vault-pass` on the command line, and
ANSIBLE_VAULT_PASSWORD_FILE / ANSIBLE_VAULT_IDENTITY_LIST or their keys in the ansible.cfg
Ansible finds (`vault_password_file`, `vault_identity_list`). kvprov reads the inventory with
them (whole encrypted files and inline `!vault` values) and hands the same sources to every
ansible-playbook it starts. `--ask-vault-pass` prompts once; the password then lives in a
root-only file in a private directory for the life of the command, removed at exit.

Decrypted values are remembered (`hide`): kvprov's own messages show `<vaulted>` instead.
"""

from __future__ import annotations

import atexit
import getpass
import json
import os
import re
import shutil
import tempfile
from typing import Any

SHOWN = "<vaulted>"

_cli_ids: list[str] = []  # what the command line gave, as vault-id slugs ('label@source')
_secrets: set[str] = set()  # every decrypted string value, for hide()
_encrypted: dict[str, bool] = {}  # path -> whether it is a whole-file encrypted file (from_encrypted_file)
MIN_HIDDEN = 4  # shorter values of an encrypted vars file (a flag, a small number) stay shown


def add_args(parser) -> None:
    g = parser.add_argument_group("Ansible Vault (as ansible-playbook takes them; ANSIBLE_VAULT_PASSWORD_FILE "
                                  "and ansible.cfg's vault_password_file work too)")
    g.add_argument("--vault-id", action="append", default=[], dest="vault_ids", metavar="[LABEL@]SOURCE",
                   help="a vault identity: a password file, a script, or 'prompt' (repeatable)")
    g.add_argument("--vault-password-file", "--vault-pass-file", action="append", default=[],
                   dest="vault_password_files", metavar="FILE", help="a vault password file or script (repeatable)")
    g.add_argument("-J", "--ask-vault-pass", "--ask-vault-password", action="store_true", dest="ask_vault_pass",
                   help="ask for the vault password (once)")


def configure(args) -> None:
    """The vault sources the command line gave (Ansible adds its configured ones itself);
    --ask-vault-pass and --vault-id LABEL@prompt ask now, once."""
    _cli_ids.clear()
    ids = [*getattr(args, "vault_ids", []), *getattr(args, "vault_password_files", [])]
    if getattr(args, "ask_vault_pass", False):
        ids.append("prompt")
    for slug in ids:
        label, _, source = slug.rpartition("@")
        if source == "prompt":
            source = password_file(getpass.getpass(f"Vault password{f' ({label})' if label else ''}: "))
        elif os.path.exists(source):  # ansible-playbook runs elsewhere: a relative path would be lost
            source = os.path.abspath(source)
        _cli_ids.append(f"{label}@{source}" if label else source)


def password_file(password: str) -> str:
    """A root-only file holding a prompted password, in a private directory removed at exit."""
    directory = tempfile.mkdtemp(prefix="kvprov-vault-")  # 0700
    atexit.register(shutil.rmtree, directory, True)
    path = os.path.join(directory, "password")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(password + "\n")
    return path


def set_secrets(loader) -> None:
    """Give Ansible's DataLoader the passwords: the command line's, then Ansible's configured ones."""
    from ansible.cli import CLI
    from ansible.parsing.vault import VaultSecretsContext

    ids = [s for s in _cli_ids if "@" in s]
    files = [s for s in _cli_ids if "@" not in s]
    secrets = CLI.setup_vault_secrets(loader, vault_ids=ids, vault_password_files=files, ask_vault_pass=False,
                                      auto_prompt=False, initialize_context=False)
    loader.set_vault_secrets(secrets)
    context = VaultSecretsContext.current(optional=True)  # what inline values decrypt with: once a process
    if context is None:
        VaultSecretsContext.initialize(VaultSecretsContext(secrets))
    else:
        context.secrets = secrets


def playbook_args() -> list[str]:
    """The command line's vault sources for ansible-playbook (the configured ones it reads from
    the environment and the ansible.cfg kvprov.runner hands it)."""
    return [w for s in _cli_ids for w in ("--vault-id", s)]


def _remember(text: str) -> None:
    """A decrypted text for hide(): as it is, and as kvprov's messages, JSON and repr() escape it."""
    from kvprov.sinks import shown

    if text:
        _secrets.update({text, shown(text), shown(text, limit=len(text) * 6), json.dumps(text)[1:-1], repr(text)[1:-1]})


def revealed(value):
    """An inline !vault value (ansible.parsing.vault.EncryptedString) as its plain text,
    remembered for hide(); any other value as it is."""
    if type(value).__name__ != "EncryptedString":
        return value
    text = str(value)
    _remember(text)
    return text


def from_encrypted_file(value, path: str | None) -> None:
    """A string value Ansible loaded from `path`, remembered for hide() when that file is an
    `ansible-vault encrypt`-ed vars file (Ansible decrypts it whole and its values carry no
    mark of it): whoever vaulted the file said every value in it is secret. Values shorter than
    MIN_HIDDEN characters stay shown (hiding them would blank every message)."""
    if not isinstance(value, str) or len(value) < MIN_HIDDEN or not path:
        return
    if path not in _encrypted:
        try:
            with open(path, "rb") as f:
                _encrypted[path] = is_encrypted(f.read(64))
        except OSError:
            _encrypted[path] = False
    if _encrypted[path]:
        _remember(str.__str__(value))


def is_encrypted(data: bytes) -> bool:
    """Whether a file's content is an `ansible-vault encrypt`-ed file."""
    return data.lstrip().startswith(b"$ANSIBLE_VAULT;")


def plain(value: Any) -> Any:
    """A value Ansible loaded, without its tags (an inline !vault value decrypted): str, int, float,
    bool, None, list, dict."""
    value = revealed(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def decrypted(data: bytes) -> str:
    """A whole-file vault-encrypted controller file's plain text, as Ansible's file lookup reads
    it (deploy copies secrets with it), with the passwords this process was given (set_secrets,
    or ansible-playbook's own); its text and each of its lines remembered for hide().
    ValueError says why it cannot be decrypted."""
    from ansible.errors import AnsibleError
    from ansible.parsing.vault import VaultLib, VaultSecretsContext

    context = VaultSecretsContext.current(optional=True)
    if context is None or not context.secrets:
        raise ValueError("it is vault-encrypted and no vault password was given (--vault-id, --vault-password-file, "
                         "-J, ANSIBLE_VAULT_PASSWORD_FILE or ansible.cfg's vault_password_file)")
    try:
        text = VaultLib(context.secrets).decrypt(data).decode()
    except (AnsibleError, UnicodeDecodeError):
        raise ValueError("it is vault-encrypted and no vault password given decrypts it") from None
    lines = [line.strip() for line in text.splitlines()]
    values = [value.strip() for name, sep, value in (line.partition("=") for line in lines)
              if sep and re.search(r"pass|secret|token|key", name, re.I)]  # NAME=value files: the secret's value
    for secret in (text, text.strip(), *lines, *values):
        _remember(secret)
    return text


def has_secrets() -> bool:
    """Whether this process decrypted any value (hide() has something to hide)."""
    return bool(_secrets)


def hide(text: str) -> str:
    """Text with every decrypted value replaced by <vaulted>."""
    for secret in sorted(_secrets, key=len, reverse=True):
        text = text.replace(secret, SHOWN)
    return text
