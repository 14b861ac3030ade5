"""A batch's rows as the commit stages them: decoded by the driver and held as Arrow (ArrowRows,
`stream.stage_on: driver`), or already staged by Spark's tasks in the batch's own table
(StagedRows, `executors`: stream.executor_stage). The commit asks, it does not branch: inside its
fenced transaction each one leaves out the tables no longer streamed and the events below their
committed offsets, fills what Debezium left out from the source (stream.source_fill), and puts
the rest where the targets' apply reads it — `tl_stage` and `tl_log` (core.apply_sql).
"""
from __future__ import annotations

from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc
from psycopg2 import sql

from tideline.core import apply_sql
from tideline.core.batch_events import drop_applied
from tideline.core.errors import TidelineError
from tideline.core.staged_batch import LOG, ROW, StagedSummary, applied_floors, fill_across

Fill = Callable[[pa.Table], pa.Table]   # rows with placeholders -> filled (some may be left out)


class StagedRowsMissing(TidelineError):
    """The batch table lost rows its tasks staged: nothing of the batch is applied."""


class ArrowRows:
    """The batch's compacted rows and change-log events, held by the driver."""

    def __init__(self, rows: pa.Table, log: pa.Table | None = None):
        self.rows, self.log = rows, log

    def logs(self, live: set[str]) -> bool:
        """Whether change-log events of the `live` topics are in the batch."""
        if self.log is None or not self.log.num_rows:
            return False
        return pc.any(pc.is_in(self.log.column("topic"), pa.array(sorted(live), pa.string()))).as_py()

    def stage(self, cur, store, live: set[str], current: dict[str, dict[int, int]], fill: Fill,
              table_of_topic: dict[str, str]) -> set[str]:
        """Stages what is left to apply of the live topics; returns the topics with rows or log
        events staged."""
        only = pa.array(sorted(live), pa.string())
        rows = self.rows.filter(pc.is_in(self.rows.column("topic"), only)) if self.rows.num_rows else self.rows
        rows = fill(drop_applied(rows, current))
        topics = set(pc.unique(rows.column("topic")).to_pylist())
        if rows.num_rows:
            store.stage_changes(cur, rows, table_of_topic)
        if self.logs(live):
            log = self.log.filter(pc.is_in(self.log.column("topic"), only))
            store.stage_log(cur, log, table_of_topic)
            topics |= set(pc.unique(log.column("topic")).to_pylist())
        return topics

    def discard(self, cur) -> None:
        """Nothing to do: the staging tables are dropped with the transaction (ON COMMIT DROP)."""


