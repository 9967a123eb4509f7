"""`kvprov check INVENTORY`: validate an inventory before any host is contacted.

Types and choices come from the roles' meta/argument_specs.yml (the variable contract);
this module adds what a spec cannot say: misspelt names, ranges, paths, and rules that
span several variables or several hosts. Every problem names the file, line, host and
variable, and says how to fix it.

Three kinds of rules:
- setting rules look at one variable where it is set (a group or host, in the inventory
  file or in group_vars/host_vars), so a mistake in a group is reported once;
- host rules look at a target host's effective values (role defaults included);
- fleet rules look at all target hosts together (shared NIXL storage directories).

The roles' preflight (roles/preflight, the kvprov_preflight action plugin) runs the setting
and host rules of this module on each host's values as Ansible resolved them
(`check_host_values`), so a plain ansible-playbook run is held to the same rules; the
fleet rules and the rules on names and structure need the whole inventory and stay here.

The package, by concern (each module says which rules it holds; kvprov/sinks.py has the
formats of the places values land in, used by these rules and by the roles' templates):
  values.py   one variable's value: spec types, formats, VALUE_RULES; the setting rules
  host.py     HostView; the KV mount's, the acceptance test's and the address's host rules
  engines.py  the engines' host rules (settings together, exposure, the evictor's marks)
  tiers.py    the tiers' sizes against host memory and storage
  bounds.py   what the engine may be given: secrets, loader paths, its account and home
  fleet.py    storage directories and namespaces across hosts, hash seeds, rollout
  storage.py  the storage systems' inventory (`kvprov storage check`)
  this file   the command: every rule over an inventory, one host's values, the output
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, replace
from typing import Any

from kvprov import inventory, vault
from kvprov.check import strict
from kvprov.check.engines import engine_rules
from kvprov.check.fleet import (StorageDir, namespace_keys, namespaces, rollout_settings,
                                shared_storage_dirs, storage_dirs)
from kvprov.check.host import HostView, instances_var, mount_rules
from kvprov.check.storage import STORAGE_SPECS, controller_file, storage_credentials_file, storage_rules
from kvprov.check.values import (DEPRECATED, LMCACHE_KEYS, LMCACHE_RENAMED, TIERLESS_ENGINES, Finding, VarSpec,
                                 _instance, check_setting, describe, environment, extra_options,
                                 fraction, int_range, is_int, is_template, lmcache_config, model_path, mount_point,
                                 networks, nixl_plugins, non_negative, positive_number, s3_credentials_file,
                                 s3_secrets_in, s3_secrets_in_environment, secret_file, serial, spec_findings,
                                 storage_dir_errors, storage_server, type_error, user_name)
from kvprov.errors import EXIT_OK, EXIT_USAGE, KvprovError
from kvprov.inventory import Host, Inventory, InventoryError, Origin, Problem, Setting, Var
from kvprov.specs import read_specs, typed

__all__ = ["Problem", "VarSpec", "check", "check_host_values", "host_from_values", "read_specs", "add_parser",
           # the rules and names other modules and the tests use, from the modules below
           "DEPRECATED", "LMCACHE_KEYS", "LMCACHE_RENAMED", "TIERLESS_ENGINES", "Finding", "HostView", "_instance",
           "controller_file", "describe", "environment", "extra_options", "fraction", "instances_var", "int_range",
           "is_int", "is_template", "lmcache_config", "model_path", "mount_point", "networks", "nixl_plugins",
           "non_negative", "positive_number", "s3_credentials_file", "s3_secrets_in", "s3_secrets_in_environment",
           "secret_file", "serial", "spec_findings", "storage_credentials_file", "storage_dir_errors", "storage_dirs",
           "storage_server", "type_error", "typed", "user_name"]

# ---------------------------------------------------------------------------- check

def check_host(host: Host, specs: dict[str, VarSpec]) -> list[Problem]:
    """The rules that span several of one host's variables (storage dirs: see storage_dirs)."""
    h = HostView(host, specs)
    return mount_rules(h) + engine_rules(h)


