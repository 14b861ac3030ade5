"""MariaDB sources on the real stack: every mapped type through the full load and the stream,
writes during the full load, and sources the product must refuse before any work.

The oracle: the source's rows read in one transaction, each value as its mapping's text
(engines.mariadb.types), put into PostgreSQL by its input functions in a scratch table — then the
target must equal it row for row as `row::text`. Values whose mapping matters most are also
asserted literally, so the oracle cannot share a mistake with the product.
"""
from __future__ import annotations

import io
import os
import random
import signal
import time

import pytest
from psycopg2 import sql

import stackctl
from test_dags import airflow_env  # noqa: F401 — fixture
from helpers import Writer, catching_up, let_retention_delete, rows_as_text, table_digest
from tideline import engines
from tideline.ops import doctor
from tideline.core.config import load_pipeline
from tideline.core.connections import get_connection
from tideline.core.errors import SourceError
from tideline.core.table_shape import copy_into, copy_options, create_table
from tideline.load.full_load import FullLoad
from tideline.ops.status import pipeline_status
from tideline.stream.run import IncrementalRun

DB = stackctl.MARIADB_DATABASE
CONN_ID = "tideline_mariadb_source"


@pytest.fixture
def maria(stack):
    conn = stackctl.mariadb_connect(DB, autocommit=True)
    yield conn
    conn.close()


def _exec(conn, *statements, params=None):
    with conn.cursor() as cur:
        for s in statements:
            cur.execute(s, params)


def _drop(conn, *tables):
    _exec(conn, *[f"DROP TABLE IF EXISTS `{t}`" for t in tables])


def mariadb_pipeline(pipelines, tables, **kw):
    return pipelines.make(tables, source={"kind": "mariadb", "conn_id": CONN_ID, "schema": DB}, **kw)


def oracle(target_db, table: str, scratch: str) -> None:
    """The source table, read now (one statement) and mapped, as scratch.<table> in the target."""
    engine = engines.for_source(get_connection(CONN_ID))
    src = engine.connect()
    buf = io.BytesIO()
    try:
        shape = engine.describe(src, DB, table)
        engine.copy_out(src, shape, "TRUE", buf)
    finally:
        src.close()
    buf.seek(0)
    with target_db.cursor() as cur:
        cur.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(scratch)))
        cur.execute(sql.SQL("DROP TABLE IF EXISTS {}.{}").format(sql.Identifier(scratch), sql.Identifier(table)))
        cur.execute(create_table(shape, scratch, table))
        cur.copy_expert(copy_into(scratch, table, shape.column_names).as_string(target_db), buf)


def column_differences(target_db, schema: str, scratch: str, table: str, limit: int = 20) -> list[tuple]:
    """(column, id, target text, source text) of the values that differ: a readable failure."""
    with target_db.cursor() as cur:
        cur.execute("SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
                    "ORDER BY ordinal_position", (scratch, table))
        out = []
        for (c,) in cur.fetchall():
            cur.execute(sql.SQL("SELECT {c}, a.id, a.{col}::text, b.{col}::text FROM {a} a FULL JOIN {b} b USING (id) "
                                "WHERE a.{col}::text IS DISTINCT FROM b.{col}::text LIMIT 5").format(
                c=sql.Literal(c), col=sql.Identifier(c), a=sql.SQL("{}.{}").format(sql.Identifier(schema),
                                                                                 sql.Identifier(table)),
                b=sql.SQL("{}.{}").format(sql.Identifier(scratch), sql.Identifier(table))))
            out += cur.fetchall()
        return out[:limit]


def converge(cfg, spark, target_db, tables: list[str], scratch: str, timeout: float = 120) -> None:
    """Streams what Kafka holds until the target equals the mapped source (asynchronous capture:
    equality is reached, not assumed)."""
    deadline = time.time() + timeout
    while True:
        IncrementalRun(cfg, spark, "available_now").run()
        for t in tables:
            oracle(target_db, t, scratch)
        if all(table_digest(target_db, scratch, t, "id") == table_digest(target_db, cfg.name, t, "id")
               for t in tables):
            return
        if time.time() > deadline:
            raise AssertionError(f"target did not converge within {timeout}s: " + "; ".join(
                f"{t}: source {table_digest(target_db, scratch, t, 'id')} target "
                f"{table_digest(target_db, cfg.name, t, 'id')}; (column, id, target, source): "
                f"{column_differences(target_db, cfg.name, scratch, t)}; rows only in the target: "
                f"{sorted(set(rows_as_text(target_db, cfg.name, t)) - set(rows_as_text(target_db, scratch, t)))[:3]}"
                f"; only in the source: "
                f"{sorted(set(rows_as_text(target_db, scratch, t)) - set(rows_as_text(target_db, cfg.name, t)))[:3]}"
                for t in tables))
        time.sleep(1)


TYPES_DDL = """CREATE TABLE `{t}` (
 id int PRIMARY KEY,
 c_tiny tinyint, c_tiny_u tinyint unsigned, c_bool boolean, c_small smallint, c_small_u smallint unsigned,
 c_med mediumint, c_med_u mediumint unsigned, c_int int, c_int_u int unsigned, c_big bigint,
 c_big_u bigint unsigned, c_dec decimal(30,10), c_dec0 decimal(65,0), c_float float, c_double double,
 c_bit1 bit(1), c_bit10 bit(10), c_bit64 bit(64),
 c_char char(5), c_varchar varchar(100), c_text text, c_long longtext,
 c_binary binary(4), c_varbinary varbinary(20), c_blob blob,
 c_date date, c_dt datetime, c_dt3 datetime(3), c_dt6 datetime(6), c_ts timestamp(6) NULL, c_time time,
 c_time6 time(6), c_year year, c_enum enum('a','b','c d'), c_set set('x','y','z'), c_json json,
 c_date_nn date NOT NULL DEFAULT '2000-01-01', c_dt_nn datetime NOT NULL DEFAULT '2000-01-01 00:00:00',
 c_date_nd date NOT NULL
) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"""

