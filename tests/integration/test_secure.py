"""The stack in secure mode (TIDELINE_STACK_SECURE=1) beside the shared one: PostgreSQL over TLS
only (hostssl, clients verify-full against the stack's CA), Kafka over SASL_SSL only (SCRAM-SHA-512),
Kafka Connect logging in to it. A pipeline runs end to end there — capture, full load, stream,
verify — with every client configured from the Airflow connections alone; a client without TLS,
a PLAINTEXT Kafka client and a wrong password are refused."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time

import psycopg2
import pytest
import yaml
from confluent_kafka.admin import AdminClient

import stackctl
from helpers import table_digest
from tideline.capture.connector import ConnectClient, drop_capture, ensure_capture
from tideline.core.config import load_pipeline
from tideline.core.connections import get_connection
from tideline.core.debezium import connector_name
from tideline.load.full_load import FullLoad
from tideline.stream.run import IncrementalRun
from tideline.verify.compare import verify

pytestmark = pytest.mark.integration
VAR = stackctl.VAR / "secure"
PORTS = {name: str(port) for name, port in stackctl.SECURE_TEST_PORTS.items()}   # reserved with the stack's
CONN_IDS = ("tideline_source", "tideline_mariadb_source", "tideline_target", "tideline_kafka", "tideline_connect")
_quiet = logging.getLogger("tests.secure.rdkafka")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


def _stackctl(*args: str) -> str:
    env = dict(os.environ, TIDELINE_STACK_SECURE="1", TIDELINE_STACK_VAR=str(VAR), **PORTS)
    res = subprocess.run([sys.executable, str(stackctl.STACK / "stackctl.py"), *args], env=env,
                         capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        pytest.fail(f"stackctl {' '.join(args)} (secure mode) failed:\n{res.stdout}\n{res.stderr}", pytrace=False)
    return res.stdout


@pytest.fixture(scope="module")
def secure(stack):
    """A second stack in secure mode (its own PostgreSQL, Kafka and Connect; Spark is the test's):
    the environment its Airflow connections make, under the usual connection ids."""
    _stackctl("up", "postgres", "mariadb", "kafka", "connect")
    env = json.loads(_stackctl("env", "--json"))
    yield {k: v for k, v in env.items() if k.startswith("AIRFLOW_CONN_") or k == "TIDELINE_CONNECT_SECRETS_DIR"}
    _stackctl("down")


def _conns(secure: dict) -> dict:
    return {c: get_connection(c, secure) for c in CONN_IDS}


def _db(secure, which: str, **override):
    kw = dict(host=stackctl.HOST, port=int(PORTS["TIDELINE_PG_PORT"]), dbname=stackctl.DATABASES[which],
              user=stackctl.PG_USER, password=stackctl.PG_PASS, connect_timeout=5,
              sslmode="verify-full", sslrootcert=str(VAR / "tls" / "ca.pem"))
    kw.update(override)
    conn = psycopg2.connect(**kw)
    conn.autocommit = True
    return conn


def _maria(**kw):
    """The secure stack's MariaDB as its application (the admin; Tideline's capture user only reads)."""
    import pymysql
    return pymysql.connect(host=stackctl.HOST, port=int(PORTS["TIDELINE_MARIADB_PORT"]), user=stackctl.MARIADB_ADMIN,
                           password=stackctl.MARIADB_ADMIN_PASS, database=stackctl.MARIADB_DATABASE, autocommit=True,
                           connect_timeout=5, **kw)


def _pipeline(tmp_path, name: str, source_conn: str, schema: str, table: str):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "source": {"kind": "mariadb" if "mariadb" in source_conn else "postgres", "conn_id": source_conn,
                                 "schema": schema},
        "target": {"conn_id": "tideline_target", "schema": name},
        "kafka": {"conn_id": "tideline_kafka", "topic_prefix": f"sec.{name}", "partitions": 2},
        "connect": {"conn_id": "tideline_connect"}, "spark": {"parallelism": 2},
        "tables": [{"name": table}]}))
    return load_pipeline(path)


def _run_pipeline(secure, spark, cfg, table: str, change, equal) -> dict:
    """Capture, full load, changes through the stream, verify — every client from the connections."""
    conns = _conns(secure)
    source, connect = conns[cfg.source.conn_id], conns["tideline_connect"]
    try:
        ensure_capture(cfg, conns["tideline_kafka"], connect, source)
        config = ConnectClient(connect.http_base_url()).config(connector_name(cfg))
        assert config["database.password"].startswith("${directory:")   # never the password itself
        FullLoad(cfg, spark, environ=secure).run([table])
        assert equal(), "the full load over TLS differs from the source"
        change()
        deadline = time.time() + 120
        while not equal():
            assert time.time() < deadline, "the stream over SASL_SSL did not bring the target to the source"
            IncrementalRun(cfg, spark, "available_now", environ=secure).run()
        [report] = verify(cfg, source, conns["tideline_target"], [table], conns["tideline_kafka"].kafka_access)
        assert report.equal, report.summary()
        return config
    finally:
        drop_capture(cfg, connect, source)
        admin = AdminClient(conns["tideline_kafka"].kafka_access.librdkafka(), logger=_quiet)
        for fut in admin.delete_topics([cfg.topic(table)]).values():
            fut.exception(30)


def test_a_mariadb_pipeline_runs_end_to_end_over_tls_and_sasl_ssl(secure, spark, tmp_path, monkeypatch, unique_name):
    conns = _conns(secure)
    assert conns["tideline_mariadb_source"].tls["sslmode"] == "verify-full"
    monkeypatch.setenv("TIDELINE_CONNECT_SECRETS_DIR", secure["TIDELINE_CONNECT_SECRETS_DIR"])
    t = f"{unique_name}_items"
    ca = str(VAR / "tls" / "ca.pem")
    import ssl
    maria = _maria(ssl=ssl.create_default_context(cafile=ca))
    tgt = _db(secure, "target")
    with maria.cursor() as cur:
        cur.execute(f"CREATE TABLE `{t}` (id bigint PRIMARY KEY, name varchar(40), price decimal(12,3), "
                    f"at datetime(6), raw varbinary(8)) CHARACTER SET utf8mb4")
        cur.execute(f"INSERT INTO `{t}` SELECT seq, CONCAT('item ', seq, ' ☕'), seq / 8, "
                    f"'2026-01-01' + INTERVAL seq SECOND, UNHEX('00ff') FROM seq_1_to_3000")
        cur.execute(f"INSERT INTO `{t}` VALUES (0, '', NULL, '0001-01-01 00:00:00', '')")
    cfg = _pipeline(tmp_path, unique_name, "tideline_mariadb_source", stackctl.MARIADB_DATABASE, t)

    def count_sum():
        with maria.cursor() as cur:
            cur.execute(f"SELECT count(*), COALESCE(sum(id), 0), COALESCE(sum(price), 0) FROM `{t}`")
            left = tuple(str(v) for v in cur.fetchone())
        with tgt.cursor() as cur:
            cur.execute(f'SELECT count(*), COALESCE(sum(id), 0), COALESCE(sum(price), 0) FROM "{unique_name}"."{t}"'
                        if _exists(tgt, unique_name, t) else "SELECT -1, -1, -1")
            right = tuple(str(v) for v in cur.fetchone())
        return left == right

    def change():
        with maria.cursor() as cur:
            cur.execute(f"UPDATE `{t}` SET price = price + 1, name = CONCAT(name, ' ✓') WHERE id % 5 = 0")
            cur.execute(f"DELETE FROM `{t}` WHERE id % 13 = 0")
            cur.execute(f"INSERT INTO `{t}` VALUES (9000001, 'late', 0.001, NOW(6), NULL)")
    try:
        config = _run_pipeline(secure, spark, cfg, t, change, count_sum)
        assert config["database.ssl.mode"] == "verify-full"
        assert config["database.ssl.truststore.password"].startswith("${directory:")
        assert config["schema.history.internal.producer.sasl.jaas.config"].startswith("${directory:")
    finally:
        with maria.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS `{t}`")
        with tgt.cursor() as cur:
            cur.execute(f'DROP SCHEMA IF EXISTS "{unique_name}" CASCADE')
        maria.close()
        tgt.close()


def _exists(conn, schema: str, table: str) -> bool:
    with conn.cursor() as cur:
        cur.execute("SELECT to_regclass(%s) IS NOT NULL", (f'"{schema}"."{table}"',))
        return cur.fetchone()[0]


def test_a_pipeline_runs_end_to_end_over_tls_and_sasl_ssl(secure, spark, tmp_path, monkeypatch, unique_name):
    conns = _conns(secure)
    assert conns["tideline_source"].tls["sslmode"] == "verify-full"
    assert conns["tideline_kafka"].kafka_access.protocol == "SASL_SSL"
    # the connector's password file goes where the secure Connect worker may read it
    monkeypatch.setenv("TIDELINE_CONNECT_SECRETS_DIR", secure["TIDELINE_CONNECT_SECRETS_DIR"])
    t = f"{unique_name}_orders"
    src, tgt = _db(secure, "source"), _db(secure, "target")
    with src.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id bigint PRIMARY KEY, note text, amount numeric(12,2), "
                    f"at timestamptz, tags text[])")
        cur.execute(f"INSERT INTO public.{t} SELECT g, 'row ' || g || ' 🌊', g * 1.25, "
                    f"'2026-01-01'::timestamptz + g * interval '1 minute', ARRAY['a', NULL, 'ü'] "
                    f"FROM generate_series(1, 5000) g")
        cur.execute(f"INSERT INTO public.{t} VALUES (0, '', NULL, 'infinity', '{{}}')")
    cfg = _pipeline(tmp_path, unique_name, "tideline_source", "public", t)

    def equal():   # row for row (row::text), in key order
        return _exists(tgt, unique_name, t) and \
            table_digest(src, "public", t, "id") == table_digest(tgt, unique_name, t, "id")

    def change():   # through Debezium: TLS to PostgreSQL, SASL_SSL to Kafka
        with src.cursor() as cur:
            cur.execute(f"UPDATE public.{t} SET note = note || ' ✓', tags = tags || NULL::text WHERE id % 7 = 0")
            cur.execute(f"DELETE FROM public.{t} WHERE id % 11 = 0")
            cur.execute(f"INSERT INTO public.{t} VALUES (9000001, 'late', 'NaN', '-infinity', NULL)")
    try:
        config = _run_pipeline(secure, spark, cfg, t, change, equal)
        assert config["database.sslmode"] == "verify-full"
    finally:
        with src.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS public.{t}")
        with tgt.cursor() as cur:
            cur.execute(f'DROP SCHEMA IF EXISTS "{unique_name}" CASCADE')
        src.close()
        tgt.close()


def test_clients_without_tls_or_with_a_wrong_password_are_refused(secure):
    # PostgreSQL: hostssl only — a client without TLS finds no pg_hba entry; a wrong password fails
    with pytest.raises(psycopg2.OperationalError, match="no encryption"):
        _db(secure, "source", sslmode="disable")
    with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
        _db(secure, "source", password="not-the-password")
    with pytest.raises(psycopg2.OperationalError, match="certificate verify failed|root certificate"):
        _db(secure, "source", sslrootcert="/etc/ssl/certs/ca-certificates.crt")   # a CA that did not sign it
    _db(secure, "source").close()
    # MariaDB: require_secure_transport — the same login without TLS is refused, with it let in
    import pymysql
    import ssl
    with pytest.raises(pymysql.err.OperationalError, match="insecure transport|Access denied"):
        _maria().close()
    _maria(ssl=ssl.create_default_context(cafile=str(VAR / "tls" / "ca.pem"))).close()

    # Kafka: the secure listener speaks SASL_SSL only
    kafka = get_connection("tideline_kafka", secure).kafka_access

    def errors_of(config: dict) -> tuple[bool, list[str]]:
        seen: list[str] = []
        admin = AdminClient({**config, "error_cb": lambda e: seen.append(e.str()), "socket.timeout.ms": 3000},
                            logger=_quiet)
        try:
            admin.list_topics(timeout=3)
            return True, seen
        except Exception as exc:   # noqa: BLE001 — the refusal is what is asserted
            admin.poll(1.0)   # serves error_cb: the broker's reason
            return False, seen + [str(exc)]

    ok, _ = errors_of(kafka.librdkafka())
    assert ok, "the Airflow connection's own settings must reach the secure listener"
    ok, seen = errors_of({"bootstrap.servers": kafka.bootstrap})
    assert not ok, "a PLAINTEXT client reached the SASL_SSL listener"
    ok, seen = errors_of(kafka.librdkafka({"sasl.password": "not-the-password"}))
    assert not ok and any("Authentication failed" in s or "authentication" in s.lower() for s in seen), seen
