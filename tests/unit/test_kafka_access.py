"""One Kafka connection, every client: librdkafka, Java (Spark, Debezium) and the refusals."""
import json
from pathlib import Path

import pytest

from tideline.core.connections import get_connection
from tideline.core.errors import ConfigError
from tideline.core.kafka_access import client_config, kafka_access

ROOT = Path(__file__).resolve().parents[2]
SECURE = {"bootstrap.servers": "k1:9093,k2:9093", "security.protocol": "sasl_ssl", "sasl.mechanisms": "SCRAM-SHA-512",
          "sasl.username": "sync", "sasl.password": 'p"a\\ss', "ssl.ca.location": "/etc/kafka/ca.pem"}


def test_a_plaintext_connection_is_the_bootstrap_alone():
    k = kafka_access("k", {"bootstrap.servers": "a:1"})
    assert k.librdkafka({"group.id": "g"}) == {"bootstrap.servers": "a:1", "group.id": "g"}
    assert k.java() == {"bootstrap.servers": "a:1"}
    assert client_config("a:1") == {"bootstrap.servers": "a:1"}


def test_sasl_ssl_reaches_librdkafka_as_given_and_java_as_a_jaas_login_and_a_pem_truststore():
    k = get_connection("k", {"AIRFLOW_CONN_K": json.dumps({"conn_type": "kafka", "extra": SECURE})}).kafka_access
    assert str(k) == "k1:9093,k2:9093" and "p\"a" not in repr(k)
    assert k.librdkafka() == {"bootstrap.servers": "k1:9093,k2:9093", "security.protocol": "SASL_SSL",
                              "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "sync",
                              "sasl.password": 'p"a\\ss', "ssl.ca.location": "/etc/kafka/ca.pem"}
    java = k.java()
    assert java["security.protocol"] == "SASL_SSL" and java["sasl.mechanism"] == "SCRAM-SHA-512"
    assert java["sasl.jaas.config"] == ('org.apache.kafka.common.security.scram.ScramLoginModule required '
                                        'username="sync" password="p\\"a\\\\ss";')
    assert (java["ssl.truststore.type"], java["ssl.truststore.location"]) == ("PEM", "/etc/kafka/ca.pem")
    assert k.spark_options()["kafka.sasl.jaas.config"] == java["sasl.jaas.config"]
    assert k.spark_options()["kafka.bootstrap.servers"] == "k1:9093,k2:9093"


@pytest.mark.parametrize("extra, field", [
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI", "sasl.username": "u", "sasl.password": "p"},
     "extra.sasl.mechanism"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u"}, "extra.sasl.password"),
    ({"security.protocol": "TLS"}, "extra.security.protocol"),
    ({"sasl.username": "u", "sasl.password": "p"}, "extra.security.protocol"),
    ({"security.protocol": "SSL", "ssl.certificate.location": "/c.pem", "ssl.key.location": "/k.pem"},
     "extra.ssl.certificate.location"),
])
def test_a_security_setting_that_cannot_reach_every_client_is_refused_by_name(extra, field):
    with pytest.raises(ConfigError) as info:
        kafka_access("tideline_kafka", {"bootstrap.servers": "a:1", **extra})
    assert field in str(info.value) and "tideline_kafka" in str(info.value)


def test_postgres_tls_reaches_psycopg2_and_jdbc():
    c = get_connection("db", {"AIRFLOW_CONN_DB": json.dumps({
        "conn_type": "postgres", "host": "db.internal", "port": 5432, "login": "sync", "password": "pw",
        "schema": "shop", "extra": {"sslmode": "verify-full", "sslrootcert": "/etc/ssl/ca.pem"}})})
    assert "sslmode='verify-full'" in c.postgres_dsn() and "sslrootcert='/etc/ssl/ca.pem'" in c.postgres_dsn()
    assert c.jdbc_url() == "jdbc:postgresql://db.internal:5432/shop?sslmode=verify-full&sslrootcert=%2Fetc%2Fssl%2Fca.pem"
    bad = get_connection("db", {"AIRFLOW_CONN_DB": json.dumps({"conn_type": "postgres", "extra": {"sslmode": "on"}})})
    with pytest.raises(ConfigError, match="extra.sslmode"):
        bad.postgres_dsn()


def test_the_connectors_get_tls_and_the_schema_history_login():
    from tideline.core import debezium
    from tideline.core.config import load_pipeline
    from tideline.engines.mariadb.capture import MariaDbCapture
    cfg = load_pipeline(ROOT / "pipelines" / "demo.yaml")
    src = get_connection("s", {"AIRFLOW_CONN_S": json.dumps({
        "conn_type": "postgres", "host": "h", "login": "u", "password": "p", "schema": "d",
        "extra": {"sslmode": "verify-full", "sslrootcert": "/ca.pem"}})})
    conf = debezium.connector_config(cfg, src)
    assert conf["database.sslmode"] == "verify-full" and conf["database.sslrootcert"] == "/ca.pem"
    assert "database.sslmode" not in debezium.connector_config(cfg, get_connection("s", {"AIRFLOW_CONN_S": "postgresql://u:p@h/d"}))

    maria = MariaDbCapture.__new__(MariaDbCapture)
    maria.source = get_connection("m", {"AIRFLOW_CONN_M": "mariadb://u:p@h:3306/shop"})
    conf = maria.connector_config(load_pipeline(ROOT / "pipelines" / "shop_mariadb.yaml"), kafka_access("k", SECURE))
    for client in ("producer", "consumer"):
        assert conf[f"schema.history.internal.{client}.security.protocol"] == "SASL_SSL"
        assert "ScramLoginModule" in conf[f"schema.history.internal.{client}.sasl.jaas.config"]
        assert conf[f"schema.history.internal.{client}.ssl.truststore.location"] == "/etc/kafka/ca.pem"
    assert conf["schema.history.internal.kafka.bootstrap.servers"] == "k1:9093,k2:9093"


def test_the_schema_history_login_is_a_secret_kept_out_of_connects_config(tmp_path, monkeypatch):
    from tideline.engines import connect_secrets as secrets
    monkeypatch.setenv(secrets.SECRETS_DIR_ENV, str(tmp_path))
    jaas = kafka_access("k", SECURE).java()["sasl.jaas.config"]
    out, changed = secrets.externalize("c1", {"database.password": "pw",
                                              "schema.history.internal.producer.sasl.jaas.config": jaas})
    assert changed and "p\"a" not in json.dumps(out)
    assert out["schema.history.internal.producer.sasl.jaas.config"].startswith("${directory:")
    assert (tmp_path / "c1" / "schema.history.internal.producer.sasl.jaas.config").read_text() == jaas
