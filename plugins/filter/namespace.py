"""kvprov's shared-namespace names as Jinja filters (kvprov/namespace.py): the engine role names
a shared namespace with the same code `kvprov check` uses, so deploy, render, audit and check
agree on it.

  kvprov.kvprov.kv_keying       the variables that key an engine's namespace (a list of names)
  kvprov.kvprov.kv_namespace    {variable: value} of those (and the extra arguments, environment
                                and kvprov_engine_namespace) -> the namespace's directory name
"""

from __future__ import annotations

import sys
from pathlib import Path

from ansible.errors import AnsibleFilterError

try:
    from kvprov import namespace, vault
except ImportError:  # not installed: the repository this collection ships in
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from kvprov import namespace, vault

# What kv_namespace reads besides an engine's table.
ALSO = ("kvprov_engine_extra_args", "kvprov_engine_environment", "kvprov_engine_namespace")


def kv_keying(engine: str) -> list[str]:
    return [*namespace.KEYING.get(engine, {}), *ALSO]


def kv_namespace(values: dict, engine: str) -> str:
    missing = [n for n in namespace.KEYING.get(engine, {}) if values.get(n) is None]
    if missing:  # hashed as "" they would name another namespace than the one check and render show
        raise AnsibleFilterError(f"kvprov cannot name the {engine} namespace here: {', '.join(missing)} not defined "
                                 "(the engine's role is not loaded yet, or the value is null)")
    return namespace.namespace(engine, lambda name: vault.revealed(values.get(name)))


class FilterModule:
    def filters(self):
        return {"kv_keying": kv_keying, "kv_namespace": kv_namespace}
