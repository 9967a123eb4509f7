"""The desired state of each GPU node, from the inventory and the roles' own variables and
templates (playbooks/tasks/desired.yml): the one source of truth that deploy writes and
that collect/validate, audit and the testinfra checks (kvprov.checks) compare against.
Computed on the controller; contacts no host."""

from __future__ import annotations

import io
import sys

from kvprov import check, runner
from kvprov.errors import EXIT_CHECKS_FAILED, KvprovError
from kvprov.inventory import describe

TASK = "Compute the desired state"


def load(inventory: str | list[str], limit: str | None = None) -> dict[str, dict]:
    """{host: desired state} for the inventory's gpu_nodes (all, or those matching limit)."""
    check.require_valid(inventory)
    result = runner.run("desired.yml", inventory, name="desired", limit=limit, stream=io.StringIO(),
                        capture=TASK)
    if result.failures or result.rc != 0:
        runner.print_summary(result, sys.stderr)
        raise KvprovError(f"{describe(inventory)}: cannot compute the desired state", EXIT_CHECKS_FAILED)
    return {h: res["ansible_facts"]["kvprov_desired"] for h, res in sorted(result.captured.items())}
