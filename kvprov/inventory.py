"""The inventory model: an Ansible YAML inventory, its group_vars/host_vars and the role
defaults, resolved per target host, with the file and line every value came from.

Pure parsing (`parse_yaml`, `parse_inventory`, `parse_vars`, `resolve`) is kept apart from
file reading (`load`, `read_vars_dir`, `read_role_defaults`). Values are built with
PyYAML's safe constructor from the composed node tree, so each variable keeps its node
(`Var.line_of` finds the line of a nested element) and no Ansible internals are needed.

Precedence is Ansible's (ansible-core's default VARIABLE_PRECEDENCE), lowest first:
role defaults < inventory-file group vars (all, then groups by depth, priority, name)
< group_vars/all < group_vars/<group> (same order) < inventory-file host vars
< host_vars/<host>. Dicts are replaced, not merged (hash_behaviour=replace).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import SafeConstructor

from kvprov import paths
from kvprov.errors import EXIT_USAGE, KvprovError

TARGET_GROUP = "gpu_nodes"  # kvprov configures the hosts of this group (and its children)
STORAGE_GROUP = "kv_storage"  # the storage systems `kvprov storage check` checks (and its children)
GROUP_KEYS = ("hosts", "children", "vars")
VARS_FILE_SUFFIXES = ("", ".yml", ".yaml", ".json")  # what Ansible's host_group_vars reads


class InventoryError(KvprovError):
    """The inventory cannot be used at all (unreadable, not YAML, no target hosts)."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None,
                 column: int | None = None):
        self.file, self.line, self.column, self.detail = file, line, column, message
        where = ":".join(str(p) for p in (file, line, column) if p is not None)
        super().__init__(f"{where}: {message}" if where else message, EXIT_USAGE)


@dataclass(frozen=True)
class Origin:
    """Where a value was set: a file and 1-based line, or a role's defaults."""

    file: str
    line: int
    default: bool = False  # True: a role default (file/line point into roles/*/defaults)

    def __str__(self) -> str:
        return "default" if self.default else f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Var:
    """One variable's value and where it was set."""

    name: str
    value: Any
    origin: Origin
    node: yaml.Node | None = field(default=None, compare=False, repr=False)

    def line_of(self, *path: str | int) -> int:
        """The line of a nested element (dict keys, list indexes), else this variable's line."""
        node, line = self.node, self.origin.line
        for step in path:
            if isinstance(node, yaml.MappingNode):
                pairs = [(k, v) for k, v in node.value if _scalar_text(k) == str(step)]
                if not pairs:
                    break
                line, node = _line(pairs[-1][0]), pairs[-1][1]
            elif isinstance(node, yaml.SequenceNode) and isinstance(step, int) and step < len(node.value):
                node = node.value[step]
                line = _line(node)
            else:
                break
        return line


@dataclass(frozen=True)
class Problem:
    """One finding about an inventory, meant for the operator (see kvprov.check)."""

    file: str | None
    line: int | None
    host: str | None
    variable: str | None
    message: str
    severity: str = "error"  # "error" | "warning"
    column: int | None = None  # only for YAML syntax errors

    def __str__(self) -> str:
        return self.format()

    def format(self, hosts: str | None = None) -> str:
        """FILE:LINE: [warning: ][host H: ][VARIABLE: ]MESSAGE; `hosts` replaces "host H"."""
        location = ":".join(str(p) for p in (self.file, self.line, self.column) if p is not None)
        hosts = hosts if hosts is not None else (f"host {self.host}" if self.host else None)
        severity = self.severity if self.severity != "error" else None
        return ": ".join(p for p in (location, severity, hosts, self.variable, self.message) if p)


@dataclass
class Group:
    name: str
    origin: Origin | None  # None for the implicit `all`
    vars: dict[str, Var] = field(default_factory=dict)
    children: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)


@dataclass
class Layout:
    """What the inventory file itself says: groups, hosts and their vars (parse_inventory)."""

    file: str
    groups: dict[str, Group]
    host_origins: dict[str, Origin]  # every host, in file order, where first declared
    host_vars: dict[str, dict[str, Var]]
    issues: list[Problem] = field(default_factory=list)


@dataclass(frozen=True)
class Setting:
    """A variable as set in one place (inventory file or a vars file), for a group or a host."""

    var: Var
    group: str | None = None
    host: str | None = None