TYPES_ROWS = [
    "(1, " + ", ".join(["NULL"] * 36) + ", DEFAULT, DEFAULT, DEFAULT)",
    """(2, -128, 0, 0, -32768, 0, -8388608, 0, -2147483648, 0, -9223372036854775808, 0,
     '-99999999999999999999.9999999999', -99999999999999999999999999999999999999999999999999999999999999999,
     -3.40282e38, -1.7976931348623157e308, b'0', b'0000000000', b'0', '', '', '', '', x'00000000', x'', x'',
     '1000-01-01', '1000-01-01 00:00:00', '1000-01-01 00:00:00.000', '1000-01-01 00:00:00.000000',
     '1970-01-01 00:00:01', '-838:59:59', '-838:59:59.000000', 1901, 'a', '', '[]', '0000-00-00',
     '0000-00-00 00:00:00', '0000-00-00')""",
    """(3, 127, 255, 1, 32767, 65535, 8388607, 16777215, 2147483647, 4294967295, 9223372036854775807,
     18446744073709551615, '99999999999999999999.9999999999',
     99999999999999999999999999999999999999999999999999999999999999999, 3.40282e38, 1.7976931348623157e308,
     b'1', b'1000000001', b'1111111111111111111111111111111111111111111111111111111111111111', 'abc  ',
     'x\\'y"z\\\\,\\t\\n😀', 'emoji 😀🎉 ünï', REPEAT('long ', 20000), x'00ff00ff', x'00010203', x'5c78',
     '9999-12-31', '9999-12-31 23:59:59', '9999-12-31 23:59:59.999', '9999-12-31 23:59:59.999999',
     '2038-01-19 03:14:07.999999', '838:59:59', '838:59:59.999999', 2155, 'c d', 'x,y,z',
     '{"b": 1,  "a": [1, 2.50, "x"], "b": 2}', '2024-02-29', '2024-02-29 12:34:56', '0099-05-06')""",
    """(4, 2, 7, 2, 0, 1, 0, 1, 0, 1, 0, 1, '0.0000000001', 0, 0.1, 0.1, b'0', b'0000000001',
     b'1000000000000000000000000000000000000000000000000000000000000000', 'a', 'NULL', '\\\\N',
     'line1\\r\\nline2', x'0a', x'ff', x'000000', '2000-02-29', '1999-12-31 23:59:59',
     '2000-01-01 00:00:00.5', '1969-12-31 23:59:59.999999', '1999-12-31 23:59:59.5', '-00:00:01',
     '-00:00:00.000001', 2000, 'b', 'y', 'null', '1970-01-01', '1969-12-31 23:59:59', '1969-12-31')""",
    """(5, -1, 1, -5, -1, 2, -1, 2, -1, 2, -1, 9223372036854775808, '-0.5000000000', -1, -0.0, -0.0, NULL,
     b'0101010101', NULL, 'zz', 'tab\\there', '', '', x'01', NULL, x'00', '0000-00-00', '0000-00-00 00:00:00',
     NULL, '2020-01-01 10:00:00.000001', '2020-01-01 10:00:00', '25:00:00', '100:00:00.5', 0, '', 'z,x',
     '{"k": "v"}', '0000-00-00', '2020-02-02', '2020-02-02')""",
    """(6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, '3.1415926535', 12345678901234567890, 1.17549e-38, 4.9e-324, b'1',
     b'1111111111', b'101', 'ab c', ' lead', 'trail ', '😀', x'ffffffff', x'0000', x'', '0001-01-01',
     '0001-01-01 00:00:00', '2020-06-01 12:00:00.123', '2020-06-01 12:00:00.123456', NULL, '00:00:00',
     '12:34:56.789', 1970, NULL, NULL, '{"nested": {"x": [true, false, null]}}', '2020-01-01',
     '2020-01-01 00:00:00', '0001-01-01')""",
]

# A few values stated outright (target column -> {id: PostgreSQL text}), independent of the oracle.
EXPECTED = {
    "c_big_u": {3: "18446744073709551615", 5: "9223372036854775808"},
    "c_bool": {4: "2", 5: "-5"},
    "c_bit10": {3: "1000000001", 5: "0101010101"},
    "c_bit64": {6: "0" * 61 + "101"},
    "c_bit1": {3: "1", 2: "0", 5: None},
    "c_time": {2: "-838:59:59", 5: "25:00:00", 4: "-00:00:01"},
    "c_time6": {5: "100:00:00.5", 4: "-00:00:00.000001"},
    "c_date": {5: None, 6: "0001-01-01", 3: "9999-12-31"},
    "c_date_nn": {2: "2000-01-01", 5: "2000-01-01"},   # zero date, NOT NULL: the column's default
    "c_dt_nn": {2: "2000-01-01 00:00:00"},
    "c_date_nd": {1: "1970-01-01", 2: "1970-01-01", 3: "0099-05-06", 6: "0001-01-01"},   # no default: epoch
    "c_year": {5: "0", 6: "1970"},
    "c_ts": {3: "2038-01-19 03:14:07.999999+00"},
    "c_dt6": {4: "1969-12-31 23:59:59.999999"},
    "c_binary": {4: "\\x0a000000"},
    "c_blob": {6: "\\x", 4: "\\x000000"},
    "c_text": {3: "emoji 😀🎉 ünï"},
    "c_varchar": {3: "x'y\"z\\,\t\n😀"},
    "c_json": {3: '{"b": 1,  "a": [1, 2.50, "x"], "b": 2}'},
    "c_set": {3: "x,y,z"},
    "c_float": {4: "0.1", 2: "-3.40282e+38"},
    "c_double": {2: "-1.7976931348623157e+308", 6: "5e-324"},
}


def _assert_expected(target_db, schema: str, table: str) -> None:
    with target_db.cursor() as cur:
        for col, by_id in EXPECTED.items():
            cur.execute(sql.SQL("SELECT id, {}::text FROM {}.{}").format(
                sql.Identifier(col), sql.Identifier(schema), sql.Identifier(table)))
            got = dict(cur.fetchall())
            for i, want in by_id.items():
                assert got[i] == want, (col, i, got[i], want)


# Text keys that order differently by collation, by case, by bytes (verify cuts ranges on them).
TEXT_KEYS = ["a", "B", "c", "é", "😀", "Z", " x", "a\tb", "", "ab", "Ab-2", "~", "ß", "中文"]