class StagedRows:
    """The batch as Spark's tasks staged it in `table` (tideline schema of the state database)."""

    def __init__(self, schema: str, table: str, summary: StagedSummary, versioned: frozenset[str] = frozenset()):
        self.schema, self.table, self.summary = schema, table, summary
        self.versioned = versioned   # history tables' topics: every row a version, none compacted away

    @property
    def _batch(self) -> sql.Composable:
        return sql.SQL("{}.{}").format(sql.Identifier(self.schema), sql.Identifier(self.table))

    def logs(self, live: set[str]) -> bool:
        return bool(self.summary.log_topics & live)

    def stage(self, cur, store, live: set[str], current: dict[str, dict[int, int]], fill: Fill,
              table_of_topic: dict[str, str]) -> set[str]:
        del store, table_of_topic   # staged by the tasks already, under the target's table names
        cur.execute(sql.SQL("SELECT count(*) FROM {}").format(self._batch))
        found = cur.fetchone()[0]
        if found != self.summary.staged:
            raise StagedRowsMissing(
                f"the staged rows of this batch are not all in {self.schema}.{self.table} ({found:,} of "
                f"{self.summary.staged:,}): the database restarted after a crash (which empties unlogged tables) or "
                f"another run removed them. Nothing of the batch was applied; the stream starts again from the "
                f"offsets committed in the target.")
        cur.execute(sql.SQL("ANALYZE {}").format(self._batch))   # before the statements below plan their joins
        gone = self._leave_out(cur, live, current)
        if self.summary.split:
            self._join_tasks(cur)
        if self.summary.holes:
            gone |= self._fill(cur, fill)
        topics = (self.summary.topics | self.summary.log_topics) & live
        if gone:   # the batch may have lost every row of a table
            cur.execute(sql.SQL("SELECT DISTINCT topic FROM {}").format(self._batch))
            topics = {t for (t,) in cur.fetchall()} & live
        if len(topics) > 1:   # each table's statements read only its events (apply_sql.INDEX_STAGE)
            cur.execute(sql.SQL("CREATE INDEX ON {} (tbl)").format(self._batch))
        if gone or self.summary.split:
            cur.execute(sql.SQL("ANALYZE {}").format(self._batch))
        for view, kind, columns in ((apply_sql.STAGE, ROW, "tbl, op, key, after, part, off, ts, pos"),
                                    (apply_sql.LOG_STAGE, LOG, "tbl, topic, op, key, before, after, part, off, ts, pos")):
            # a plain view: PostgreSQL updates and deletes through it, as the apply does on tl_stage
            cur.execute(sql.SQL("CREATE TEMP VIEW {} AS SELECT {} FROM {} WHERE kind = {}").format(
                sql.Identifier(view), sql.SQL(columns), self._batch, sql.Literal(kind)))
        return topics

    def _leave_out(self, cur, live: set[str], current: dict[str, dict[int, int]]) -> bool:
        """Deletes the rows of topics not streamed any more and those below the committed offsets
        (rows only: a change log keeps its own position); whether any went."""
        gone = False
        if self.summary.topics - live or self.summary.log_topics - live:
            cur.execute(sql.SQL("DELETE FROM {} WHERE topic <> ALL(%s)").format(self._batch), (sorted(live),))
            gone = cur.rowcount > 0
        floors = applied_floors(self.summary.per_partition, live, current)
        if floors:
            cur.execute(sql.SQL("DELETE FROM {} b USING (SELECT * FROM unnest(%s::text[], %s::int[], %s::bigint[])) "
                                "f(topic, part, floor) WHERE b.kind = 'r' AND b.topic = f.topic AND b.part = f.part "
                                "AND b.off < f.floor").format(self._batch),
                        ([f[0] for f in floors], [f[1] for f in floors], [f[2] for f in floors]))
            gone = gone or cur.rowcount > 0
        return gone

    def _join_tasks(self, cur) -> None:
        """Partitions read by several tasks (core.staged_batch): a placeholder left in one task's
        row filled from an earlier task's row of the key, then only each key's last row kept
        (not a history table's: each of its rows is a version)."""
        split = [f"{topic}:{part}" for topic, part in sorted(self.summary.split)]
        where = sql.SQL("b.kind = 'r' AND b.topic || ':' || b.part = ANY(%s)")
        if self.summary.holes:
            cur.execute(sql.SQL(
                "SELECT b.topic, b.key::text, b.part, b.off, b.op, b.after::text FROM {} b WHERE {} AND (b.topic, b.key) "
                "IN (SELECT h.topic, h.key FROM {} h WHERE h.kind = 'r' AND h.hole)").format(self._batch, where,
                                                                                            self._batch), (split,))
            for (topic, part, off), after in fill_across(cur.fetchall()).items():
                cur.execute(sql.SQL("UPDATE {} SET after = %s::jsonb, hole = %s WHERE kind = 'r' AND topic = %s AND "
                                    "part = %s AND off = %s").format(self._batch),
                            (after, "__debezium_unavailable_value" in after, topic, part, off))
        # a key deleted in one task's part and inserted or updated in an earlier one: the delete
        # carries that row image (core.batch_events.with_last_image, across tasks)
        cur.execute(sql.SQL("UPDATE {} d SET after = r.prev_after FROM (SELECT b.ctid AS id, lag(b.after) OVER w AS "
                            "prev_after, lag(b.op) OVER w AS prev_op, lead(b.off) OVER w AS next_off FROM {} b WHERE {} "
                            "AND b.topic <> ALL(%s) WINDOW w AS (PARTITION BY b.topic, b.part, b.key ORDER BY b.off)) r "
                            "WHERE d.ctid = r.id AND r.next_off IS NULL AND d.op = 'd' AND d.after IS NULL "
                            "AND r.prev_op <> 'd'").format(self._batch, self._batch, where),
                    (split, sorted(self.versioned)))
        cur.execute(sql.SQL("DELETE FROM {} WHERE ctid IN (SELECT ctid FROM (SELECT b.ctid, row_number() OVER ("
                            "PARTITION BY b.topic, b.part, b.key ORDER BY b.off DESC) AS nth FROM {} b WHERE {} AND "
                            "b.topic <> ALL(%s)) r WHERE r.nth > 1)").format(self._batch, self._batch, where),
                    (split, sorted(self.versioned)))

    def _fill(self, cur, fill: Fill) -> bool:
        """The rows with values Debezium left out, filled from the source (or left out); whether
        any was left out."""
        cur.execute(sql.SQL("SELECT topic, op, key::text, after::text, part, off, ts, pos FROM {} "
                            "WHERE kind = 'r' AND hole AND topic <> ALL(%s)").format(self._batch), (sorted(self.versioned),))
        found = cur.fetchall()
        if not found:
            return False
        names = ("topic", "op", "key", "after", "partition", "offset", "ts_us", "position")
        rows = pa.table({n: [r[i] for r in found] for i, n in enumerate(names)})
        filled = fill(rows)
        kept = {(r["topic"], r["partition"], r["offset"]): r["after"] for r in filled.to_pylist()}
        for topic, _op, _key, after, part, off, _ts, _pos in found:
            now = kept.get((topic, part, off))
            if now is None:
                cur.execute(sql.SQL("DELETE FROM {} WHERE kind = 'r' AND topic = %s AND part = %s AND off = %s").format(
                    self._batch), (topic, part, off))
            elif now != after:
                cur.execute(sql.SQL("UPDATE {} SET after = %s::jsonb WHERE kind = 'r' AND topic = %s AND part = %s "
                                    "AND off = %s").format(self._batch), (now, topic, part, off))
        return len(kept) < len(found)

    def discard(self, cur) -> None:
        """The views and the batch table go with the commit (or stay, for a retry, when it rolls back)."""
        cur.execute(sql.SQL("DROP VIEW IF EXISTS {}, {}").format(sql.Identifier(apply_sql.STAGE),
                                                                 sql.Identifier(apply_sql.LOG_STAGE)))
        cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(self._batch))
