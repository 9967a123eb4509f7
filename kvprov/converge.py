"""Converging hosts with playbooks/site.yml, each under its host's deploy lock: what `kvprov deploy`
runs after its audit and what `kvprov audit --fix` runs on the drifted hosts."""

from __future__ import annotations

from kvprov import inventory, lock, runner
from kvprov.errors import EXIT_BUSY, EXIT_CHECKS_FAILED, EXIT_OK, EXIT_UNREACHABLE

HOST_LOCK_TASK = "Take the host's deploy lock"  # playbooks/site.yml
ROLLOUT = ("kvprov_deploy_serial", "kvprov_deploy_max_fail_percentage")


def rollout(path: str | list[str]) -> dict:
    """serial and max_fail_percentage are play keywords: Ansible reads them once per play from
    extra vars, never from host variables. kvprov passes the inventory's values (the same on
    every target host: `kvprov check`)."""
    hosts = inventory.load(path).hosts
    return {name: hosts[0].value(name) for name in ROLLOUT
            if hosts and hosts[0].var(name) is not None and not hosts[0].is_default(name)}


def converge(sources: list[str], command: str, limit: str | None, *, check: bool = False, diff: bool = False,
             tags: str | None = None, skip_tags: str | None = None, allow_remount: bool = False,
             stop_engines: bool = False) -> runner.RunResult:
    """playbooks/site.yml on the hosts of `limit` (None: all), each under its host's deploy lock."""
    extravars = {**lock.host_lock_vars(sources, command), **rollout(sources)}
    if allow_remount:
        extravars.update(kvprov_storage_allow_remount=True, kvprov_storage_stop_dependents=stop_engines)
    return runner.run("site.yml", sources, name=command.replace(" --", "-"),
                      extravars=extravars, limit=limit, tags=tags, skip_tags=skip_tags, check=check, diff=diff)


def exit_code(result: runner.RunResult) -> int:
    """3 unreachable (whatever else failed), 6 when the only failures are hosts another run holds,
    1 other failures."""
    if result.unreachable:
        return EXIT_UNREACHABLE
    if result.failures and all(f.task == HOST_LOCK_TASK for f in result.failures):
        return EXIT_BUSY
    if result.failures or result.rc != 0:
        return EXIT_CHECKS_FAILED
    return EXIT_OK