def verify_table(cfg, table: str, **settings):
    """One verify of a table (no stream to wait for), narrowing down to single rows when asked."""
    from tideline.verify.compare import VerifySettings, verify
    [report] = verify(cfg, get_connection(CONN_ID), get_connection("tideline_target"), [table], None,
                      VerifySettings(**settings))
    return report


def tamper_and_repair(target_db, cfg, table: str, scratch: str, change: str, deleted, extra_row: str) -> None:
    """Changes one target row (`change`: SET … WHERE …), deletes one, adds one: verify must name
    exactly those keys, and repair must fix exactly them (target == source again)."""
    from tideline.verify.repair import repair_verified
    first = verify_table(cfg, table, leaf_rows=1, fanout=3)
    assert first.equal, first.summary()
    name = sql.Identifier(cfg.name), sql.Identifier(table)
    with target_db.cursor() as cur:
        cur.execute(sql.SQL("UPDATE {}.{} SET " + change).format(*name))
        assert cur.rowcount == 1
        cur.execute(sql.SQL("DELETE FROM {}.{} WHERE id = %s").format(*name), (deleted,))
        assert cur.rowcount == 1
        cur.execute(sql.SQL("INSERT INTO {}.{} " + extra_row).format(*name))
    found = verify_table(cfg, table, leaf_rows=1, fanout=3)
    assert found.counts == {"missing": 1, "extra": 1, "different": 1}, found.summary()
    result = repair_verified(cfg, get_connection(CONN_ID), get_connection("tideline_target"), table)
    assert (result.upserted, result.deleted) == (2, 1), result
    again = verify_table(cfg, table)
    assert again.equal, again.summary()
    oracle(target_db, table, scratch)
    assert table_digest(target_db, scratch, table, "id") == table_digest(target_db, cfg.name, table, "id")


def test_every_mapped_type_through_full_load_and_stream(stack, spark, maria, target_db, pipelines, unique_name):
    t, tk, scratch = f"{unique_name}_types", f"{unique_name}_tkeys", f"{unique_name}_oracle"
    _exec(maria, "SET SESSION sql_mode = ''", "SET time_zone = '+00:00'", TYPES_DDL.format(t=t))
    _exec(maria, f"INSERT INTO `{t}` VALUES " + ", ".join(TYPES_ROWS))
    _exec(maria, f"CREATE TABLE `{tk}` (id varchar(40) PRIMARY KEY, n int, d double) CHARACTER SET utf8mb4 "
                 f"COLLATE utf8mb4_general_ci")
    with maria.cursor() as cur:
        cur.executemany(f"INSERT INTO `{tk}` VALUES (%s, %s, %s)",
                        [(k, i, 1 / (i + 1)) for i, k in enumerate(TEXT_KEYS)])
    try:
        cfg = mariadb_pipeline(pipelines, [{"name": t}, {"name": tk}], capture=True)
        [loaded, _] = FullLoad(cfg, spark).run([t, tk])
        assert loaded.rows == len(TYPES_ROWS)
        oracle(target_db, t, scratch)
        by_load = rows_as_text(target_db, cfg.name, t)
        assert not column_differences(target_db, cfg.name, scratch, t)
        assert by_load == rows_as_text(target_db, scratch, t)
        _assert_expected(target_db, cfg.name, t)
        # every value again, through the stream: rows deleted and inserted anew, then updated
        _exec(maria, "SET SESSION sql_mode = ''", "SET time_zone = '+00:00'", f"DELETE FROM `{t}`")
        converge(cfg, spark, target_db, [t], scratch)
        assert rows_as_text(target_db, cfg.name, t) == []
        _exec(maria, "SET SESSION sql_mode = ''", "SET time_zone = '+00:00'",
              f"INSERT INTO `{t}` VALUES " + ", ".join(TYPES_ROWS))
        converge(cfg, spark, target_db, [t], scratch)
        assert rows_as_text(target_db, cfg.name, t) == by_load, "the stream must carry what the full load carries"
        _assert_expected(target_db, cfg.name, t)
        _exec(maria, "SET SESSION sql_mode = ''", f"UPDATE `{t}` SET id = id + 100, c_text = CONCAT(c_text, '✓') "
                                                  f"WHERE id IN (3, 5)")
        converge(cfg, spark, target_db, [t], scratch)
        with target_db.cursor() as cur:
            cur.execute(sql.SQL("SELECT state.source_position FROM tideline.table_state state WHERE pipeline = %s"),
                        (cfg.name,))
            assert cur.fetchone()[0].startswith("0-1-"), "the GTID set at the full load is in the state"
        # verify fingerprints every type alike on both sides; it finds tampered rows, repair fixes them
        tamper_and_repair(target_db, cfg, t, scratch, "c_double = 0.30000000000000004 WHERE id = 4", 6,
                          "(id, c_date_nn, c_dt_nn, c_date_nd) VALUES (999, '2000-01-01', '2000-01-01', '2000-01-01')")
        tamper_and_repair(target_db, cfg, tk, scratch, "d = d * 2 WHERE id = 'é'", "😀", "(id, n) VALUES ('zz', 1)")
    finally:
        _drop(maria, t, tk)
        with target_db.cursor() as cur:
            cur.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(scratch)))


def test_writes_during_the_full_load_converge_exactly(stack, spark, maria, target_db, pipelines, unique_name):
    t, scratch = f"{unique_name}_load", f"{unique_name}_oracle"
    _exec(maria, f"CREATE TABLE `{t}` (id bigint PRIMARY KEY, qty int NOT NULL, note varchar(400), "
                 f"price decimal(12,2) DEFAULT 1.50) CHARACTER SET utf8mb4",
          f"INSERT INTO `{t}` (id, qty, note) SELECT seq, seq % 100, CONCAT('row ', seq) FROM seq_1_to_60000")
    writer = Writer(f"`{t}`", 60_001, seed=7, pause=0.001, connect=lambda: stackctl.mariadb_connect(DB))
    try:
        cfg = mariadb_pipeline(pipelines, [{"name": t}], partitions=3, parallelism=4, capture=True)
        writer.start()
        time.sleep(1)
        before = writer.count
        [loaded] = FullLoad(cfg, spark).run([t])
        assert loaded.partitions == 4
        assert writer.count - before > 50, "the writer must keep writing through the partitions' snapshots"
        IncrementalRun(cfg, spark, "available_now").run()
        writer.stop()
        assert not writer.errors, writer.errors
        converge(cfg, spark, target_db, [t], scratch)
    finally:
        writer.stop_event.set()
        _drop(maria, t)
        with target_db.cursor() as cur:
            cur.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(scratch)))


