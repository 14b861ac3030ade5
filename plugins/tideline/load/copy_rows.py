"""Copying a snapshot's rows into a target table: one Spark task per key range (a COPY pipe from
a source engine with one, Spark JDBC and Arrow from others), the driver piping ranges itself while
the job's Spark session starts, and the load's progress sampled for the view's chart.

The full load (load.full_load) hands this to a target that takes COPY (Capabilities.copy_in) as the
way to fill the table its snapshot goes live from.
"""
from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager

from tideline import state
from tideline.core.table_shape import TableShape
from tideline.engines import SourceEngine
from tideline.pipes.copy_pipe import make_copy_writer, make_pipe_copier, report_partition
from tideline.spark_session import driver_streams, local_cores, session_ready
from tideline.targets import Target

log = logging.getLogger("tideline.full_load")


class Progress(threading.Thread):
    """Logs every few seconds how many partitions of the running load are done and, when the load
    is a run in the history, records the rows stored so far (tideline.load_progress: the view
    charts a running load from it)."""

    def __init__(self, spark, label: str, total: int, started: float, every: float = 5.0,
                 sample: tuple[Target, int, str, str] | None = None):
        super().__init__(daemon=True)
        self.spark, self.label, self.total, self.started, self.every = spark, label, total, started, every
        self.sample = sample   # (the target, run id, schema and table being loaded)
        self.stopped = threading.Event()

    def run(self) -> None:
        conn = self._record(None, 0) if self.sample is not None else None
        tracker = None
        while not self.stopped.wait(self.every):
            done, running = self.driver_done, self.driver_running   # partitions the driver pipes itself
            if tracker is None and session_ready(self.spark):
                tracker = self.spark.sparkContext.statusTracker()
            for stage_id in tracker.getActiveStageIds() if tracker is not None else ():
                info = tracker.getStageInfo(stage_id)
                if info:
                    done += info.numCompletedTasks
                    running += info.numActiveTasks
            log.info("%s: %d/%d partitions done, %d running, %.0fs elapsed",
                     self.label, done, self.total, running, time.monotonic() - self.started)
            if self.sample is not None and not self.stopped.is_set():
                conn = self._record(conn)
        if self.sample is not None and self.final_rows is not None:
            conn = self._record(conn, self.final_rows)
        if conn is not None:
            conn.close()

    def _record(self, conn, rows: int | None = None):
        """One sample: `rows` when known (the start, the end), else what the target has stored so far."""
        store, run_id, schema, table = self.sample
        try:
            if conn is None:
                conn = store.connect(autocommit=True, connect_timeout=10)   # the state's, as the load's
            stored = (rows, 0) if rows is not None else store.stored_so_far(conn, schema, table)
            if stored is not None:
                state.record_load_progress(conn, run_id, *stored)
            return conn
        except (*state.ERRORS, *store.errors) as exc:   # the load itself goes on; only its progress chart misses a point
            log.warning("%s: could not record the load's progress in tideline.load_progress: %s",
                        self.label, str(exc).strip())
            if conn is not None:
                conn.close()
            return None

    def stop(self, final_rows: int | None = None) -> None:
        """Stops the thread; `final_rows` (the rows the copy stored) becomes the last sample."""
        self.final_rows = final_rows
        self.stopped.set()
        self.join(timeout=15)

    final_rows: int | None = None
    figures: list[dict] = []   # the partitions' figures, once done (watched)
    driver_done = driver_running = 0   # partitions piped by the driver (pipe_partitions)


