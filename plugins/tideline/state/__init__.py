"""Tideline's state in the target database (schema `tideline`): phases, epochs, offsets, runs.

The state room: this module (the records), `database` (where the state lives and how to reach it)
and `staging` (a stream batch's changes staged beside the state, and dead letters). Targets compose
them; nothing here knows a target.

Every method takes an open psycopg2 connection so callers can put state writes in the same
transaction as the data they describe. `connect` is the one place that says where the state
lives (README: "Targets: where rows land, and where the state lives").
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

from psycopg2.extras import RealDictCursor

from tideline import sqlfiles
from tideline.core.errors import FencedError

from tideline.state.database import ERRORS, connect_postgres  # noqa: F401 — ERRORS: state.ERRORS, the callers' catch

MIGRATION_LOCK = 0x71DE11E  # advisory lock key: one migrator at a time


def connect(target, connect_timeout: int | None = None):
    """A connection to the pipeline's state: the PostgreSQL database the target connection names
    (state.database): the target itself, for a target that holds it (targets.Capabilities.holds_state),
    so state and rows commit together."""
    return connect_postgres(target, connect_timeout=connect_timeout)


def given(*conns, fallback=None):
    """A `resolve` for of_pipeline over the connections a caller was handed (by conn id), else
    `fallback` (the environment's, core.connections.get_connection): a caller given its target
    connection still reaches the state by the pipeline's one door."""
    from tideline.core.connections import get_connection
    handed = {c.conn_id: c for c in conns}
    return lambda conn_id: handed[conn_id] if conn_id in handed else (fallback or get_connection)(conn_id)


def of_pipeline(cfg, resolve, connect_timeout: int | None = None):
    """A connection to a pipeline's state, its connections resolved by `resolve` (conn id -> Conn):
    the one place that says which database holds a pipeline's state: the one its `state.conn_id`
    names, else its target connection's (connect). Callers that have a pipeline come here, not to
    connect(...)."""
    return connect(resolve(cfg.state_conn_id), connect_timeout)


def migrate(conn) -> int:
    """Creates/updates the state schema idempotently; returns the schema version now in place."""
    files = [n for n in sqlfiles.names("state") if re.match(r"\d{3}_", n)]
    with conn, conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        cur.execute("CREATE SCHEMA IF NOT EXISTS tideline")
        cur.execute("CREATE TABLE IF NOT EXISTS tideline.schema_version ("
                    " version int PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())")
        cur.execute("SELECT coalesce(max(version), 0) FROM tideline.schema_version")
        current = cur.fetchone()[0]
        for name in files:
            version = int(re.match(r"(\d+)_", name).group(1))
            if version > current:
                cur.execute(sqlfiles.load(f"state/{name[:-len('.sql')]}"))
                cur.execute("INSERT INTO tideline.schema_version (version, name) VALUES (%s, %s)",
                            (version, name))
                current = version
    return current


@dataclass
class TableState:
    pipeline: str
    table_name: str
    phase: str
    epoch: int
    epoch_owner: str | None
    topic: str | None
    resume_offsets: dict[int, int] | None
    snapshot_id: str | None
    snapshot_rows: int | None
    last_batch_id: int | None
    last_error: str | None
    raw: dict[str, Any]


def get(conn, pipeline: str, table: str) -> TableState | None:
    with conn.cursor(cursor_factory=RealDictCursor) as cur:
        cur.execute("SELECT * FROM tideline.table_state WHERE pipeline = %s AND table_name = %s", (pipeline, table))
        row = cur.fetchone()
    if row is None:
        return None
    offsets = row["resume_offsets"]
    return TableState(row["pipeline"], row["table_name"], row["phase"], row["epoch"], row["epoch_owner"],
                      row["topic"], {int(k): int(v) for k, v in offsets.items()} if offsets else None,
                      row["snapshot_id"], row["snapshot_rows"], row["last_batch_id"], row["last_error"], dict(row))


def removed_tables(conn, pipeline: str, kept: list[str]) -> list[tuple]:
    """(table, phase, topic, target schema or None, target table) of the pipeline's tables not in
    `kept`, as their loads recorded where they landed (core.target_names)."""
    with conn.cursor() as cur:
        cur.execute(sqlfiles.load("state/removed_tables"), {"pipeline": pipeline, "kept": kept})
        rows = cur.fetchall()
    conn.rollback()
    return rows


def claim_epoch(conn, pipeline: str, table: str, owner: str, topic: str) -> int:
    """A new epoch for this run (committed at once): older runs are fenced from here on."""
    with conn, conn.cursor() as cur:
        cur.execute(sqlfiles.load("state/claim_epoch"),
                    {"pipeline": pipeline, "table": table, "owner": owner, "topic": topic})
        return cur.fetchone()[0]


def check_epoch(cur, pipeline: str, table: str, epoch: int) -> None:
    """Inside the caller's transaction: lock the state row and refuse if another run took over."""
    check_epochs(cur, pipeline, {table: epoch})


def check_epochs(cur, pipeline: str, epochs: dict[str, int]) -> dict[str, dict[int, int]]:
    """check_epoch for many tables in one statement (a stream's batch holds every table it
    streams): locks their state rows, refuses if another run took any over, and returns each
    table's recorded resume offsets ({} when none)."""
    cur.execute(sqlfiles.load("state/check_epochs"), {"pipeline": pipeline, "tables": sorted(epochs)})
    rows = {name: (current, owner, offsets) for name, current, owner, offsets in cur.fetchall()}
    for table in sorted(epochs):
        current, owner, _ = rows.get(table, (None, None, None))
        if current != epochs[table]:
            raise FencedError(
                f"{pipeline}.{table}: this run holds fencing epoch {epochs[table]} but the table's epoch is now "
                f"{current} (claimed by {owner}). A newer run replaced this one; this run commits nothing and stops.",
                table=table, owner=owner)
    return {table: {int(p): int(o) for p, o in (rows[table][2] or {}).items()} for table in epochs}


def lock(cur, pipeline: str, table: str) -> None:
    """Inside the caller's transaction: hold the table's state row, as a stream's batch does
    while it commits — so work that rewrites the table's files waits for, and holds off, batches."""
    cur.execute(sqlfiles.load("state/check_epochs"), {"pipeline": pipeline, "tables": [table]})


def run_start(conn, pipeline: str, table: str, kind: str, epoch: int | None, detail: str = "",
              stream_mode: str | None = None) -> int:
    """Opens a run in the history, committed at once (so a killed run still shows)."""
    with conn, conn.cursor() as cur:
        return run_start_in(cur, pipeline, table, kind, epoch, detail, stream_mode)


def run_start_in(cur, pipeline: str, table: str, kind: str, epoch: int | None, detail: str = "",
                 stream_mode: str | None = None) -> int:
    """Opens a run inside the caller's transaction, with the Airflow task that runs it (if any);
    a stream's run with the mode it streams in."""
    ctx = airflow_task(os.environ)
    cur.execute(sqlfiles.load("state/run_start"),
                {"pipeline": pipeline, "table": table, "kind": kind, "epoch": epoch, "detail": detail,
                 "airflow": json.dumps(ctx) if ctx else None, "stream_mode": stream_mode})
    return cur.fetchone()[0]


@dataclass(frozen=True)
class StreamRun:
    """A table's latest stream run: how it was asked to stream, and whether it still holds the table."""
    mode: str | None
    outcome: str
    detail: str
    ended_s: float | None   # seconds since it ended (None: still running, or killed)

    @property
    def holds(self) -> bool:
        return self.outcome == "running"


def latest_streams(conn, pipeline: str) -> dict[str, StreamRun]:
    """Each table's latest stream run (tables never streamed are absent)."""
    with conn.cursor() as cur:
        cur.execute(sqlfiles.load("state/latest_streams"), {"pipeline": pipeline})
        rows = cur.fetchall()
    conn.rollback()
    return {t: StreamRun(m, o, d or "", float(e) if e is not None else None) for t, m, o, d, e in rows}


@dataclass
class StreamWait:
    """A stream task waiting (core.keep_alive) — current while no stream run started since."""
    waiting_for: str
    since: Any
    tries: int
    last_error: str | None
    task: str | None
    waiting_s: float

    def describe(self) -> str:
        from tideline.core.keep_alive import waiting_line
        return waiting_line(self.waiting_for, self.since, self.tries)


def record_wait(conn, pipeline: str, waiting_for: str, since, tries: int, last_error: str, task: str) -> None:
    with conn, conn.cursor() as cur:
        cur.execute(sqlfiles.load("state/record_wait"), {"pipeline": pipeline, "waiting_for": waiting_for,
                                                         "since": since, "tries": tries,
                                                         "last_error": last_error, "task": task})


def stream_wait(conn, pipeline: str) -> StreamWait | None:
    """The pipeline's stream wait, if current (see sql/state/stream_wait.sql)."""
    with conn.cursor() as cur:
        cur.execute(sqlfiles.load("state/stream_wait"), {"pipeline": pipeline})
        row = cur.fetchone()
    conn.rollback()
    return StreamWait(*row[:5], float(row[5])) if row else None


def airflow_task(environ) -> dict | None:
    """The Airflow task instance this process works for: Airflow exports it as AIRFLOW_CTX_* to
    the task's environment, which spark-submit passes on to the driver."""
    ctx = {key: environ.get(f"AIRFLOW_CTX_{key.upper()}") for key in ("dag_id", "dag_run_id", "task_id", "try_number")}
    if not (ctx["dag_id"] and ctx["dag_run_id"] and ctx["task_id"]):
        return None
    return {k: v for k, v in ctx.items() if v}


def loaded_by_task(conn, pipeline: str, tables: list[str], environ) -> list[str]:
    """Of `tables`, those an earlier try of this Airflow task loaded (none outside Airflow)."""
    ctx = airflow_task(environ)
    if ctx is None or not tables:
        return []
    with conn.cursor() as cur:
        cur.execute(sqlfiles.load("state/loaded_by_task"), {"pipeline": pipeline, "tables": tables, **{
            k: ctx[k] for k in ("dag_id", "dag_run_id", "task_id")}})
        return sorted(r[0] for r in cur.fetchall())


def run_end(cur, run_id: int, outcome: str, rows: int | None, detail: str, counts: dict | None = None) -> None:
    cur.execute(sqlfiles.load("state/run_end"), {"run_id": run_id, "outcome": outcome, "rows": rows,
                                                 "detail": detail, "counts": json.dumps(counts) if counts else None})


def record_error(conn, pipeline: str, table: str, error: str) -> None:
    with conn, conn.cursor() as cur:
        cur.execute(sqlfiles.load("state/record_error"), {"pipeline": pipeline, "table": table, "error": error})


def finish_full_load(cur, *, pipeline: str, table: str, epoch: int, topic: str, offsets: dict[int, int],
                     snapshot_id: str, snapshot_at, snapshot_xmin: str, rows: int, topic_id: str | None = None,
                     hashed: dict[str, str] | None = None, names: dict | None = None) -> None:
    cur.execute(sqlfiles.load("state/finish_full_load"), {
        "pipeline": pipeline, "table": table, "epoch": epoch, "topic": topic, "topic_id": topic_id,
        "hashed": json.dumps(hashed) if hashed else None, "names": json.dumps(names) if names else None,
        "offsets": json.dumps({str(p): o for p, o in sorted(offsets.items())}), "partitions": len(offsets),
        "snapshot_id": snapshot_id, "snapshot_at": snapshot_at, "snapshot_xmin": snapshot_xmin, "rows": rows})
    if cur.rowcount != 1:
        raise FencedError(f"{pipeline}.{table}: state row changed epoch during the swap; nothing was committed")


def set_phase(conn, pipeline: str, table: str, phase: str, error: str | None) -> None:
    """In its own transaction: the table's new phase and why (needs_resnapshot, halted)."""
    with conn, conn.cursor() as cur:
        cur.execute(sqlfiles.load("state/set_phase"),
                    {"pipeline": pipeline, "table": table, "phase": phase, "error": error[:4000] if error else None})


def set_partitions(cur, pipeline: str, table: str, tree: dict | None) -> None:
    """In the caller's transaction: the source table's partitions as now seen (or NULL)."""
    cur.execute("UPDATE tideline.table_state SET source_partitions = %s WHERE pipeline = %s AND table_name = %s",
                (json.dumps(tree) if tree is not None else None, pipeline, table))


def park(conn, pipeline: str, table: str, phase: str, owner: str, why: str) -> bool:
    """Phase 'paused' or 'removed', fencing whatever run holds the table (its position stays).
    False when the table has no state (never loaded: nothing holds it)."""
    with conn, conn.cursor() as cur:
        cur.execute(sqlfiles.load("state/park_table"), {"pipeline": pipeline, "table": table, "phase": phase,
                                                        "owner": owner, "why": why})
        return cur.fetchone() is not None


def refuse(conn, pipeline: str, table: str, error: str) -> None:
    """In its own transaction: the table is refused (before any work), fenced from running jobs."""
    with conn, conn.cursor() as cur:
        cur.execute(sqlfiles.load("state/refuse_table"), {"pipeline": pipeline, "table": table, "error": error[:4000]})


def unrefuse(conn, pipeline: str, table: str) -> bool:
    """A refused table whose cause is gone goes back to 'new' (loaded afresh); True if it was refused."""
    with conn, conn.cursor() as cur:
        cur.execute(sqlfiles.load("state/unrefuse_table"), {"pipeline": pipeline, "table": table})
        return cur.rowcount == 1


@dataclass
class Advance:
    """One table's new position in a stream batch."""
    table: str
    epoch: int
    offsets: dict[int, int]
    events: int


def advance_streams(cur, pipeline: str, batch_id: int, advances: list[Advance]) -> None:
    """The batch's new positions, every table in one statement; refuses (FencedError) if any
    table's epoch changed during the batch."""
    if not advances:
        return
    cur.execute(sqlfiles.load("state/advance_streams"), {
        "pipeline": pipeline, "batch_id": batch_id, "tables": [a.table for a in advances],
        "epochs": [a.epoch for a in advances], "events": [a.events for a in advances],
        "offsets": [json.dumps({str(p): o for p, o in sorted(a.offsets.items())}) for a in advances]})
    moved = sorted({a.table for a in advances} - {row[0] for row in cur.fetchall()})
    if moved:
        raise FencedError(f"{', '.join(f'{pipeline}.{t}' for t in moved)}: the state row changed epoch during the "
                          f"batch; nothing committed")


def halt_in(cur, *, pipeline: str, table: str, epoch: int, error: str, event: dict | None,
            during_load: bool = False) -> None:
    """Halts the table in the caller's transaction (the stream batch or the full load that met the
    failure). `during_load`: nothing of a load committed, so a resume must load it again, never
    stream it (phase_before 'loading'; core.params.plan_tables)."""
    cur.execute(sqlfiles.load("state/halt_table"), {"pipeline": pipeline, "table": table, "epoch": epoch,
                                                    "error": error, "event": json.dumps(event) if event else None,
                                                    "during": "loading" if during_load else None})
    if cur.rowcount != 1:
        raise FencedError(f"{pipeline}.{table}: the state row changed epoch during the batch; nothing committed")


def next_batch_id(cur, pipeline: str) -> int:
    cur.execute("SELECT coalesce(max(batch_id), 0) + 1 FROM tideline.batches WHERE pipeline = %s", (pipeline,))
    return cur.fetchone()[0]


def commit_batch(cur, **values) -> None:
    values = dict(values)
    values["start"] = json.dumps(values["start"])
    values["end"] = json.dumps(values["end"])
    values["table_events"] = json.dumps(values["table_events"])
    cur.execute(sqlfiles.load("state/commit_batch"), values)


def finish_batch(cur, *, pipeline: str, table: str, epoch: int, cursor: str | None) -> None:
    cur.execute(sqlfiles.load("state/finish_batch"), {"pipeline": pipeline, "table": table, "epoch": epoch,
                                                      "cursor": cursor})
    if cur.rowcount != 1:
        raise FencedError(f"{pipeline}.{table}: the state row changed epoch during the batch; nothing committed")


def expect_rows(conn, run_id: int, rows: int | None) -> None:
    """What a running load expects to store (its progress bar's end), committed at once."""
    with conn, conn.cursor() as cur:
        cur.execute("UPDATE tideline.runs SET rows_expected = %s WHERE run_id = %s", (rows, run_id))


def record_load_progress(conn, run_id: int, rows: int, nbytes: int) -> None:
    """One sample of a running load (the view charts it); one per instant."""
    with conn.cursor() as cur:
        cur.execute("INSERT INTO tideline.load_progress (run_id, rows, bytes) VALUES (%s, %s, %s) "
                    "ON CONFLICT DO NOTHING", (run_id, rows, nbytes))
