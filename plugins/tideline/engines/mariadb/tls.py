"""TLS to a MariaDB source, from the connection's extra in libpq's names (as for PostgreSQL):
`sslmode` require | verify-ca | verify-full and `sslrootcert` (the CA's PEM file). Each client
gets it in its own terms: pymysql an SSL context, Connector/J `sslMode` and `serverSslCert`, the
Debezium connector `database.ssl.mode` and a truststore — its binlog client reads Java keystores
only, so one is made from the CA file (keytool, from the JDK Spark runs on) in the connector's
secrets folder, its password a secret file like the database password (engines.connect_secrets)."""
from __future__ import annotations

import os
import secrets as random
import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tideline.core.connections import Conn
from tideline.core.errors import ConfigError, SourceError

MODES = {"require": "trust", "verify-ca": "verify-ca", "verify-full": "verify-full"}   # libpq -> MariaDB's


@dataclass(frozen=True)
class MariaDbTls:
    conn_id: str
    mode: str                  # require | verify-ca | verify-full
    ca: str | None

    def ssl_context(self) -> ssl.SSLContext:
        """pymysql's (the same rule on the load's executors: pipes.mariadb_pipe)."""
        from tideline.engines.mariadb.pipe import client_ssl
        return client_ssl(self.mode, self.ca)

    def jdbc_query(self) -> str:
        """Connector/J's URL parameters (Spark's JDBC reads); it takes values as written (no
        %-decoding), so the CA's path goes in as it is (mariadb_tls refuses one with & or =)."""
        return f"sslMode={MODES[self.mode]}" + (f"&serverSslCert={self.ca}" if self.ca else "")

    def connector_config(self, folder: Path | None, connector: str) -> dict[str, str]:
        """Debezium's settings; with a CA, a PKCS#12 truststore of it made in the connector's
        secrets folder (which the Connect worker reads)."""
        out = {"database.ssl.mode": MODES[self.mode]}
        if not self.ca:
            return out
        if folder is None:
            raise ConfigError(f"connection {self.conn_id!r}", [("extra.sslrootcert", (
                "needs a folder the Connect worker reads to hold the connector's truststore: set "
                "TIDELINE_CONNECT_SECRETS_DIR (README, Security)"))])
        own = folder / connector
        own.mkdir(mode=0o700, parents=True, exist_ok=True)
        store, password_file = own / "truststore.p12", own / "database.ssl.truststore.password"
        password = password_file.read_text() if password_file.exists() and store.exists() else None
        if password is None or _stale(store, Path(self.ca)):
            password = random.token_urlsafe(18)
            _make_truststore(Path(self.ca), store, password)
        return {**out, "database.ssl.truststore": str(store), "database.ssl.truststore.password": password}


def _stale(store: Path, ca: Path) -> bool:
    return not store.exists() or store.stat().st_mtime < ca.stat().st_mtime


def _make_truststore(ca: Path, store: Path, password: str) -> None:
    keytool = shutil.which("keytool")
    if keytool is None:
        raise SourceError("a MariaDB source with sslrootcert needs the JDK's keytool on this worker (the one "
                          "spark-submit uses) to make the connector's truststore")
    tmp = store.with_name(f".{store.name}.tmp")
    tmp.unlink(missing_ok=True)
    res = subprocess.run([keytool, "-importcert", "-noprompt", "-alias", "tideline-ca", "-file", str(ca),
                          "-storetype", "PKCS12", "-keystore", str(tmp), "-storepass:env", "TIDELINE_TS_PASS"],
                         capture_output=True, text=True, env={**os.environ, "TIDELINE_TS_PASS": password}, timeout=60)
    if res.returncode != 0:
        raise SourceError(f"making a truststore of {ca} failed: {(res.stdout + res.stderr).strip()[:300]}")
    tmp.chmod(0o600)
    tmp.replace(store)


def mariadb_tls(source: Conn) -> MariaDbTls | None:
    """The source's TLS, validated; None without sslmode (or with disable)."""
    tls = source.tls
    mode = tls.get("sslmode", "disable")
    if mode == "disable" and not set(tls) - {"sslmode"}:
        return None
    problems = []
    if mode not in MODES:
        problems.append(("extra.sslmode", f"is {mode!r}; a MariaDB source takes require, verify-ca or verify-full "
                                          "(prefer and allow would fall back to no TLS)"))
    if mode in ("verify-ca", "verify-full") and not tls.get("sslrootcert"):
        problems.append(("extra.sslrootcert", f"is missing: sslmode {mode} checks the server against this CA file"))
    if set(tls.get("sslrootcert", "")) & set("&=?#"):
        problems.append(("extra.sslrootcert", "a path with &, =, ? or # cannot be given to the JDBC driver: move the file"))
    if tls.get("sslcert") or tls.get("sslkey"):
        problems.append(("extra.sslcert/sslkey", "client certificates to MariaDB are not supported yet"))
    if problems:
        raise ConfigError(f"connection {source.conn_id!r}", problems)
    return MariaDbTls(source.conn_id, mode, tls.get("sslrootcert"))
