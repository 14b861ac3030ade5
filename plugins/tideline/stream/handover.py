"""The hand-over between Spark's batch thread and the committer thread.

Spark's batch thread reads and decodes batch N (one Spark job for the raw records; the driver
decodes them, core.change_events) while batch N-1 commits in the committer thread, then waits
for that commit (raising its failure) and hands N over. At most one batch commits while the next
is read. The target stays the only position: Spark's checkpoint may record N-1 before it
committed, but a run whose commit failed ends, and the next run resumes from the target.
"""
from __future__ import annotations

import math
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Iterator

import pyarrow as pa
from pyspark.errors.exceptions.captured import unwrap_spark_exception
from pyspark.sql.pandas.serializers import ArrowCollectSerializer
from pyspark.traceback_utils import SCCallSiteSync
from pyspark.util import local_connect_and_auth

from tideline.core.batch_events import split_batch
from tideline.core.change_events import RECORD_COLUMNS, decode_records
from tideline.stream.batch_rows import ArrowRows

# Events per Spark task of a batch. Each task's result (its raw records as Arrow, ~3.5 MB at the
# benchmark's ~570 bytes per event) is held by the driver JVM until Python has collected it; results
# this small die young, where 25,000-event results overflowed the young generation into the old one
# and cost ~10 full collections per 200,000-event batch (~1.5 s; tests/bench/incremental.py: 28
# full GCs per run -> 2). A small batch stays one task per Kafka partition.
TASK_EVENTS = 6_250
CODEGEN_FACTORY_MODE = "spark.sql.codegen.factoryMode"
INTERPRETED_BELOW = 2_000   # events per Kafka offset range (see interpreted())


@dataclass
class ReadBatch:
    """A batch read and decoded by Spark's batch thread, waiting for the committer: its figures
    per Kafka partition, bad messages and truncates (core.batch_events), and its rows — held by
    the driver, or staged by the tasks (stream.batch_rows)."""
    spark_batch_id: int
    per_partition: list[dict]
    bad_rows: list[dict]
    truncates: list[dict]
    rows: object   # stream.batch_rows: ArrowRows | StagedRows
    started: float
    started_at: datetime
    read_s: float


def read_batch(df, spark_batch_id: int, versioned: frozenset[str] = frozenset(),
               logged: frozenset[str] = frozenset()) -> ReadBatch | None:
    """One Spark job reads the batch's raw records; the driver decodes them as its tasks hand them
    over. None when empty. `versioned`: topics of history tables (every event kept); `logged`:
    topics of tables with a change log (every event logged, with its before image)."""
    started, started_at = time.monotonic(), datetime.now(timezone.utc)
    context, ranges = df.sparkSession.sparkContext, kafka_range_sizes(df)
    tasks = read_tasks(ranges, context.defaultParallelism, TASK_EVENTS)
    records = df.select(*RECORD_COLUMNS)
    if tasks < len(ranges):
        records = records.coalesce(tasks)
    # A local property reaches only the jobs this thread starts (the committer's Iceberg MERGE
    # keeps its generated code).
    context.setLocalProperty(CODEGEN_FACTORY_MODE, "NO_CODEGEN" if interpreted(ranges) else None)
    try:
        with closing(arrow_batches(records)) as batches:   # closed at once if the decode fails
            events = decode_records(batches, keep_before=logged)
    finally:
        context.setLocalProperty(CODEGEN_FACTORY_MODE, None)
    if not events.num_rows:
        return None
    split = split_batch(events, versioned, logged)
    return ReadBatch(spark_batch_id, split.per_partition, split.bad_rows, split.truncates,
                     ArrowRows(split.rows, split.log), started, started_at, time.monotonic() - started)


def arrow_batches(df) -> Iterator[pa.RecordBatch]:
    """The rows of `df` as Arrow record batches in the order its tasks finish, each as soon as its
    task has: what DataFrame.toArrow does (pyspark 4.0's _collect_as_arrow), without waiting for
    the last task before handing over the first. Batch order does not matter to the decode (see
    core.batch_events), so the driver's Python decodes a batch's records while the JVM still reads
    the rest: ~0.5 s of a 200,000-event batch's ~3 s that ran after the read (tests/bench/incremental.py)."""
    with SCCallSiteSync(df.sparkSession.sparkContext):
        port, secret, server = df._jdf.collectAsArrowToPython()
    sockfile, sock = local_connect_and_auth(port, secret)
    sock.settimeout(None)   # as pyspark's own collect: a batch's read takes as long as it takes
    stopped_early = False
    try:
        for item in ArrowCollectSerializer().load_stream(sockfile):
            if isinstance(item, pa.RecordBatch):   # the last item is the batches' order: not needed
                try:
                    yield item
                except BaseException:   # the consumer stopped (closed, or failed while decoding)
                    stopped_early = True
                    raise
    finally:
        # Closed first: a consumer that stopped early leaves the JVM writing into a socket nobody
        # reads, and getResult() would wait for it for ever; closed, the JVM's write fails and ends.
        sockfile.close()
        sock.close()
        try:
            with unwrap_spark_exception():   # the job's own failure, raised here
                server.getResult()
        except Exception:
            if not stopped_early:
                raise   # else what stopped the consumer is the error that goes on


