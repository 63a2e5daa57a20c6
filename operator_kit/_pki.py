"""X.509 building blocks shared by the local control plane and webhook certificates.

One place makes keys, CAs and leaf certificates, so the local plane's API server
certificate and an operator's webhook certificate are made the same way. Keys are
ECDSA P-256 (small, fast, accepted by Go's and OpenSSL's TLS stacks). Nothing here
writes files or logs key material; callers decide where PEM bytes go.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PrivateKey = ec.EllipticCurvePrivateKey


def new_key() -> PrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def public_key_pem(key: PrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def load_key(pem: bytes) -> PrivateKey:
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError("expected an ECDSA private key")
    return key


def load_cert(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


@dataclass(frozen=True)
class Issued:
    """A certificate with its private key."""

    cert: x509.Certificate
    key: PrivateKey

    @property
    def cert_pem(self) -> bytes:
        return cert_pem(self.cert)

    @property
    def key_pem(self) -> bytes:
        return key_pem(self.key)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


MAX_BACKDATE = datetime.timedelta(minutes=5)


def backdate(lifetime: datetime.timedelta) -> datetime.timedelta:
    """How far before its issue a certificate of `lifetime` is valid from: 5 minutes (for
    clocks a little behind), or a tenth of a short lifetime (tests use seconds)."""
    return min(MAX_BACKDATE, lifetime / 10)


def issued_at(cert: x509.Certificate) -> datetime.datetime:
    """When `cert` was made here: ``notBefore`` plus the `backdate` it was given."""
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    total = end - start  # lifetime + backdate(lifetime)
    if total > MAX_BACKDATE * 11:
        return start + MAX_BACKDATE
    return start + total / 11


def _lifetime(days: int, lifetime: datetime.timedelta | None) -> datetime.timedelta:
    value = datetime.timedelta(days=days) if lifetime is None else lifetime
    if value < datetime.timedelta(seconds=1):
        raise ValueError(f"a certificate lifetime must be at least 1 second, got {value}")
    return value


def new_ca(common_name: str, *, days: int = 3650,
           lifetime: datetime.timedelta | None = None) -> Issued:
    """A self-signed CA that can sign leaf certificates only (path length 0), valid for
    `lifetime` (or `days`)."""
    key = new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _now()
    valid = _lifetime(days, lifetime)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - backdate(valid))
        .not_valid_after(now + valid)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issued(cert, key)


def issue(
    ca: Issued,
    common_name: str,
    *,
    dns_names: tuple[str, ...] = (),
    ip_addresses: tuple[str, ...] = (),
    organizations: tuple[str, ...] = (),
    server: bool = True,
    client: bool = False,
    days: int = 365,
    lifetime: datetime.timedelta | None = None,
) -> Issued:
    """A leaf certificate signed by `ca` for a TLS server, a TLS client, or both, valid for
    `lifetime` (or `days`) but never past the CA's own end."""
    key = new_key()
    valid = _lifetime(days, lifetime)
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    now = _now()
    usages = []
    if server:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    if client:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(attrs))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - backdate(valid))
        .not_valid_after(min(now + valid, ca.cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
            critical=False,
        )
    )
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return Issued(builder.sign(ca.key, hashes.SHA256()), key)


def spki(public_key: Any) -> bytes:
    """The DER SubjectPublicKeyInfo of `public_key`: equal for a key and its certificate."""
    return bytes(public_key.public_bytes(serialization.Encoding.DER,
                                         serialization.PublicFormat.SubjectPublicKeyInfo))


def b64(data: bytes) -> str:
    """`data` base64-encoded as text (a Secret's data, a caBundle)."""
    return base64.b64encode(data).decode("ascii")
