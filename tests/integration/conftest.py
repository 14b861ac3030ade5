"""Integration tests run against the real local stack; the session fixture starts it or reuses it."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import sys
import uuid

import psycopg2
import pytest

# The stack the tests start (or take over) runs Kafka and Connect on the client compiler only
# (stack/services/base.py LEAN_JVM says why); set before stackctl reads it, so a part started or
# checked from this process (the demo test's `make demo` path) agrees with the `stackctl up` below.
os.environ.setdefault("TIDELINE_STACK_LEAN_JVM", "1")
import stackctl  # noqa: E402

# py4j logs "Closing down clientserver connection" from __del__ at interpreter exit, after pytest
# closed its capture stream: a harmless but alarming "--- Logging error ---" at the end of the run
logging.getLogger("py4j.clientserver").setLevel(logging.WARNING)


@pytest.fixture(autouse=True)
def outside_any_airflow_task():
    """Each test starts outside an Airflow task, and leaves no task behind: Airflow's dag.test()
    (test_batch) exports its task's AIRFLOW_CTX_* into this process's environment and keeps them.
    A full load run after it then took itself for a retry of that task and skipped the tables
    "already loaded" (state.loaded_by_task): the reloads of later tests silently did nothing."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("AIRFLOW_CTX_")}
    for key in saved:
        del os.environ[key]
    yield
    for key in [k for k in os.environ if k.startswith("AIRFLOW_CTX_")]:
        del os.environ[key]


def pytest_collection_modifyitems(items):
    """Tests marked `last` after all others, in their order (the log check reads the whole run's logs)."""
    items.sort(key=lambda item: item.get_closest_marker("last") is not None)


@pytest.fixture(scope="session")
def stack():
    """Brings every part of the local stack up (idempotent) and exports its environment."""
    res = subprocess.run([sys.executable, str(stackctl.STACK / "stackctl.py"), "up"],
                         capture_output=True, text=True, timeout=900)
    if res.returncode != 0:
        pytest.fail(f"the local stack did not come up:\n{res.stdout}\n{res.stderr}", pytrace=False)
    os.environ.update(stackctl.environment())
    return stackctl


@pytest.fixture(scope="session")
def spark(stack):
    from tideline.core.settings import CLIENT_COMPILER_ONLY
    from tideline.spark_session import get_session
    from tideline.targets import spec
    # the tests' own driver on the client compiler: over the suite C2's compilations were 203 of
    # this JVM's 240 CPU-s, and the tests that measure speed are the benchmarks, not these. Not a
    # job's driver_conf, which it does not need (once, when `stackctl down` stopped any process
    # naming spark_jobs/, the secure stack's down in test_secure killed this JVM by its log4j option)
    session = get_session("tideline-tests", conf={"spark.driver.extraJavaOptions": CLIENT_COMPILER_ONLY},
                          extra_jars=spec("iceberg").spark_jars())
    yield session
    session.stop()


def _autocommit(db: str):
    """The source as its application (the tables' owner); the target as Tideline's role there, so
    what a test makes beside Tideline's tables (views, grants) is owned as a DBA would have it."""
    conn = psycopg2.connect(stackctl.pg_url(stackctl.DATABASES[db]) if db == "source" else
                            stackctl.pg_url(stackctl.DATABASES[db], stackctl.PG_SYNC_USER, stackctl.PG_SYNC_PASS))
    conn.autocommit = True
    return conn


@pytest.fixture
def source_db(stack):
    conn = _autocommit("source")
    yield conn
    conn.close()


@pytest.fixture
def target_db(stack):
    conn = _autocommit("target")
    yield conn
    conn.close()


@pytest.fixture
def unique_name():
    """A fresh lowercase name per test, so tests never see each other's tables or topics."""
    return f"t_{uuid.uuid4().hex[:10]}"


