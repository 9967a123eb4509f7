"""kvprov's own lint of YAML inventory files and vars files, on top of what Ansible reads.

Ansible skips a mistyped group key or a non-mapping group with a warning, keeps the last of
two equal keys silently and reports a YAML syntax error in its own words; kvprov reports
each as one line with its file, line (and column). Pure: text in, problems and nodes out.
The nodes (`key_nodes`) let kvprov.inventory find the YAML node of a value Ansible loaded,
for the line of a nested element and the value as written ("yes", "0755").
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.constructor import SafeConstructor

from kvprov import sinks
from kvprov.errors import EXIT_USAGE, KvprovError

GROUP_KEYS = ("hosts", "children", "vars")


class InventoryError(KvprovError):
    """The inventory cannot be used at all (unreadable, not parsable, no target hosts)."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None,
                 column: int | None = None, problems: list[Problem] | None = None):
        self.file, self.line, self.column, self.detail = file, line, column, message
        # what to report instead of this one line: kvprov's lint findings that explain it
        self.problems = problems or [Problem(file, line, None, None, message, "error", column)]
        where = ":".join(str(p) for p in (file, line, column) if p is not None)
        super().__init__(f"{where}: {message}" if where else message, EXIT_USAGE)


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
        line = ": ".join(p for p in (location, severity, hosts, self.variable, self.message) if p)
        return sinks.shown(line, limit=1 << 30)  # a host or file name's escapes never reach the terminal


# ---------------------------------------------------------------------------- YAML

