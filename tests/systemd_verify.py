"""`systemd-analyze verify`'s complaints about kvprov's units, less the ones a test expects.

A config-only engine host (kvprov_engine_install: false) gets the engine's units but no venv,
so verify says "<unit>: Command <venv>/bin/python3 is not executable: No such file or
directory" (and exits 1). That line, for exactly the binaries named, is the one tolerated;
every other line (a bad setting, an unknown unit, another missing binary) is a complaint."""

from __future__ import annotations

import re
from collections.abc import Iterable

MISSING = re.compile(r"^\S+: Command (?P<path>/\S+) is not executable: No such file or directory$")


def complaints(output: str, missing_ok: Iterable[str] = ()) -> list[str]:
    """verify's lines (stdout and stderr) but those saying a binary in missing_ok does not exist."""
    ok = set(missing_ok)
    out = []
    for line in output.splitlines():
        m = MISSING.match(line.strip())
        if line.strip() and not (m and m["path"] in ok):
            out.append(line)
    return out
