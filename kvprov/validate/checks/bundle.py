"""bundle.*: the capture itself (collect.json: format, host, collector errors), and
bundle.desired: whether the bundle's own desired.json is what the inventory says."""

from __future__ import annotations

from kvprov.validate import bundle as bf
from kvprov.validate.bundle import Desired, DesiredError, FileProblem
from kvprov.validate.context import Context, check
from kvprov.validate.result import FAIL, PASS, WARN, Result, res, show

MAX_LISTED = 8  # differing keys named in bundle.desired


@check("bundle.collect")
def bundle_collect(c: Context) -> Result:
    expected = "collect.json with no capture error"
    try:
        data = c.b.json_object(bf.COLLECT)
    except FileProblem as e:
        return res(WARN, expected, show(str(e), 300), "the bundle lacks its collector metadata; results below stand "
                                                     "on the files that are there")
    notes = []
    if data.get("format") not in bf.READABLE_FORMATS:
        notes.append(f"format {show(data.get('format'), 20)} (this kvprov reads {', '.join(map(str, bf.READABLE_FORMATS))})")
    if data.get("host") != c.d.host:
        notes.append(f"collect.json names host {show(data.get('host'), 60)}, desired.json {c.d.host}: "
                     "files of two hosts mixed?")
    errors = data.get("errors")
    if isinstance(errors, dict) and errors:
        notes.append("the collector reported: " + "; ".join(f"{show(k, 60)}: {show(v, 120)}"
                                                           for k, v in list(errors.items())[:10]))
    if notes:
        return res(WARN, expected, " / ".join(notes), "the checks that need the files named here fail or skip; "
                                                     "fix the capture and collect again")
    return res(PASS, expected, f"collected {show(data.get('time', '?'), 40)} by kvprov "
                              f"{show(data.get('kvprov_version', '?'), 20)}")


def _flat(value, prefix: str = "") -> dict:
    """{dotted key: leaf} of desired.json's content; a file's content is one leaf."""
    if isinstance(value, dict) and value:
        out = {}
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


SIDES = ("inventory", "bundle")


def _scalars(value) -> bool:
    return isinstance(value, list) and all(isinstance(x, (str, int, float)) for x in value)


def desired_differences(bundle: Desired, inventory: Desired) -> list[str]:
    """One short line per key whose value differs ("storage.profile rdma (inventory) vs nfs_tcp
    (bundle)"); managed files' content is never shown (it may hold secrets), only that it differs."""
    have, want = _flat(bundle.to_dict()), _flat(inventory.to_dict())
    out = []
    for key in sorted(set(have) | set(want), key=lambda k: (k.startswith("files."), k)):
        if have.get(key, ...) == want.get(key, ...):
            continue
        if key not in want or key not in have:
            out.append(f"{show(key, 100)} only in the {'bundle' if key in have else 'inventory'}")
        elif key.startswith("files.") and key.endswith(".content"):
            out.append(f"{show(key[:-len('.content')], 100)}: content differs")
        elif _scalars(want[key]) and _scalars(have[key]) and set(want[key]) != set(have[key]):
            only = [[x for x in a if x not in b] for a, b in ((want[key], have[key]), (have[key], want[key]))]
            out.append(f"{show(key, 100)} " + " vs ".join(
                f"{show(', '.join(map(str, o)) or 'nothing else', 60)} ({side})" for o, side in zip(only, SIDES)))
        else:
            out.append(f"{show(key, 100)} {show(want[key], 60)} (inventory) vs {show(have[key], 60)} (bundle)")
    return out


def desired_check(own: Desired | None, problem: DesiredError | None, inventory: Desired, source: str) -> Result:
    """bundle.desired with --inventory: the bundle's desired.json against the one recomputed from
    the inventory (the checks then judge the bundle against the inventory's)."""
    expected = f"desired.json as {source} gives it"
    fix = (f"the checks below use {source}'s desired state; if the inventory is right, the capture's desired.json was "
           "edited or comes from another inventory: capture again with `kvprov collect`")
    if own is None:
        return Result("bundle.desired", "bundle", FAIL, expected,
                      f"the bundle's desired.json is unusable ({show(str(problem), 300)})", fix)
    diffs = desired_differences(own, inventory)
    if not diffs:
        return Result("bundle.desired", "bundle", PASS, expected, f"desired.json agrees with {source}")
    more = f"; and {len(diffs) - MAX_LISTED} more" if len(diffs) > MAX_LISTED else ""
    return Result("bundle.desired", "bundle", FAIL, expected,
                  f"desired.json disagrees with {source}: " + "; ".join(diffs[:MAX_LISTED]) + more, fix)
