"""bundle.*: the capture itself (collect.json: format, host, collector errors)."""

from __future__ import annotations

from kvprov.validate import bundle as bf
from kvprov.validate.bundle import FileProblem
from kvprov.validate.context import Context, check
from kvprov.validate.result import PASS, WARN, Result, res, show


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
