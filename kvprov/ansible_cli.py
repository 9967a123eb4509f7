"""ansible-playbook's own options on every kvprov command that reads an inventory: `-e/--extra-vars`,
`-u/--user`, `--private-key`, `-k/--ask-pass`, `--connection-password-file`, `-f/--forks`, `-b/--become`,
`--become-method`, `--become-user`, `-K/--ask-become-pass`, `--become-password-file`, `-v`. kvprov applies
extra vars itself where it reads the inventory (the highest precedence, as in Ansible) and passes all of
them to every ansible-playbook it starts (kvprov.runner); `-u` reaches kvprov's own ssh tunnel too
(kvprov.tunnel reads remote_user() and private_key()). `-k` and `-K`
ask once; each password then lives in a root-only file in a private directory for the command's life
(kvprov.vault's), and ansible-playbook gets the file's name (`--connection-password-file`,
`--become-password-file`), never the password: it is in no command line, run artifact or report."""

from __future__ import annotations

import json
import os
from typing import Any

import yaml

from kvprov.errors import EXIT_USAGE, KvprovError

_words: list[str] = []  # for ansible-playbook
_verbose = 0  # -v given this many times
_extra: dict[str, Any] = {}  # the extra vars, merged in order
_user: list[str] = []  # -u/--user, when given
_key: list[str] = []  # --private-key, when given (absolute)


def add_args(parser) -> None:
    g = parser.add_argument_group("Ansible (as ansible-playbook takes them)")
    g.add_argument("-e", "--extra-vars", action="append", default=[], dest="extra_vars", metavar="VARS",
                   help="key=value pairs, YAML/JSON, or @FILE (repeatable; the highest precedence, as in Ansible)")
    g.add_argument("-u", "--user", dest="remote_user", metavar="USER", help="connect as this user")
    g.add_argument("--private-key", "--key-file", dest="private_key_file", metavar="FILE",
                   help="authenticate the connection with this private key file (below a host's "
                        "ansible_ssh_private_key_file)")
    one = g.add_mutually_exclusive_group()
    one.add_argument("-k", "--ask-pass", action="store_true", dest="ask_pass",
                     help="ask for the connection (ssh) password (once)")
    one.add_argument("--connection-password-file", "--conn-pass-file", dest="connection_password_file",
                     metavar="FILE", help="the connection password's file")
    g.add_argument("-f", "--forks", type=int, metavar="N", help="parallel hosts (default: your ansible.cfg's, else 50)")
    g.add_argument("-b", "--become", action="store_true",
                   help="run operations with become (kvprov's plays already become root where they need to)")
    g.add_argument("--become-method", metavar="METHOD", help="the privilege escalation method (sudo, su...)")
    g.add_argument("--become-user", metavar="USER", help="become this user (default: root)")
    one = g.add_mutually_exclusive_group()
    one.add_argument("-K", "--ask-become-pass", action="store_true", dest="ask_become_pass",
                     help="ask for the become (sudo) password (once)")
    one.add_argument("--become-password-file", "--become-pass-file", dest="become_password_file", metavar="FILE",
                     help="the become password's file")
    g.add_argument("-v", "--verbose", action="count", default=0,
                   help="say which ansible.cfg kvprov's runs use and what kvprov sets on top (audit: list every check "
                        "too); repeated (-vv, -vvv), ansible-playbook gets the same (-vvv: its connection debugging, in "
                        "the run's artifacts)")


def configure(args) -> None:
    global _verbose
    _verbose = int(getattr(args, "verbose", 0) or 0)
    _words.clear()
    _extra.clear()
    if _verbose > 1:  # -v alone is kvprov's own; -vv gives ansible-playbook -vv, and so on
        _words.append("-" + "v" * _verbose)
    for given in getattr(args, "extra_vars", []):
        data = parse_extra_vars(given)
        if given.startswith("@"):  # Ansible reads the file again (types, vault): by its absolute path
            _words.extend(["-e", "@" + os.path.abspath(given[1:])])
        else:  # key=value strings converted as the role would; kvprov's runs get the same values
            if given.lstrip()[:1] not in ("{", "["):
                data = _converted(data)
            _words.extend(["-e", json.dumps(data)])
        _extra.update(data)
    _user[:] = [args.remote_user] if getattr(args, "remote_user", None) else []
    if _user:
        _words.extend(["-u", args.remote_user])
    _key[:] = [_readable(args.private_key_file, "--private-key")] if getattr(args, "private_key_file", None) else []
    if _key:
        _words.extend(["--private-key", _key[0]])
    if getattr(args, "forks", None):
        if args.forks < 1:
            raise KvprovError(f"--forks {args.forks}: give a number of hosts, 1 or more", EXIT_USAGE)
        _words.extend(["--forks", str(args.forks)])
    if getattr(args, "become", False):
        _words.append("--become")
    for option, name in (("--become-method", "become_method"), ("--become-user", "become_user")):
        if getattr(args, name, None):
            _words.extend([option, getattr(args, name)])
    for option, ask, given, prompt in (
            ("--connection-password-file", "ask_pass", "connection_password_file", "SSH password: "),
            ("--become-password-file", "ask_become_pass", "become_password_file", "BECOME password: ")):
        path = _password_source(args, ask, given, prompt)
        if path:
            _words.extend([option, path])


