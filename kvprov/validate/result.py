"""The result model of kvprov's checks (validate, bench, audit): Result, its statuses, and
the per-host summary. Every check returns one Result: its id (`mount.transport`),
category, status (pass, fail, warn, skip), what was expected, what was found and, for
failures, the fix.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

PASS, FAIL, WARN, SKIP = "pass", "fail", "warn", "skip"
STATUSES = (PASS, FAIL, WARN, SKIP)
CATEGORIES = ("bundle", "mount", "rdma", "gds", "nixl", "engine", "packages", "summary")


@dataclass
class Result:
    id: str
    category: str
    status: str  # pass | fail | warn | skip
    expected: str = ""
    found: str = ""
    fix: str = ""
    host: str = ""
    detail: str = ""  # several lines, e.g. a unified diff (audit)


def res(status: str, expected: str = "", found: str = "", fix: str = "") -> Result:
    """A result whose id and category the check runner fills in."""
    return Result("", "", status, expected, found, fix)


def show(value: Any, limit: int = 160) -> str:
    """A value from a captured file, safe to print: control characters escaped, length capped."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text[:limit + 1])
    return text if len(text) <= limit else text[:limit] + "..."


def summarize(results: list[Result]) -> Result:
    counts = {s: sum(r.status == s for r in results) for s in STATUSES}
    found = ", ".join(f"{counts[s]} {s}" for s in STATUSES)
    status = FAIL if counts[FAIL] else PASS
    fix = "fix the failed checks above, then collect and validate again" if counts[FAIL] else ""
    host = results[0].host if results else ""
    return Result("summary", "summary", status, "no failed check", found, fix, host)