@dataclass
class Host:
    """A target host: its groups and its effective variables."""

    name: str
    origin: Origin  # where the host is first declared in the inventory file
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
    path: Path
    hosts: list[Host]  # the targets: hosts of TARGET_GROUP (and its children), in file order
    groups: dict[str, Group]
    settings: list[Setting]  # every variable set anywhere, in file order
    defaults: dict[str, Var]  # the roles' defaults
    roles: Path  # the roles directory the defaults came from
    issues: list[Problem] = field(default_factory=list)  # structural findings of the loader
    storage_hosts: list[Host] = field(default_factory=list)  # hosts of STORAGE_GROUP, in file order

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    @property
    def host_names(self) -> list[str]:
        return [h.name for h in self.hosts]


# ---------------------------------------------------------------------------- YAML

def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _scalar_text(node: yaml.Node) -> str | None:
    return node.value if isinstance(node, yaml.ScalarNode) else None


def construct(node: yaml.Node) -> Any:
    """The Python value of a node, exactly as yaml.safe_load would build it."""
    return SafeConstructor().construct_object(node, deep=True)


def parse_yaml(text: str, file: str) -> yaml.Node | None:
    """Compose a YAML document into nodes (None when empty); syntax errors -> InventoryError."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if node is not None:
            construct(node)  # surface constructor errors (bad timestamps, ...) here
        return node
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        detail = e.problem or e.context or "invalid YAML"
        if e.context and e.problem:
            detail = f"{e.problem} ({e.context})"
        if "block" in detail:
            detail += "; check the indentation"
        line, col = (mark.line + 1, mark.column + 1) if mark else (None, None)
        raise InventoryError(f"YAML error: {detail}", file, line, col) from None
    except yaml.YAMLError as e:
        raise InventoryError(f"YAML error: {e}", file) from None


def mapping_items(node: yaml.MappingNode) -> list[tuple[str, yaml.Node, yaml.Node]]:
    """(key, key node, value node) of a mapping, with YAML merge keys (<<) applied."""
    SafeConstructor().flatten_mapping(node)
    return [(str(construct(k)), k, v) for k, v in node.value]


def duplicate_keys(node: yaml.Node | None, file: str) -> list[Problem]:
    """Keys given twice in one mapping anywhere in the document: YAML keeps the last silently."""
    out: list[Problem] = []
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for k, v in node.value:
            key = _scalar_text(k)
            if key is not None and key != "<<":
                if key in seen:
                    out.append(Problem(file, _line(k), None, None,
                                       f"duplicate key {key!r} (first at line {seen[key]}): "
                                       "YAML silently keeps only the last one; remove one of them"))
                seen.setdefault(key, _line(k))
            out += duplicate_keys(v, file)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            out += duplicate_keys(item, file)
    return out


def parse_vars(node: yaml.Node | None, file: str, issues: list[Problem], what: str) -> dict[str, Var]:
    """A mapping of variables (a `vars:` block, a host's body, a vars file)."""
    if node is None or (isinstance(node, yaml.ScalarNode) and construct(node) is None):
        return {}
    if not isinstance(node, yaml.MappingNode):
        issues.append(Problem(file, _line(node), None, None,
                              f"{what} must be a mapping of variable: value, got {_kind(node)}"))
        return {}
    return {name: Var(name, construct(v), Origin(file, _line(k)), v) for name, k, v in mapping_items(node)}


def _kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    return f"the value {node.value!r}"


# ---------------------------------------------------------------------------- inventory file

_INI_SECTION = re.compile(r"^\[[A-Za-z0-9_:.-]+\]\s*$", re.M)
_RANGE = re.compile(r"^(.*?)\[([0-9a-zA-Z]+):([0-9a-zA-Z]+)(?::([0-9]+))?\](.*)$")


def expand_hosts(pattern: str) -> list[str]:
    """Ansible host ranges: gpu[01:04] -> gpu01..gpu04, rack[a:c]-n1, x[0:10:5]."""
    m = _RANGE.match(pattern)
    if not m:
        return [pattern]
    head, start, end, step, tail = m.groups()
    step_n = int(step or 1)
    if start.isdigit() and end.isdigit():
        width = len(start) if start.startswith("0") else 0
        items = [str(i).zfill(width) for i in range(int(start), int(end) + 1, step_n)]
    elif len(start) == 1 and len(end) == 1 and start.isalpha() and end.isalpha():
        items = [chr(c) for c in range(ord(start), ord(end) + 1, step_n)]
    else:
        raise ValueError(f"bad host range [{start}:{end}] in {pattern!r}")
    return [head + item + rest for item in items for rest in expand_hosts(tail)]


def parse_inventory(text: str, file: str) -> Layout:
    """The groups, hosts and vars of a YAML inventory (pure)."""
    if _INI_SECTION.search(text) and not re.search(r"^all:", text, re.M):
        raise InventoryError("this looks like an INI inventory ([group] sections); kvprov reads YAML "
                             "inventories (all: children: gpu_nodes: hosts: ...); `ansible-inventory -i "
                             "FILE --list -y` shows yours as YAML", file)
    root = parse_yaml(text, file)
    if root is None:
        raise InventoryError("the inventory is empty", file)
    if not isinstance(root, yaml.MappingNode):
        raise InventoryError(f"an inventory must be a mapping of groups (all: ...), got {_kind(root)}",
                             file, _line(root))
    layout = Layout(file, {"all": Group("all", None)}, {}, {}, duplicate_keys(root, file))
    for name, key, body in mapping_items(root):
        _parse_group(layout, name, Origin(file, _line(key)), body, parent=None if name == "all" else "all")
    return layout


def _parse_group(layout: Layout, name: str, origin: Origin, body: yaml.Node, parent: str | None) -> None:
    file, issues = layout.file, layout.issues
    group = layout.groups.setdefault(name, Group(name, origin))
    if group.origin is None:
        group.origin = origin
    if parent is not None and name not in layout.groups[parent].children:
        if _is_ancestor(layout, name, parent):
            raise InventoryError(f"group {name} is its own ancestor (children loop via {parent})",
                                 file, origin.line)
        layout.groups[parent].children.append(name)
    if body is None or (isinstance(body, yaml.ScalarNode) and construct(body) is None):
        return
    if not isinstance(body, yaml.MappingNode):
        issues.append(Problem(file, _line(body), None, None,
                              f"group {name} must be a mapping with hosts:, children:, vars:, got {_kind(body)}"))
        return
    for key, knode, value in mapping_items(body):
        if key == "vars":
            group.vars.update(parse_vars(value, file, issues, f"vars of group {name}"))
        elif key == "hosts":
            _parse_hosts(layout, group, value)
        elif key == "children":
            _parse_children(layout, name, value)
        else:
            hint = _did_you_mean(key, GROUP_KEYS)
            issues.append(Problem(file, _line(knode), None, None,
                                  f"group {name}: unexpected key {key!r}; a group has only "
                                  f"hosts:, children:, vars: (Ansible ignores this key){hint}"))


def _parse_children(layout: Layout, parent: str, node: yaml.Node) -> None:
    if isinstance(node, yaml.ScalarNode) and construct(node) is None:
        return
    if not isinstance(node, yaml.MappingNode):
        layout.issues.append(Problem(layout.file, _line(node), None, None,
                                     f"children of group {parent} must be a mapping of group names, got {_kind(node)}"))
        return
    for name, key, body in mapping_items(node):
        _parse_group(layout, name, Origin(layout.file, _line(key)), body, parent)


def _parse_hosts(layout: Layout, group: Group, node: yaml.Node) -> None:
    file = layout.file
    if isinstance(node, yaml.ScalarNode) and construct(node) is None:
        return
    if not isinstance(node, yaml.MappingNode):
        layout.issues.append(Problem(file, _line(node), None, None,
                                     f"hosts of group {group.name} must be a mapping (host: vars), got {_kind(node)}"))
        return
    for pattern, key, body in mapping_items(node):
        try:
            names = expand_hosts(pattern)
        except ValueError as e:
            layout.issues.append(Problem(file, _line(key), None, None, str(e)))
            continue
        host_vars = parse_vars(body, file, layout.issues, f"host {pattern}")
        for name in names:
            layout.host_origins.setdefault(name, Origin(file, _line(key)))
            layout.host_vars.setdefault(name, {}).update(host_vars)
            if name not in group.hosts:
                group.hosts.append(name)


def _is_ancestor(layout: Layout, group: str, of: str) -> bool:
    """Is `group` equal to `of` or one of its ancestors?"""
    if group == of:
        return True
    return any(_is_ancestor(layout, group, p.name) for p in layout.groups.values() if of in p.children)


def _did_you_mean(word: str, choices) -> str:
    import difflib

    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {match[0]}?" if match else ""


# ---------------------------------------------------------------------------- resolution

def group_depths(groups: dict[str, Group]) -> dict[str, int]:
    """Ansible's group depth: the longest path from `all`."""
    depth = {"all": 0}

    def visit(name: str, d: int) -> None:
        if depth.get(name, -1) >= d:
            return
        depth[name] = d
        for child in groups[name].children:
            visit(child, d + 1)

    for child in groups["all"].children:
        visit(child, 1)
    return depth


def parents(groups: dict[str, Group]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {name: [] for name in groups}
    for g in groups.values():
        for child in g.children:
            out[child].append(g.name)
    return out


def host_groups(groups: dict[str, Group], host: str, depth: dict[str, int],
                priority: dict[str, int]) -> list[str]:
    """Every group of a host (ancestors included), in Ansible's order: all, then by
    (depth, ansible_group_priority, name). Later groups win."""
    up = parents(groups)
    member: set[str] = set()
    todo = [g.name for g in groups.values() if host in g.hosts]
    while todo:
        name = todo.pop()
        if name not in member:
            member.add(name)
            todo += up[name]
    rest = sorted(member - {"all"}, key=lambda g: (depth.get(g, 1), priority.get(g, 1), g))
    return ["all", *rest]


def target_hosts(groups: dict[str, Group], host_order: list[str], target: str = TARGET_GROUP) -> list[str]:
    """The hosts of group `target` and of its child groups, in file order."""
    members: set[str] = set()
    todo = [target]
    while todo:
        g = groups[todo.pop()]
        members.update(g.hosts)
        todo += g.children
    return [h for h in host_order if h in members]


@dataclass(frozen=True)
class VarsFile:
    """One file of group_vars/ or host_vars/."""

    file: str
    vars: dict[str, Var]


@dataclass
class VarsFiles:
    """group_vars/ and host_vars/ contents: group or host name -> its files, in load order."""

    groups: dict[str, list[VarsFile]] = field(default_factory=dict)
    hosts: dict[str, list[VarsFile]] = field(default_factory=dict)


def resolve(layout: Layout, files: VarsFiles, defaults: dict[str, Var], path: Path,
            roles: Path, target: str = TARGET_GROUP) -> Inventory:
    """The effective variables of every target host (pure)."""
    if target not in layout.groups:
        others = ", ".join(g for g in layout.groups if g != "all") or "none"
        raise InventoryError(f"no group {target}: kvprov configures the hosts of group {target} "
                             f"(add them under all: children: {target}: hosts:; groups here: {others})",
                             layout.file)
    targets = target_hosts(layout.groups, list(layout.host_origins), target)
    if not targets:
        g = layout.groups[target]
        raise InventoryError(f"group {target} has no hosts", layout.file, g.origin.line if g.origin else None)
    depth, priority = group_depths(layout.groups), _group_priorities(layout.groups, files)

    def host(name: str) -> Host:
        groups = host_groups(layout.groups, name, depth, priority)
        merged: dict[str, Var] = {n: v for n, v in defaults.items() if n.startswith("kvprov_")}
        for g in groups:  # the inventory file's group vars
            merged.update(layout.groups[g].vars)
        for g in groups:  # group_vars/ (all first)
            for f in files.groups.get(g, []):
                merged.update(f.vars)
        merged.update(layout.host_vars.get(name, {}))
        for f in files.hosts.get(name, []):
            merged.update(f.vars)
        return Host(name, layout.host_origins[name], groups, merged)

    storage = (target_hosts(layout.groups, list(layout.host_origins), STORAGE_GROUP)
               if STORAGE_GROUP in layout.groups and target != STORAGE_GROUP else [])
    issues = layout.issues + _unused_vars_files(layout, files)
    return Inventory(path, [host(n) for n in targets], layout.groups, _settings(layout, files), defaults, roles,
                     issues, [host(n) for n in storage])


def _group_priorities(groups: dict[str, Group], files: VarsFiles) -> dict[str, int]:
    out = {}
    for name, g in groups.items():
        var = g.vars.get("ansible_group_priority")
        for f in files.groups.get(name, []):
            var = f.vars.get("ansible_group_priority", var)
        if var is not None and isinstance(var.value, int):
            out[name] = var.value
    return out


def _settings(layout: Layout, files: VarsFiles) -> list[Setting]:
    out = [Setting(v, group=g.name) for g in layout.groups.values() for v in g.vars.values()]
    out += [Setting(v, host=h) for h, vars_ in layout.host_vars.items() for v in vars_.values()]
    out += [Setting(v, group=g) for g, lst in files.groups.items() for f in lst for v in f.vars.values()]
    out += [Setting(v, host=h) for h, lst in files.hosts.items() for f in lst for v in f.vars.values()]
    return out


def _unused_vars_files(layout: Layout, files: VarsFiles) -> list[Problem]:
    """group_vars/host_vars files named after no group/host: Ansible ignores them silently."""
    out = []
    for kind, entries, known in (("group", files.groups, layout.groups),
                                 ("host", files.hosts, layout.host_origins)):
        for name, lst in entries.items():
            if name not in known:
                hint = _did_you_mean(name, known)
                out += [Problem(f.file, 1, None, None,
                                f"no {kind} {name} in the inventory: Ansible ignores this file{hint}",
                                "warning") for f in lst]
    return out


# ---------------------------------------------------------------------------- file I/O

def roles_dir() -> Path:
    """The Ansible roles shipped with kvprov (kvprov.paths decides where they live)."""
    return paths.roles_dir()


def read_text(path: Path) -> str:
    try:
        return path.read_text()
    except IsADirectoryError:
        raise InventoryError("is a directory; give the inventory file (e.g. inventory/prod.yml)",
                             str(path)) from None
    except OSError as e:
        raise InventoryError(f"cannot read: {e.strerror or e}", str(path)) from None
    except UnicodeDecodeError as e:
        raise InventoryError(f"not a UTF-8 text file ({e.reason} at byte {e.start})", str(path)) from None


def read_role_defaults(roles: Path) -> dict[str, Var]:
    """Every role's defaults/main.yml, each value marked as a default (origin.default)."""
    out: dict[str, Var] = {}
    for path in sorted(roles.glob("*/defaults/main.y*ml")):
        node = parse_yaml(read_text(path), str(path))
        for name, var in parse_vars(node, str(path), [], str(path)).items():
            out[name] = Var(name, var.value, Origin(var.origin.file, var.origin.line, default=True), var.node)
    return out


def read_vars_dir(directory: Path, issues: list[Problem]) -> dict[str, list[VarsFile]]:
    """group_vars/ or host_vars/: <name>, <name>.yml|.yaml|.json files and <name>/ directories
    (every such file below it, sorted), as Ansible's host_group_vars plugin reads them."""
    out: dict[str, list[VarsFile]] = {}
    if not directory.is_dir():
        return out
    for entry in sorted(directory.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            name, paths = entry.name, sorted(p for p in entry.rglob("*") if _is_vars_file(p))
        else:
            name = entry.stem if entry.suffix in VARS_FILE_SUFFIXES else entry.name
            paths = [entry]
        for path in paths:
            node = parse_yaml(read_text(path), str(path))
            issues += duplicate_keys(node, str(path))
            out.setdefault(name, []).append(VarsFile(str(path), parse_vars(node, str(path), issues, str(path))))
    return out


def _is_vars_file(path: Path) -> bool:
    return path.is_file() and not path.name.startswith(".") and path.suffix in VARS_FILE_SUFFIXES


def load(path: str | Path, roles: Path | None = None, target: str = TARGET_GROUP) -> Inventory:
    """Load an inventory file with its group_vars/ and host_vars/ and the role defaults.

    Raises InventoryError (exit code 2) when the inventory cannot be used at all."""
    path = Path(path)
    layout = parse_inventory(read_text(path), str(path))
    files = VarsFiles(read_vars_dir(path.parent / "group_vars", layout.issues),
                      read_vars_dir(path.parent / "host_vars", layout.issues))
    roles = roles or roles_dir()
    return resolve(layout, files, read_role_defaults(roles), path, roles, target)
