"""Reports of `kvprov validate`, `bench` and `audit`: a readable table, JSON and JUnit XML
(pure: results in, text out), and the one writer of report files (write_file, write_reports)
that the three commands share.

Every text that came from a captured file is cleaned before it is printed or written:
control characters (terminal escapes, NUL) are shown escaped, and the XML gets only
characters XML 1.0 allows, so a hostile bundle cannot garble a terminal or a CI report.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import asdict
from pathlib import Path

from kvprov.errors import EXIT_USAGE, KvprovError
from kvprov.validate.result import FAIL, PASS, SKIP, STATUSES, WARN, Result

_XML_BAD = re.compile("[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def clean(text: str) -> str:
    """Printable text: control and format characters escaped (\\x1b, \\u202e ...)."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in str(text))


def by_host(results: list[Result]) -> dict[str, list[Result]]:
    out: dict[str, list[Result]] = {}
    for r in results:
        out.setdefault(r.host, []).append(r)
    return out


def checks(results: list[Result]) -> list[Result]:
    """The results without the per-host summaries."""
    return [r for r in results if r.id != "summary"]


def counts(results: list[Result]) -> dict[str, int]:
    return {s: sum(r.status == s for r in checks(results)) for s in STATUSES}


def ok(results: list[Result]) -> bool:
    """True when no check failed (warnings and skips allowed)."""
    return not any(r.status == FAIL for r in results)


def _status(r: Result) -> str:
    return r.status.upper() if r.status in (FAIL, WARN) else r.status


def format_table(results: list[Result], everything: bool = True) -> str:
    """HOST  CHECK  STATUS  FOUND, with expected/fix lines under what did not pass
    (everything=False: only the failed and warned checks), then a line per host."""
    rows = [r for r in checks(results) if everything or r.status in (FAIL, WARN)]
    if not checks(results):
        return "no results"
    host_w = max(len("HOST"), *(len(clean(r.host)) for r in rows or results))
    id_w = min(40, max(len("CHECK"), *(len(r.id) for r in rows or results)))
    indent = " " * (host_w + 2 + id_w + 2 + 6 + 2)
    lines = [f"{'HOST':<{host_w}}  {'CHECK':<{id_w}}  {'STATUS':<6}  FOUND"]
    for r in rows:
        lines.append(f"{clean(r.host):<{host_w}}  {clean(r.id):<{id_w}}  {_status(r):<6}  {clean(r.found)}")
        if r.status in (FAIL, WARN) and r.expected:
            lines.append(f"{indent}expected: {clean(r.expected)}")
        if r.status in (FAIL, WARN) and r.fix:
            lines.append(f"{indent}fix: {clean(r.fix)}")
        if r.status in (FAIL, WARN) and r.detail:
            lines += [f"{indent}  {clean(line)}" for line in r.detail.splitlines()]
    lines.append("")
    for host, rs in by_host(results).items():
        n = counts(rs)
        verdict = "FAILED" if not ok(rs) else "ok"
        lines.append(f"{clean(host)}: {verdict} ({n[FAIL]} failed, {n[WARN]} warnings, {n[SKIP]} skipped, "
                     f"{n[PASS]} passed)")
    return "\n".join(lines)


def to_json(results: list[Result], host_fields: dict[str, dict] | None = None) -> dict:
    """{"ok", "hosts": {host: {"ok", "counts", "results": [Result fields ...]}}} (summaries included);
    `host_fields`: more fields of a host's entry (audit's "namespaces")."""
    hosts = {host: {"ok": ok(rs), "counts": counts(rs), "results": [asdict(r) for r in rs],
                    **(host_fields or {}).get(host, {})}
             for host, rs in by_host(results).items()}
    return {"ok": ok(results), "hosts": hosts}


def format_json(results: list[Result], host_fields: dict[str, dict] | None = None) -> str:
    return json.dumps(to_json(results, host_fields), indent=2) + "\n"


def _x(text: str) -> str:
    return _XML_BAD.sub("\ufffd", str(text))


def to_junit(results: list[Result], name: str = "kvprov validate") -> str:
    """JUnit XML: a testsuite per host, a testcase per check (failures, skips; warnings in system-out)."""
    all_checks = checks(results)
    n = counts(all_checks)
    root = ET.Element("testsuites", name=name, tests=str(len(all_checks)), failures=str(n[FAIL]),
                      skipped=str(n[SKIP]), errors="0")
    for host, rs in by_host(all_checks).items():
        hn = counts(rs)
        suite = ET.SubElement(root, "testsuite", name=_x(host), tests=str(len(rs)), failures=str(hn[FAIL]),
                              skipped=str(hn[SKIP]), errors="0")
        for r in rs:
            case = ET.SubElement(suite, "testcase", classname=_x(f"{host}.{r.category}"), name=_x(r.id))
            detail = "\n".join(f"{k}: {v}" for k, v in (("expected", r.expected), ("found", r.found),
                                                        ("fix", r.fix), ("detail", r.detail)) if v)
            if r.status == FAIL:
                failure = ET.SubElement(case, "failure", message=_x(r.found[:500]), type="fail")
                failure.text = _x(detail)
            elif r.status == SKIP:
                ET.SubElement(case, "skipped", message=_x(r.found[:500]))
            else:
                out = ET.SubElement(case, "system-out")
                out.text = _x(("warning: " if r.status == WARN else "") + detail)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


# ---------------------------------------------------------------------------- writing them

def refuse_link(path: str | Path, option: str) -> None:
    """KvprovError (exit 2) when the file an option names is a symbolic link: a report is
    never written through one (whoever planted it would choose what root overwrites)."""
    if os.path.islink(path):
        raise KvprovError(f"{option} {path} is a symbolic link (to {os.readlink(path)}): refusing to write through "
                          "it; remove it or name another file", EXIT_USAGE)


def write_file(path: str, text: str | bytes, mode: int = 0o600) -> None:
    """Write a report atomically (readers such as node_exporter never see half of it): a new
    file in the target's directory, flushed to disk, then renamed over it. Reports name hosts
    and paths: 0600 unless the reader needs more (the Prometheus textfile: 0644)."""
    target = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    except OSError as e:
        raise KvprovError(f"cannot write {path}: {e.strerror or e}", EXIT_USAGE) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(text.encode() if isinstance(text, str) else text)
            fh.flush()
            os.fchmod(fh.fileno(), mode)
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise KvprovError(f"cannot write {path}: {e.strerror or e}", EXIT_USAGE) from None


def write_reports(args, results: list, name: str = "kvprov validate", everything: bool = True,
                  host_fields: dict[str, dict] | None = None, appendix: str = "") -> None:
    """--json F (or '-': JSON on stdout instead of the table), --junit F, and the table
    (everything=False: only failures and warnings), then `appendix` (text after the table);
    `host_fields`: more fields of each host's JSON entry."""
    if args.json:
        text = format_json(results, host_fields)
        if args.json == "-":
            sys.stdout.write(text)
        else:
            write_file(args.json, text)
    if args.junit:
        write_file(args.junit, to_junit(results, name))
    if args.json != "-":
        print(format_table(results, everything))
        if appendix:
            print(appendix)
