"""A stream batch decoded and staged where Spark runs its tasks (`stream.stage_on: executors`).

The driver's Python decodes every event of a batch in the other mode (stream.handover), so a
stream cannot grow past one process however many executors it has. Here each task of the batch's
Spark job reads its Kafka offset ranges, decodes them, keeps the last event per key
(core.staged_batch), and COPYs its rows into the batch's own table; the driver collects only each
task's summary, then commits the batch as before (stream.commit, through stream.batch_rows'
StagedRows): the fence, the apply from the staged rows, the offsets — one transaction.

The batch's table is UNLOGGED (staged rows are written once and read once; after a database crash
it comes back empty, which the commit sees by its row count and refuses) and named for the run:
`tideline.stage_<run key>_<spark batch>`. The run holds a session advisory lock on its key for as
long as it lives. The commit drops its batch's table with the rows it applied; a table of a batch
that never committed (the driver killed between staging and commit, a zombie run fenced) is
dropped by the next run that starts and finds its run's lock free. A task run again (an executor
lost mid-stage) replaces what its earlier attempt staged: each attempt deletes its task's rows and
COPYs them again under a transaction lock, so a batch's table holds each task's rows once.
"""
from __future__ import annotations

import logging
import random
import re
import time
from datetime import datetime, timezone

import pyarrow as pa
from psycopg2 import sql

from tideline.core.staged_batch import COLUMNS, ESCAPE, merge_summaries
from tideline.stream.batch_rows import StagedRows
from tideline.stream.handover import CODEGEN_FACTORY_MODE, ReadBatch, interpreted, kafka_range_sizes, \
    read_tasks

# Spark runs each Python task with ~0.1-0.4 s of its own around the function (2 cores, local
# master: a trivial mapInArrow over 200,000 rows took 4.7 s in 32 tasks, 1.1 s in 4, where toArrow
# took 0.7 s): a batch is cut into about TASKS_PER_SLOT tasks per core, not into TASK_EVENTS-event
# tasks as the driver's read is.
TASKS_PER_SLOT = 2
MIN_TASK_EVENTS = 1_000


def task_events(batch_events: int, slots: int) -> int:
    """Events per task of a staged batch at most (the Kafka source's maxRecordsPerPartition)."""
    return max(MIN_TASK_EVENTS, -(-batch_events // (TASKS_PER_SLOT * max(1, slots))))


def stages_on_executors(setting: str, spark) -> bool:
    """stream.stage_on: `auto` stages on the executors where they are not the driver's own cores
    (a cluster); on a local master the tasks' Python would only add its per-task cost on the same
    cores (tests/bench/incremental.py: see docs/operations/sizing.md)."""
    if setting != "auto":
        return setting == "executors"
    from tideline.spark_session import local_cores
    return local_cores(spark) is None

log = logging.getLogger("tideline.incremental")

SCHEMA = "tideline"
LOCK_CLASS = 0x71DE57A   # pg_advisory_lock(LOCK_CLASS, run key): the run that owns stage_<key>_* lives
_NAME = re.compile(r"^stage_([0-9a-f]{8})_(\d+)$")


class StageSpace:
    """Where one run's tasks stage its batches, on the state database (the target for PostgreSQL;
    the catalog's database for Iceberg: both apply from there)."""

    def __init__(self, store):
        self.store = store
        self.dsn = store.dsn()
        self.key: int | None = None
        self._conn = None
        self._connect()
        self.sweep()

    def _connect(self) -> None:
        if self._conn is not None:   # lost: its lock went with it
            self._conn.close()
        self._conn = self.store.connect(autocommit=True)
        with self._conn.cursor() as cur:
            while True:   # a key no live run holds
                key = random.getrandbits(31)
                cur.execute("SELECT pg_try_advisory_lock(%s, %s)", (LOCK_CLASS, key))
                if cur.fetchone()[0]:
                    break
        self.key = key

    def table(self, spark_batch_id: int) -> str:
        return f"stage_{self.key:08x}_{spark_batch_id}"

    def create(self, spark_batch_id: int) -> str:
        """The batch's empty table (a retried batch id's: emptied)."""
        name = self.table(spark_batch_id)
        columns = sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(t)) for c, t, _ in COLUMNS)
        try:
            self._create(name, columns)
        except self.store.errors as exc:
            if not self.store.lost_connection(exc):
                raise
            self._connect()   # a new key: the old one's lock went with the connection
            name = self.table(spark_batch_id)
            self._create(name, columns)
        return name

    def _create(self, name: str, columns) -> None:
        with self._conn.cursor() as cur:
            ident = sql.Identifier(SCHEMA, name)
            cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident))
            cur.execute(sql.SQL("CREATE UNLOGGED TABLE {} ({}) WITH (autovacuum_enabled = false)").format(
                ident, columns))

    def sweep(self) -> int:
        """Drops the batch tables of runs that ended without committing them; how many."""
        dropped = 0
        with self._conn.cursor() as cur:
            cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename LIKE 'stage\\_%%'",
                        (SCHEMA,))
            by_key: dict[int, list[str]] = {}
            for (name,) in cur.fetchall():
                m = _NAME.match(name)
                if m:
                    by_key.setdefault(int(m.group(1), 16), []).append(name)
            for key, names in by_key.items():
                if key == self.key:
                    continue
                cur.execute("SELECT pg_try_advisory_lock(%s, %s)", (LOCK_CLASS, key))
                if not cur.fetchone()[0]:
                    continue   # its run is alive
                try:
                    for name in names:
                        cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(SCHEMA, name)))
                        dropped += 1
                finally:
                    cur.execute("SELECT pg_advisory_unlock(%s, %s)", (LOCK_CLASS, key))
        if dropped:
            log.info("dropped %d staged batch table(s) of streams that ended before committing them", dropped)
        return dropped

    def close(self) -> None:
        """The run's own batch tables go (a batch that failed left its table), then its lock."""
        if self._conn is None or self._conn.closed:
            return
        try:
            with self._conn.cursor() as cur:
                cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename LIKE %s",
                            (SCHEMA, f"stage\\_{self.key:08x}\\_%"))
                for (name,) in cur.fetchall():
                    cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(SCHEMA, name)))
        except self.store.errors as exc:   # the next run's sweep drops them
            log.warning("staged batch tables of this run left for the next run to drop: %s", exc)
        finally:
            self._conn.close()


