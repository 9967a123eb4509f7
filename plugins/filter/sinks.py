"""kvprov's sink formats as Jinja filters (kvprov/sinks.py): the roles' templates put every
inventory value through the filter of the place it lands in, after Jinja has templated it,
so a value that is itself a template is checked as well.

  kvprov.kvprov.unit_word      one word of a unit's command line (ExecStart=, ExecStartPre=)
  kvprov.kvprov.unit_env       one Environment= assignment (NAME=value)
  kvprov.kvprov.unit_path      ReadWritePaths=, RequiresMountsFor=, WorkingDirectory=
  kvprov.kvprov.mount_options  the mount unit's Options= (a list in, one line out)
  kvprov.kvprov.mount_source   the mount unit's What=
  kvprov.kvprov.netdev         an interface name in the soft-RoCE unit's shell command
  kvprov.kvprov.plain_name     User=, Group=, unit names, idmapd.conf's Domain: one unquoted name
  kvprov.kvprov.unit_text      free text on one unit line (Description=), % doubled
"""

from __future__ import annotations

import sys
from pathlib import Path

from ansible.errors import AnsibleFilterError

try:
    from kvprov import sinks, vault
except ImportError:  # not installed: the repository this collection ships in
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from kvprov import sinks, vault
from kvprov.validate.parsers import mount_state


def _filter(function):
    def run(*args):
        # an inline !vault value arrives encrypted; judged decrypted, and never shown
        args = tuple(vault.revealed(a) for a in args)
        try:
            return function(*args)
        except sinks.SinkError as e:
            raise AnsibleFilterError(f"kvprov refuses to render this value: {vault.hide(str(e))}") from None
    run.__name__ = function.__name__
    return run


class FilterModule:
    def filters(self):
        return {
            "unit_word": _filter(sinks.unit_word),
            "unit_env": _filter(lambda value: sinks.unit_word(value, command_line=False)),
            "unit_path": _filter(sinks.unit_path),
            "mount_options": _filter(lambda options: sinks.mount_options(options, mount_state.expectations)),
            "mount_source": _filter(sinks.mount_source),
            "netdev": _filter(sinks.netdev),
            "plain_name": _filter(sinks.plain_name),
            "unit_text": _filter(sinks.unit_text),
            "toml_key": _filter(sinks.toml_key),
            "toml_value": _filter(sinks.toml_value),
        }
