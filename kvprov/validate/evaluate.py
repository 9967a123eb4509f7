"""Running the checks of `kvprov validate`: a bundle and the desired state in, results out (pure).

Runs every registered check (kvprov.validate.checks, one module per tier) on one host's
bundle, then every per-instance engine check on each engine instance, then the summary.
Checks that cannot apply (no GPU, local storage, nothing mounted) skip and say why.

Entry points: `evaluate_bundle(path[, inventory])` (reads DIR/HOST; with the inventory's
desired states, judges it against those instead of its own desired.json) and
`evaluate(bundle, desired)`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from kvprov.errors import EXIT_USAGE, KvprovError
from kvprov.validate import bundle as bf
from kvprov.validate import checks  # noqa: F401  (registers the checks, in tier order)
from kvprov.validate.bundle import Bundle, Desired
from kvprov.validate.checks.bundle import desired_check
from kvprov.validate.context import CHECKS, INSTANCE_CHECKS, Context, run_check
from kvprov.validate.result import SKIP, Result, show, summarize


def _instance_results(c: Context) -> Iterator[Result]:
    if not c.d.instances:
        yield Result("engine.instances", "engine", SKIP, "", "no engine instance in the inventory")
        return
    for inst in c.d.instances:
        for suffix, fn in INSTANCE_CHECKS:
            yield run_check(f"engine.{inst.name}.{suffix}", "engine", lambda fn=fn, inst=inst: fn(c, inst))


def evaluate(bundle: Bundle, desired: Desired) -> list[Result]:
    """Every check on one host's bundle, then the summary (pure: reads only `bundle`)."""
    c = Context(bundle, desired)
    results = [run_check(check_id, category, lambda fn=fn: fn(c)) for check_id, category, fn in CHECKS]
    results += list(_instance_results(c))
    for r in results:
        r.host = desired.host
    results.append(summarize(results))
    return results


def bundle_host(b: Bundle, root: Path) -> str:
    """The host a bundle without a usable desired.json is of: collect.json's, else the directory's name."""
    try:
        host = b.json_object(bf.COLLECT).get("host")
    except bf.FileProblem:
        host = None
    return host if isinstance(host, str) and host else root.name


def evaluate_bundle(path: Path | str, inventory: dict[str, dict] | None = None, source: str = "") -> list[Result]:
    """Read DIR/HOST and evaluate it. KvprovError (exit 2) when it is no bundle or lacks desired.json.

    inventory ({host: desired state}, kvprov.desired.load of `source`): the checks judge the
    bundle against the inventory's desired state, not its own desired.json, and bundle.desired
    says whether the two agree (KvprovError when the bundle's host is not in the inventory)."""
    root = Path(path)
    if not root.is_dir():
        raise KvprovError(f"{show(str(path), 300)}: no such bundle directory (give DIR/HOST as written by "
                          "`kvprov collect`)", EXIT_USAGE)
    b = Bundle(root)
    try:
        desired, problem = bf.load_desired(b), None
    except bf.DesiredError as e:
        if inventory is None:
            raise KvprovError(f"{show(str(path), 300)}: {show(str(e), 2000)}", EXIT_USAGE) from None
        desired, problem = None, e
    if inventory is None:
        return evaluate(b, desired)
    host = desired.host if desired else bundle_host(b, root)
    if host not in inventory:
        raise KvprovError(f"{show(str(path), 300)}: host {show(host, 100)} is not a GPU node of {show(source, 200)} "
                          f"(its gpu_nodes: {show(', '.join(sorted(inventory)), 300) or 'none'})", EXIT_USAGE)
    try:
        want = Desired.from_dict(inventory[host])
    except bf.DesiredError as e:  # kvprov's own desired.yml and reader disagree: a bug, say so plainly
        raise KvprovError(f"{show(source, 200)}: the desired state of {show(host, 100)} is unusable: {e}",
                          EXIT_USAGE) from None
    first = desired_check(desired, problem, want, show(source, 200))
    first.host = want.host
    results = [first, *evaluate(b, want)[:-1]]
    return results + [summarize(results)]
