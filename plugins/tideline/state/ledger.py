"""The state's smaller records, for the rooms that read or write them: alerts sent, verify findings,
unparseable events kept as dead letters, what the doctor and the verify DAG read of the phases,
a pipeline's rows. With the records (tideline.state), the chunks and the staging, this is the one
way into `tideline.*`: no SQL on the state schema outside tideline.state
(tests/unit/test_architecture.py), so where the state lives is said in one place."""
from __future__ import annotations

from psycopg2 import sql
from psycopg2.extras import RealDictCursor

from tideline import sqlfiles
from tideline.core.verify_plan import KeyRange, VerifyReport


# ---------------------------------------------------------------- what the doctor and the DAGs read

def summary(cur, pipeline: str, cdc: list[str]) -> tuple[int | None, int, list[tuple[str, str]]]:
    """(the state schema's version or None when it is not there yet, how many of `cdc` stream,
    (table, last error) of those halted)."""
    cur.execute("SELECT to_regclass('tideline.schema_version') IS NOT NULL")
    if not cur.fetchone()[0]:   # the state schema exists (migrate creates both tables together)
        return None, 0, []
    cur.execute("SELECT max(version) FROM tideline.schema_version")
    version = cur.fetchone()[0]
    cur.execute("SELECT count(*) FROM tideline.table_state WHERE pipeline = %s AND phase = 'streaming' "
                "AND table_name = ANY(%s)", (pipeline, cdc))
    streaming = cur.fetchone()[0]
    cur.execute("SELECT table_name, last_error FROM tideline.table_state WHERE pipeline = %s AND phase = "
                "'halted' AND table_name = ANY(%s) ORDER BY table_name", (pipeline, cdc))
    return version, streaming, cur.fetchall()


def exists(conn) -> bool:
    """Whether the state schema is there (nothing has run against a database without it)."""
    with conn.cursor() as cur:
        cur.execute("SELECT to_regclass('tideline.load_progress') IS NOT NULL")
        return cur.fetchone()[0]


def tables_in_phases(conn, pipeline: str, tables: list[str] | None, phases: tuple[str, ...]) -> list[str]:
    """The pipeline's tables (of `tables`, or all) whose state is in one of `phases`; none before
    the state schema exists."""
    if not exists(conn):
        return []
    with conn.cursor() as cur:
        cur.execute("SELECT table_name FROM tideline.table_state WHERE pipeline = %s AND (%s::text[] IS NULL OR "
                    "table_name = ANY(%s)) AND (%s::text[] IS NULL OR phase = ANY(%s)) ORDER BY table_name",
                    (pipeline, tables, tables, list(phases) or None, list(phases) or None))
        return [r[0] for r in cur.fetchall()]


def epochs(cur, pipeline: str, tables: list[str]) -> list[tuple[str, int, str | None]]:
    """(table, epoch, its owner) of each of `tables`: a run sees whether another took one over."""
    cur.execute("SELECT table_name, epoch, epoch_owner FROM tideline.table_state WHERE pipeline = %s AND "
                "table_name = ANY(%s)", (pipeline, tables))
    return cur.fetchall()


def phase(cur, pipeline: str, table: str) -> str | None:
    """The table's phase, in the caller's transaction (after its fence locked the row)."""
    cur.execute("SELECT phase FROM tideline.table_state WHERE pipeline = %s AND table_name = %s", (pipeline, table))
    row = cur.fetchone()
    return row[0] if row else None


def delete_pipeline(conn, pipeline: str) -> int:
    """Every row of the pipeline in the state schema (each state table has a `pipeline` column)."""
    with conn, conn.cursor() as cur:
        cur.execute("SELECT table_name FROM information_schema.columns WHERE table_schema = 'tideline' "
                    "AND column_name = 'pipeline' ORDER BY table_name")
        removed = 0
        for (name,) in cur.fetchall():
            cur.execute(sql.SQL("DELETE FROM tideline.{} WHERE pipeline = %s").format(sql.Identifier(name)),
                        (pipeline,))
            removed += cur.rowcount
    return removed


# ---------------------------------------------------------------- alerts sent

def alert_due(conn, pipeline: str, event: str, subject: str, quiet_s: float) -> bool:
    """No alert (event, subject) of the pipeline was delivered within the last `quiet_s` seconds."""
    with conn, conn.cursor() as cur:
        cur.execute("SELECT 1 FROM tideline.alerts_sent WHERE pipeline = %s AND event = %s AND subject = %s "
                    "AND sent_at >= now() - make_interval(secs => %s)", (pipeline, event, subject, quiet_s))
        return cur.fetchone() is None


