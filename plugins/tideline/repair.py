"""Repair and validate: fix or check a table against the source without moving the stream.

repair re-reads a key range (or an update-time range) from the source and applies it in one
target transaction that holds the table's state row lock — the same lock every stream batch
takes — so it never interleaves with a batch, and it leaves the stream's position alone. Events
the stream applies afterwards are newer than or equal to what was read, so the table converges.
validate compares row count and an order-independent checksum of every row, computed inside each
database, and records the result in the run history.
"""
from __future__ import annotations

import io
import logging
from dataclasses import dataclass

import psycopg2
from psycopg2 import sql

from tideline import source_catalog, state
from tideline.core.config import PipelineConfig
from tideline.core.connections import Conn
from tideline.core.errors import SourceError, TerminalError

log = logging.getLogger("tideline.repair")


class RepairError(TerminalError):
    """The repair request cannot be carried out as asked (the message says why); nothing changed."""


@dataclass
class RepairResult:
    table: str
    read: int
    upserted: int
    deleted: int


@dataclass
class ValidateResult:
    table: str
    source_rows: int
    target_rows: int
    equal: bool


def _lock_state(cur, pipeline: str, table: str) -> str:
    cur.execute("SELECT phase FROM tideline.table_state WHERE pipeline = %s AND table_name = %s FOR UPDATE",
                (pipeline, table))
    row = cur.fetchone()
    if row is None or row[0] not in ("streaming", "batch"):
        raise RepairError(f"{pipeline}.{table} is {row[0] if row else 'not loaded yet'}: repair works on a loaded "
                          f"table (run the sync first, or action=full_reload)")
    return row[0]


def repair(cfg: PipelineConfig, source: Conn, target: Conn, table: str, *, key_from: str | None = None,
           key_to: str | None = None, time_column: str | None = None, time_from: str | None = None,
           time_to: str | None = None) -> RepairResult:
    tcfg = cfg.table(table)
    src = psycopg2.connect(source.postgres_dsn())
    tgt = psycopg2.connect(target.postgres_dsn())
    try:
        shape = source_catalog.describe(src, cfg.source.schema_, table, tcfg)
        if not shape.primary_key:
            raise RepairError(f"{cfg.name}.{table} has no primary key; repair needs one")
        cols = sql.SQL(", ").join(sql.Identifier(c) for c in shape.column_names)
        if key_from is not None:
            if len(shape.primary_key) != 1:
                raise RepairError(f"{cfg.name}.{table}: a key-range repair needs a one-column primary key; this one "
                                  f"is ({', '.join(shape.primary_key)}). Use an update-time range instead.")
            col = shape.column(shape.primary_key[0])
            where = sql.SQL("{c} BETWEEN {lo}::{t} AND {hi}::{t}").format(
                c=sql.Identifier(col.name), lo=sql.Literal(key_from), hi=sql.Literal(key_to), t=sql.SQL(col.type))
        else:
            if time_column not in shape.column_names:
                raise RepairError(f"{cfg.name}.{table} has no column {time_column!r} for a time-range repair")
            col = shape.column(time_column)
            where = sql.SQL("{c} BETWEEN {lo}::timestamptz AND {hi}::timestamptz").format(
                c=sql.Identifier(col.name), lo=sql.Literal(time_from), hi=sql.Literal(time_to))
        with src.cursor() as cur:
            lo_hi = (key_from, key_to) if key_from is not None else (time_from, time_to)
            try:
                cur.execute(sql.SQL("SELECT {}::{t} <= {}::{t}").format(
                    sql.Literal(lo_hi[0]), sql.Literal(lo_hi[1]),
                    t=sql.SQL(col.type if key_from is not None else "timestamptz")))
            except psycopg2.Error as exc:
                raise RepairError(f"repair range {lo_hi[0]!r}..{lo_hi[1]!r} is not a valid {col.type} range for "
                                  f"{table}.{col.name}: {exc.pgerror.strip() if exc.pgerror else exc}") from None
            if not cur.fetchone()[0]:
                raise RepairError(f"repair range is inverted: {lo_hi[0]!r} is after {lo_hi[1]!r}")
        buf = io.BytesIO()
        with src.cursor() as cur:  # one consistent read of the range
            cur.copy_expert(sql.SQL("COPY (SELECT {} FROM {} WHERE {}) TO STDOUT").format(
                cols, shape.qualified(), where).as_string(src), buf)
        src.rollback()
        buf.seek(0)
        schema = cfg.target.schema_
        target_table = sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table))
        with tgt, tgt.cursor() as cur:
            _lock_state(cur, cfg.name, table)
            cur.execute(sql.SQL("CREATE TEMP TABLE tl_repair ON COMMIT DROP AS SELECT {} FROM {} WITH NO DATA").format(
                cols, target_table))
            cur.copy_expert(sql.SQL("COPY tl_repair ({}) FROM STDIN").format(cols).as_string(tgt), buf)
            read = cur.rowcount
            deleted = 0
            pk = sql.SQL(", ").join(sql.Identifier(k) for k in shape.primary_key)
            if key_from is not None:  # rows gone at the source go from the target too
                cur.execute(sql.SQL("DELETE FROM {t} WHERE {w} AND ({pk}) NOT IN (SELECT {pk} FROM tl_repair)").format(
                    t=target_table, w=where, pk=pk))
                deleted = cur.rowcount
            updates = sql.SQL(", ").join(sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(c), sql.Identifier(c))
                                         for c in shape.column_names if c not in shape.primary_key)
            cur.execute(sql.SQL("INSERT INTO {t} ({cols}) SELECT {cols} FROM tl_repair ON CONFLICT ({pk}) DO UPDATE "
                                "SET {u}").format(t=target_table, cols=cols, pk=pk, u=updates))
            upserted = cur.rowcount
            run_id = state.run_start_in(cur, cfg.name, table, "repair", None)
            state.run_end(cur, run_id, "succeeded", read,
                          f"{'key' if key_from is not None else time_column} range {lo_hi[0]}..{lo_hi[1]}: "
                          f"{read} read, {upserted} upserted, {deleted} deleted")
        log.info("%s.%s: repaired %s..%s: %d rows read, %d upserted, %d deleted; the stream kept its position",
                 cfg.name, table, lo_hi[0], lo_hi[1], read, upserted, deleted)
        return RepairResult(table, read, upserted, deleted)
    finally:
        src.close()
        tgt.close()