def purge_binlogs_the_connector_needs(maria, client, connector: str) -> None:
    """Flushes to a new binlog and purges until the file the stopped connector would resume in
    is gone. MariaDB keeps a file that a replica connection still reads (other pipelines' connectors
    read the newest file, which is not purged), or that InnoDB's crash recovery still needs (until
    its binlog checkpoint): purge until it lets go."""
    import pymysql
    stopped_in = client.offsets(connector)["offsets"][0]["offset"]["file"]
    with maria.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("SHOW MASTER STATUS")
        current = cur.fetchone()[0]
        deadline = time.time() + 90
        while True:
            try:
                cur.execute(f"PURGE BINARY LOGS TO '{current}'")
            except pymysql.MySQLError as exc:   # a file still in use: it is kept, try again
                print(f"purge: {exc}")
            cur.execute("SHOW BINARY LOGS")
            if stopped_in not in [r[0] for r in cur.fetchall()]:
                return
            assert time.time() < deadline, f"MariaDB did not purge {stopped_in} within 90 s"
            time.sleep(0.5)


def _binlog_expiry_s(maria) -> int:
    with maria.cursor() as cur:
        cur.execute("SELECT @@binlog_expire_logs_seconds")
        return int(cur.fetchone()[0])


def test_sync_dag_reloads_by_itself_after_retention_loss_and_purged_binlogs(airflow_env, stack, maria, target_db,
                                                                            pipelines, unique_name):
    """The seed cases on a MariaDB source, through the sync DAG alone: (1) the stream is stopped,
    the source changes (its schema too), Kafka retention deletes offsets it still needs → the
    sensor notices and re-snapshots; (2) the connector is stopped and the binlogs it needs are
    purged → the sync DAG's prepare marks the table, recreates capture, and the run reloads it."""
    from test_dags import run_dag
    from tideline import state
    from tideline.capture.connector import ConnectClient
    from tideline.core.debezium import connector_name
    t, scratch = f"{unique_name}_tide", f"{unique_name}_oracle"
    _exec(maria, f"CREATE TABLE `{t}` (id int PRIMARY KEY, qty int NOT NULL, note varchar(100)) CHARACTER SET utf8mb4",
          f"INSERT INTO `{t}` SELECT seq, seq % 10, CONCAT('n', seq) FROM seq_1_to_2000")

    def converged() -> bool:
        oracle(target_db, t, scratch)
        return table_digest(target_db, scratch, t, "id") == table_digest(target_db, cfg.name, t, "id")

    def run_until_converged(timeout: float = 120) -> None:
        deadline = time.time() + timeout
        while not converged():
            assert time.time() < deadline, "target did not converge"
            states = run_dag(dag_id, stream_mode="available_now")
            assert states["__run__"] == "success", states

    def full_loads() -> int:
        with target_db.cursor() as cur:
            cur.execute("SELECT count(*) FROM tideline.runs WHERE pipeline = %s AND kind = 'full_load' "
                        "AND outcome = 'succeeded'", (cfg.name,))
            return cur.fetchone()[0]

    try:
        cfg = pipelines.adopt(mariadb_pipeline(pipelines, [{"name": t}], create_topics=False, partitions=1))
        dag_id = f"sync_{cfg.name}"
        states = run_dag(dag_id, stream_mode="available_now")
        assert states["__run__"] == "success" and states["full_load"] == "success", states
        run_until_converged()
        # (1) retention deletes what the stopped stream still needs
        resume = state.get(target_db, cfg.name, t).resume_offsets
        _exec(maria, f"ALTER TABLE `{t}` ADD COLUMN added_later varchar(20)",
              f"UPDATE `{t}` SET added_later = CONCAT('x', id), qty = qty + 1 WHERE id <= 500",
              f"INSERT INTO `{t}` (id, qty, note, added_later) SELECT seq, 1, 'new', 'y' FROM seq_3001_to_3500")
        let_retention_delete(stack.kafka_bootstrap(), cfg.topic(t), resume[0],
                             lambda: _exec(maria, f"UPDATE `{t}` SET qty = qty + 1 WHERE id = 1"))
        states = run_dag(dag_id, stream_mode="available_now")
        assert states["__run__"] == "success", states
        assert states["full_load"] == "skipped" and states["resnapshot"] == "success", states
        assert full_loads() == 2
        _exec(maria, f"UPDATE `{t}` SET added_later = 'after' WHERE id = 2")
        run_until_converged()
        # (2) binlogs purged while the connector was stopped
        client, name = ConnectClient(get_connection("tideline_connect").http_base_url()), connector_name(cfg)
        client.stop(name)
        deadline = time.time() + 60
        while client.status(name)["connector"]["state"] != "STOPPED":
            assert time.time() < deadline, "the connector did not stop"
            time.sleep(0.5)
        _exec(maria, f"DELETE FROM `{t}` WHERE id BETWEEN 100 AND 199", f"UPDATE `{t}` SET note = 'missed'")
        # the binlog headroom of the stopped connector's position: shown, then its loss alerted
        [row] = pipeline_status(cfg, exact_counts=False)
        assert row.source_hold.startswith(f"binlog position of connector {name}: retains "), row.source_hold
        assert "expiry purges its position in at most" in row.source_hold, row.source_hold
        assert row.source_retained_bytes > 0 and 0 < row.source_expires_in_s <= _binlog_expiry_s(maria)
        purge_binlogs_the_connector_needs(maria, client, name)
        [row] = pipeline_status(cfg, exact_counts=False)
        assert any(f"binlog position of connector {name} is gone: the source purged the binlog" in m
                   and f"trigger sync_{cfg.name}" in m for m in row.source_hold_alerts), row.source_hold_alerts
        states = run_dag(dag_id, stream_mode="available_now")
        assert states["__run__"] == "success" and states["full_load"] == "success", states
        assert full_loads() == 3
        with target_db.cursor() as cur:
            cur.execute("SELECT detail FROM tideline.runs WHERE pipeline = %s AND kind = 'full_load' "
                        "ORDER BY run_id DESC LIMIT 1", (cfg.name,))
            detail = cur.fetchone()[0]
            assert detail.startswith("re-snapshot because: ") and "was purged from the MariaDB source" in detail, detail
        _exec(maria, f"UPDATE `{t}` SET qty = 0 WHERE id > 3400")
        run_until_converged()
        assert state.get(target_db, cfg.name, t).phase == "streaming"
    finally:
        _drop(maria, t)
        with target_db.cursor() as cur:
            cur.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(scratch)))


