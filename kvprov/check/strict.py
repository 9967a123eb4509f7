"""`kvprov check --strict` (#38): an inventory that is data, not code, for teams whose inventory
many people edit. Ansible treats an inventory as code, and so does kvprov by default:

- Jinja in a value runs on the controller whenever a command renders it
  (`{{ lookup('pipe', 'any command') }}`, in render, audit, validate and deploy);
- connection, interpreter and ssh variables choose what runs where (`ansible_connection: local`
  runs the roles on the controller; `ansible_ssh_common_args: -o ProxyCommand=...` runs a
  command there);
- a file variable copies any controller file to the hosts (`kvprov_engine_wheelhouse:
  /root/.ssh`);
- an inventory script, or a YAML plugin configuration (`plugin: ...`), runs when it is read;
- an `ansible.cfg` in the working directory configures all of it (callbacks, plugins, ssh).

Strict mode refuses each of them: values without Jinja, only the connection variables that
say where and as whom to connect, controller files inside the inventory's directories (or
KVPROV_STRICT_ROOTS, a colon-separated list of directories), inventory files that are plain
YAML or INI, and no ./ansible.cfg. KVPROV_STRICT=1 makes it the default of every command that
reads an inventory (check, render, deploy, audit, validate, collect, bench, storage check,
loadtest)."""

from __future__ import annotations

import os
from typing import Any

import yaml

from kvprov.inventory import Inventory, Problem

STRICT_ENV = "KVPROV_STRICT"
ROOTS_ENV = "KVPROV_STRICT_ROOTS"
JINJA = ("{{", "{%", "{#")
# The ansible_* variables an inventory of data may set: where and as whom to connect, and how to
# become root (sudo or su only: a become plugin by another name is code on the controller).
CONNECTION_VARS = frozenset({
    "ansible_host", "ansible_port", "ansible_user", "ansible_ssh_private_key_file", "ansible_password",
    "ansible_ssh_pass", "ansible_become", "ansible_become_user", "ansible_become_method",
    "ansible_become_password", "ansible_become_pass"})
BECOME_METHODS = ("sudo", "su")
# Variables naming files or directories on the controller that kvprov reads or copies to the hosts.
CONTROLLER_PATHS = ("ansible_ssh_private_key_file", "kvprov_engine_api_key_file", "kvprov_engine_hf_token_file",
                    "kvprov_engine_admin_api_key_file",
                    "kvprov_engine_tls_cert_file", "kvprov_engine_tls_key_file", "kvprov_engine_tls_ca_file",
                    "kvprov_engine_s3_credentials_file", "kvprov_engine_wheelhouse",
                    "kvprov_storage_credentials_file")


def enabled(flag: bool = False) -> bool:
    """--strict, or KVPROV_STRICT=1 (or true/yes) in the environment."""
    return flag or os.environ.get(STRICT_ENV, "").strip().lower() in ("1", "true", "yes")


def _has_jinja(value: Any) -> bool:
    if isinstance(value, str):
        return any(mark in value for mark in JINJA)
    if isinstance(value, dict):
        return any(_has_jinja(k) or _has_jinja(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_jinja(v) for v in value)
    return False


def _inside(path: str, roots: list[str]) -> bool:
    real = os.path.realpath(path)  # a link inside a root to a file outside is outside
    return any(real == root or real.startswith(root.rstrip("/") + "/") for root in roots)


def allowed_roots(sources: list[str]) -> list[str]:
    """The inventory's own directories (each source's directory, or the source when it is one)
    and KVPROV_STRICT_ROOTS's."""
    roots = [s if os.path.isdir(s) else os.path.dirname(os.path.abspath(s)) for s in sources]
    roots += [d for d in os.environ.get(ROOTS_ENV, "").split(":") if d]
    return [os.path.realpath(r) for r in roots]


def source_problems(sources: list[str], cwd: str | None = None) -> list[Problem]:
    """What strict mode refuses before the inventory is read (reading it would run it)."""
    out = []
    config = os.path.join(cwd or os.getcwd(), "ansible.cfg")
    if os.path.exists(config):
        out.append(Problem(config, None, None, None, "strict mode: an ansible.cfg in the working directory "
                           "configures every Ansible run (plugins, callbacks, ssh arguments); run kvprov from "
                           "another directory, or name the configuration explicitly with ANSIBLE_CONFIG"))
    for source in sources:
        for f in _inventory_files(source):
            if not os.path.exists(f):
                continue  # the loader says that it is missing
            if os.access(f, os.X_OK) and os.path.isfile(f):
                out.append(Problem(f, None, None, None, "strict mode: an executable file in the inventory is run "
                                   "as an inventory script when it is read; give plain YAML or INI (chmod a-x)"))
            elif f.endswith((".yml", ".yaml")) and _plugin_config(f):
                out.append(Problem(f, None, None, None, "strict mode: an inventory plugin configuration "
                                   "(`plugin:`) runs the plugin, and its Jinja, when it is read; give the hosts "
                                   "and groups as plain YAML"))
    return out


def _inventory_files(source: str) -> list[str]:
    """The files Ansible reads as inventory sources: the source, or the files of a directory
    (recursively; not the names Ansible ignores: group_vars/, host_vars/, *.md...)."""
    if not os.path.isdir(source):
        return [source]
    from ansible.inventory.manager import IGNORED

    out = []
    for d, dirs, names in os.walk(source):
        dirs[:] = sorted(x for x in dirs if not IGNORED.search(x.encode()))  # group_vars, host_vars among them
        out += [os.path.join(d, n) for n in sorted(names) if not IGNORED.search(n.encode())]
    return out


def _plugin_config(path: str) -> bool:
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False  # the loader reports what it cannot read
    return isinstance(data, dict) and "plugin" in data


def inventory_problems(inv: Inventory, sources: list[str]) -> list[Problem]:
    """Every value set in the inventory (not the roles' defaults): no Jinja, only the connection
    variables, controller files inside the allowed roots."""
    roots = allowed_roots(sources)
    out = []
    for setting in inv.settings:
        var = setting.var
        where = (var.origin.file, var.line_of(), setting.host, var.name)
        if _has_jinja(var.value):
            out.append(Problem(*where, "strict mode: holds Jinja, which runs on the controller when a command "
                                       "renders it; give the value itself"))
        elif var.name.startswith("ansible_") and var.name not in CONNECTION_VARS:
            out.append(Problem(*where, "strict mode: only where and as whom to connect may be set "
                                       f"({', '.join(sorted(CONNECTION_VARS))}); this one chooses what runs where"))
        elif var.name == "ansible_become_method" and var.value not in BECOME_METHODS:
            out.append(Problem(*where, f"strict mode: the become method is one of {', '.join(BECOME_METHODS)}"))
        elif var.name in CONTROLLER_PATHS and isinstance(var.value, str) and var.value \
                and not _inside(var.value, roots):
            out.append(Problem(*where, f"strict mode: {var.value} is a file of the controller outside the "
                                       f"inventory's directories ({', '.join(roots)}); keep it there, or add its "
                                       f"directory to {ROOTS_ENV}"))
    return out
