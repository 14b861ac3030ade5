"""Applies one table's share of a staged stream batch, and when the target refuses it, finds the
first event it refuses — inside the batch's transaction, so nothing half-done is ever committed.

Each table is applied under its own savepoint (the caller's); a deterministic refusal (see
core.apply_failure) is narrowed by halving over the table's events in Kafka order, keeping each
half that applies, so the search ends at the one event that fails given everything before it.
Then either that event goes to tideline.dead_letters and the rest of the table is applied
(on_bad_message: dead_letter), or ApplyRefused carries it to the caller, which halts the table.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import psycopg2
from psycopg2 import sql

from tideline.core import apply_sql
from tideline.core.apply_failure import FailedEvent, describe, is_deterministic, truncate
from tideline.core.debezium import UNAVAILABLE, value_expr
from tideline.core.errors import ResnapshotRequired
from tideline.core.table_extras import TableExtras
from tideline.core.table_shape import Column
from tideline.state.staging import record_dead_letter
from tideline.targets.interfaces import ApplyRefused

log = logging.getLogger("tideline.apply")


@dataclass
class TableApply:
    pipeline: str
    schema: str
    table: str
    topic: str
    columns: list[Column]
    primary_key: list[str]
    dead_letter: bool = False
    dead_lettered: list[FailedEvent] = field(default_factory=list)
    extras: TableExtras = TableExtras()   # soft deletes and metadata columns (core.table_extras)

    def run(self, cur) -> tuple[int, int]:
        """Applies the table's staged events; returns (upserts, deletes). Raises ApplyRefused."""
        try:
            return self._savepointed(cur, None)
        except psycopg2.Error as exc:
            if not is_deterministic(exc.pgcode):
                raise
            first_error = exc
        cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(apply_sql.RANKED)))
        cur.execute(apply_sql.RANK_STAGE, {"tbl": self.table})
        cur.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(apply_sql.RANKED)))
        total = cur.fetchone()[0]
        upserts = deletes = 0
        start = 1
        while start <= total:
            try:   # the rest at once: the common case after one refused event
                u, d = self._savepointed(cur, apply_sql.only_rows(start, total))
                return upserts + u, deletes + d
            except psycopg2.Error as exc:
                if not is_deterministic(exc.pgcode):
                    raise
                first_error = exc
            bad, (u, d) = self._narrow(cur, start, total)
            upserts, deletes = upserts + u, deletes + d
            if bad is None:   # the refusal needs more than one event to happen: report the batch
                raise ApplyRefused(self._whole_batch_message(first_error), self._batch_event(first_error))
            event = self._describe_event(cur, bad)
            if not self.dead_letter:
                raise ApplyRefused(describe(self.pipeline, event), event)
            self._dead_letter(cur, event)
            start = bad + 1
        return upserts, deletes

    # ------------------------------------------------------------------ search

    def _narrow(self, cur, lo: int, hi: int) -> tuple[int | None, tuple[int, int]]:
        """The first rank in lo..hi that fails once every event before it is applied (those are
        kept applied); None when each event applies on its own."""
        upserts = deletes = 0
        while lo < hi:
            mid = (lo + hi) // 2
            try:
                u, d = self._savepointed(cur, apply_sql.only_rows(lo, mid))
                upserts, deletes, lo = upserts + u, deletes + d, mid + 1
            except psycopg2.Error as exc:
                if not is_deterministic(exc.pgcode):
                    raise
                hi = mid
        try:
            u, d = self._savepointed(cur, apply_sql.only_rows(lo, lo))
            return None, (upserts + u, deletes + d)
        except psycopg2.Error as exc:
            if not is_deterministic(exc.pgcode):
                raise
            self._last_error = exc
            return lo, (upserts, deletes)

    def _savepointed(self, cur, only) -> tuple[int, int]:
        """The savepoint and the table's statement in one round trip. Kept, the savepoint is
        released with the caller's (the table's), which holds it."""
        try:
            statement = apply_sql.history_statement if self.extras.history else apply_sql.apply_statement
            cur.execute(sql.SQL("SAVEPOINT tl_apply; {}").format(
                statement(self.schema, self.table, self.columns, self.primary_key, only, self.extras)))
            deleted, updated, inserted, part, off, key = cur.fetchone()
            if part is not None:
                raise ResnapshotRequired(
                    f"{self.pipeline}.{self.table}: the change at partition {part} offset {off} (key {key}) updates "
                    f"a row the target does not have, and Debezium did not send its unchanged large values; the "
                    f"target has diverged from the source and the table is reloaded.", table=self.table)
        except BaseException:
            cur.execute("ROLLBACK TO SAVEPOINT tl_apply")
            raise
        return updated + inserted, deleted

    # ------------------------------------------------------------------ what it was

    def _describe_event(self, cur, rank: int) -> FailedEvent:
        exc = self._last_error
        cur.execute(sql.SQL("SELECT r.part, r.off, r.op, r.key FROM {} r WHERE r.i = %s").format(
            sql.Identifier(apply_sql.RANKED)), (rank,))
        part, off, op, key = cur.fetchone()
        diag = exc.diag
        column = (diag.column_name or self._constraint_column(cur, diag.constraint_name)
                  or self._column_refusing(cur, part, off))
        value = None
        if column is not None:
            doc = "key" if op == "d" else "after"
            cur.execute(sql.SQL("SELECT s.{}->>%s FROM {} s WHERE s.tbl = %s AND s.part = %s AND s.off = %s").format(
                sql.Identifier(doc), sql.Identifier(apply_sql.STAGE)), (column, self.table, part, off))
            row = cur.fetchone()
            value = truncate(row[0]) if row else None
        return FailedEvent(table=self.table, topic=self.topic, partition=part, offset=off, key=truncate(key), op=op,
                           column=column, value=value, sqlstate=exc.pgcode,
                           error=(diag.message_primary or str(exc)).strip(), constraint=diag.constraint_name)

    def _constraint_column(self, cur, constraint: str | None) -> str | None:
        """The column a one-column constraint of the target table is about (CHECK, unique, FK)."""
        if not constraint:
            return None
        cur.execute("SELECT a.attname FROM pg_constraint c JOIN pg_attribute a ON a.attrelid = c.conrelid "
                    "AND a.attnum = ANY (c.conkey) WHERE c.conrelid = %s::regclass AND c.conname = %s",
                    (f'"{self.schema}"."{self.table}"', constraint))
        names = [r[0] for r in cur.fetchall()]
        return names[0] if len(names) == 1 else None

    def _column_refusing(self, cur, part: int, off: int) -> str | None:
        """The first column whose value does not cast to the target column's type, if one."""
        for c in self.columns:
            if c.generated is not None:
                continue
            cur.execute("SAVEPOINT tl_cast")
            try:
                raw = sql.SQL("s.after->>{}").format(sql.Literal(c.source_name))
                cur.execute(sql.SQL("SELECT {} FROM {} s WHERE s.tbl = %s AND s.part = %s AND s.off = %s "
                                    "AND {} IS DISTINCT FROM {}").format(   # a TOAST placeholder is never cast
                    value_expr(raw, c.type, c.encoding), sql.Identifier(apply_sql.STAGE), raw, sql.Literal(UNAVAILABLE)),
                    (self.table, part, off))
                cur.execute("RELEASE SAVEPOINT tl_cast")
            except psycopg2.Error:
                cur.execute("ROLLBACK TO SAVEPOINT tl_cast")
                return c.name
        return None

    def _batch_event(self, exc) -> FailedEvent:
        return FailedEvent(table=self.table, topic=self.topic, partition=-1, offset=-1, key=None, op="?",
                           column=exc.diag.column_name, value=None, sqlstate=exc.pgcode,
                           error=(exc.diag.message_primary or str(exc)).strip(), constraint=exc.diag.constraint_name)

    def _whole_batch_message(self, exc) -> str:
        return (f"{self.pipeline}.{self.table}: the target refused this table's batch ({str(exc).strip()}), though "
                f"each of its events applies on its own (a conflict between events of one batch, such as a unique "
                f"index on the target that the source does not have). The table is HALTED at its last committed "
                f"batch; the other tables keep streaming. Remove the target-only constraint, then trigger the sync "
                f"DAG to resume it.")

    def _dead_letter(self, cur, ev: FailedEvent) -> None:
        record_dead_letter(cur, self.pipeline, ev)
        self.dead_lettered.append(ev)
