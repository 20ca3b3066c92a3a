"""The secured local broker's TLS material: a private CA and a certificate for this machine's loopback
names, made once under the broker's home (``<home>/tls``) and kept for later starts.

Why a private CA rather than one self-signed certificate: clients trust the CA file (``bus.ssl_cafile``)
and keep trusting it when the broker's certificate is made again. The broker's certificate serves both
ends: as a server on the client listener, and as the client certificate the broker presents to its own
controller listener (mutual TLS there; SCRAM is not offered on KRaft controller listeners).
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from cua_stream.broker.users import write_private

BROKER_CN = "cua-stream-broker"
"""The broker certificate's subject: on the controller listener the broker's principal is
``User:CN=cua-stream-broker`` (Kafka's default SSL principal is the subject's DN)."""
VALID_DAYS = 825


@dataclass(frozen=True)
class TlsFiles:
    ca: Path
    """The CA certificate (PEM): what clients trust (``bus.ssl_cafile``)."""
    keystore: Path
    """The broker's private key (PKCS#8, unencrypted, 0600) followed by its certificate and the CA's."""


def tls_files(home: Path) -> TlsFiles:
    return TlsFiles(ca=home / "tls" / "ca.pem", keystore=home / "tls" / "broker.pem")


def ensure_tls(home: Path, host: str, also: Sequence[str] = ()) -> TlsFiles:
    """The CA and broker certificate under ``home`` (made on first use; kept afterwards), for
    localhost, ``host`` and the names in ``also`` (a compose network's broker hostnames)."""
    files = tls_files(home)
    if files.ca.exists() and files.keystore.exists():
        return files
    files.ca.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cua-stream local CA")])
    ca_cert = (
        _builder(ca_name, ca_name, ca_key.public_key(), now)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    for name in dict.fromkeys((host, *also)):
        if name in ("localhost", "127.0.0.1"):
            continue
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            names.append(x509.DNSName(name))
    cert = (
        _builder(
            x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, BROKER_CN)]), ca_name, key.public_key(), now
        )
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    write_private(files.keystore, (key_pem + cert.public_bytes(pem) + ca_cert.public_bytes(pem)).decode())
    files.ca.write_bytes(ca_cert.public_bytes(pem))
    # The CA's key is not kept: nothing signs with it again (a new broker certificate means a new CA).
    return files


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey, now: datetime.datetime
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
    )