def copy_source_rows(spark, engine: SourceEngine, store: Target, tgt, shape: TableShape, query: str,
                     predicates: list[str], schema: str, table: str, label: str, session_init: str | None = None,
                     started: float | None = None, where: str | None = None, run_id: int | None = None,
                     snapshot_conn=None, numbers: list[int] | None = None,
                     record: tuple[str, dict] | None = None) -> list[dict]:
    """Reads `query` from the source, one Spark task per predicate, and COPYs the rows into
    schema.table of the target (`tgt`, a connection to it, renders the statement); returns each partition's
    figures (partition, rows read, rows copied, seconds, how). Each partition's session runs
    `session_init` first (joining the snapshot of a full load). A source engine with a pipe
    (engine.pipe: PostgreSQL's COPY, MariaDB's COPY-text lines) is piped straight into the
    target (reading the rows of `where`, the filter inside `query`), in binary where the shape
    allows; others go through Spark JDBC and Arrow. With `run_id`, the rows stored so far are
    sampled into tideline.load_progress while the copy runs. A small table (`snapshot_conn`: the
    connection holding its snapshot, one partition; PostgreSQL) is piped by the driver itself on
    that connection and `tgt`: a Spark job and two more sessions would cost more than its rows
    (tests/bench/many_tables.py). A chunked load (load.chunked) numbers its partitions by chunk
    (`numbers`) and gives each the statement that records it with its rows (`record`). `shape` is
    the target's (core.target_names): the source is read by its own names, in the same order."""
    pipe = engine.pipe(tgt, shape.at_source, where, predicates, session_init)
    copy_format = pipe.copy_format if pipe else "text"   # the JDBC path writes COPY text
    copy_sql = store.copy_statement(tgt, schema, table, shape.written_columns, copy_format)
    if snapshot_conn is not None and pipe is not None and len(predicates) == 1 and record is None:
        t0 = time.monotonic()
        if run_id is not None:   # the view charts a load from its first and last sample
            state.record_load_progress(tgt, run_id, 0, 0)
            tgt.commit()
        with tgt.cursor() as tcur:
            moved = pipe.source.pipe_into(pipe.reads[0], tcur, copy_sql, conn=snapshot_conn)
        if run_id is not None:   # committed with the rows (its own instant: a new transaction)
            state.record_load_progress(tgt, run_id, moved.stored, moved.bytes)
        secs, how = time.monotonic() - t0, f"COPY pipe, {copy_format}, in the driver"
        report_partition(label, 0, moved.read, moved.bytes, secs, how)
        return [{"partition": 0, "rows": moved.read, "copied": moved.stored, "seconds": secs, "how": how}]
    target_dsn = store.dsn()
    sample = (store, run_id, schema, table) if run_id is not None else None
    with watched(spark, label, len(predicates), started, sample) as progress:
        if pipe is not None:
            log.info("%s: piping %d partitions into %s.%s (COPY, %s)", label, len(predicates), schema, table,
                     copy_format)
            items = list(zip(numbers if numbers is not None else range(len(pipe.reads)), pipe.reads))
            figures = pipe_partitions(spark, items, progress, lambda where: make_pipe_copier(
                pipe.source, target_dsn, copy_sql, label, copy_format, where, record=record))
        else:
            if record is not None:
                raise ValueError(f"{label}: a chunked load needs a source engine with a COPY pipe")
            log.info("%s: copying %d partitions into %s.%s (JDBC)", label, len(predicates), schema, table)
            props = engine.jdbc_properties()
            if session_init:
                props["sessionInitStatement"] = session_init
            df = spark.read.jdbc(engine.jdbc_url(), query, predicates=predicates, properties=props)
            df = df.select(*[f"`{c}`" for c in shape.at_source.written_columns])
            writer = make_copy_writer(target_dsn, copy_sql, shape.escape_flags, label)
            rows = df.mapInArrow(writer, "partition int, rows long, copied long, seconds double").collect()
            figures = [dict(r.asDict(), how="JDBC") for r in rows]
        progress.figures = figures
    return figures


@contextmanager
def watched(spark, label: str, total: int, started: float | None, sample: tuple | None = None):
    """A Progress thread over the block's partitions (`sample`: Progress's); the figures the block
    assigns to `progress.figures` give the last sample: the rows they copied."""
    progress = Progress(spark, label, total, started or time.monotonic(), sample=sample)
    progress.start()
    try:
        yield progress
    except BaseException:
        progress.stop()
        raise
    progress.stop(final_rows=sum(f["copied"] for f in progress.figures))


def spread_partitions(spark, items: list[tuple[int, str]], copier_for, label: str, started: float | None = None,
                      sample: tuple | None = None, in_threads: bool = False) -> list[dict]:
    """pipe_partitions (below) with the load's progress logged and sampled (SnapshotLoad.spread:
    a target that writes its own files runs its per-partition function so). `in_threads`: the
    function spends its time in code that lets go of the GIL (Arrow's CSV reader and Parquet
    writer), so on a local master the driver runs as many at once as the master has cores, from
    the start, whether or not Spark's session is up: Spark's Python workers would only run the
    same code on the same cores, later (pipes.lake_files: 5M rows in 2 threads 9.5-10.2 s, in 2
    processes 9.3-9.5 s)."""
    with watched(spark, label, len(items), started, sample) as progress:
        cores = local_cores(spark) if in_threads else None
        progress.figures = (_driver_only(spark, items, progress, copier_for, cores) if cores
                            else pipe_partitions(spark, items, progress, copier_for))
    return progress.figures