def line_of(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def scalar_text(node: yaml.Node | None) -> str | None:
    return node.value if isinstance(node, yaml.ScalarNode) else None


VAULT_HEADER = "$ANSIBLE_VAULT;"  # a whole file encrypted with ansible-vault


class _Constructor(SafeConstructor):
    """yaml.safe_load's constructor plus Ansible's own tags: `!vault` (an inline encrypted
    value: Ansible decrypts it, kvprov's lint sees only that it is one) and `!unsafe`."""


_Constructor.add_constructor("!vault", lambda c, node: "<vaulted>")
_Constructor.add_constructor("!unsafe", lambda c, node: c.construct_scalar(node))


def construct(node: yaml.Node) -> Any:
    """The Python value of a node, as yaml.safe_load would build it (and Ansible's tags)."""
    return _Constructor().construct_object(node, deep=True)


def is_vaulted(text: str) -> bool:
    return text.lstrip().startswith(VAULT_HEADER)


def parse_yaml(text: str, file: str) -> yaml.Node | None:
    """Compose a YAML document into nodes (None when empty, or a vault-encrypted file: Ansible
    decrypts it, and its values have no lines); syntax errors -> InventoryError."""
    if is_vaulted(text):
        return None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if node is not None and expanded_size(node) > MAX_EXPANDED:
            raise InventoryError(f"YAML aliases (*name) expand this file to more than {MAX_EXPANDED:,} values: "
                                 "an alias bomb, not an inventory; write the values out", file)
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


MAX_EXPANDED = 5_000_000  # values a file may hold once its aliases are expanded (10,000 hosts x 500)


def expanded_size(node: yaml.Node) -> int:
    """How many nodes the document holds with every alias expanded, counted once per node object
    (aliases share them): linear in the file, whatever the expansion."""
    sizes: dict[int, int] = {}
    order, seen = [node], set()
    while order:  # children before parents, without recursion (the nesting can be deep)
        n = order[-1]
        if id(n) in seen:
            order.pop()
            children = [c for kv in n.value for c in kv] if isinstance(n, yaml.MappingNode) else (
                n.value if isinstance(n, yaml.SequenceNode) else [])
            sizes[id(n)] = 1 + sum(sizes.get(id(c), 1) for c in children)
            continue
        seen.add(id(n))
        if isinstance(n, yaml.MappingNode):
            order += [c for kv in n.value for c in kv if id(c) not in seen]
        elif isinstance(n, yaml.SequenceNode):
            order += [c for c in n.value if id(c) not in seen]
    return sizes[id(node)]


def mapping_items(node: yaml.MappingNode) -> list[tuple[str, yaml.Node, yaml.Node]]:
    """(key, key node, value node) of a mapping, with YAML merge keys (<<) applied."""
    _Constructor().flatten_mapping(node)
    return [(str(construct(k)), k, v) for k, v in node.value]


def is_null(node: yaml.Node | None) -> bool:
    return node is None or (isinstance(node, yaml.ScalarNode) and construct(node) is None)


def kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    return f"the value {node.value!r}"


def key_nodes(node: yaml.Node | None) -> dict[tuple[int, str], yaml.Node]:
    """Every mapping entry of a document: (line of the key, key) -> the value's node."""
    out: dict[tuple[int, str], yaml.Node] = {}
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if scalar_text(k) is not None:
                out[(line_of(k), k.value)] = v
            out.update(key_nodes(v))
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            out.update(key_nodes(item))
    return out


def duplicate_keys(node: yaml.Node | None, file: str) -> list[Problem]:
    """Keys given twice in one mapping anywhere in the document: YAML keeps the last silently."""
    out: list[Problem] = []
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for k, v in node.value:
            key = scalar_text(k)
            if key is not None and key != "<<":
                if key in seen:
                    out.append(Problem(file, line_of(k), None, None,
                                       f"duplicate key {key!r} (first at line {seen[key]}): "
                                       "YAML silently keeps only the last one; remove one of them"))
                seen.setdefault(key, line_of(k))
            out += duplicate_keys(v, file)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            out += duplicate_keys(item, file)
    return out


def did_you_mean(word: str, choices) -> str:
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {match[0]}?" if match else ""


# ---------------------------------------------------------------------------- files

def lint_vars_file(text: str, file: str) -> tuple[yaml.Node | None, list[Problem]]:
    """A group_vars/host_vars file: its nodes and problems (syntax errors raise)."""
    root = parse_yaml(text, file)
    problems = duplicate_keys(root, file)
    if not is_null(root) and not isinstance(root, yaml.MappingNode):
        problems.append(Problem(file, line_of(root), None, None,
                                f"{file} must be a mapping of variable: value, got {kind(root)}"))
    return root, problems


def is_plugin_config(root: yaml.Node | None) -> bool:
    """An inventory plugin's configuration (plugin: constructed, ...), not a YAML inventory."""
    return isinstance(root, yaml.MappingNode) and any(scalar_text(k) == "plugin" for k, _ in root.value)


def lint_inventory(text: str, file: str) -> tuple[yaml.Node | None, list[Problem]]:
    """A YAML inventory file (or a plugin's configuration): its nodes and problems. Syntax
    errors, an empty file and a document that is not a mapping raise InventoryError."""
    root = parse_yaml(text, file)
    if root is None:
        raise InventoryError("the inventory is empty", file)
    if not isinstance(root, yaml.MappingNode):
        raise InventoryError(f"an inventory must be a mapping of groups (all: ...), got {kind(root)}",
                             file, line_of(root))
    problems = duplicate_keys(root, file)
    if not is_plugin_config(root):
        for name, _, body in mapping_items(root):
            problems += _lint_group(name, body, file)
    return root, problems


def _lint_group(name: str, body: yaml.Node, file: str) -> list[Problem]:
    if is_null(body):
        return []
    if not isinstance(body, yaml.MappingNode):
        return [Problem(file, line_of(body), None, None,
                        f"group {name} must be a mapping with hosts:, children:, vars:, got {kind(body)}")]
    out = []
    for key, knode, value in mapping_items(body):
        if key in GROUP_KEYS and not is_null(value) and not isinstance(value, yaml.MappingNode):
            what = {"vars": "vars of group {} must be a mapping of variable: value",
                    "hosts": "hosts of group {} must be a mapping (host: vars)",
                    "children": "children of group {} must be a mapping of group names"}[key]
            out.append(Problem(file, line_of(value), None, None, f"{what.format(name)}, got {kind(value)}"))
        elif key == "children":
            out += [p for child, _, b in mapping_items(value) for p in _lint_group(child, b, file)]
        elif key == "hosts":
            out += [Problem(file, line_of(b), None, None,
                            f"host {host} must be a mapping of variable: value, got {kind(b)}")
                    for host, _, b in mapping_items(value) if not is_null(b) and not isinstance(b, yaml.MappingNode)]
        elif key not in GROUP_KEYS:
            out.append(Problem(file, line_of(knode), None, None,
                               f"group {name}: unexpected key {key!r}; a group has only "
                               f"hosts:, children:, vars: (Ansible ignores this key){did_you_mean(key, GROUP_KEYS)}"))
    return out
