"""Test certificates made with `cryptography` (an ansible-core dependency): a CA and the
server certificates it signs, for the engine TLS tests (unit and lab)."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

DAY = datetime.timedelta(days=1)


def make_cert(name: str, issuer=None, days: int = 30, ips: tuple = ("127.0.0.1",)):
    """(certificate, key): a CA when `issuer` is None, else a server certificate for `ips` it
    signs; `days` < 0 makes one that expired."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    ca_cert, ca_key = issuer or (None, key)
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_cert.subject if ca_cert else subject)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - DAY * (1 + max(0, -days))).not_valid_after(now + days * DAY))
    if issuer is None:
        b = b.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    else:
        b = b.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(a)) for a in ips]),
                            critical=False)
    return b.sign(ca_key, hashes.SHA256()), key


def pem(cert=None, key=None, password: bytes | None = None) -> str:
    if cert is not None:
        return cert.public_bytes(serialization.Encoding.PEM).decode()
    enc = serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc).decode()


def engine_tls_files(d: Path, ips: tuple) -> dict:
    """A CA and a server certificate for `ips` in d (the key root-only): the inventory variables."""
    ca = make_cert("kvprov test CA")
    cert, key = make_cert("engine", issuer=ca, ips=ips)
    out = {}
    for var, name, text in (("kvprov_engine_tls_cert_file", "tls.crt", pem(cert=cert)),
                            ("kvprov_engine_tls_key_file", "tls.key", pem(key=key)),
                            ("kvprov_engine_tls_ca_file", "ca.pem", pem(cert=ca[0]))):
        (d / name).write_text(text)
        (d / name).chmod(0o600)
        out[var] = str(d / name)
    return out