class Pipelines:
    """Makes throwaway pipelines over test tables: config file, Kafka topics, target schema."""

    def __init__(self, stack, tmp_path, name: str):
        self.stack, self.dir, self.name = stack, tmp_path, name
        self.topics: list[str] = []

    def make(self, tables: list[dict], partitions: int = 2, parallelism: int = 4, create_topics: bool = True,
             capture: bool = False, stream: dict | None = None, **settings):
        import yaml

        from tideline.core.config import load_pipeline
        data = {
            "name": self.name,
            "source": {"conn_id": "tideline_source", "schema": "public"},
            "target": {"conn_id": "tideline_target", "schema": self.name},
            "kafka": {"conn_id": "tideline_kafka", "topic_prefix": f"test.{self.name}", "partitions": partitions},
            "spark": {"parallelism": parallelism},
            "stream": stream or {},
            "tables": tables,
            **settings,   # any other pipeline setting: kafka overrides merge, the rest replace
        }
        if "kafka" in settings:
            data["kafka"] = {"conn_id": "tideline_kafka", "topic_prefix": f"test.{self.name}",
                             "partitions": partitions, **settings["kafka"]}
        path = self.dir / f"{self.name}.yaml"
        path.write_text(yaml.safe_dump(data))
        cfg = load_pipeline(path)
        if create_topics:
            from confluent_kafka.admin import AdminClient, NewTopic
            admin = AdminClient({"bootstrap.servers": self.bootstrap()})
            new = [cfg.topic(t.name) for t in cfg.tables]
            for fut in admin.create_topics([NewTopic(t, partitions, cfg.kafka.replication_factor)
                                            for t in new]).values():
                fut.result(30)
            self.topics += new
        if capture:
            from tideline.capture.connector import ensure_capture
            from tideline.core.connections import get_connection
            ensure_capture(cfg, get_connection("tideline_kafka"), get_connection("tideline_connect"),
                           get_connection(cfg.source.conn_id))
            self.captured = cfg
        return cfg

    captured = None

    @staticmethod
    def bootstrap() -> str:
        """The brokers of the `tideline_kafka` connection (the stack's, unless a test points it
        at another cluster)."""
        from tideline.core.connections import get_connection
        return get_connection("tideline_kafka").kafka_bootstrap

    def _heartbeat_topic(self, cfg) -> list[str]:
        """The heartbeat topic and the engine's own (a MariaDB connector's schema history)."""
        from tideline import engines
        from tideline.core.connections import get_connection
        from tideline.core.names import topic_name
        own = list(engines.for_source(get_connection(cfg.source.conn_id)).capture_topics(cfg))
        beat = cfg.source.heartbeat_table   # not a table of the pipeline: its topic by Debezium's rule
        return ([topic_name(cfg.kafka.topic_prefix, cfg.source.schema_, beat)] if beat else []) + own

    def adopt(self, cfg):
        """The DAG's prepare task creates topics and connector: clean them up after the test."""
        self.captured = cfg
        self.topics += [cfg.topic(t.name) for t in cfg.tables if cfg.topic(t.name) not in self.topics]
        return cfg

    def cleanup(self):
        if self.captured is not None:
            self._drop_capture(self.captured)
            self.topics += self._heartbeat_topic(self.captured)
        if self.topics:
            from confluent_kafka.admin import AdminClient
            admin = AdminClient({"bootstrap.servers": self.bootstrap()})
            for fut in admin.delete_topics(self.topics).values():
                try:
                    fut.result(30)
                except Exception:
                    pass


    def _drop_capture(self, cfg):
        from tideline.capture.connector import drop_capture
        from tideline.core.connections import get_connection
        drop_capture(cfg, get_connection("tideline_connect"), get_connection(cfg.source.conn_id))


@pytest.fixture
def pipelines(stack, tmp_path, unique_name):
    factory = Pipelines(stack, tmp_path, unique_name)
    yield factory
    try:
        factory.cleanup()
    finally:
        _drop_target(unique_name)


def _drop_target(unique_name: str) -> None:
    conn = _autocommit("target")
    with conn.cursor() as cur:
        cur.execute(f'DROP SCHEMA IF EXISTS "{unique_name}" CASCADE')
        if _has_state(cur):
            for table in ("table_state", "runs", "batches", "dead_letters", "alerts_sent"):
                cur.execute(f"DELETE FROM tideline.{table} WHERE pipeline = %s", (unique_name,))
    conn.close()


def _has_state(cur) -> bool:
    cur.execute("SELECT to_regclass('tideline.table_state') IS NOT NULL")
    return cur.fetchone()[0]


@pytest.fixture
def webhook(monkeypatch):
    """A real chat-webhook receiver on loopback, as the Airflow connection `tideline_test_hook`;
    yields the list of JSON bodies it received."""
    received: list[dict] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self):
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *_args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("AIRFLOW_CONN_TIDELINE_TEST_HOOK", json.dumps({
        "conn_type": "http", "host": "127.0.0.1", "port": server.server_address[1], "schema": "http",
        "extra": {"endpoint": "hooks/tideline"}}))
    yield received
    server.shutdown()


@pytest.fixture
def lake(stack, pipelines, unique_name):
    """An Iceberg pipeline's target (the test lake: helpers.LAKE_CATALOG and its state database,
    namespace = the test's name); its tables, namespace and state rows are removed afterwards."""
    from helpers import lake_connections
    from tideline.targets import for_connection
    store = for_connection(*lake_connections())
    yield store
    catalog = store.pyiceberg_catalog()
    if (unique_name,) in catalog.list_namespaces():
        for ident in catalog.list_tables(unique_name):
            catalog.purge_table(ident)
        catalog.drop_namespace(unique_name)
    conn = store.connect(autocommit=True)
    with conn.cursor() as cur:
        cur.execute("SELECT to_regclass('tideline.table_state') IS NOT NULL")
        if cur.fetchone()[0]:
            for t in ("table_state", "runs"):
                cur.execute(f"DELETE FROM tideline.{t} WHERE pipeline = %s", (unique_name,))
    conn.close()
