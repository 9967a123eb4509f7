"""Text from elsewhere (a remote host's or server's answer) made safe to print: a hostile
server cannot move the cursor, retitle the terminal or hide text with escape sequences."""

from __future__ import annotations


def printable(text: object) -> str:
    """`text` with every control and format character escaped as repr would write it
    (\\x1b, \\n, \\u202e ...); printable characters unchanged."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in str(text))