def read_tasks(ranges: list[int], slots: int, task_events: int) -> int:
    """Tasks to read a batch of Kafka offset ranges (events per range) in. Spark's Kafka source
    reads each topic partition's range in its own task (and splits ranges above task_events);
    a task costs ~5-10 ms of the driver's CPU whatever it reads (its closure deserialized, the
    record projection generated, scheduling), so a stream of 100 tables spent ~0.6 s a batch on
    100 tasks of a few hundred events. Adjacent ranges are merged into at least `slots` tasks
    of at most ~task_events events each (the task-result bound of TASK_EVENTS)."""
    if not ranges:
        return 0
    per_task = max(1, task_events // max(ranges))   # ranges a task may take and stay within task_events
    return min(len(ranges), max(slots, math.ceil(len(ranges) / per_task)))


def interpreted(ranges: list[int]) -> bool:
    """Whether the read's tasks should build Spark's interpreted record projections. Its Kafka
    reader generates and compiles two (with and without headers) for every offset range it reads,
    ~2.3 ms of CPU each: ~40% of the stream JVM's CPU with 100 tables of ~100 events a batch
    (tests/bench/many_streams.py, a JFR profile). The interpreted one costs nothing to build and
    ~1 µs more per record (200,000 events in 32 ranges: 9% more CPU), so it pays below
    INTERPRETED_BELOW events per range on average."""
    return bool(ranges) and sum(ranges) < INTERPRETED_BELOW * len(ranges)


def kafka_range_sizes(df) -> list[int]:
    """Events in each Spark partition (a Kafka offset range) of a micro-batch DataFrame as
    `foreachBatch` receives it: its plan is the executed batch (a LogicalRDD whose RDD chain ends
    in the DataSourceRDD of KafkaBatchInputPartitions; Spark 4.0)."""
    rdd = df._jdf.queryExecution().logical().rdd()
    while not rdd.dependencies().isEmpty():
        rdd = rdd.dependencies().head().rdd()
    sizes = []
    for part in rdd.partitions():
        inputs, events = part.inputPartitions().iterator(), 0
        while inputs.hasNext():
            events += inputs.next().offsetRange().size()
        sizes.append(events)
    return sizes


class BatchHandover:
    """`foreachBatch`'s function. `read(df, spark_batch_id)` runs in Spark's batch thread (this
    module's read_batch, or stream.executor_stage's stage_batch); `commit(read)` in the committer
    thread; `failed(exc)` hears every failure on either thread (once per exception object is the
    caller's concern), and a commit failure also calls `stop_query` — an idle stream would never
    call back to hear of it."""

    def __init__(self, read: Callable[..., ReadBatch | None], commit: Callable[[ReadBatch], None],
                 failed: Callable[[BaseException], None], stop_query: Callable[[], None]):
        self._read, self._commit, self._failed, self._stop_query = read, commit, failed, stop_query
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tideline-commit")
        self._inflight: Future | None = None

    def __call__(self, df, spark_batch_id: int) -> None:
        try:
            read = self._read(df, spark_batch_id)
            self.wait()
            if read is not None:
                self._inflight = self._thread.submit(self._run_commit, read)
        except BaseException as exc:
            self._failed(exc)
            raise

    def _run_commit(self, read: ReadBatch) -> None:
        try:
            self._commit(read)
        except BaseException as exc:
            self._failed(exc)
            threading.Thread(target=self._stop_query, daemon=True, name="tideline-stop").start()
            raise

    def wait(self) -> None:
        """Waits for the batch committing now; raises its failure."""
        inflight, self._inflight = self._inflight, None
        if inflight is not None:
            inflight.result()

    def drain(self) -> None:
        """Waits for the batch still committing when the query ends. Its failure is not lost:
        `failed` heard it already."""
        try:
            self.wait()
        except BaseException:   # noqa: BLE001 — reported through `failed`
            pass

    def shutdown(self) -> None:
        """Before the committer's connections close."""
        self._thread.shutdown(wait=True)
