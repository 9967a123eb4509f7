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
author: kvprov maintainers (!UNKNOWN)
options: {}
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
"""