def pipe_partitions(spark, items: list[tuple[int, str]], progress: Progress, copier_for) -> list[dict]:
    """Runs the pipe copier (`copier_for(where)`) over the (partition, read) items, one Spark task
    each — but while the job's Spark session is still starting (~2-5 s of a job's start:
    spark_session.SessionStarting), the driver pipes key ranges itself, one after another,
    instead of waiting idle (a pipe needs nothing of Spark; tests/bench/full_load.py: 5M rows
    22.3 -> 17.7 s), and Spark takes the rest once it is ready. With a local master of N cores
    the driver is one of N streams then: it keeps the last 1/N of the ranges left and Spark gets
    the others in N-1 tasks — Spark's first tasks start ~1 s after the session, and more streams
    than cores were slower (tests/bench/full_load.py, full_load_mariadb.py). On a cluster the
    driver takes at most half of the ranges before the session is ready and none after: the rest
    are Spark's to spread over its executors. When the driver has piped every range before the
    session is ready (small tables), the load goes on without waiting for it (a MariaDB table of
    20,000 rows: its two ranges piped in 2 s, then 6 s of waiting for Spark). The driver's failure
    is raised once Spark's job has ended; a failure of Spark's stops the driver taking more."""
    if session_ready(spark):
        return spark.sparkContext.parallelize(items, len(items)).mapPartitions(copier_for("")).collect()
    streams = driver_streams(spark)
    if streams:
        return _driver_only(spark, items, progress, copier_for, streams)
    if len(items) == 1:   # nothing to share: no waiting for the session
        progress.driver_running = 1
        try:
            figures = list(copier_for("in the driver while Spark started")(items))
        finally:
            progress.driver_running = 0
        progress.driver_done = 1
        return figures
    cores = local_cores(spark)
    queue, reserved, lock = list(items), [], threading.Lock()
    split, closed = threading.Event(), threading.Event()
    cap = len(items) if cores else max(1, len(items) // 2)
    mine: list[dict] = []
    failed: list[BaseException] = []

    def take() -> list[tuple[int, str]]:
        while session_ready(spark) and not (split.is_set() or closed.is_set()):
            split.wait(0.05)   # the session is up: what is left is split between Spark and the driver
        with lock:
            if closed.is_set():
                return []
            if split.is_set():
                return [reserved.pop(0)] if reserved else []
            if len(mine) >= cap or not queue:
                return []
            return [queue.pop(0)]

    def drive() -> None:
        copy = copier_for("in the driver while Spark started")
        try:
            while item := take():
                progress.driver_running = 1
                mine.extend(copy(item))
                progress.driver_done, progress.driver_running = len(mine), 0
        except BaseException as exc:  # noqa: BLE001 — raised by the calling thread
            failed.append(exc)
        finally:
            progress.driver_running = 0

    driver = threading.Thread(target=drive, name="tideline-driver-pipe", daemon=True)
    driver.start()
    while not session_ready(spark):
        driver.join(0.05)
        if not driver.is_alive() and not failed and not queue:
            return sorted(mine, key=lambda f: f["partition"])   # the driver piped every range: no waiting for Spark
    theirs: list[dict] = []
    try:
        # waits for the session; on a failure here (a task's, the JVM gone) the driver's pipe is
        # not waited for: it ends with its range, or with the process, its uncommitted rows with it
        context = spark.sparkContext
        with lock:
            sharing = bool(cores) and driver.is_alive()
            keep = len(queue) // cores if sharing else 0
            rest, reserved[:] = queue[:len(queue) - keep], queue[len(queue) - keep:]
            queue[:] = []
            split.set()
        tasks = min(len(rest), max(1, cores - 1) if sharing else len(rest))
        if rest:
            theirs = context.parallelize(rest, tasks).mapPartitions(copier_for("")).collect()
    except BaseException:
        closed.set()
        raise
    driver.join()
    if failed:
        raise failed[0]
    return sorted(mine + theirs, key=lambda f: f["partition"])


def _driver_only(spark, items: list[tuple[int, str]], progress: Progress, copier_for, streams: int) -> list[dict]:
    """The load's ranges piped by the driver alone, `streams` at once (a local master whose
    session the job never started: spark_session.driver_streams), each stream taking the next
    range left; the streams of tables loading at once share the master's cores
    (SessionStarting.driver_slots). A failed range stops the streams taking more, and its error
    is raised once the running ones have ended (their uncommitted rows roll back with them)."""
    queue, lock, failed, figures = list(items), threading.Lock(), [], []
    slots = getattr(spark, "driver_slots", None) or threading.BoundedSemaphore(streams)

    def stream() -> None:
        copy = copier_for("in the driver")
        while True:
            with slots:
                with lock:
                    if failed or not queue:
                        return
                    item = queue.pop(0)
                    progress.driver_running += 1
                try:
                    done = list(copy([item]))
                except BaseException as exc:  # noqa: BLE001 — raised by the calling thread
                    with lock:
                        failed.append(exc)
                    return
                finally:
                    with lock:
                        progress.driver_running -= 1
                with lock:
                    figures.extend(done)
                    progress.driver_done += 1

    threads = [threading.Thread(target=stream, name=f"tideline-driver-pipe-{i}", daemon=True)
               for i in range(min(streams, len(items)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failed:
        raise failed[0]
    return sorted(figures, key=lambda f: f["partition"])