def check(inv: Inventory, specs: dict[str, VarSpec] | None = None) -> list[Problem]:
    """Every problem of an inventory, sorted by file and line. Contacts no host."""
    specs = {**(specs if specs is not None else read_specs(inv.roles)), **STORAGE_SPECS}
    problems = list(inv.issues) + storage_rules(inv, specs)
    # a dict set in several places is judged whole, as each host gets it, where Ansible merges dicts
    merge = inventory.merges_dicts()
    for setting in inv.settings:
        if not (merge and isinstance(setting.var.value, dict)):
            problems += check_setting(setting, specs)
    if merge:
        problems += [p for host in inv.hosts for var in host.vars.values()
                     if isinstance(var.value, dict) and not var.origin.default
                     for p in check_setting(Setting(var, host=host.name), specs)]
    dirs: list[StorageDir] = []
    for host in inv.hosts:
        host_problems, host_dirs = _host_rules(host, specs)
        problems += host_problems
        dirs += host_dirs
    problems += shared_storage_dirs(dirs) + namespace_keys(dirs)
    views = [HostView(host, specs) for host in inv.hosts]
    problems += rollout_settings(views)
    return sorted(_unique(problems), key=lambda p: (p.file or "", p.line or 0, p.host or "", p.message))


def _host_rules(host: Host, specs: dict[str, VarSpec]) -> tuple[list[Problem], list[StorageDir]]:
    """One host's host rules and its storage dirs (with the problems of each dir on its own)."""
    dirs = storage_dirs(HostView(host, specs))
    return check_host(host, specs) + [p for d in dirs for p in d.problems], dirs


# ---------------------------------------------------------------------------- one host (the roles' preflight)

def host_from_values(name: str, values: dict[str, Any], defaults: dict[str, Var]) -> Host:
    """A target host from its kvprov_* values as Ansible resolved them: the roles' defaults,
    overlaid with every value that differs from its default. Ansible does not say where a
    value was set, so the origins are unknown: problems name the host and the variable."""
    unknown = Origin(None, None)  # type: ignore[arg-type]
    merged = {n: v for n, v in defaults.items() if n.startswith("kvprov_")}
    for n, value in values.items():
        default = defaults.get(n)
        if default is None or default.value != value:
            merged[n] = Var(n, value, unknown)
    return Host(name, unknown, ["all"], merged)


def check_host_values(host: Host, specs: dict[str, VarSpec]) -> list[Problem]:
    """One host's own problems, from its effective values: the setting rules on every value
    that is not a role default (as if set on the host), the host rules and its storage dirs'
    own problems. The roles' preflight runs this for each host (roles/preflight)."""
    problems = [p for name, var in sorted(host.vars.items())
                if not var.origin.default and DEPRECATED.get(name, name) in specs
                for p in check_setting(Setting(var, host=host.name), specs)]
    problems += _host_rules(host, specs)[0]
    return _unique(problems)


def _unique(problems: list[Problem]) -> list[Problem]:
    return list(dict.fromkeys(problems))


def has_errors(problems: list[Problem]) -> bool:
    return any(p.severity == "error" for p in problems)


# ---------------------------------------------------------------------------- output

def format_lines(problems: list[Problem], max_hosts: int = 5) -> list[str]:
    """One line per problem; the same problem on several hosts (a group setting) is one line."""
    merged: dict[Problem, list[str]] = {}
    for p in problems:
        key = Problem(p.file, p.line, None, p.variable, p.message, p.severity, p.column)
        merged.setdefault(key, [])
        if p.host:
            merged[key].append(p.host)
    lines = []
    for p, hosts in merged.items():
        label = None
        if hosts:
            label = ("host " if len(hosts) == 1 else "hosts ") + ", ".join(hosts[:max_hosts])
            if len(hosts) > max_hosts:
                label += f" and {len(hosts) - max_hosts} more"
        lines.append(p.format(label))
    return lines


def summary(path: str | list[str], hosts: list[str], problems: list[Problem]) -> str:
    errors = sum(p.severity == "error" for p in problems)
    warnings = len(problems) - errors
    verdict = "OK" if not errors else "fix the errors before deploying"
    return (f"{inventory.describe(path)}: {len(hosts)} host(s) checked, {errors} error(s), {warnings} warning(s): {verdict}")


