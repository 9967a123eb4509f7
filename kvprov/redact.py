"""Secrets never reach a report, an audit diff or a bundle: the one redaction rule (pure).

A *secret name* is a key, option or flag whose name contains pass, secret, token, key or
cred (any case): API_KEY, HF_TOKEN, PASSWORD, aws_secret_access_key, credentials=...
Its value is replaced by `<redacted>`, wherever it appears on a line:

- `NAME=value`, `NAME: value`, `NAME = "value"` (env files, INI, TOML, YAML), also inside a
  line (`Environment="HF_TOKEN=x"`, mount options `password=x`);
- `"NAME": "value"` (JSON);
- `--NAME value`, `--NAME=value` (command lines);
- a quoted `"NAME=value"` (a unit's Environment=): the whole quoted value;
- the password of a URL, whatever its name (`scheme://user:PASSWORD@host`);
- the credentials of an HTTP `Authorization:` header (`Authorization: Bearer TOKEN`).

A reference such as `${KVPROV_ENGINE_API_KEY}` is not a secret and is kept. A *secret file*
(under /etc/kvprov/secrets/, or named like a key or credentials file) is never shown at
all: every line of it is `<redacted>`. Differences stay visible: a diff of redacted lines
still says how many lines differ.

The collector (plugins/modules/kvprov_collect.py, stdlib only on the target) carries a
copy of SECRET_NAME for /etc/fstab; a unit test keeps the two equal.
"""

from __future__ import annotations

import posixpath
import re

REDACTED = "<redacted>"
SECRET_NAME = r"[A-Za-z0-9_.-]*(?:pass|secret|token|key|cred)[A-Za-z0-9_.-]*"
SECRET_DIRS = ("/etc/kvprov/secrets/",)
_SECRET_FILE = re.compile(r"(secret|credential|token|passw|\.key$|\.pem$|\.p12$)", re.I)

_REF = re.compile(r"""^["']?\$\{?[A-Za-z_][A-Za-z0-9_]*\}?["']?$""")
# a value runs to the next space or quote: a secret may hold , and ; (hiding more than the secret is safe)
_VALUE = r"""(?:"[^"]*"?|'[^']*'?|[^\s"']+)"""
# whole line: NAME = value / NAME: value / export NAME=value (value to the end of the line)
_LINE = re.compile(rf"""^(?P<head>\s*(?:export\s+)?["']?(?P<name>{SECRET_NAME})["']?\s*[=:]\s*)(?P<value>\S.*?)\s*$""",
                   re.I)
# inside a line: "NAME=value" (the whole quoted word), NAME=value, "NAME": "value", --NAME value, --NAME=value
_INLINE = [
    re.compile(rf"""(?P<head>"(?P<name>{SECRET_NAME})=)(?P<value>(?:[^"\\]|\\.)*)(?=")""", re.I),
    re.compile(rf"""(?P<head>'(?P<name>{SECRET_NAME})=)(?P<value>[^']*)(?=')""", re.I),
    re.compile(rf"""(?P<head>"(?P<name>{SECRET_NAME})"\s*:\s*)(?P<value>"(?:[^"\\]|\\.)*")""", re.I),
    re.compile(rf"""(?P<head>--(?P<name>{SECRET_NAME})(?:=|\s+))(?P<value>(?!-){_VALUE})""", re.I),
    re.compile(rf"""(?P<head>(?<![A-Za-z0-9_.-])(?P<name>{SECRET_NAME})=)(?P<value>{_VALUE})""", re.I),
]


# an HTTP Authorization header's credentials, whatever scheme (Authorization: Bearer X, -H 'authorization=Basic X')
_AUTHORIZATION = re.compile(r"""(?P<head>(?<![A-Za-z0-9_-])(?:proxy-)?authorization["']?\s*[:=]\s*["']?"""
                            r"""(?:(?:bearer|basic|token|digest|negotiate)\s+)?)(?P<value>[^\s"']+)""", re.I)
# a password in a URL, whatever names it: scheme://user:PASSWORD@host
_URL_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^/\s:@\"']*:)(?P<value>[^/\s@\"']+)(?=@)", re.I)


# a value that is not a scalar: a YAML block header (its lines follow) or a flow table or list
_BLOCK_OR_TABLE = re.compile(r"[|>][-+0-9]*|\{.*\}|\[.*\]")


def _sub(m: re.Match) -> str:
    value = m.group("value")
    if not value or _REF.match(value) or value in ('""', "''"):
        return m.group(0)
    quote = value[0] if value[0] in "\"'" else ""
    return m.group("head") + quote + REDACTED + quote


def redact_line(line: str) -> str:
    """One line with the value of every secret name replaced by <redacted>."""
    m = _LINE.match(line)
    if m and not _BLOCK_OR_TABLE.fullmatch(m.group("value")):  # YAML blocks, JSON/TOML tables: inline rules
        return _sub(m)
    for pattern in _INLINE:
        line = pattern.sub(_sub, line)
    return _URL_PASSWORD.sub(_sub, _AUTHORIZATION.sub(_sub, line))


def redact_text(text: str) -> str:
    return "".join(redact_line(line[:-1] if line.endswith("\n") else line) + ("\n" if line.endswith("\n") else "")
                   for line in text.splitlines(keepends=True))


def is_secret_path(path: str) -> bool:
    """A file whose whole content is secret (never shown, not even redacted line by line)."""
    norm = posixpath.normpath(path if path.startswith("/") else "/" + path).replace("//", "/", 1)
    return norm.startswith(SECRET_DIRS) or bool(_SECRET_FILE.search(posixpath.basename(norm)))


def redact_diff(lines: list[str], path: str) -> tuple[list[str], bool]:
    """A unified diff (as difflib gives it) safe to show: (lines, whether anything was redacted).
    Headers are kept: the file names (---, +++) before the first hunk, and each hunk's @@ line;
    every other line is content (a removed `--api-key=x` starts with --- too): it is redacted,
    and a secret file's content lines become `<redacted>`."""
    secret = is_secret_path(path)
    out, redacted, in_hunk = [], False, False
    for line in lines:
        if line.startswith("@@"):
            in_hunk = True
        if (not in_hunk and line.startswith(("---", "+++"))) or line[:1] not in ("+", "-", " "):  # @@ too
            out.append(line)
            continue
        end = "\n" if line.endswith("\n") else ""
        body = line[1:len(line) - len(end)]
        new = REDACTED if secret else redact_line(body)
        redacted |= new != body
        out.append(line[0] + new + end)
    return out, redacted