def alert_sent(conn, pipeline: str, event: str, subject: str, message: str) -> None:
    with conn, conn.cursor() as cur:
        cur.execute("INSERT INTO tideline.alerts_sent (pipeline, event, subject, sent_at, message) "
                    "VALUES (%s, %s, %s, now(), %s) ON CONFLICT (pipeline, event, subject) DO UPDATE "
                    "SET sent_at = now(), message = EXCLUDED.message", (pipeline, event, subject, message))


# ---------------------------------------------------------------- unparseable events

def keep_unparseable(cur, pipeline: str, bad_rows: list[dict]) -> None:
    """Messages that are no Debezium change event, kept as dead letters (stream.on_bad_message:
    dead_letter), in the batch's transaction; one already kept is not kept twice."""
    for b in bad_rows:
        cur.execute("INSERT INTO tideline.dead_letters (pipeline, topic, kafka_partition, kafka_offset, key, "
                    "value, error) VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                    (pipeline, b["topic"], b["partition"], b["offset"], b["key"], b["value"],
                     "not a Debezium change event (unparseable JSON, unknown op, or missing key/row image)"))


# ---------------------------------------------------------------- verify findings

def record_verify(conn, pipeline: str, report: VerifyReport) -> int:
    """The verify's run row, its sample of differing keys and every differing range."""
    from tideline import state
    conn.autocommit = False
    try:
        with conn, conn.cursor() as cur:
            run_id = state.run_start_in(cur, pipeline, report.table, "verify", None)
            state.run_end(cur, run_id, "succeeded" if report.equal else "failed", report.source_rows, report.summary(),
                          counts=dict(report.counts))
            for f in report.samples:
                cur.execute("INSERT INTO tideline.verify_findings (run_id, kind, key) VALUES (%s, %s, %s)",
                            (run_id, f.kind, list(f.key)))
            for r in report.ranges:
                cur.execute("INSERT INTO tideline.verify_ranges (run_id, lo, hi) VALUES (%s, %s, %s)",
                            (run_id, list(r.lo) if r.lo is not None else None,
                             list(r.hi) if r.hi is not None else None))
    finally:
        conn.autocommit = True
    return run_id


def last_differences(conn, pipeline: str, table: str) -> tuple[int | None, list[KeyRange]]:
    """The newest verify of a table and the key ranges it found different (empty when it was clean)."""
    with conn.cursor() as cur:
        cur.execute("SELECT run_id FROM tideline.runs WHERE pipeline = %s AND table_name = %s AND kind = 'verify' "
                    "AND outcome <> 'running' ORDER BY run_id DESC LIMIT 1", (pipeline, table))
        row = cur.fetchone()
        if row is None:
            return None, []
        cur.execute("SELECT lo, hi FROM tideline.verify_ranges WHERE run_id = %s ORDER BY id", (row[0],))
        return row[0], [KeyRange(tuple(lo) if lo is not None else None, tuple(hi) if hi is not None else None)
                        for lo, hi in cur.fetchall()]


def table_history(conn, pipeline: str, table: str, since, bucket_s: int) -> tuple[list[dict], list[dict], list[dict]]:
    """One table's stream figures in buckets of `bucket_s` since `since`, its runs and its loads'
    progress samples (the view's history), as rows of dicts; read-only."""
    args = {"pipeline": pipeline, "table": table, "since": since, "bucket": f"{bucket_s} seconds"}
    out = []
    with conn.cursor(cursor_factory=RealDictCursor) as cur:
        for query in ("state/table_series", "state/table_runs", "state/load_progress"):
            cur.execute(sqlfiles.load(query), args)
            out.append([dict(r) for r in cur.fetchall()])
    return out[0], out[1], out[2]


def record_hold(state_conn, pipeline: str, holder: str, unread: bool, server_since, retained: int | None):
    """Records what capture holds on the source (tideline.capture_holds); returns since when the
    holder has been unread (the state's first sighting when the server cannot tell), committed."""
    with state_conn, state_conn.cursor() as cur:
        cur.execute(sqlfiles.load("state/record_hold"), {"pipeline": pipeline, "holder": holder, "unread": unread,
                                                         "server_since": server_since, "retained": retained})
        return cur.fetchone()[0]


def table_figures(conn, pipeline: str, table: str) -> dict:
    """What status shows of one table from the state (its phase, runs, verify, errors); {} when none."""
    with conn.cursor(cursor_factory=RealDictCursor) as cur:
        cur.execute(sqlfiles.load("state/table_status"), {"pipeline": pipeline, "table": table})
        row = cur.fetchone()
    conn.rollback()
    return dict(row) if row else {}