def test_batch_mode_reads_intervals_by_the_cursor_and_reruns_change_nothing(stack, spark, maria, target_db,
                                                                            pipelines, unique_name):
    from datetime import datetime, timedelta, timezone

    from tideline import state
    from tideline.load.batch import BatchSync
    t, scratch = f"{unique_name}_batch", f"{unique_name}_oracle"
    day0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
    _exec(maria, f"CREATE TABLE `{t}` (id varchar(20) PRIMARY KEY, updated_at datetime(6) NOT NULL, v text, "
                 f"amount decimal(10,2), at timestamp(3) NULL) CHARACTER SET utf8mb4",
          f"INSERT INTO `{t}` SELECT CONCAT('k', seq), '2026-11-01' + INTERVAL seq * 30 MINUTE, "
          f"CONCAT('😀 ', seq), seq / 4, '2026-11-01 00:00:00.125' FROM seq_1_to_96")
    try:
        cfg = mariadb_pipeline(pipelines, [{"name": t, "mode": "batch", "cursor_column": "updated_at",
                                            "safety_lag_s": 5}], create_topics=False)
        sync = BatchSync(cfg, spark)
        [r1] = sync.run(day0, day0 + timedelta(days=1))
        assert r1.rows == 47   # 00:30 … 23:30 of the first day
        [r2] = sync.run(day0 + timedelta(days=1), day0 + timedelta(days=2))
        assert r2.rows == 48   # 2026-11-02 00:00 … 23:30
        before = table_digest(target_db, cfg.name, t, "id")
        sync.run(day0, day0 + timedelta(days=1))     # re-running an interval changes nothing
        assert table_digest(target_db, cfg.name, t, "id") == before
        # an update moves a row into a later interval; the run of that interval carries it
        _exec(maria, f"UPDATE `{t}` SET v = 'changed', updated_at = '2026-11-03 01:00:00' WHERE id = 'k5'")
        [r3] = sync.run(day0 + timedelta(days=2), day0 + timedelta(days=3))
        assert r3.rows == 2   # k5 and k96 (2026-11-03 00:00)
        oracle(target_db, t, scratch)
        assert rows_as_text(target_db, cfg.name, t) == rows_as_text(target_db, scratch, t)
        st = state.get(target_db, cfg.name, t)
        assert st.phase == "batch" and st.raw["cursor_value"] == "2026-11-04 00:00:00.000000"
    finally:
        _drop(maria, t)
        with target_db.cursor() as cur:
            cur.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(scratch)))


def test_doubles_print_alike_in_both_databases(stack, maria, target_db):
    """Verify hashes a float column by MariaDB's text of it; PostgreSQL's tideline.mysql_double_text
    must print every double the same (random bit patterns, powers of ten, the extremes)."""
    import random
    import struct
    rng = random.Random(7)
    values = [struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0] for _ in range(20_000)]
    values += [float(f"{m}e{e}") for e in range(-320, 308) for m in ("1", "1.5", "123456789")]
    values += [1.7976931348623157e308, 2.2250738585072014e-308, 5e-324, 0.1 + 0.2, 2.0 ** 53 + 2, 1e15, 1e16]
    values = [v for v in values if v == v and abs(v) != float("inf")]
    values += [-v for v in values[-200:]]
    with maria.cursor() as cur:
        cur.execute("CREATE TEMPORARY TABLE dbl (i int PRIMARY KEY, v double, f float)")
        cur.executemany("INSERT INTO dbl VALUES (%s, %s, %s)",
                        [(i, v, v if abs(v) < 3.4e38 else None) for i, v in enumerate(values)])
        cur.execute("SELECT i, CAST(v AS CHAR), CAST(CAST(f AS DOUBLE) AS CHAR), CAST(f AS DOUBLE) FROM dbl")
        maria_text = {i: (v, f, fv) for i, v, f, fv in cur.fetchall()}
    with target_db.cursor() as cur:
        cur.execute("SELECT i, tideline.mysql_double_text(v), tideline.mysql_double_text(f) FROM "
                    "unnest(%s::float8[], %s::float8[]) WITH ORDINALITY AS x(v, f, i)",
                    ([repr(v) for v in values], [repr(maria_text[i][2]) if maria_text[i][2] is not None else None
                                                  for i in range(len(values))]))
        differ = [(values[i - 1], maria_text[i - 1][:2], (v, f)) for i, v, f in cur.fetchall()
                  if (v, f) != maria_text[i - 1][:2]]
    assert not differ, differ[:10]


