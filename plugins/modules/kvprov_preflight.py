#!/usr/bin/python
# Documentation only: kvprov_preflight is an action plugin (plugins/action/kvprov_preflight.py)
# that runs on the controller; Ansible reads a module's documentation from this file.

DOCUMENTATION = r"""
module: kvprov_preflight
short_description: Check this host's kvprov_* variables with kvprov check's rules
description:
  - Runs on the controller, contacts no host and changes nothing; check-mode safe.
  - Judges the kvprov_* values Ansible resolved for the host, over every kvprov role's defaults, with the per-host
    rules of C(kvprov check) (the kvprov Python package must be importable by the controller's Python).
  - Fails naming each problem; warnings are returned as warnings.
  - Returns the values Ansible's argument-spec validation would convert (a string V("262144") for an int,
    V("yes") for a bool) converted, for a C(ansible.builtin.set_fact) after it (roles/preflight/tasks/typed.yml).
author: kvprov maintainers (!UNKNOWN)
options:
  rules:
    description: Apply the rules; V(false) only converts (the desired-state computation, which kvprov check has
      judged already).
    type: bool
    default: true
attributes:
  check_mode:
    description: Changes nothing; runs the same in check mode.
    support: full
  diff_mode:
    description: No diff.
    support: none
  platform:
    description: Runs on the controller (an action plugin).
    support: full
    platforms: posix
"""

EXAMPLES = r"""
- name: Check this host's kvprov variables (the rules of kvprov check)
  kvprov.kvprov.kvprov_preflight:
"""

RETURN = r"""
kvprov_problems:
  description: Every problem found, errors and warnings.
  returned: always
  type: list
  elements: dict
kvprov_converted:
  description: The host's kvprov_* values that were strings (or integral floats) of a typed option, converted as
    Ansible converts them.
  returned: always
  type: dict
"""
