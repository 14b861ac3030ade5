"""The secure stack's certificates (TIDELINE_STACK_SECURE=1): its own CA and one server
certificate for 127.0.0.1/localhost, made once at `up` with the `cryptography` package (already
Airflow's dependency) — as a user's PKI would hand them to a DBA and a Kafka operator. Clients
verify the server against ca.pem (sslmode=verify-full, Kafka's PEM truststore)."""
from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from services.base import HOST, SECURE, VAR

TLS_DIR = VAR / "tls"


@dataclass(frozen=True)
class Certificates:
    ca: Path            # the CA's certificate: what every client trusts
    cert: Path          # the server certificate (SAN 127.0.0.1, localhost)
    key: Path           # its key, PKCS#8, mode 0600
    bundle: Path        # key + certificate in one PEM file: Kafka's PEM keystore


def certificates() -> Certificates:
    """The stack's CA and server certificate, made on first use."""
    c = Certificates(TLS_DIR / "ca.pem", TLS_DIR / "server.pem", TLS_DIR / "server.key", TLS_DIR / "server-bundle.pem")
    if not all(p.exists() for p in (c.ca, c.cert, c.key, c.bundle)):
        _make(c)
    return c


def _make(c: Certificates) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    TLS_DIR.mkdir(parents=True, exist_ok=True)
    os.chmod(TLS_DIR, 0o755)   # PostgreSQL runs as its own user and reads its copy of the key
    now = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Tideline local stack CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now)
          .not_valid_after(now + dt.timedelta(days=3650))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOST)])).issuer_name(ca_name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + dt.timedelta(days=825))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(HOST)),
                                                        x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    cert_pem = cert.public_bytes(pem)
    c.ca.write_bytes(ca.public_bytes(pem))
    c.cert.write_bytes(cert_pem)
    for path, data in ((c.key, key_pem), (c.bundle, key_pem + cert_pem)):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)


def client_tls() -> dict[str, str]:
    """What a client of the stack's databases adds in secure mode: verify the server against the
    stack's CA (libpq's names — psycopg2 keywords, URI parameters, the Airflow connection's extra —
    which Tideline reads for MariaDB too)."""
    if not SECURE:
        return {}
    return {"sslmode": "verify-full", "sslrootcert": str(certificates().ca)}


def server_copies(owner: str | None, where: Path) -> Certificates:
    """The certificate, CA and key copied into a server's own home: a server that runs as its own
    OS user wants its key 0600 and its own, and may not enter the stack's folder at all (a clone
    under root's 0700 home: services.base.server_home)."""
    import pwd
    certs = certificates()
    copies = Certificates(where / "ca.pem", where / "server.pem", where / "server.key", certs.bundle)
    for src, dst, mode in ((certs.ca, copies.ca, 0o644), (certs.cert, copies.cert, 0o644), (certs.key, copies.key, 0o600)):
        dst.write_bytes(src.read_bytes())
        os.chmod(dst, mode)
        if owner:
            pw = pwd.getpwnam(owner)
            os.chown(dst, pw.pw_uid, pw.pw_gid)
    return copies
