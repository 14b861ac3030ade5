"""TLS to a MariaDB source: one setting in the connection, each client in its own terms."""
import json
import ssl
import stat
import subprocess
from pathlib import Path

import pytest

from tideline import engines
from tideline.core.connections import get_connection
from tideline.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def maria(extra: dict):
    return get_connection("m", {"AIRFLOW_CONN_M": json.dumps(
        {"conn_type": "mariadb", "host": "db.internal", "port": 3306, "login": "u", "password": "p",
         "schema": "shop", "extra": extra})})


@pytest.mark.parametrize("extra, field", [
    ({"sslmode": "prefer"}, "extra.sslmode"),
    ({"sslmode": "verify-full"}, "extra.sslrootcert"),
    ({"sslmode": "verify-full", "sslrootcert": "/ca.pem", "sslcert": "/c.pem", "sslkey": "/k.pem"},
     "extra.sslcert/sslkey"),
])
def test_settings_that_would_not_be_what_they_say_are_refused(extra, field):
    with pytest.raises(ConfigError, match=field.replace("/", ".")):
        engines.for_source(maria(extra))


def test_verify_full_reaches_pymysql_and_connector_j(tmp_path):
    engine = engines.for_source(maria({"sslmode": "verify-full", "sslrootcert": str(ca_file(tmp_path))}))
    ctx = engine.tls.ssl_context()
    assert ctx.check_hostname and ctx.verify_mode == ssl.CERT_REQUIRED
    assert "sslMode=verify-full" in engine.jdbc_url() and "serverSslCert=" in engine.jdbc_url()
    assert engines.for_source(maria({})).tls is None and "sslMode" not in engines.for_source(maria({})).jdbc_url()
    lax = engines.for_source(maria({"sslmode": "require"})).tls
    assert lax.ssl_context().verify_mode == ssl.CERT_NONE and "sslMode=trust" in lax.jdbc_query()


def test_the_connector_gets_a_truststore_of_the_ca_and_its_password_stays_a_secret(tmp_path, monkeypatch):
    from tideline.engines import connect_secrets as secrets
    from tideline.core.config import load_pipeline
    folder = tmp_path / "secrets"
    monkeypatch.setenv(secrets.SECRETS_DIR_ENV, str(folder))
    engine = engines.for_source(maria({"sslmode": "verify-full", "sslrootcert": str(ca_file(tmp_path))}))
    cfg = load_pipeline(ROOT / "pipelines" / "shop_mariadb.yaml")
    conf = engine.connector_config(cfg)
    assert conf["database.ssl.mode"] == "verify-full"
    store = Path(conf["database.ssl.truststore"])
    assert stat.S_IMODE(store.stat().st_mode) == 0o600
    listing = subprocess.run(["keytool", "-list", "-keystore", str(store), "-storetype", "PKCS12", "-storepass",
                              conf["database.ssl.truststore.password"]], capture_output=True, text=True)
    assert "trustedCertEntry" in listing.stdout, listing.stdout + listing.stderr
    from tideline.core.debezium import connector_name
    out, _changed = secrets.externalize(connector_name(cfg), conf)
    assert out["database.ssl.truststore.password"].startswith("${directory:")
    assert engine.connector_config(cfg)["database.ssl.truststore.password"] == conf["database.ssl.truststore.password"]


def ca_file(tmp_path: Path) -> Path:
    """A self-signed CA certificate, as a DBA would hand it out."""
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(key, hashes.SHA256()))
    path = tmp_path / "ca.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path
