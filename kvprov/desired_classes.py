"""Which hosts' desired states kvprov.desired must template, and which it may derive (issue #28).

Templating the desired state (playbooks/tasks/desired.yml) costs Ansible about 0.4 CPU s a
host, though the hosts of a group get the same state but for their name. Pure functions, no
Ansible:

- `class_key`: a host's class, the sha256 of every variable Ansible gives the host (its
  inventory, group_vars, host_vars, cached facts, group_names, inventory_file ...) except its
  identity (`is_identity`: its name and how kvprov reaches it), which differs per host and
  would leave every class one host.
- `plan`: per class, the hosts to template first. A class of several hosts gets two probes
  that differ in every identity variable that varies in the class (a class where no two
  hosts do is templated host by host from the start).
- `spread`: when the second probe's state is the first's with the first's name replaced by
  the second's (`renamed`: in every string; the roles use the name only in text, e.g. an
  engine instance's directory <mount>/<inventory_hostname>/<name>), the state reads no other
  identity value and each other host of the class gets the first probe's state renamed to
  it; otherwise (a template reads ansible_host, transforms the name, or the name occurs for
  another reason) each host of the class is templated.

The result equals the host-by-host one as long as a template that reads an identity value
either includes the name as it is or treats the probes' values differently from each other:
a host whose name holds a kind of character (lower or upper case letter, digit, each other
character) that neither probe's has is templated itself, for escaping; a template that
reads, say, the name's length or hash is not seen (tests/unit/test_desired_classes.py lists
every use of the name in the roles). Nothing is kept across runs: the classes and states
live in one call of kvprov.desired.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

# A host's own name and the variables that say how Ansible reaches it (Ansible's connection
# variables): they differ per host, and no role reads them for the desired state except the
# name (which the probes cover).
IDENTITY_NAMES = frozenset({"inventory_hostname", "inventory_hostname_short", "ansible_host", "ansible_port",
                            "ansible_user", "ansible_connection", "ansible_password", "ansible_private_key_file",
                            "ansible_python_interpreter"})
IDENTITY_PREFIXES = ("ansible_ssh_", "ansible_become")
_MISSING = object()  # an identity variable a host does not set


def is_identity(name: str) -> bool:
    """Whether a variable is part of the host's identity (left out of its class key)."""
    return name in IDENTITY_NAMES or name.startswith(IDENTITY_PREFIXES)


def _plain(value: Any) -> Any:
    """A value json cannot write as it is (a vault-encrypted string, a set, a date), as its
    type and text: values of different types never share a key."""
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    return [type(value).__name__, str(value)]


def class_key(variables: dict[str, Any]) -> str:
    """The sha256 of the host's variables without its identity, as canonical JSON."""
    kept = {name: value for name, value in variables.items() if not is_identity(name)}
    text = json.dumps(kept, sort_keys=True, separators=(",", ":"), default=_plain)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class HostClass:
    """Hosts with the same class key, in inventory order; `probes`: those to compute first."""

    members: list[str]
    probes: list[str]

    @property
    def rest(self) -> list[str]:
        """The members the probes leave: derived from them (spread) or templated."""
        return [h for h in self.members if h not in self.probes]


def _identity(variables: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in variables.items() if is_identity(name)}


def _probes(members: list[str], variables: dict[str, dict[str, Any]]) -> list[str]:
    """The first member and the member differing from it in the most identity variables; every
    member when those two agree on a variable that another member sets differently (the probe
    could not see a template reading it)."""
    first = _identity(variables[members[0]])
    names = {n for h in members for n in _identity(variables[h])}
    varying = {n for n in names if any(_identity(variables[h]).get(n, _MISSING) != first.get(n, _MISSING)
                                       for h in members)}

    def differing(host: str) -> int:
        own = _identity(variables[host])
        return sum(own.get(n, _MISSING) != first.get(n, _MISSING) for n in varying)

    second = max(members[1:], key=differing)  # the first of the most differing
    if differing(second) < len(varying):
        return list(members)
    return [members[0], second]


def plan(variables: dict[str, dict[str, Any]]) -> list[HostClass]:
    """The classes of the hosts ({host: every variable Ansible gives it}, in inventory order),
    each with the hosts to compute first: the only member, two probes, or every member."""
    by_key: dict[str, list[str]] = {}
    for host, values in variables.items():
        by_key.setdefault(class_key(values), []).append(host)
    return [HostClass(members, members if len(members) == 1 else _probes(members, variables))
            for members in by_key.values()]


def renamed(value: Any, old: str, new: str) -> Any:
    """A desired state (or any part of it) with `old` replaced by `new` in every string, keys
    included; a new structure, sharing nothing mutable with `value`."""
    if isinstance(value, dict):
        return {renamed(k, old, new): renamed(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [renamed(v, old, new) for v in value]
    return value.replace(old, new) if isinstance(value, str) else value


def _kinds(name: str) -> set[str]:
    """The kinds of character in a name: lower, upper, digit, and each other character itself."""
    return {"lower" if c.islower() else "upper" if c.isupper() else "digit" if c.isdigit() else c for c in name}


def spread(host_class: HostClass, states: dict[str, dict]) -> tuple[dict[str, dict], list[str]]:
    """From the probes' states: the states derived for the class's other hosts, and the hosts
    that must be templated themselves (all of them when the probes' states are not each
    other's renamed)."""
    if len(host_class.probes) != 2 or not host_class.rest:
        return {}, host_class.rest
    first, second = host_class.probes
    if renamed(states[first], first, second) != states[second]:
        return {}, host_class.rest
    seen = _kinds(first) | _kinds(second)
    return ({h: renamed(states[first], first, h) for h in host_class.rest if _kinds(h) <= seen},
            [h for h in host_class.rest if not _kinds(h) <= seen])