def stage_batch(df, spark_batch_id: int, space: StageSpace, table_of_topic: dict[str, str], per_task: int,
                versioned: frozenset[str] = frozenset(), logged: frozenset[str] = frozenset()) -> ReadBatch | None:
    """One Spark job: its tasks decode and stage the batch (make_stager); None when it is empty."""
    started, started_at = time.monotonic(), datetime.now(timezone.utc)
    context, ranges = df.sparkSession.sparkContext, kafka_range_sizes(df)
    if not sum(ranges):
        return None
    table = space.create(spark_batch_id)
    tasks = read_tasks(ranges, context.defaultParallelism, per_task)
    records = df.select("topic", "partition", "offset", "key", "value")
    if tasks < len(ranges):
        records = records.coalesce(tasks)
    context.setLocalProperty(CODEGEN_FACTORY_MODE, "NO_CODEGEN" if interpreted(ranges) else None)
    try:
        summaries = records.mapInArrow(make_stager(space.dsn, table, table_of_topic, versioned, logged),
                                       "summary string").collect()
    finally:
        context.setLocalProperty(CODEGEN_FACTORY_MODE, None)
    summary = merge_summaries([r.summary for r in summaries])
    if not summary.per_partition:
        return None
    return ReadBatch(spark_batch_id, summary.per_partition, summary.bad_rows, summary.truncates,
                     StagedRows(SCHEMA, table, summary, versioned), started, started_at, time.monotonic() - started)


def make_stager(dsn: str, table: str, table_of_topic: dict[str, str], versioned: frozenset[str],
                logged: frozenset[str]):
    """The per-task function for mapInArrow: the task's raw records decoded, compacted and COPYed
    into the batch's table; yields the task's summary (core.staged_batch.task_summary)."""

    def stage(batches):
        from pyspark import TaskContext

        from tideline.core.batch_events import split_batch
        from tideline.core.change_events import decode_records
        from tideline.core.copy_text import CopyStream
        from tideline.core.staged_batch import staged_rows, task_summary
        from tideline.pipes.copy_pipe import SESSIONS

        task = TaskContext.get().partitionId()
        split = split_batch(decode_records(batches, keep_before=logged), versioned, logged)
        staged = staged_rows(task, split, table_of_topic)
        conn = SESSIONS.take(dsn)
        try:
            with conn.cursor() as cur:
                cur.execute("SET LOCAL synchronous_commit = off")   # an unlogged table: nothing to wait for
                # one attempt of this task at a time; the last one's rows stand (see the module)
                cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s), %s)", (table, task))
                ident = sql.Identifier(SCHEMA, table)
                cur.execute(sql.SQL("DELETE FROM {} WHERE task = %s").format(ident), (task,))
                if staged.num_rows:
                    cur.copy_expert(sql.SQL("COPY {} ({}) FROM STDIN").format(
                        ident, sql.SQL(", ").join(sql.Identifier(c) for c, _, _ in COLUMNS)).as_string(cur),
                        CopyStream(staged.to_batches(max_chunksize=50_000), ESCAPE), size=1 << 20)
            conn.commit()
        except BaseException:
            conn.close()
            raise
        SESSIONS.give_back(conn, dsn)
        yield pa.RecordBatch.from_arrays([pa.array([task_summary(task, split, staged)], pa.string())],
                                         names=["summary"])

    return stage
