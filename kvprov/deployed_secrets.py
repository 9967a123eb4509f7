"""Which secret files each host was last deployed with from this controller, so that a rotated
secret is deployed although the audit cannot see it.

The audit compares every managed file with what the roles render, except the secrets' contents:
no digest of a secret leaves the host, none is put in a bundle. So after a key is rotated on
the controller, `kvprov deploy`'s audit would find every host clean and run nothing. Instead,
deploy records per host a keyed digest (HMAC-SHA256, with a random key kept beside the record,
both root-only) of the secret files its inventory names and of the secrets it gives as values (kvprov_engine_api_key...),
after each successful run of the engine role, and converges the hosts whose digest is no longer
the one recorded: a changed file or value, another file, a secret added or removed, or a host
never deployed from this controller. A host that gives no secret has nothing to record."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path

from kvprov import inventory, paths
from kvprov.check.values import SECRET_VALUES, is_template

# The controller files the engine role copies to /etc/kvprov/secrets (roles/engine/tasks/secrets.yml).
SECRET_FILES = ("kvprov_engine_api_key_file", "kvprov_engine_admin_api_key_file", "kvprov_engine_hf_token_file",
                "kvprov_engine_s3_credentials_file",
                "kvprov_engine_tls_cert_file", "kvprov_engine_tls_key_file")


def _dir() -> Path:
    d = paths.state_dir() / "deployed-secrets"
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(d, 0o700)
    return d


def _key() -> bytes:
    path = _dir() / "key"
    try:
        return path.read_bytes()
    except FileNotFoundError:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(32))
        return path.read_bytes()


def _record(sources: list[str]) -> Path:
    name = hashlib.sha256("\0".join(os.path.abspath(s) for s in sources).encode()).hexdigest()[:24]
    return _dir() / f"{name}.json"


def digests(sources: list[str], hosts: list[str]) -> dict[str, str | None]:
    """Per host: the digest of the secret files it names and the secret values it gives now; ""
    when it gives none; None when one is a template (only Ansible can resolve it) or cannot be read."""
    key = _key()
    by_name = {h.name: h for h in inventory.load(sources).hosts}
    out: dict[str, str | None] = {}
    for name in hosts:
        host = by_name.get(name)
        given = {v: host.value(v) for v in (*SECRET_FILES, *SECRET_VALUES) if host is not None and host.value(v)}
        if not given:
            out[name] = ""
            continue
        mac = hmac.new(key, digestmod=hashlib.sha256)
        try:
            for var, value in sorted(given.items()):
                if is_template(value):
                    raise OSError
                if var in SECRET_VALUES:  # the secret itself
                    mac.update(f"{var}\0\0{value}\0".encode())
                else:  # a file: its name and content
                    mac.update(f"{var}\0{value}\0".encode() + Path(value).read_bytes() + b"\0")
        except (OSError, TypeError):
            out[name] = None
            continue
        out[name] = mac.hexdigest()
    return out


def changed(sources: list[str], hosts: list[str]) -> list[str]:
    """The hosts whose secret files are not (known to be) the ones last deployed to them."""
    if not hosts:  # deploy --full, or no host audited clean: nothing to read
        return []
    try:
        recorded = json.loads(_record(sources).read_text())
    except (OSError, ValueError):
        recorded = {}
    return sorted(h for h, d in digests(sources, hosts).items() if d != "" and (d is None or recorded.get(h) != d))


def save(sources: list[str], hosts: list[str]) -> None:
    """Record what these hosts were just deployed with (each one's engine role ran without failing)."""
    if not hosts:
        return
    path = _record(sources)
    try:
        recorded = json.loads(path.read_text())
    except (OSError, ValueError):
        recorded = {}
    recorded.update({h: d for h, d in digests(sources, hosts).items() if d})
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(recorded, f, indent=1, sort_keys=True)
    os.replace(tmp, path)