def _fingerprint(conn, schema: str, table: str, columns: list[str]) -> tuple[int, int]:
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
    with conn.cursor() as cur:
        cur.execute(sql.SQL("SELECT count(*), coalesce(sum(('x' || substr(md5(ROW({cols})::text), 1, 15))::bit(60)"
                            "::bigint), 0) FROM {s}.{t}").format(cols=cols, s=sql.Identifier(schema),
                                                                t=sql.Identifier(table)))
        count, checksum = cur.fetchone()
    conn.rollback()
    return count, int(checksum)


def validate(cfg: PipelineConfig, source: Conn, target: Conn, tables: list[str]) -> list[ValidateResult]:
    """Row count and checksum of every row (the source's columns), each computed in its database."""
    src = psycopg2.connect(source.postgres_dsn())
    tgt = psycopg2.connect(target.postgres_dsn())
    out = []
    try:
        for table in tables:
            shape = source_catalog.describe(src, cfg.source.schema_, table, cfg.table(table), check_key=False)
            src.rollback()
            s_count, s_sum = _fingerprint(src, cfg.source.schema_, table, shape.column_names)
            try:
                t_count, t_sum = _fingerprint(tgt, cfg.target.schema_, table, shape.column_names)
            except psycopg2.Error as exc:
                tgt.rollback()
                raise SourceError(f"{cfg.name}.{table}: cannot read the target table: {exc}") from None
            equal = (s_count, s_sum) == (t_count, t_sum)
            with tgt, tgt.cursor() as cur:
                state.run_end(cur, state.run_start_in(cur, cfg.name, table, "verify", None), "succeeded" if equal else "failed", s_count,
                              f"source {s_count} rows, target {t_count} rows, checksums "
                              f"{'equal' if s_sum == t_sum else 'differ'}")
            (log.info if equal else log.error)("%s.%s: source %s rows, target %s rows, %s", cfg.name, table,
                                                f"{s_count:,}", f"{t_count:,}",
                                                "equal" if equal else "DIFFERENT (run action=repair or full_reload)")
            out.append(ValidateResult(table, s_count, t_count, equal))
    finally:
        src.close()
        tgt.close()
    return out
