"""The source contract: what every registered source must do for Tideline's guarantees, run against
each real one (the stack's PostgreSQL and MariaDB) — no Kafka, Connect or Airflow, so a change to
the source seam is checked in minutes. A new source joins by being registered (engines.kinds())
and naming in CONNECTIONS its test connection and how to make a table there. A throwaway SQLite
source (throwaway_sqlite, never shipped: its module plus its support lines) runs it too, to show
that a third source is its own package and nothing else.

Each case reads through the seam only: describe a table, refuse one it cannot carry, load a
consistent snapshot of it (FullLoad, its handover position given, into the PostgreSQL target),
and verify it — equal, then one changed row found."""
from __future__ import annotations

import json
import os
import tempfile

import psycopg2
import pytest

import stackctl
from tideline import engines, state
from tideline.core.config import parse_pipeline
from tideline.core.connections import get_connection
from tideline.core.errors import SourceError
from tideline.load.full_load import FullLoad
from tideline.verify.compare import verify

pytestmark = pytest.mark.integration


def _postgres_ddl():
    conn = psycopg2.connect(stackctl.pg_url(stackctl.DATABASES["source"]))
    conn.autocommit = True
    return conn, "public"


def _mariadb_ddl():
    subprocess_up("mariadb")
    return stackctl.mariadb_connect(stackctl.MARIADB_DATABASE, autocommit=True), stackctl.MARIADB_DATABASE


