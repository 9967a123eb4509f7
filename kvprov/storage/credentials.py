"""The ONTAP credentials file named by kvprov_storage_credentials_file: lines `username=NAME`
and `password=SECRET` (blank lines and # comments allowed), in a file only its owner (root,
or the user running kvprov) can read, or in an `ansible-vault encrypt`-ed file (any mode). `kvprov check` and `kvprov storage check` read it
through `read`; its values are never printed."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from kvprov import vault

KEYS = ("username", "password")


class CredentialsError(ValueError):
    """The file cannot be used; the message names the file and the fix, never a value."""


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str

    def __repr__(self) -> str:  # never the password, not even in a traceback
        return f"Credentials(username={self.username!r}, password='***')"


def parse(text: str, name: str) -> Credentials:
    """The two values from the file's text (pure). `name` is the file, for messages."""
    values: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or key not in KEYS:
            raise CredentialsError(f'"{name}" line {n}: only username=... and password=... lines may be given')
        if key in values:
            raise CredentialsError(f'"{name}" line {n}: {key} a second time')
        if not value or any(ch.isspace() or not ch.isprintable() for ch in value):
            raise CredentialsError(f'"{name}" line {n}: the value of {key} must be one word of printable '
                                   "characters (no spaces)")
        values[key] = value
    missing = [k for k in KEYS if k not in values]
    if missing:
        raise CredentialsError(f'"{name}" has no {" and no ".join(k + "=" for k in missing)} line')
    return Credentials(values["username"], values["password"])


def read(path: str) -> Credentials:
    """Read and check the file: a regular file owned by root (or by the user running kvprov),
    with no permission for group or others (chmod 600)."""
    if not path.startswith("/"):
        raise CredentialsError(f'"{path}" is not an absolute path: give the file\'s full path')
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as e:
        what = "a link (give the file itself)" if os.path.islink(path) else (e.strerror or str(e)).lower()
        raise CredentialsError(f'"{path}" cannot be opened on this controller: {what}') from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not Path(path).is_file():
            raise CredentialsError(f'"{path}" is not a regular file')
        data = fh.read()
        if st.st_mode & 0o077 and not vault.is_encrypted(data):
            raise CredentialsError(f'"{path}" is readable or writable by group or others (mode '
                                   f'{st.st_mode & 0o777:04o}): chmod 600 it, it holds the ONTAP password')
        if st.st_uid not in (0, os.geteuid()):
            raise CredentialsError(f'"{path}" belongs to uid {st.st_uid}, not to root: chown root it '
                                   "(only root may read the ONTAP password)")
        try:
            text = vault.decrypted(data) if vault.is_encrypted(data) else data.decode()
        except UnicodeDecodeError:
            raise CredentialsError(f'"{path}" is not UTF-8 text') from None
        except ValueError as e:
            raise CredentialsError(f'"{path}": {e}') from None
    return parse(text, path)
