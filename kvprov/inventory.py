"""The inventory model: any inventory Ansible reads (a YAML or INI file, a directory,
several sources, constructed and other plugin sources, scripts), its group_vars/host_vars
and the role defaults, resolved per target host, with where every value came from.

ansible-core computes the hosts, groups and merged variables (InventoryManager +
VariableManager: Ansible's precedence, ranges, ansible_group_priority, vars plugins), and
the role defaults go underneath. Where a value was set comes from Ansible's origin tag
(file and line for YAML and INI; a description for plugin sources), falling back to the
host or group. YAML inventory and vars files also get kvprov's own lint
(kvprov.inventory_lint: syntax errors with line and column, duplicate keys, misplaced
group keys), and their nodes give the line of nested elements and the value as written.
An unparsable source is an error, not Ansible's warning and an empty inventory.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

import yaml

from kvprov import ansible_cli, paths, vault
from kvprov.errors import EXIT_USAGE, KvprovError
from kvprov.inventory_lint import (InventoryError, Problem, construct, did_you_mean, key_nodes,
                                   line_of, lint_inventory, lint_vars_file, mapping_items, parse_yaml)
from kvprov.vault import plain

__all__ = ["Group", "Host", "Inventory", "InventoryError", "Origin", "Problem", "Setting", "Var", "add_inventory_args",
           "describe", "from_args", "load", "read_role_defaults", "read_text", "roles_dir", "source_list"]

TARGET_GROUP = "gpu_nodes"  # kvprov configures the hosts of this group (and its children)
STORAGE_GROUP = "kv_storage"  # the storage systems `kvprov storage check` checks (and its children)
VARS_FILE_SUFFIXES = ("", ".yml", ".yaml", ".json")  # what Ansible's host_group_vars reads
YAML_SUFFIXES = (".yml", ".yaml")  # inventory files kvprov lints (other sources are Ansible's alone)
IMPLICIT_GROUPS = ("all", "ungrouped")


@dataclass(frozen=True)
class Origin:
    """Where a value was set: a file and 1-based line, a source without a line (line None),
    or a role's defaults."""

    file: str | None
    line: int | None
    default: bool = False  # True: a role default (file/line point into roles/*/defaults)

    def __str__(self) -> str:
        if self.default:
            return "default"
        return f"{self.file}:{self.line}" if self.line is not None else str(self.file)


