"""A stream batch's changes, staged in the state database's transaction (tideline.state.database):
the batch's decoded events (last image per key) in one temporary table that each table's apply
reads, each table's share kept or undone alone under a savepoint, and the events a target refuses
kept as dead letters beside the state.

Every target composes it (Target.staging): PostgreSQL applies from it in the same transaction;
an Iceberg table's MERGE reads its rows from it.
"""
from __future__ import annotations

import logging

import pyarrow as pa
import pyarrow.compute as pc
from psycopg2 import sql

from tideline.core import apply_sql
from tideline.core.apply_failure import FailedEvent, describe
from tideline.core.copy_text import CopyStream

log = logging.getLogger("tideline.apply")


class ChangeStaging:
    """A batch's changes staged in the state database's transaction (the target itself, or the
    database that holds an Iceberg catalog and Tideline's state): each table's share is kept or
    undone alone under a savepoint."""

    def stage_changes(self, cur, rows: pa.Table, table_of_topic: dict[str, str]) -> None:
        topics = pc.dictionary_encode(rows.column("topic").combine_chunks())
        names = pa.array([table_of_topic[t] for t in topics.dictionary.to_pylist()], pa.string())
        tables = pc.take(names, topics.indices)
        staged = pa.table({"tbl": tables, "op": rows.column("op"), "key": rows.column("key"),
                           "after": rows.column("after"),
                           "part": pc.cast(rows.column("partition"), pa.string()),
                           "off": pc.cast(rows.column("offset"), pa.string()),
                           "ts": pc.cast(rows.column("ts_us"), pa.string()), "pos": rows.column("position")})
        cur.execute(apply_sql.CREATE_STAGE)
        stream = CopyStream(staged.to_batches(max_chunksize=50_000), [True, False, True, True, False, False, False,
                                                                      True])
        cur.copy_expert(apply_sql.COPY_STAGE, stream, size=1 << 20)
        if len(topics.dictionary) > 1:   # each table's statements read only its events, not the whole batch's
            cur.execute(apply_sql.INDEX_STAGE)
        cur.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(apply_sql.STAGE)))  # temp tables have no stats

    def stage_log(self, cur, log: pa.Table, table_of_topic: dict[str, str]) -> None:
        """Every event of the batch for the tables with a change log, in its own temporary table."""
        topics = pc.dictionary_encode(log.column("topic").combine_chunks())
        names = pa.array([table_of_topic[t] for t in topics.dictionary.to_pylist()], pa.string())
        staged = pa.table({"tbl": pc.take(names, topics.indices), "topic": log.column("topic"), "op": log.column("op"),
                           "key": log.column("key"), "before": log.column("before"), "after": log.column("after"),
                           "part": pc.cast(log.column("partition"), pa.string()),
                           "off": pc.cast(log.column("offset"), pa.string()),
                           "ts": pc.cast(log.column("ts_us"), pa.string()), "pos": log.column("position")})
        cur.execute(apply_sql.CREATE_LOG_STAGE)
        stream = CopyStream(staged.to_batches(max_chunksize=50_000), [True, True, False, True, True, True, False, False,
                                                                      False, True])
        cur.copy_expert(apply_sql.COPY_LOG_STAGE, stream, size=1 << 20)

    def hash_log(self, cur, table: str, columns) -> None:
        """The table's logged images with its hashed columns hashed (apply_sql.hash_log_images_sql)."""
        statement = apply_sql.hash_log_images_sql(table, columns)
        if statement is not None:
            cur.execute(statement)

    def leave_filter(self, cur, table: str, columns, predicate: str) -> int:
        """The table's staged upserts its row_filter does not keep, turned into deletes (apply_sql);
        how many."""
        cur.execute(apply_sql.leave_filter_sql(table, columns, predicate))
        return cur.rowcount

    def begin_table(self, cur) -> None:
        cur.execute("SAVEPOINT tl_table")

    def undo_table(self, cur) -> None:
        cur.execute("ROLLBACK TO SAVEPOINT tl_table")

    def end_table(self, cur) -> None:
        cur.execute("RELEASE SAVEPOINT tl_table")


def record_dead_letter(cur, pipeline: str, ev: FailedEvent) -> None:
    """A refused event goes to tideline.dead_letters with its staged row image and the reason."""
    cur.execute(sql.SQL("SELECT s.after::text FROM {} s WHERE s.tbl = %s AND s.part = %s AND s.off = %s").format(
        sql.Identifier(apply_sql.STAGE)), (ev.table, ev.partition, ev.offset))
    row = cur.fetchone()
    cur.execute("INSERT INTO tideline.dead_letters (pipeline, topic, kafka_partition, kafka_offset, key, value, "
                "error) VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (pipeline, ev.topic, ev.partition, ev.offset, ev.key, row[0] if row else None,
                 describe(pipeline, ev, dead_lettered=True)))
    log.warning("%s", describe(pipeline, ev, dead_lettered=True))