def run(path: str | list[str], strict_mode: bool = False) -> tuple[list[str], list[Problem]]:
    """Load and check an inventory: (target host names, problems). Never raises for a bad inventory.
    Strict mode (--strict or KVPROV_STRICT=1: kvprov.check.strict) refuses, before reading the
    inventory, sources that would run when read, and then what would run when rendered."""
    sources = inventory.source_list(path)
    if strict.enabled(strict_mode):
        refused = strict.source_problems(sources)
        if refused:
            return [], refused
    try:
        inv = inventory.load(path)
    except InventoryError as e:
        return [], e.problems
    found = check(inv) + (strict.inventory_problems(inv, sources) if strict.enabled(strict_mode) else [])
    # a value decrypted from the vault is never shown
    return inv.host_names, [replace(p, message=vault.hide(p.message)) for p in found]


def require_valid(path: str | list[str]) -> list[str]:
    """What deploy, render and collect run first: print the problems, and stop (exit 2)
    before any host is contacted if there is an error. Returns the target host names."""
    hosts, problems = run(path)
    for line in format_lines(problems):
        print(line, file=sys.stderr)
    if has_errors(problems):
        raise KvprovError(summary(path, hosts, problems) + "; no host was contacted", EXIT_USAGE)
    return hosts


def add_parser(sub) -> None:
    p = sub.add_parser("check", help="validate an inventory (contacts no host)",
                       description="Check an inventory against the roles' variable contract and "
                                   "kvprov's rules; one line per problem. Contacts no host. "
                                   "Exit 0: no errors (warnings allowed); 2: errors.")
    inventory.add_inventory_args(p)
    inventory.add_limit_arg(p, "report only these hosts' problems (and the inventory's own); the fleet rules "
                               "still compare every host")
    p.add_argument("--json", nargs="?", const="-", metavar="FILE",
                   help='{"ok", "hosts", "problems", "namespaces"} as JSON: to FILE, or to stdout with - or no FILE')
    p.add_argument("--strict", action="store_true",
                   help="an inventory of data, not code, for inventories many people edit: refuse Jinja in values, "
                        "connection, interpreter and ssh variables, controller files outside the inventory's "
                        "directories (and KVPROV_STRICT_ROOTS), inventory scripts and plugins, and ./ansible.cfg "
                        "(KVPROV_STRICT=1: the default of every command)")
    p.add_argument("--namespaces", action="store_true",
                   help="also list each shared KV namespace: its instances and the values that key it")
    p.set_defaults(func=cmd_check)


def fleet_namespaces(path: str | list[str]) -> list[dict]:
    """The inventory's shared namespaces (fleet.namespaces); [] when it cannot be read."""
    try:
        inv = inventory.load(path)
    except InventoryError:
        return []
    specs = {**read_specs(inv.roles), **STORAGE_SPECS}
    return namespaces([d for host in inv.hosts for d in storage_dirs(HostView(host, specs))])


def namespace_lines(found: list[dict]) -> list[str]:
    lines = []
    for n in found:
        lines.append(f"namespace {n['path']} ({n['engine']}): {', '.join(n['instances'])}")
        lines += [f"    {k} = {v!r}" for k, v in n["keys"].items() if k != "engine"]
    return lines


def cmd_check(args) -> int:
    sources = inventory.from_args(args)
    hosts, problems = run(sources, getattr(args, "strict", False))
    if args.limit:
        chosen = inventory.hosts_matching(sources, args.limit)
        hosts = [h for h in hosts if h in chosen]
        problems = [p for p in problems if p.host is None or p.host in chosen]
    ok = not has_errors(problems)
    listed = getattr(args, "namespaces", False)
    found = [{**n, "keys": {k: vault.hide(v) for k, v in n["keys"].items()}}  # a second reading: only when asked
             for n in (fleet_namespaces(sources) if args.json or listed else [])]
    if args.limit:
        found = [n for n in found if any(i.split("/")[0] in chosen for i in n["instances"])]
    data = json.dumps({"ok": ok, "hosts": hosts, "problems": [asdict(p) for p in problems], "namespaces": found},
                      indent=2)
    if args.json == "-":
        print(data)
    else:
        if args.json:  # the same convention as every command's --json FILE
            from kvprov.validate.report import refuse_link, write_file

            refuse_link(args.json, "--json")
            write_file(args.json, data + "\n")
        for line in format_lines(problems):
            print(line)
        if listed:
            print("\n".join(namespace_lines(found) or ["no shared namespace"]))
        print(summary(sources, hosts, problems))
    return EXIT_OK if ok else EXIT_USAGE
