"""The roles' argument specs (roles/*/meta/argument_specs.yml), the variable contract every
layer reads: the options with their types, and Ansible's own conversions of a value to its type.
Below the inventory's reading (kvprov.inventory, which converts -e key=value words with them) and
the rules (kvprov.check); it imports nothing of kvprov."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class VarSpec:
    """One option of a role's argument spec."""

    name: str
    role: str
    type: str = "str"  # Ansible's default type
    elements: str | None = None
    choices: tuple[Any, ...] | None = None
    no_log: bool = False  # a secret: its value is in no message


def read_specs(roles: Path) -> dict[str, VarSpec]:
    """Every option of every role's meta/argument_specs.yml (all entry points)."""
    specs: dict[str, VarSpec] = {}
    for path in sorted(roles.glob("*/meta/argument_specs.y*ml")):
        data = yaml.safe_load(path.read_text()) or {}
        for entry in (data.get("argument_specs") or {}).values():
            for name, opt in ((entry or {}).get("options") or {}).items():
                opt = opt or {}
                choices = opt.get("choices")
                specs[name] = VarSpec(name, path.parent.parent.name, opt.get("type", "str"),
                                      opt.get("elements"), tuple(choices) if choices else None,
                                      bool(opt.get("no_log")))
    return specs


def is_template(value: Any) -> bool:
    """A Jinja expression: only Ansible knows its value, so kvprov does not judge it."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def convert(value: Any, type_: str) -> Any:
    """The value as a role's argument spec converts it before the role runs, by Ansible's own
    rules (ansible.module_utils.common.validation): a string "262144" or a float 2.0 for an int,
    "yes"/"off"/"1" for a bool, "0.5" for a float -- what dynamic inventories and -e key=value
    give. Otherwise the value itself, also where kvprov is stricter than Ansible: a boolean is
    not a number, a number is not a string (YAML has already lost how it was written: 1.10
    reads 1.1), a string is not a list, and a float must be finite."""
    from ansible.module_utils.common.validation import check_type_bool, check_type_float, check_type_int

    if isinstance(value, bool) or is_template(value):
        return value
    try:
        if type_ == "int" and isinstance(value, (str, float)):
            return check_type_int(value)
        if type_ == "float" and isinstance(value, str):
            converted = check_type_float(value)
            return converted if math.isfinite(converted) else value
        if type_ == "bool" and isinstance(value, str):
            return check_type_bool(value)
    except (TypeError, ValueError, OverflowError):  # not convertible: type_error says why
        pass
    return value


def typed(value: Any, spec: VarSpec) -> Any:
    """convert() applied to a value of spec, and to each element of a list of typed elements;
    the value itself (the same object) when nothing converts."""
    if spec.type == "list" and spec.elements and isinstance(value, list):
        items = [convert(v, spec.elements) for v in value]
        return value if all(a is b for a, b in zip(items, value)) else items
    return convert(value, spec.type)