def _password_source(args, ask: str, given: str, prompt: str) -> str | None:
    """A password's file for ansible-playbook: the one given (absolute), or, when asked, a
    root-only file holding what was typed (removed at exit); None for neither (argparse allows
    one of the two)."""
    if getattr(args, ask, False):
        import getpass

        from kvprov import vault

        return vault.password_file(getpass.getpass(prompt))
    if getattr(args, given, None):
        return _readable(getattr(args, given), "--" + given.replace("_", "-"))
    return None


def _readable(path: str, option: str) -> str:
    """A file an option names, absolute (ansible-playbook runs elsewhere); KvprovError (exit 2) when
    it cannot be read."""
    full = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(full) or not os.access(full, os.R_OK):
        raise KvprovError(f"{option} {path}: cannot read the file", EXIT_USAGE)
    return full


def parse_extra_vars(given: str) -> dict[str, Any]:
    """One -e value as Ansible reads it: @FILE (YAML or JSON, vault-encrypted too), a YAML/JSON
    mapping, or key=value words."""
    from ansible.errors import AnsibleError
    from ansible.parsing.splitter import parse_kv

    where = f"-e {given}"
    if given.startswith("@"):
        from ansible.parsing.dataloader import DataLoader

        from kvprov import vault

        if not os.path.isfile(given[1:]):
            raise KvprovError(f"{where}: cannot read: no such file", EXIT_USAGE)
        loader = DataLoader()
        vault.set_secrets(loader)
        try:
            data = vault.plain(loader.load_from_file(os.path.abspath(given[1:])))
        except AnsibleError as e:
            raise KvprovError(f"{where}: {' '.join(str(e.message).split())}", EXIT_USAGE) from None
    elif given.lstrip()[:1] in ("{", "["):
        try:
            data = json.loads(given)
        except ValueError:
            try:
                data = yaml.safe_load(given)
            except yaml.YAMLError as e:
                raise KvprovError(f"{where}: not YAML or JSON: {e}", EXIT_USAGE) from None
    else:
        pairs = parse_kv(given)
        if "_raw_params" in pairs:
            raise KvprovError(f"{where}: expected key=value pairs, YAML/JSON or @FILE", EXIT_USAGE)
        data = dict(pairs)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise KvprovError(f"{where}: extra vars must be a mapping of variable: value", EXIT_USAGE)
    return data


def _converted(pairs: dict[str, str]) -> dict[str, Any]:
    """key=value strings of typed kvprov variables, converted as the role's argument spec
    converts them (`-e kvprov_sglang_tp_size=4`: 4; specs.typed); the others stay strings."""
    from kvprov import paths, specs

    contract = specs.read_specs(paths.roles_dir())
    return {name: specs.typed(value, contract[name]) if name in contract else value for name, value in pairs.items()}


def remote_user() -> str | None:
    """-u/--user, for what kvprov itself connects with (the ssh tunnel), as ansible-playbook takes it:
    below a host's ansible_user, above the configuration's remote_user."""
    return _user[0] if _user else None


def private_key() -> str | None:
    """--private-key (absolute), for what kvprov itself connects with (the ssh tunnel), as
    ansible-playbook takes it: below a host's ansible_ssh_private_key_file, above the
    configuration's private_key_file."""
    return _key[0] if _key else None


def extra_vars() -> dict[str, Any]:
    return dict(_extra)


def playbook_args() -> list[str]:
    return list(_words)


def verbose() -> bool:
    return _verbose > 0