def subprocess_up(service: str) -> None:
    import subprocess
    import sys
    res = subprocess.run([sys.executable, str(stackctl.STACK / "stackctl.py"), "up", service],
                         capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        pytest.fail(f"{service} did not come up:\n{res.stdout}\n{res.stderr}", pytrace=False)


def _sqlite_ddl():
    import throwaway_sqlite
    path = os.path.join(tempfile.mkdtemp(prefix="tideline-contract-"), "source.db")
    os.environ["AIRFLOW_CONN_TIDELINE_SQLITE_SOURCE"] = json.dumps({"conn_type": "sqlite", "host": path})
    return throwaway_sqlite.ddl_connection(path), "main"


# kind -> (its test connection, a superuser connection and the schema to make tables in)
CONNECTIONS = {"postgres": ("tideline_source", _postgres_ddl), "mariadb": ("tideline_mariadb_source", _mariadb_ddl),
               "sqlite": ("tideline_sqlite_source", _sqlite_ddl)}
THROWAWAY = {"sqlite"}   # registered by the contract for its own run (throwaway_sqlite.register)
ROWS = [(1, "Zoë 😀", "1.50"), (2, "", "-0.01"), (3, None, None), (4, "line\nbreak \\N", "99999.99")]


class SourceContract:
    def __init__(self, kind: str, name: str, spark):
        assert kind in CONNECTIONS, f"source kind {kind!r} is registered: name its test connection in CONNECTIONS"
        conn_id, ddl = CONNECTIONS[kind]
        self.kind, self.spark, self.table, self.keyless = kind, spark, f"{name}_t", f"{name}_nokey"
        self.admin, schema = ddl()
        # a source without change capture syncs its tables in batch mode (engines.SourceCapabilities)
        batch = not engines.spec(kind).capabilities.capture
        self.raw = {
            "name": name, "source": {"kind": kind, "conn_id": conn_id, "schema": schema},
            "target": {"conn_id": "tideline_target", "schema": name},
            "kafka": {"topic_prefix": f"contract.{name}", "partitions": 1}, "spark": {"parallelism": 2},
            "tables": [{"name": self.table, **({"mode": "batch", "cursor_column": "id"} if batch else {})},
                       {"name": self.keyless, **({"mode": "batch", "cursor_column": "v"} if batch else {})}]}
        self.cfg = parse_pipeline(self.raw, f"{name}.yaml")
        self.engine = engines.for_pipeline(self.cfg, get_connection(conn_id))
        conn = state.connect(get_connection("tideline_target"))   # the suite may run first on a new stack
        try:
            state.migrate(conn)
        finally:
            conn.close()
        self.run(f"CREATE TABLE {self.table} (id int PRIMARY KEY, note varchar(40), amount decimal(12,2))",
                 f"CREATE TABLE {self.keyless} (v int)")
        with self.admin.cursor() as cur:
            for row in ROWS:
                cur.execute(f"INSERT INTO {self.table} VALUES (%s, %s, %s)", row)

    def run(self, *statements: str) -> None:
        with self.admin.cursor() as cur:
            for s in statements:
                cur.execute(s)

    def close(self) -> None:
        self.run(f"DROP TABLE IF EXISTS {self.table}", f"DROP TABLE IF EXISTS {self.keyless}")
        self.admin.close()
        target = get_connection("tideline_target")
        conn = state.connect(target)
        with conn, conn.cursor() as cur:
            cur.execute(f'DROP SCHEMA IF EXISTS "{self.cfg.name}" CASCADE')
        from tideline.state import ledger
        ledger.delete_pipeline(conn, self.cfg.name)
        conn.close()


@pytest.fixture(params=sorted(CONNECTIONS))
def source(request, spark, unique_name, monkeypatch):
    assert sorted(set(CONNECTIONS) - THROWAWAY) == engines.kinds(), "every registered source is tested here"
    if request.param in THROWAWAY:
        import throwaway_sqlite
        throwaway_sqlite.register(monkeypatch, spark)
    try:
        c = SourceContract(request.param, unique_name, spark)
        yield c
        c.close()
    finally:
        if request.param in THROWAWAY:
            engines.unregister(request.param)


def test_a_table_is_described_by_its_columns_and_key_and_one_without_a_key_is_refused(source):
    """Refused before any work: by the refusals capture, load and stream start with (cdc); a batch
    table by its run, before it reads a row (load.batch: it upserts by key)."""
    conn = source.engine.connect(autocommit=True)
    try:
        shape = source.engine.describe(conn, source.cfg.source_schema(source.table), source.table,
                                       source.cfg.table(source.table))
        assert [c.name for c in shape.columns] == ["id", "note", "amount"] and list(shape.primary_key) == ["id"]
        refused = source.engine.refusals(conn, source.cfg, [source.table, source.keyless])
    finally:
        conn.close()
    if source.cfg.table(source.keyless).mode == "cdc":
        assert list(refused) == [source.keyless], refused
        assert "primary key" in refused[source.keyless].reason, refused[source.keyless]
        return
    assert refused == {}, refused
    from datetime import datetime, timezone
    from tideline.load.batch import BatchSync
    with pytest.raises(SourceError, match="batch mode upserts by primary key; the source table has none"):
        BatchSync(source.cfg, source.spark).sync_table(source.keyless, datetime(2026, 1, 1, tzinfo=timezone.utc),
                                                       datetime.now(timezone.utc))


def test_a_consistent_snapshot_loads_row_for_row_and_verify_finds_it_equal_then_one_row_changed(source):
    loader = FullLoad(source.cfg, source.spark, handover=lambda topic: ("contract-topic", {0: 5}))
    try:
        result = loader.load_table(source.table)
    finally:
        loader.close()
    assert result.rows == len(ROWS) and result.offsets == {0: 5}
    target = psycopg2.connect(stackctl.pg_url(stackctl.DATABASES["target"]))
    try:
        with target.cursor() as cur:
            cur.execute(f'SELECT id, note, amount::text FROM "{source.cfg.name}"."{source.table}" ORDER BY id')
            assert cur.fetchall() == ROWS
    finally:
        target.close()
    report = compare(source)
    assert report.equal, report.summary()
    source.run(f"UPDATE {source.table} SET note = 'changed' WHERE id = 2")
    report = compare(source)
    assert not report.equal and report.counts["different"] == 1 and [f.key for f in report.samples] == [("2",)]


def compare(source):
    """The table verified: by verify() for a cdc table; a batch table lags its source by design, so
    verify() passes it over, and its two sides (the source's verify side and the target's) are
    compared here directly, as verify() would."""
    conns = (get_connection(source.cfg.source.conn_id), get_connection("tideline_target"))
    if source.cfg.table(source.table).mode == "cdc":
        [report] = verify(source.cfg, *conns, [source.table])
        return report
    from concurrent.futures import ThreadPoolExecutor
    from tideline import targets
    from tideline.verify.compare import TableVerifier, VerifySettings
    src = engines.able(source.engine, engines.VerifiesSource).verify_side("source")
    tgt = targets.able(targets.for_pipeline(source.cfg, conns[1]), targets.Verifies).verify_side("target")
    state_conn = state.connect(conns[1])
    state_conn.autocommit = True
    try:
        with ThreadPoolExecutor(2) as pool:
            return TableVerifier(source.cfg, source.engine, src, tgt, state_conn, pool, VerifySettings(),
                                 None).run(source.table)
    finally:
        src.close()
        tgt.close()
        state_conn.close()


def test_a_batch_interval_lands_the_rows_above_the_cursor_and_the_next_one_only_the_new_ones(source):
    """Every source that declares batch mode (engines.ReadsIntervals): an integer cursor's rows
    land in the target by key; the next interval reads only what came above the cursor."""
    if not engines.spec(source.kind).capabilities.batch:
        pytest.skip(f"a {source.kind} source declares no batch mode")
    from datetime import datetime, timezone
    from tideline.load.batch import BatchSync
    tables = [{"name": source.table, "mode": "batch", "cursor_column": "id"}]
    cfg = parse_pipeline({**source.raw, "tables": tables}, "batch.yaml")
    run = BatchSync(cfg, source.spark)
    start, end = datetime(2026, 1, 1, tzinfo=timezone.utc), datetime.now(timezone.utc)
    first = run.sync_table(source.table, start, end)
    with source.admin.cursor() as cur:
        cur.execute(f"INSERT INTO {source.table} VALUES (%s, %s, %s)", (5, "five", "5.00"))
    second = run.sync_table(source.table, start, end)
    assert (first.rows, second.rows) == (len(ROWS), 1)
    target = psycopg2.connect(stackctl.pg_url(stackctl.DATABASES["target"]))
    try:
        with target.cursor() as cur:
            cur.execute(f'SELECT id, note, amount::text FROM "{cfg.name}"."{source.table}" ORDER BY id')
            assert cur.fetchall() == ROWS + [(5, "five", "5.00")]
    finally:
        target.close()