def test_stream_killed_three_times_and_a_zombie_copy_lose_and_double_nothing(stack, spark, maria, target_db,
                                                                             pipelines, unique_name):
    """kill -9 of the incremental job at random moments under writes, three times, with columns
    added at the source in between (existing rows hold the literal default: MariaDB writes no
    events for them); then a second copy started beside a running one: the older is fenced out.
    Batches stay contiguous from the full load's offsets and the target ends equal to the source."""
    from test_incremental import assert_batches_contiguous, batches, spark_submit
    from tideline.core.errors import EXIT_FENCED
    t, scratch = f"{unique_name}_crash", f"{unique_name}_oracle"
    _exec(maria, f"CREATE TABLE `{t}` (id bigint PRIMARY KEY, qty int NOT NULL, note varchar(400), "
                 f"price decimal(12,2) DEFAULT 1.50) CHARACTER SET utf8mb4",
          f"INSERT INTO `{t}` (id, qty, note) SELECT seq, seq % 100, CONCAT('row ', seq) FROM seq_1_to_10000")
    writer = Writer(f"`{t}`", 10_001, seed=5, pause=0.002, connect=lambda: stackctl.mariadb_connect(DB))
    rng = random.Random(42)
    procs = []

    def committed_once_more(proc, timeout=120):
        n, deadline = len(batches(target_db, cfg.name)), time.time() + timeout
        while len(batches(target_db, cfg.name)) == n:
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            assert time.time() < deadline, "the stream committed nothing"
            time.sleep(0.2)

    try:
        cfg = mariadb_pipeline(pipelines, [{"name": t}], capture=True,
                               stream={"max_offsets_per_trigger": 2000, "trigger_interval_s": 0.5})
        [loaded] = FullLoad(cfg, spark).run([t])
        writer.start()
        env = {"TIDELINE_PIPELINES": str(pipelines.dir)}
        for kill in range(3):
            if kill == 1:
                _exec(maria, f"ALTER TABLE `{t}` ADD COLUMN added decimal(8,2) DEFAULT 1.25, ADD COLUMN seen datetime(6)",
                      f"UPDATE `{t}` SET seen = '2026-01-02 03:04:05.678901' WHERE id <= 50")
            procs.append(spark_submit("incremental.py", cfg, env_extra=env))
            committed_once_more(procs[-1])
            time.sleep(rng.uniform(0.0, 2.0))
            os.killpg(procs[-1].pid, signal.SIGKILL)
            procs[-1].wait(30)
        first = spark_submit("incremental.py", cfg, env_extra=env)
        procs.append(first)
        committed_once_more(first)
        second = spark_submit("incremental.py", cfg, env_extra=env)
        procs.append(second)
        out, _ = first.communicate(timeout=180)
        assert first.returncode == EXIT_FENCED, out[-3000:]
        committed_once_more(second)
        writer.stop()
        assert not writer.errors, writer.errors
        os.killpg(second.pid, signal.SIGTERM)
        second.wait(60)
        converge(catching_up(cfg), spark, target_db, [t], scratch)
        with target_db.cursor() as cur:
            cur.execute(sql.SQL("SELECT count(*), count(*) FILTER (WHERE added = 1.25), count(DISTINCT seen::text) "
                                "FILTER (WHERE id <= 50) FROM {}.{}").format(sql.Identifier(cfg.name), sql.Identifier(t)))
            rows, with_default, seen = cur.fetchone()
            assert rows == with_default and seen == 1
        assert len(batches(target_db, cfg.name)) >= 5
        assert_batches_contiguous(target_db, cfg.name, {cfg.topic(t): loaded.offsets})
    finally:
        writer.stop_event.set()
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        _drop(maria, t)
        with target_db.cursor() as cur:
            cur.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(scratch)))


def test_sources_that_cannot_be_captured_are_refused_before_any_work(stack, spark, maria, pipelines, unique_name,
                                                                     monkeypatch):
    geo, nokey = f"{unique_name}_geo", f"{unique_name}_nokey"
    _exec(maria, f"CREATE TABLE `{geo}` (id int PRIMARY KEY, place point, note text)",
          f"CREATE TABLE `{nokey}` (a int, b text)")
    engine = engines.for_source(get_connection(CONN_ID))
    conn = engine.connect()
    try:
        with pytest.raises(SourceError, match=r"place \(point\): no exact PostgreSQL type.*exclude_columns"):
            engine.describe(conn, DB, geo)
        cfg = mariadb_pipeline(pipelines, [{"name": geo, "exclude_columns": ["place"]}], create_topics=False)
        assert engine.describe(conn, DB, geo, cfg.table(geo)).column_names == ["id", "note"]
        # a statement-based binlog cannot be captured: refused naming the setting and the fix
        _exec(maria, "SET GLOBAL binlog_format = 'STATEMENT'")
        try:
            check = engines.for_source(get_connection(CONN_ID)).connect()
            with pytest.raises(SourceError, match=r"binlog_format is STATEMENT, capture needs ROW"):
                engine.check_capture(check, "source of pipeline x")
            check.close()
        finally:
            _exec(maria, "SET GLOBAL binlog_format = 'ROW'")
        # a table without a key cannot stream; missing replication privileges fail the doctor
        cfg = mariadb_pipeline(pipelines, [{"name": nokey}], create_topics=False)
        checks = {c.name: c for c in doctor.source_checks(cfg, get_connection(CONN_ID), 0)}
        assert checks[f"table {nokey}"].status == "fail" and "has no primary key" in checks[f"table {nokey}"].detail
        assert checks["binlog"].status == "pass"
        # the stack's capture user has exactly what capture needs (it writes only the heartbeat table)
        assert checks["privileges"].status == "pass", checks["privileges"]
        _exec(maria, f"CREATE USER IF NOT EXISTS 'plain_{unique_name}'@'127.0.0.1' IDENTIFIED BY 'x'",
              f"GRANT SELECT ON `{DB}`.* TO 'plain_{unique_name}'@'127.0.0.1'")
        monkeypatch.setenv(f"AIRFLOW_CONN_PLAIN_{unique_name.upper()}",
                           stackctl.mariadb_url(user=f"plain_{unique_name}", password="x"))
        checks = {c.name: c for c in doctor.source_checks(cfg, get_connection(f"plain_{unique_name}"), 0)}
        assert checks["privileges"].status == "fail" and "REPLICATION SLAVE" in checks["privileges"].fix
    finally:
        conn.close()
        _exec(maria, f"DROP USER IF EXISTS 'plain_{unique_name}'@'127.0.0.1'")
        _drop(maria, geo, nokey)


def test_config_from_a_mariadb_connection(stack, pipelines, tmp_path):
    cfg = load_pipeline(stackctl.ROOT / "pipelines" / "shop_mariadb.yaml")
    engine = engines.for_source(get_connection(cfg.source.conn_id))
    assert engine.kind == "mariadb"
    config = engine.connector_config(cfg, get_connection("tideline_kafka").kafka_access)
    assert config["connector.class"] == "io.debezium.connector.mariadb.MariaDbConnector"
    assert config["snapshot.mode"] == "no_data" and config["database.include.list"] == DB


