"""A model's namespaces on the KV volume, as the collector lists them (namespaces.json, #37).

A keying change (kvprov/namespace.py) moves a model's hosts to a new namespace,
PREFIX-<fingerprint>, beside the old one; the evictor of the new one empties the old one once no
host's evictor has run on it for kvprov_engine_evict_retire_days (its `.kvprov-in-use` marker,
touched by every evictor run, is that old). `kvprov audit` shows them: each shared namespace a
host uses and its siblings of the same PREFIX, with their size and last use (the marker's mtime).
Old namespaces are expected after a change: information, never drift (no result, no exit code).

Pure: a bundle in, rows and text out (the collector's NAMESPACES_PROBE does the I/O). A bundle of
an older collector, or an unusable file, gives no rows.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from kvprov.validate import bundle as bf
from kvprov.validate.bundle import Bundle, Desired, FileProblem
from kvprov.validate.checks.engine import human_bytes
from kvprov.validate.report import clean

DAY = 86400
RETIRE_HINT = ("  last use: the last run of any host's evictor on it. The current namespace's evictor empties an old one\n"
               "  after kvprov_engine_evict_retire_days (default 7) without a run; one never run on, a link or one on\n"
               "  another filesystem it leaves alone (remove it by hand once no host uses it).")


@dataclass(frozen=True)
class Namespace:
    """One namespace directory of a model beside a shared namespace the host uses."""

    host: str
    engine: str
    parent: str  # <mount>/kv/<engine>
    name: str  # PREFIX-<12 hex>
    current: bool  # one of this host's instances uses it
    bytes: int | None = None  # None: not measured (a link, another filesystem, an error)
    files: int | None = None
    complete: bool | None = None  # False: the walk ran out of time (the figures so far)
    last_use: float | None = None  # .kvprov-in-use's mtime (epoch seconds); None: no evictor ever ran on it
    listed_at: float | None = None  # the host's clock when listed
    note: str | None = None  # "a link, not followed", "on another filesystem, not walked", an error

    @property
    def path(self) -> str:
        return posixpath.join(self.parent, self.name)

    @property
    def days(self) -> int | None:
        """Whole days from the last use to the listing; None: never used (or not known)."""
        if self.last_use is None or self.listed_at is None:
            return None
        return max(0, int((self.listed_at - self.last_use) // DAY))

    def last_use_text(self) -> str:
        if self.note and self.bytes is None and self.last_use is None:
            return "-"
        if self.last_use is None:
            return "never"
        days = self.days
        return "today" if days == 0 else "1 day ago" if days == 1 else f"{days} days ago"

    def to_dict(self) -> dict:
        return {"name": self.name, "path": self.path, "current": self.current, "bytes": self.bytes,
                "files": self.files, "complete": self.complete, "last_use": self.last_use,
                "last_use_days": self.days, "note": self.note}


def _count(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _time(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else None


def parse(b: Bundle, d: Desired) -> list[Namespace]:
    """The namespaces listed in one host's capture, current first, then by name; [] when the
    capture has none (no shared namespace, an older collector) or the file is unusable."""
    if not b.exists(bf.NAMESPACES):
        return []
    try:
        data = b.json_object(bf.NAMESPACES)
    except FileProblem:
        return []
    rows: list[Namespace] = []
    for path, entry in data.items():
        if not isinstance(entry, dict):
            continue
        parent, own = posixpath.split(posixpath.normpath(str(path)))
        if entry.get("error") is not None:  # the listing itself failed (a hung mount): the host's own, unmeasured
            rows.append(Namespace(d.host, d.engine, parent, own, True, note=str(entry["error"])[:300]))
            continue
        listed_at = _time(entry.get("listed_at"))
        names = entry.get("namespaces")
        for name, e in (names.items() if isinstance(names, dict) else ()):
            if not isinstance(e, dict):
                continue
            usage = e.get("usage") if isinstance(e.get("usage"), dict) else {}
            note = e.get("skipped") or usage.get("error")
            complete = usage.get("complete")
            rows.append(Namespace(d.host, d.engine, parent, str(name), e.get("current") is True,
                                  _count(usage.get("bytes")), _count(usage.get("files")),
                                  complete if isinstance(complete, bool) else None,
                                  _time(e.get("in_use")), listed_at, str(note)[:300] if note else None))
    unique = {(r.parent, r.name): r for r in rows}  # two instances of one namespace: listed once
    return sorted(unique.values(), key=lambda r: (r.parent, not r.current, r.name))


def has_old(rows: list[Namespace]) -> bool:
    return any(not r.current for r in rows)


def json_fields(rows: list[Namespace]) -> dict[str, dict]:
    """{host: {"namespaces": [row ...]}} for audit's --json (hosts whose capture listed them)."""
    out: dict[str, dict] = {}
    for r in rows:
        out.setdefault(r.host, {"namespaces": []})["namespaces"].append(r.to_dict())
    return out


def _size(r: Namespace) -> str:
    if r.bytes is None:
        return "-"
    return (">= " if r.complete is False else "") + human_bytes(r.bytes)


def _state(r: Namespace) -> str:
    words = ["current" if r.current else "old"]
    if r.complete is False:
        words.append("incomplete: the walk ran out of time")
    if r.note:
        words.append(r.note)
    return ", ".join(words)


def format_section(rows: list[Namespace]) -> str:
    """The console's "namespaces on the volume" section: per host, only where an old namespace
    is listed ("" when none is)."""
    by_host: dict[tuple[str, str], list[Namespace]] = {}
    for r in rows:
        by_host.setdefault((r.host, r.parent), []).append(r)
    shown = {k: rs for k, rs in by_host.items() if has_old(rs)}
    if not shown:
        return ""
    lines = [""]
    for (host, parent), rs in shown.items():
        table = [(clean(r.name), _size(r), "-" if r.files is None else str(r.files), r.last_use_text(), clean(_state(r)))
                 for r in rs]
        widths = [max(len(h), *(len(row[i]) for row in table))
                  for i, h in enumerate(("NAMESPACE", "SIZE", "FILES", "LAST USE"))]
        lines.append(f"namespaces on the volume: {clean(host)} ({clean(parent)})")
        lines.append(f"  {'NAMESPACE':<{widths[0]}}  {'SIZE':>{widths[1]}}  {'FILES':>{widths[2]}}  "
                     f"{'LAST USE':<{widths[3]}}  STATE")
        for name, size, files, last, state in table:
            lines.append(f"  {name:<{widths[0]}}  {size:>{widths[1]}}  {files:>{widths[2]}}  {last:<{widths[3]}}  "
                         f"{state}")
    lines.append(RETIRE_HINT)
    return "\n".join(lines)
