"""Action plugin kvprov_preflight: check this host's kvprov_* variables on the controller with
the rules of `kvprov check` itself (kvprov/check/), before any role touches the host.

Why this shape:
- one rule set: the roles used to repeat a subset of kvprov check's rules as Jinja asserts,
  in a second language, and the two drifted. An action plugin runs in the controller's
  Python, imports kvprov and calls `check.check_host_values` -- the setting rules (spec
  type, control characters, VALUE_RULES), the host rules and the host's own storage
  directory rules -- so no rule is written twice. A module would run on the target, which
  has only python3 and not kvprov.
- called by the role kvprov.kvprov.preflight, listed in every kvprov role's meta/main.yml
  `dependencies`, so a role used alone, from another playbook, still gets the check, and a
  dependency runs once per host and play however many roles list it. The plugin lives in
  the collection's plugins/action: Ansible loads no plugins embedded in a role that a
  collection holds (ansible/playbook/role/__init__.py adds them for standalone roles only).

Not checked here: the rules that need the whole inventory -- storage directories or hash
seeds shared between hosts -- and its files -- misspelt variable names, YAML structure.
`kvprov check` runs those (and `kvprov deploy` runs it first).

Input: every role's defaults (read once per controller process from the roles beside this
one) overlaid with the kvprov_* values Ansible resolved for the host. A value that is a
Jinja expression is rendered with this task's templar; one that cannot be rendered, or
renders to something not of its spec type, is left unjudged, as kvprov check leaves every
template. Never changed, check-mode safe, contacts no host.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from ansible.plugins.action import ActionBase

HERE = Path(__file__).resolve()
ROLES = HERE.parents[2] / "roles"  # plugins/action/kvprov_preflight.py -> the collection's roles/
try:
    from kvprov import check, inventory, vault
except ImportError:  # not installed: the repository this role ships in
    sys.path.insert(0, str(ROLES.parent))
    from kvprov import check, inventory, vault

_RULES: tuple[dict, dict] | None = None


def _rules() -> tuple[dict, dict]:
    """(argument specs, role defaults) of the roles beside this one, read once per process."""
    global _RULES
    if _RULES is None:
        _RULES = (check.read_specs(ROLES), inventory.read_role_defaults(ROLES))
    return _RULES


try:
    # Ansible's strategy imports this module in the controller's main process before it
    # forks a worker per host and task: read the specs and defaults now, and every worker
    # inherits them instead of reading eleven roles' YAML again.
    _rules()
except Exception:  # noqa: BLE001 - reported by the task itself, with the reason
    pass


def _line(p: check.Problem) -> str:
    return f"host {p.host}: {p.variable}: {p.message}" if p.variable else f"host {p.host}: {p.message}"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        result["changed"] = False
        args = dict(self._task.args)
        rules = args.pop("rules", True)
        if args or not isinstance(rules, bool):
            result.update(failed=True, msg=f"kvprov_preflight takes only rules (a boolean), got {self._task.args}")
            return result
        specs, defaults = _rules()
        host = str(task_vars.get("inventory_hostname", "?"))
        values, result["kvprov_converted"] = self._values(task_vars, specs, defaults)
        if not rules:
            result["msg"] = f"host {host}: {len(result['kvprov_converted'])} value(s) converted to their spec type"
            return result
        problems = check.check_host_values(check.host_from_values(host, values, defaults), specs)
        problems = [replace(p, message=vault.hide(p.message)) for p in problems]  # no decrypted value shown
        errors = [p for p in problems if p.severity == "error"]
        warnings = [p for p in problems if p.severity != "error"]
        result["kvprov_problems"] = [{"host": p.host, "variable": p.variable, "message": p.message,
                                      "severity": p.severity} for p in problems]
        if warnings:
            result["warnings"] = [_line(p) for p in warnings]
        if errors:
            inv = task_vars.get("inventory_file") or "INVENTORY"
            result["failed"] = True
            result["msg"] = "\n".join([_line(p) for p in errors] + [
                f"{len(errors)} problem(s) in host {host}'s kvprov variables: `kvprov check {inv}` applies the same "
                "rules and names the file and line of each"])
        else:
            result["msg"] = f"host {host}: its kvprov variables pass kvprov check's per-host rules"
        return result

    def _values(self, task_vars: dict, specs: dict, defaults: dict) -> tuple[dict, dict]:
        """The kvprov_* values of the host that a role reads (facts and extra names left out),
        templates rendered where they can be, and strings converted to their spec type as
        Ansible's argument specs convert them ("262144" for an int); and those converted values
        alone, for the role to set as facts (its tasks would otherwise read the strings)."""
        out, converted, context = {}, {}, None
        for name, value in task_vars.items():
            spec = specs.get(check.DEPRECATED.get(name, name)) if name.startswith("kvprov_") else None
            if spec is None:
                continue
            value = vault.revealed(value)  # an inline !vault value, as kvprov check reads it
            default = defaults.get(name)
            if check.is_template(value) and (default is None or default.value != value):
                if context is None:
                    context = {**{n: v.value for n, v in defaults.items()}, **task_vars}
                rendered = self._render(value, context)
                if not check.type_error(check.typed(rendered, spec), spec.type):
                    value = rendered
            typed = check.typed(value, spec)
            if typed is not value and not check.type_error(typed, spec.type):
                converted[name] = value = typed
            out[name] = value
        return out, converted

    def _render(self, value, context: dict):
        """The value rendered with the host's variables; itself when it cannot be (undefined,
        broken: Ansible says so when a role uses it)."""
        try:
            templar = self._templar.copy_with_new_env(available_variables=context)
        except TypeError:  # ansible-core < 2.19: set the variables on this task's templar for the call
            templar = None
        saved = self._templar.available_variables
        try:
            if templar is None:
                templar = self._templar
                templar.available_variables = context
            return templar.template(value)
        except Exception:  # noqa: BLE001
            return value
        finally:
            if templar is self._templar:
                self._templar.available_variables = saved