def test_names_as_the_database_spells_them_and_partitioned_tables_are_carried_views_refused(
        stack, spark, maria, target_db, pipelines, unique_name):
    from tideline.capture import refusals
    t, view, scratch = f"{unique_name} Order Lines Ä", f"{unique_name}_v", f"{unique_name}_oracle"
    _exec(maria, f"CREATE TABLE `{t}` (id int PRIMARY KEY, `Line Note` text, `Select` int, `Ümlaut ✓` varchar(20)) "
                 f"CHARACTER SET utf8mb4 PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (100), "
                 f"PARTITION p1 VALUES LESS THAN (1000), PARTITION pmax VALUES LESS THAN MAXVALUE)",
          f"INSERT INTO `{t}` SELECT seq, CONCAT('n', seq, ' 😀'), seq, 'ü' FROM seq_1_to_300",
          f"CREATE VIEW `{view}` AS SELECT id FROM `{t}`")
    try:
        cfg = mariadb_pipeline(pipelines, [{"name": t}, {"name": view}], create_topics=False)
        refused = refusals.find(cfg, get_connection(CONN_ID))
        assert list(refused) == [view] and "is a view" in refused[view].reason
        cfg = mariadb_pipeline(pipelines, [{"name": t}], capture=True)
        FullLoad(cfg, spark).run([t])
        _exec(maria, f"UPDATE `{t}` SET id = id + 1000, `Select` = -`Select` WHERE id % 10 = 0",   # across partitions
              f"DELETE FROM `{t}` WHERE id % 7 = 0", f"INSERT INTO `{t}` VALUES (5000, NULL, 1, 'ß')")
        converge(cfg, spark, target_db, [t], scratch)
    finally:
        _exec(maria, f"DROP VIEW IF EXISTS `{view}`")
        _drop(maria, t)
        with target_db.cursor() as cur:
            cur.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(scratch)))


def test_keys_of_strings_bytes_decimals_and_date_times_are_read_in_slices_of_their_own_order(stack, maria,
                                                                                             monkeypatch):
    """A partition whose one-column key is not an integer is read in slices of its next keys in the
    key's own order (keyset): strings under a case- and accent-insensitive collation (keys whose
    bytes sort otherwise side by side), bytes from 0x00 to 0xff, negative and positive decimals,
    date-times to the microsecond — every row once, as the row-by-row read gives it, with slices
    cut short by wide rows and read again with fewer keys."""
    from tideline.engines.mariadb import pipe as mariadb_pipe
    from tideline.pipes.copy_pipe import SESSION_OPTIONS
    import psycopg2
    rng = random.Random(5)
    words = ["a", "Ä", "b", "Zoë", "zz", "é", "E", "😀", "ß", "ss", "Ω", "o", "Ö", "-", "_", " x", "x "]
    tables = {
        "ks_str": ("varchar(40) COLLATE utf8mb4_unicode_ci",
                   lambda i: "".join(rng.choice(words) for _ in range(rng.randint(1, 4))) + str(i % 97)),
        "ks_bin": ("varbinary(16)", lambda i: bytes(rng.randrange(256) for _ in range(rng.randint(0, 6)))),
        "ks_dec": ("decimal(20,6)", lambda i: f"{rng.randint(-10**9, 10**9)}.{rng.randint(0, 999999):06d}"),
        "ks_dt": ("datetime(6)", lambda i: f"{rng.randint(1000, 9999)}-{rng.randint(1, 12):02d}-"
                                           f"{rng.randint(1, 28):02d} 12:34:56.{rng.randint(0, 999999):06d}"),
    }
    engine = engines.for_source(get_connection(CONN_ID))
    target = psycopg2.connect(get_connection("tideline_target").postgres_dsn(), options=SESSION_OPTIONS)
    monkeypatch.setattr(mariadb_pipe, "SLICE_BYTES", 4_000)
    monkeypatch.setattr(mariadb_pipe, "SLICE_VALUE_MAX", 30_000)
    try:
        for t, (key_type, make_key) in tables.items():
            _drop(maria, t)
            _exec(maria, f"CREATE TABLE `{t}` (k {key_type} PRIMARY KEY, note mediumtext) CHARACTER SET utf8mb4")
            with maria.cursor() as cur:
                cur.executemany(f"INSERT IGNORE INTO `{t}` VALUES (%s, %s)",   # keys equal under the collation: once
                                [(make_key(i), "w\t\n\"ü" * (1500 if i % 9 == 0 else rng.randint(0, 3)))
                                 for i in range(1500)])
                cur.execute(f"SELECT count(*) FROM `{t}`")
                count = cur.fetchone()[0]
            src = engine.connect()
            shape = engine.describe(src, DB, t)
            snap = engine.open_snapshot(src, shape, 3)
            pipe = engine.pipe(target, shape, None, snap.predicates, snap.session_init)
            assert pipe.source.slicing == "keyset", (t, shape.columns[0].type)
            rows = engine.pipe(target, shape, "TRUE", snap.predicates, snap.session_init)   # (a where: row by row)
            assert rows.source.slice_key is None
            landed = {}
            for side, reads, name in ((pipe.source, pipe.reads, "sliced"), (rows.source, rows.reads, "streamed")):
                with target.cursor() as cur:
                    cur.execute(f"CREATE TEMP TABLE {t}_{name} "
                                f"({', '.join(f'{c.name} {c.type}' for c in shape.columns)})")
                    copy = f"COPY {t}_{name} FROM STDIN{copy_options(pipe.copy_format)}"
                    moved = [side.pipe_into(read, cur, copy) for read in reads]
                    assert sum(m.read for m in moved) == sum(m.stored for m in moved) == count, (t, name)
                    cur.execute(f"SELECT t::text FROM {t}_{name} t")
                    landed[name] = sorted(r[0] for r in cur.fetchall())
            assert landed["sliced"] == landed["streamed"] and len(set(landed["sliced"])) == count, t
            target.rollback()
            # a row longer than a slice's value may be: the read stops, naming that row's key
            monkeypatch.setattr(mariadb_pipe, "SLICE_VALUE_MAX", 8_000)
            too_long = pytest.raises(mariadb_pipe.SliceTooLarge, match=r"the row of key .+ is longer")
            with target.cursor() as cur, too_long:
                cur.execute(f"CREATE TEMP TABLE {t}_long ({', '.join(f'{c.name} {c.type}' for c in shape.columns)})")
                for read in pipe.reads:
                    pipe.source.pipe_into(read, cur, f"COPY {t}_long FROM STDIN{copy_options(pipe.copy_format)}")
            target.rollback()
            monkeypatch.setattr(mariadb_pipe, "SLICE_VALUE_MAX", 30_000)
            src.close()
    finally:
        target.close()
        for t in tables:
            _drop(maria, t)


