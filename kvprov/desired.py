"""The desired state of each GPU node, from the inventory and the roles' own variables and
templates (playbooks/tasks/desired.yml): the one source of truth that deploy writes and
that collect/validate, audit and the testinfra checks (kvprov.checks) compare against.
Computed on the controller; contacts no host.

Each distinct state is templated once per call (kvprov.desired_classes: hosts whose every
variable but their identity is the same get one state, renamed to each); nothing is cached
across calls."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Iterator

from kvprov import check, desired_classes, runner
from kvprov.errors import EXIT_CHECKS_FAILED, KvprovError
from kvprov.inventory import TARGET_GROUP, describe, hosts_matching, source_list
from kvprov.vault import plain

TASK = runner.DESIRED_TASK


def host_variables(inventory: str | list[str], limit: str | None = None) -> dict[str, dict]:
    """{host: every variable Ansible gives it before a play} for the inventory's gpu_nodes (all,
    or those matching limit: none is a usage error), in inventory order: what a class key is
    made of."""
    from kvprov.inventory import _ansible

    sources = source_list(inventory)
    selected = hosts_matching(sources, limit) if limit else None
    _, manager, variables = _ansible([os.path.abspath(s) if os.path.exists(s) else s for s in sources])
    targets = set(manager.groups[TARGET_GROUP].get_hosts()) if TARGET_GROUP in manager.groups else set()
    return {plain(h.name): variables.get_vars(host=h, include_hostvars=False)
            for h in manager.hosts.values() if h in targets and (selected is None or plain(h.name) in selected)}


def _template(inventory: str | list[str], hosts: list[str]) -> tuple[dict[str, dict], runner.RunResult | None]:
    """({host: desired state} of those of these hosts it templated, the desired.yml run or None
    for no host)."""
    if not hosts:
        return {}, None
    result = runner.run("desired.yml", inventory, name="desired", limit=",".join(hosts), stream=io.StringIO())
    return {h: result.desired[h] for h in hosts if h in result.desired}, result


def compute(inventory: str | list[str], limit: str | None = None,
            classes: list[desired_classes.HostClass] | None = None) -> tuple[dict[str, dict], list[runner.RunResult]]:
    """({host: desired state} of the hosts it could compute, the Ansible runs), each distinct
    state templated once (kvprov.desired_classes): the classes' probes in one run, the other
    hosts' states derived from them, and in a second run the hosts they cannot be derived
    for. A class whose probe failed gets no state."""
    classes = desired_classes.plan(host_variables(inventory, limit)) if classes is None else classes
    states, first = _template(inventory, [h for c in classes for h in c.probes])
    per_host = []
    for c in classes:
        if all(p in states for p in c.probes):
            derived, left = desired_classes.spread(c, states)
            states.update(derived)
            per_host += left
    templated, second = _template(inventory, per_host)
    states.update(templated)
    return states, [r for r in (first, second) if r is not None]


def load(inventory: str | list[str], limit: str | None = None) -> dict[str, dict]:
    """{host: desired state} for the inventory's gpu_nodes (all, or those matching limit)."""
    check.require_valid(inventory)
    states, runs = compute(inventory, limit)
    for result in runs:
        if result.failures or result.rc != 0:
            runner.print_summary(result, sys.stderr)
            raise KvprovError(f"{describe(inventory)}: cannot compute the desired state", EXIT_CHECKS_FAILED)
    return dict(sorted(states.items()))


def file_name(host: str) -> str:
    """A host's file in written()'s directory: the sha256 of its name (any name is one file name),
    as playbooks/collect.yml finds it."""
    return hashlib.sha256(host.encode()).hexdigest() + ".json"


def collector_view(state: dict) -> dict:
    """A desired state as the collector module takes it (playbooks/collect.yml): the managed
    files as a list of paths, never their content (a module's arguments travel to its target)."""
    return {**state, "files": sorted(state["files"])}


@contextlib.contextmanager
def written(inventory: str | list[str], limit: str | None = None) -> Iterator[tuple[Path, dict[str, dict]] | None]:
    """(a private (0700) directory, removed afterwards, with each host's collector_view() in its
    file_name(); {host: desired state}): what playbooks/collect.yml reads given
    `kvprov_desired_dir`, instead of templating each host's state itself. None where no class
    has a host whose state could be derived (a small or varied fleet: a run of its own would only
    add Ansible's start-up), or where a host's state could not be computed (collect.yml computes
    every host's itself and reports the failure on that host)."""
    classes = desired_classes.plan(host_variables(inventory, limit))
    if not any(c.rest and len(c.probes) == 2 for c in classes):
        yield None  # no state to derive: collect.yml templates each host's as it goes, without a run of its own
        return
    states, _ = compute(inventory, limit, classes)
    if any(h not in states for c in classes for h in c.members):
        yield None
        return
    directory = Path(tempfile.mkdtemp(prefix="kvprov-desired-"))
    try:
        for host, state in states.items():
            fd = os.open(directory / file_name(host), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                json.dump(collector_view(state), fh)
        yield directory, states
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def run_with_states(playbook: str, inventory: str | list[str], *, limit: str | None = None, extravars: dict | None = None,
        **kw) -> runner.RunResult:
    """runner.run of a playbook that takes the hosts' desired states (playbooks/collect.yml): the
    states computed first, each distinct one once (written), and returned in `desired`; where
    none is written ahead, the playbook computes each host's itself."""
    with written(inventory, limit) as ahead:
        if ahead is None:
            return runner.run(playbook, inventory, limit=limit, extravars=extravars, **kw)
        directory, states = ahead
        result = runner.run(playbook, inventory, limit=limit,
                            extravars={**(extravars or {}), runner.DESIRED_DIR: str(directory)}, **kw)
        result.desired = states
        return result