@dataclass(frozen=True)
class Var:
    """One variable's value and where it was set (node: its YAML node, when set in YAML)."""

    name: str
    value: Any
    origin: Origin
    node: yaml.Node | None = field(default=None, compare=False, repr=False)

    def line_of(self, *path: str | int) -> int | None:
        """The line of a nested element (dict keys, list indexes), else this variable's line."""
        node, line = self.node, self.origin.line
        for step in path:
            if isinstance(node, yaml.MappingNode):
                pairs = [(k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == str(step)]
                if not pairs:
                    break
                line, node = line_of(pairs[-1][0]), pairs[-1][1]
            elif isinstance(node, yaml.SequenceNode) and isinstance(step, int) and step < len(node.value):
                node = node.value[step]
                line = line_of(node)
            else:
                break
        return line


@dataclass
class Group:
    name: str
    origin: Origin | None  # None for Ansible's implicit groups
    vars: dict[str, Var] = field(default_factory=dict)  # as set in the inventory source
    children: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Setting:
    """A variable as set in one place (inventory source or a vars file), for a group or a host."""

    var: Var
    group: str | None = None
    host: str | None = None


@dataclass
class Host:
    """A target host: its groups and its effective variables."""

    name: str
    origin: Origin  # where the host is declared (its source when Ansible does not say the line)
    groups: list[str]  # every group it belongs to, `all` first, in precedence order
    vars: dict[str, Var]  # effective: inventory/vars files over role defaults

    def var(self, name: str) -> Var | None:
        return self.vars.get(name)

    def value(self, name: str, default: Any = None) -> Any:
        var = self.vars.get(name)
        return default if var is None else var.value

    def is_default(self, name: str) -> bool:
        var = self.vars.get(name)
        return var is not None and var.origin.default

    def kvprov_vars(self) -> dict[str, Any]:
        """Every kvprov_* variable's effective value (role default if not set)."""
        return {n: v.value for n, v in sorted(self.vars.items()) if n.startswith("kvprov_")}

    def values(self) -> dict[str, Any]:
        """All effective values (ansible_*, kvprov_*, others) plus inventory_hostname."""
        return {"inventory_hostname": self.name, **{n: v.value for n, v in self.vars.items()}}


@dataclass
class Inventory:
    path: Path  # the first source
    hosts: list[Host]  # the targets: hosts of TARGET_GROUP (and its children), in inventory order
    groups: dict[str, Group]
    settings: list[Setting]  # every variable set anywhere: source groups, source hosts, group_vars, host_vars
    defaults: dict[str, Var]  # the roles' defaults
    roles: Path  # the roles directory the defaults came from
    issues: list[Problem] = field(default_factory=list)  # lint findings of the loader
    storage_hosts: list[Host] = field(default_factory=list)  # hosts of STORAGE_GROUP, in inventory order
    sources: list[str] = field(default_factory=list)  # every source, as given

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    @property
    def host_names(self) -> list[str]:
        return [h.name for h in self.hosts]


# ---------------------------------------------------------------------------- the command line

def add_inventory_args(parser, required: bool = True, help: str | None = None) -> None:
    """The inventory arguments of every command: INVENTORY, then -i/--inventory SOURCE
    (repeatable), the sources in that order, as `ansible-inventory -i a -i b` merges them
    (a later source wins). `sources(args)` gives the list."""
    parser.add_argument("inventory", nargs="?", metavar="INVENTORY",
                        help=help or "the inventory: whatever ansible-inventory -i takes (a YAML or INI file, a "
                                     "directory, a plugin configuration, a script), read by ansible-core with its "
                                     "group_vars/ and host_vars/ (default: your ansible.cfg's inventory = or "
                                     "ANSIBLE_INVENTORY)")
    parser.add_argument("-i", "--inventory", dest="more_inventory", action="append", default=[], metavar="SOURCE",
                        help="an inventory source after INVENTORY (repeatable, in order; INVENTORY may be left out): "
                             "merged as ansible-inventory -i merges them, a later source winning")
    parser.set_defaults(inventory_required=required)
    ansible_cli.add_args(parser)
    vault.add_args(parser)


def add_limit_arg(parser, help: str = "Ansible host pattern") -> None:
    parser.add_argument("-l", "--limit", help=help)


def from_args(args) -> list[str]:
    """The inventory sources given on the command line, in order (KvprovError, exit 2, when
    the command needs one and none is given)."""
    given = ([args.inventory] if args.inventory else []) + args.more_inventory
    if not given and args.inventory_required:
        given = configured_inventory()
    if not given and args.inventory_required:
        raise KvprovError("give the inventory: INVENTORY or -i SOURCE (repeatable), or `inventory =` in your "
                          "ansible.cfg or ANSIBLE_INVENTORY", EXIT_USAGE)
    if not getattr(args, "ansible_configured", False):  # once a command: -K and -J ask once
        vault.configure(args)
        ansible_cli.configure(args)
        args.ansible_configured = True
    return given


def configured_inventory() -> list[str]:
    """The sources Ansible's configuration names when the command line names none, as
    ansible-playbook takes them: `inventory =` in the ansible.cfg Ansible finds, or
    ANSIBLE_INVENTORY (paths relative to that file); [] when only Ansible's built-in default
    (/etc/ansible/hosts) would apply."""
    from ansible import constants as C

    sources, origin = C.config.get_config_value_and_origin("DEFAULT_HOST_LIST")
    return [str(s) for s in sources or []] if origin != "default" else []


def argv(sources: list[str]) -> list[str]:
    """The sources as command-line words again: the first as INVENTORY, the rest as -i SOURCE."""
    return [*sources[:1], *(w for s in sources[1:] for w in ("-i", s))]


def limit_patterns(limit: str | None) -> str | None:
    """An Ansible --limit with each `@FILE` replaced by the patterns in FILE (one a line, blank
    lines ignored), as ansible-playbook reads it, but relative to kvprov's own working directory;
    a missing or empty file is a usage error."""
    if not limit:
        return limit
    patterns = []
    for part in limit.split(","):
        if not part.startswith("@"):
            patterns.append(part)
            continue
        try:
            lines = [line.strip() for line in Path(part[1:]).read_text().splitlines()]
        except OSError as e:
            raise KvprovError(f"--limit {part}: cannot read the file: {e.strerror}", EXIT_USAGE) from None
        if not any(lines):
            raise KvprovError(f"--limit {part}: the file names no host", EXIT_USAGE)
        patterns += [line for line in lines if line]
    return ",".join(patterns)


def source_list(inventory: str | Path | list[str | Path]) -> list[str]:
    """One source or several, as a list of strings."""
    return [str(s) for s in (inventory if isinstance(inventory, list) else [inventory])]


def describe(inventory: str | Path | list[str | Path]) -> str:
    """The sources for a message: `a.ini`, or `a.ini, b.yml`."""
    return ", ".join(source_list(inventory))


# ---------------------------------------------------------------------------- Ansible values

def _ansible_origin(value: Any) -> Any:
    """Ansible's origin tag of a loaded value or key (path, line_num, col_num, description),
    or None. The tag's module is private (ansible-core 2.19); older ones put ansible_pos
    (path, line, column) on what they load from YAML."""
    try:
        from ansible._internal._datatag._tags import Origin as AnsibleOrigin
        return AnsibleOrigin.get_tag(value)
    except Exception:  # moved or changed in another ansible-core: the older position, else the fallback
        pos = getattr(value, "ansible_pos", None)
        return SimpleNamespace(path=pos[0], line_num=pos[1], col_num=pos[2], description=None) if pos else None


class _Shown:
    """Ansible reports resolved absolute paths; kvprov shows them as the user gave the source."""

    def __init__(self, sources: list[str]):
        self.prefixes: list[tuple[str, str]] = []
        for s in sources:
            if os.path.exists(s):
                d = s if os.path.isdir(s) else os.path.dirname(s)
                for real in {os.path.realpath(d or "."), os.path.abspath(d or ".")}:
                    self.prefixes.append((real.rstrip("/") + "/", os.path.join(d, "")))
        self.prefixes.sort(key=lambda p: -len(p[0]))

    def __call__(self, path: str) -> str:
        for real, shown in self.prefixes:
            if path.startswith(real):
                return shown + path[len(real):]
        return path


def _vaulted_strings(value: Any) -> None:
    """The strings in a loaded value (not its mappings' keys), each told to vault with the file
    Ansible loaded it from (vault.from_encrypted_file)."""
    if isinstance(value, dict):
        for v in value.values():
            _vaulted_strings(v)
    elif isinstance(value, list):
        for v in value:
            _vaulted_strings(v)
    else:
        vault.from_encrypted_file(value, getattr(_ansible_origin(value), "path", None))


@dataclass
class _Context:
    """What load() gathers before building the model: paths, YAML nodes, lint findings."""

    shown: _Shown
    # (file, line, column) of a value's YAML node -> (line of its key, the node)
    nodes: dict[tuple[str, int, int], tuple[int, yaml.Node]] = field(default_factory=dict)
    issues: list[Problem] = field(default_factory=list)
    vars_files: dict[str, dict[str, list[str]]] = field(default_factory=lambda: {"group": {}, "host": {}})

    def index(self, file: str, root: yaml.Node | None) -> None:
        for (line, _), node in key_nodes(root).items():
            self.nodes[(file, line_of(node), node.start_mark.column + 1)] = (line, node)

    def var(self, name: Any, value: Any, fallback: Origin) -> Var:
        """A variable Ansible loaded: its origin from the value's tag (YAML: the line of its
        key, and its node), else from the key's tag, else `fallback` (the host or group). The
        strings in a value from a whole-file encrypted vars file are remembered for hide()."""
        _vaulted_strings(value)
        for tagged in (value, name):
            tag = _ansible_origin(tagged)
            if tag is not None and getattr(tag, "path", None):
                file, line = self.shown(tag.path), getattr(tag, "line_num", None)
                key_line, node = self.nodes.get((file, line, getattr(tag, "col_num", None)), (line, None))
                return Var(str.__str__(name), plain(value), Origin(file, key_line), node)
            if tag is not None and getattr(tag, "description", None):
                return Var(str.__str__(name), plain(value), Origin(tag.description, None))
        return Var(str.__str__(name), plain(value), fallback)

    def origin(self, name: Any) -> Origin | None:
        """Where a group or host name was written, if Ansible says."""
        tag = _ansible_origin(name)
        if tag is not None and getattr(tag, "path", None):
            return Origin(self.shown(tag.path), getattr(tag, "line_num", None))
        return None


# ---------------------------------------------------------------------------- file I/O

def roles_dir() -> Path:
    """The Ansible roles shipped with kvprov (kvprov.paths decides where they live)."""
    return paths.roles_dir()


def read_text(path: Path) -> str:
    try:
        return path.read_text()
    except IsADirectoryError:
        raise InventoryError("is a directory; give a file", str(path)) from None
    except OSError as e:
        raise InventoryError(f"cannot read: {e.strerror or e}", str(path)) from None
    except UnicodeDecodeError as e:
        raise InventoryError(f"not a UTF-8 text file ({e.reason} at byte {e.start})", str(path)) from None


def read_role_defaults(roles: Path) -> dict[str, Var]:
    """Every role's defaults/main.yml, each value marked as a default (origin.default)."""
    out: dict[str, Var] = {}
    for path in sorted(roles.glob("*/defaults/main.y*ml")):
        node = parse_yaml(read_text(path), str(path))
        if isinstance(node, yaml.MappingNode):
            for name, key, value in mapping_items(node):
                out[name] = Var(name, construct(value), Origin(str(path), line_of(key), default=True), value)
    return out


def _inventory_files(source: str) -> list[str]:
    """The files of a source that kvprov lints: a YAML file, or the YAML files of a directory
    (recursively, skipping what Ansible skips)."""
    if os.path.isfile(source):
        return [source] if source.endswith(YAML_SUFFIXES) else []
    if not os.path.isdir(source):
        return []
    from ansible.inventory.manager import IGNORED

    out = []
    for name in sorted(os.listdir(source)):
        if not IGNORED.search(name.encode()):
            out += _inventory_files(os.path.join(source, name))
    return out


def _vars_files(directory: str) -> dict[str, list[str]]:
    """group_vars/ or host_vars/: <name>, <name>.yml|.yaml|.json files and <name>/ directories
    (every such file below it, sorted), as Ansible's host_group_vars plugin reads them."""
    out: dict[str, list[str]] = {}
    d = Path(directory)
    if not d.is_dir():
        return out
    for entry in sorted(d.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            name = entry.name
            files = sorted(p for p in entry.rglob("*") if p.is_file() and not p.name.startswith(".")
                           and p.suffix in VARS_FILE_SUFFIXES)
        else:
            name = entry.stem if entry.suffix in VARS_FILE_SUFFIXES else entry.name
            files = [entry]
        out.setdefault(name, []).extend(str(f) for f in files)
    return out


def _lint(sources: list[str], ctx: _Context) -> None:
    """Read and lint every YAML inventory file and vars file of the sources; index their nodes."""
    for source in sources:
        if "," in source and not os.path.exists(source):
            continue  # a host list (host1,host2): Ansible's alone
        if not os.path.exists(source):
            raise InventoryError("cannot read: No such file or directory", source)
        for file in _inventory_files(source):
            root, problems = lint_inventory(read_text(Path(file)), file)
            ctx.issues += problems
            ctx.index(file, root)
        base = source if os.path.isdir(source) else os.path.dirname(source)
        for kind in ("group", "host"):
            for name, files in _vars_files(os.path.join(base, f"{kind}_vars")).items():
                ctx.vars_files[kind].setdefault(name, []).extend(files)
                for file in files:
                    root, problems = lint_vars_file(read_text(Path(file)), file)
                    ctx.issues += problems
                    ctx.index(file, root)


@contextlib.contextmanager
def _ansible_messages() -> Iterator[list[str]]:
    """Ansible's warnings while it loads, collected instead of printed."""
    from ansible.utils.display import Display

    display, messages = Display(), []
    display.warning = lambda msg, *a, **kw: messages.append(str(msg))  # type: ignore[method-assign]
    display.error_as_warning = lambda msg, exception=None, *a, **kw: messages.append(  # type: ignore
        f"{msg} {exception}" if exception is not None else str(msg))
    try:
        yield messages
    finally:
        del display.warning, display.error_as_warning


@functools.cache
def _init_plugin_loader() -> None:
    """Ansible's plugin and collection loaders, as its CLIs set them up (once a process)."""
    from ansible.plugins.loader import init_plugin_loader

    init_plugin_loader()


def _ansible(sources: list[str]):
    """Ansible's inventory and variable managers for the sources; an unparsable source raises."""
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    _init_plugin_loader()
    loader = DataLoader()
    vault.set_secrets(loader)
    with _ansible_messages() as messages:
        try:
            manager = InventoryManager(loader=loader, sources=sources)
        except AnsibleError as e:
            raise InventoryError(f"Ansible cannot read the inventory: {e.message}", describe(sources)) from None
    failures: list[tuple[str, str]] = []  # (plugin, why), for the source Ansible could not parse
    for message in messages:
        m = re.fullmatch(r"Failed to parse inventory with '([\w.]+)' plugin\. (.*)", message, re.S)
        if m:
            failures.append((m[1], " ".join(m[2].split())))
        elif message.startswith("Unable to parse ") and message.endswith(" as an inventory source"):
            source = message[len("Unable to parse "):-len(" as an inventory source")]
            raise InventoryError(f"not an inventory Ansible can parse: {_why(source, failures)}",
                                 _Shown(sources)(source))
    return loader, manager, VariableManager(loader=loader, inventory=manager)


def merges_dicts() -> bool:
    """Whether Ansible's configuration (hash_behaviour = merge, ANSIBLE_HASH_BEHAVIOUR) merges a
    dict set in several places instead of the highest replacing the others."""
    from ansible import constants as C

    return C.DEFAULT_HASH_BEHAVIOUR == "merge"


def hosts_matching(sources: list[str], limit: str) -> set[str]:
    """The hosts an Ansible --limit selects (with @FILE); KvprovError (exit 2) when none."""
    absolute = [os.path.abspath(s) if os.path.exists(s) else s for s in sources]
    _, manager, _ = _ansible(absolute)
    with _ansible_messages():  # Ansible's "could not match" warning: the error below says it
        manager.subset(limit_patterns(limit))
        found = {plain(h.name) for h in manager.get_hosts()}
    if not found:
        raise KvprovError(f"{describe(sources)}: no host matches --limit {limit}", EXIT_USAGE)
    return found


def _why(source: str, failures: list[tuple[str, str]]) -> str:
    """The failures that matter: for a YAML file, not the ini plugin trying it too, nor the
    yaml and auto plugins declining a plugin configuration or a plain inventory."""
    if os.path.isdir(source):
        return "the directory holds no inventory source"
    if source.endswith(YAML_SUFFIXES):
        declined = ("ini", "Plugin configuration YAML file, not YAML inventory", "no root 'plugin' key found")
        failures = [f for f in failures if not (f[0] in declined or any(d in f[1] for d in declined))] or failures
    return "; ".join(f"{why} ({plugin} plugin)" for plugin, why in failures) or "no inventory plugin accepts it"


# ---------------------------------------------------------------------------- the model

def load(sources: str | Path | list[str | Path], roles: Path | None = None,
         target: str = TARGET_GROUP) -> Inventory:
    """Load inventory sources (whatever `ansible-inventory -i` takes, one or several) with
    their group_vars/ and host_vars/ and the role defaults; vault-encrypted files and values
    are decrypted with the passwords kvprov.vault gives.

    Raises InventoryError (exit code 2) when the inventory cannot be used at all."""
    from ansible.errors import AnsibleError
    from ansible.parsing.vault import AnsibleVaultError

    try:
        return _load(sources, roles, target)
    except AnsibleError as error:  # a vars plugin wraps the vault's error in its own
        e = next((x for x in (error, error.__cause__, error.__context__) if isinstance(x, AnsibleVaultError)), None)
        if e is None:
            raise
        tag = _ansible_origin(getattr(e, "obj", None))
        file = _Shown(source_list(sources))(tag.path) if tag is not None and getattr(tag, "path", None) else None
        raise InventoryError(
            f"cannot decrypt a vault-encrypted value: {e.message} Give its password as ansible-playbook takes "
            "it: --vault-password-file FILE, --vault-id [LABEL@]SOURCE, -J/--ask-vault-pass, or "
            "ANSIBLE_VAULT_PASSWORD_FILE (or vault_password_file in ansible.cfg)",
            file or describe(source_list(sources)), getattr(tag, "line_num", None) if file else None) from None


def _load(sources, roles, target) -> Inventory:
    from ansible.inventory.helpers import sort_groups
    from ansible.vars.plugins import get_vars_from_inventory_sources

    given = source_list(sources)
    ctx = _Context(_Shown(given))
    _lint(given, ctx)
    # absolute, as Ansible's own commands pass them: its vars plugins cache group_vars/ by path
    absolute = [os.path.abspath(s) if os.path.exists(s) else s for s in given]
    try:
        loader, manager, variables = _ansible(absolute)
    except InventoryError as e:  # Ansible refuses the inventory: kvprov's lint may say why, line by line
        if any(p.severity == "error" for p in ctx.issues):
            raise InventoryError(e.detail, e.file, e.line, e.column, ctx.issues) from None
        raise
    where = describe(given)

    def plugin_vars(entity) -> dict:  # group_vars/, host_vars/ and other vars plugins, as a play sees them
        return get_vars_from_inventory_sources(loader, absolute, [entity], "task")

    groups: dict[str, Group] = {}
    group_files: dict[str, list[Var]] = {}  # group -> its vars from group_vars/ (vars plugins)
    for g in manager.groups.values():
        origin = ctx.origin(g.name)
        fallback = origin or Origin(where, None)
        groups[plain(g.name)] = Group(plain(g.name), origin,
                                      {plain(k): ctx.var(k, v, fallback) for k, v in g.vars.items()},
                                      [plain(c.name) for c in g.child_groups], [plain(h.name) for h in g.hosts])
        group_files[plain(g.name)] = [ctx.var(k, v, fallback) for k, v in plugin_vars(g).items()]
    host_origins = {plain(name): ctx.origin(name) or Origin(ctx.shown(str(h.vars.get("inventory_file") or where)),
                                                            None)  # INI, plugins: the source that added it
                    for name, h in manager.hosts.items()}
    host_vars = {plain(name): [ctx.var(k, v, host_origins[name]) for k, v in h.vars.items()
                        if k not in ("inventory_file", "inventory_dir")] for name, h in manager.hosts.items()}
    host_files = {plain(name): [ctx.var(k, v, host_origins[name]) for k, v in plugin_vars(h).items()]
                  for name, h in manager.hosts.items()}
    settings = [Setting(v, group=g.name) for g in groups.values() for v in g.vars.values()]
    settings += [Setting(v, host=h) for h, lst in host_vars.items() for v in lst]
    settings += [Setting(v, group=g) for g, lst in group_files.items() for v in lst]
    settings += [Setting(v, host=h) for h, lst in host_files.items() for v in lst]

    roles = roles or roles_dir()
    defaults = read_role_defaults(roles)
    extra = ansible_cli.extra_vars()
    settings += [Setting(Var(k, v, Origin("-e (extra vars)", None))) for k, v in extra.items()]
    set_somewhere = {s.var.name for s in settings}

    def layers(name: str, host_groups: list[str]) -> list[Var]:
        """Where a host's values can come from, lowest first, as in VariableManager (its
        default VARIABLE_PRECEDENCE): the inventory's all, the other groups' inventory vars,
        group_vars/all, the other groups' group_vars/, the host's inventory vars, host_vars/.
        Used only to say where the winner was set."""
        others = [g for g in host_groups if g != "all"]
        return [*groups["all"].vars.values(), *(v for g in others for v in groups[g].vars.values()),
                *group_files["all"], *(v for g in others for v in group_files[g]),
                *host_vars[name], *host_files[name]]

    merge = merges_dicts()

    def layered(var: Var, below: Var | None) -> Var:
        """With hash_behaviour = merge, a dict merged over the one below it, as Ansible's
        combine_vars does (role defaults, inventory, -e)."""
        if merge and below is not None and isinstance(below.value, dict) and isinstance(var.value, dict):
            from ansible.utils.vars import combine_vars

            return Var(var.name, plain(combine_vars(below.value, var.value)), var.origin, var.node)
        return var

    def host(name: str) -> Host:
        h = manager.hosts[name]
        host_groups = [plain(g.name) for g in sort_groups(h.get_groups())]
        winners = {v.name: v for v in layers(name, host_groups)}
        merged: dict[str, Var] = {n: v for n, v in defaults.items() if n.startswith("kvprov_")}
        for k, v in variables.get_vars(host=h, include_hostvars=False).items():
            if k in set_somewhere:
                var = ctx.var(k, v, host_origins[name])
                won = winners.get(var.name)
                merged[var.name] = layered(won if won is not None and won.value == var.value else var,
                                           defaults.get(var.name))
        for k, v in extra.items():  # -e: above everything, as in Ansible
            merged[k] = layered(Var(k, v, Origin("-e (extra vars)", None)), merged.get(k))
        return Host(name, host_origins[name], host_groups, merged)

    def members(group: str) -> list[str]:
        inside = {h.name for h in manager.groups[group].get_hosts()}
        return [plain(n) for n in manager.hosts if n in inside]

    if target not in groups:
        others = ", ".join(g for g in groups if g not in IMPLICIT_GROUPS) or "none"
        raise InventoryError(f"no group {target}: kvprov configures the hosts of group {target} "
                             f"(add them under all: children: {target}: hosts:; groups here: {others})", where)
    targets = members(target)
    if not targets:
        origin = groups[target].origin
        raise InventoryError(f"group {target} has no hosts", origin.file if origin else where,
                             origin.line if origin else None)
    storage = members(STORAGE_GROUP) if STORAGE_GROUP in groups and target != STORAGE_GROUP else []
    issues = ctx.issues + _unused_vars_files(ctx.vars_files, groups, manager.hosts)
    return Inventory(Path(given[0]), [host(n) for n in targets], groups, settings, defaults, roles,
                     issues, [host(n) for n in storage], given)


def _unused_vars_files(files: dict[str, dict[str, list[str]]], groups, hosts) -> list[Problem]:
    """group_vars/host_vars files named after no group/host: Ansible ignores them silently."""
    out = []
    for kind, known in (("group", groups), ("host", hosts)):
        for name, lst in files[kind].items():
            if name not in known:
                hint = did_you_mean(name, [k for k in known if k not in IMPLICIT_GROUPS])
                out += [Problem(f, 1, None, None, f"no {kind} {name} in the inventory: Ansible ignores this file{hint}",
                                "warning") for f in lst]
    return out