def test_the_pipe_reads_every_row_once_in_key_slices_whatever_their_width_and_sql_mode(stack, maria, target_db,
                                                                                     monkeypatch):
    """The MariaDB side of a load's pipe, alone (no Spark): a partition of an integer key read in
    key slices, sized from what each held — sparse keys, the largest unsigned
    bigint, rows of 3 bytes and of 20 kB side by side, so slices get cut short and are read again
    narrower — lands row for row as the load's read prints it, under a server whose sql_mode has
    NO_BACKSLASH_ESCAPES (backslashes, tabs, newlines, quotes, U+0001 — the lines' quote — and `\\N`
    as text, bytes, NULL); a row longer
    than a slice may be stops the read with its key; the source's session killed mid-read fails the
    partition with MariaDB's error."""
    from tideline.engines.mariadb import pipe as mariadb_pipe
    from tideline.pipes.copy_pipe import SESSION_OPTIONS
    import psycopg2
    t = "pipe_slices"
    keys = [0, 1, 2, 3, 1000, 10**9, 10**12, 10**12 + 1, 2**63 - 1, 2**63, 2**64 - 1]
    keys += list(range(5000, 5600))
    rng = random.Random(11)
    rows = []
    for k in keys:
        wide = rng.random() < 0.2
        note = None if k % 7 == 0 else ("a\\b\tc\nd\re \\N \"ü😀 " * (1000 if wide else 1))[:20000 if wide else 40] + "\x01"
        rows.append((k, note, os.urandom(3) if k % 5 else b"\\x\t\n", "\\N" if k % 11 == 0 else ""))
    _drop(maria, t)
    _exec(maria, f"CREATE TABLE `{t}` (id bigint unsigned PRIMARY KEY, note mediumtext, b varbinary(10), s varchar(5)) "
                 f"CHARACTER SET utf8mb4")
    with maria.cursor() as cur:
        cur.executemany(f"INSERT INTO `{t}` VALUES (%s, %s, %s, %s)", rows)
        cur.execute(f"SELECT id, note, b, s FROM `{t}` ORDER BY id")
        assert cur.fetchall() == tuple(sorted(rows)), "stored as written"
        cur.execute("SELECT @@GLOBAL.sql_mode")
        mode = cur.fetchone()[0]
    engine = engines.for_source(get_connection(CONN_ID))
    target = psycopg2.connect(get_connection("tideline_target").postgres_dsn(), options=SESSION_OPTIONS)
    try:
        _exec(maria, "SET GLOBAL sql_mode = CONCAT(@@GLOBAL.sql_mode, ',NO_BACKSLASH_ESCAPES')")
        src = engine.connect()
        shape = engine.describe(src, DB, t)
        snap = engine.open_snapshot(src, shape, 3)
        pipe = engine.pipe(target, shape, None, snap.predicates, snap.session_init)
        assert pipe.source.slice_key and len(pipe.reads) == 3
        monkeypatch.setattr(mariadb_pipe, "SLICE_BYTES", 4_000)
        monkeypatch.setattr(mariadb_pipe, "SLICE_VALUE_MAX", 30_000)
        with target.cursor() as cur:
            cur.execute(f"CREATE TEMP TABLE {t} ({', '.join(f'{c.name} {c.type}' for c in shape.columns)})")
            copy = f"COPY {t} FROM STDIN{copy_options(pipe.copy_format)}"
            moved = [pipe.source.pipe_into(read, cur, copy) for read in pipe.reads]
            assert sum(m.read for m in moved) == sum(m.stored for m in moved) == len(rows)
            cur.execute(f"SELECT id::text, note, b, s FROM {t}")
            got = sorted((int(i), n, bytes(b) if b is not None else None, s) for i, n, b, s in cur.fetchall())
        assert got == sorted(rows)
        # the source's session killed mid-read, sliced or streamed: its own error is raised, never a
        # shorter read that looks complete, and nothing of the partition stays in the target
        import pymysql
        streamed = mariadb_pipe.MariaDbPipeSource(pipe.source.connect, pipe.source.tls, pipe.source.session_init,
                                                  None)
        monkeypatch.setattr(mariadb_pipe, "FETCH_ROWS", 50)
        for side, method in ((pipe.source, "_slices"), (streamed, "_rows")):
            real = getattr(mariadb_pipe.MariaDbPipeSource, method)

            def killed_after_the_first_chunk(self, conn, read_sql, real=real):
                chunks = real(self, conn, read_sql)
                yield next(chunks)
                _exec(maria, f"KILL CONNECTION {conn.thread_id()}")
                yield from chunks
            monkeypatch.setattr(mariadb_pipe.MariaDbPipeSource, method, killed_after_the_first_chunk)
            with target.cursor() as cur:
                cur.execute("SAVEPOINT before_the_kill")
                try:
                    done = side.pipe_into(pipe.reads[0], cur, copy)
                except pymysql.err.OperationalError:
                    pass
                else:
                    # a slice after the kill is a new query on a dead session: it must fail. A
                    # streamed read may have had all its rows in the socket before the kill took
                    # effect: then it is complete (its end came from the server) — never shorter.
                    assert method == "_rows", "a sliced read went on past a killed session"
                    assert done.read == done.stored == moved[0].read, "a shorter read that looks complete"
                cur.execute("ROLLBACK TO SAVEPOINT before_the_kill")
            monkeypatch.setattr(mariadb_pipe.MariaDbPipeSource, method, real)
        with target.cursor() as cur:
            cur.execute(f"SELECT count(*) FROM {t}")
            assert cur.fetchone()[0] == len(rows)   # the complete reads above, once
        # one row longer than a slice's value may be: the read stops, naming its key
        monkeypatch.setattr(mariadb_pipe, "SLICE_VALUE_MAX", 15_000)
        with target.cursor() as cur, pytest.raises(mariadb_pipe.SliceTooLarge, match=r"the row of key \d+ is longer"):
            for read in pipe.reads:
                pipe.source.pipe_into(read, cur, copy)
        target.rollback()
        src.close()
    finally:
        _exec(maria, "SET GLOBAL sql_mode = %s", params=(mode,))
        target.close()
        _drop(maria, t)
