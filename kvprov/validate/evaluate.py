"""Running the checks of `kvprov validate`: a bundle and the desired state in, results out (pure).

Runs every registered check (kvprov.validate.checks, one module per tier) on one host's
bundle, then every per-instance engine check on each engine instance, then the summary.
Checks that cannot apply (no GPU, local storage, nothing mounted) skip and say why.

Entry points: `evaluate_bundle(path)` (reads DIR/HOST) and `evaluate(bundle, desired)`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from kvprov.errors import EXIT_USAGE, KvprovError
from kvprov.validate import bundle as bf
from kvprov.validate import checks  # noqa: F401  (registers the checks, in tier order)
from kvprov.validate.bundle import Bundle, Desired
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


def evaluate_bundle(path: Path | str) -> list[Result]:
    """Read DIR/HOST and evaluate it. KvprovError (exit 2) when it is no bundle or lacks desired.json."""
    root = Path(path)
    if not root.is_dir():
        raise KvprovError(f"{show(str(path), 300)}: no such bundle directory (give DIR/HOST as written by "
                          "`kvprov collect`)", EXIT_USAGE)
    b = Bundle(root)
    try:
        desired = bf.load_desired(b)
    except bf.DesiredError as e:
        raise KvprovError(f"{show(str(path), 300)}: {show(str(e), 2000)}", EXIT_USAGE) from None
    return evaluate(b, desired)
