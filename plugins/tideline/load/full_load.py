"""Full load of one or more tables: one consistent snapshot, parallel key-range reads as Spark
tasks (a COPY pipe from a PostgreSQL source, Spark JDBC from others), COPY into a shadow table,
one-transaction swap together with the state.

Order matters for the handover (see DESIGN.md): claim the fencing epoch, record the topic's end
offsets, *then* open the snapshot. Everything committed before the snapshot is in it; everything
after is at or above the recorded offsets, so the stream replays the overlap and loses nothing.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime


from tideline import engines, kafka_offsets, state, targets

from tideline.capture import refusals
from tideline.load.copy_pipe import make_copy_writer, make_pipe_copier, report_partition
from tideline.load.lake_load import commit_snapshot
from tideline.core.config import PipelineConfig
from tideline.core.connections import Conn, get_connection
from tideline.core.errors import FencedError, LoadVerificationError, SourceError, TidelineError
from tideline.core.settings import CLIENT_COMPILER_ONLY
from tideline.core.table_shape import TableShape
from tideline.engines import SourceEngine
from tideline.spark_session import local_cores, session_ready
from tideline.targets import Target

log = logging.getLogger("tideline.full_load")


@dataclass
class LoadResult:
    table: str
    rows: int
    seconds: float
    partitions: int
    epoch: int
    offsets: dict[int, int]

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0


# A table of at most this many rows (one partition) is piped by the driver, not a Spark job.
DRIVER_COPY_MAX_ROWS = 50_000

# The driver JVM of a load whose rows never enter it compiles with the client compiler only: it just
# schedules tasks, and C2's compilations cost a 2-core host more than its faster code gives back
# (tests/bench/many_tables.py, 200 tables: the job's processes 10.9-11.8 -> 8.2-8.7 s of CPU,
# 26.1-27.4 -> 24.7-25.8 s). Not when the JVM moves the rows (Spark JDBC, an Iceberg write).
PIPED_LOAD_JAVA_OPTIONS = CLIENT_COMPILER_ONLY


def piped_load_conf(source: Conn, target_kind: str) -> dict[str, str]:
    """Spark settings for a full load from `source` into a `target_kind` target, beyond its job
    kind's (SparkSettings.job_conf; the pipeline's own spark.conf wins over both): the lean driver
    JVM when every row goes source -> target as a COPY piped by Python (in local mode the driver's
    JVM is the executor too, so only then)."""
    piped = engines.for_source(source).pipes_copy and not targets.target_class(target_kind).capabilities().writes_in_jvm
    return {"spark.driver.extraJavaOptions": PIPED_LOAD_JAVA_OPTIONS} if piped else {}


def shadow_name(table: str) -> str:
    return f"{table[:46]}__tl_shadow"


def run_owner(kind: str) -> str:
    """Who claims an epoch, in words a person can trace back to a task."""
    airflow = os.environ.get("AIRFLOW_CTX_DAG_RUN_ID")
    where = f" (dag run {airflow}, try {os.environ.get('AIRFLOW_CTX_TRY_NUMBER', '?')})" if airflow else ""
    return f"{kind} pid {os.getpid()} on {socket.gethostname()} at {datetime.now().isoformat(timespec='seconds')}{where}"


class _Progress(threading.Thread):
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
                conn = state.connect(store.conn, connect_timeout=10)
                conn.autocommit = True
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
    driver_done = driver_running = 0   # partitions piped by the driver (pipe_partitions)


def copy_source_rows(spark, engine: SourceEngine, store: Target, tgt, shape: TableShape, query: str,
                     predicates: list[str], schema: str, table: str, label: str, session_init: str | None = None,
                     started: float | None = None, where: str | None = None, run_id: int | None = None,
                     snapshot_conn=None) -> list[dict]:
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
    (tests/bench/many_tables.py)."""
    pipe = engine.pipe(tgt, shape, where, predicates, session_init)
    copy_format = pipe.copy_format if pipe else "text"   # the JDBC path writes COPY text
    copy_sql = store.copy_statement(tgt, schema, table, shape.written_columns, copy_format)
    if snapshot_conn is not None and pipe is not None and len(predicates) == 1:
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
    progress = _Progress(spark, label, len(predicates), started or time.monotonic(),
                         sample=(store, run_id, schema, table) if run_id is not None else None)
    progress.start()
    try:
        if pipe is not None:
            log.info("%s: piping %d partitions into %s.%s (COPY, %s)", label, len(predicates), schema, table,
                     copy_format)
            figures = pipe_partitions(spark, list(enumerate(pipe.reads)), progress, lambda where: make_pipe_copier(
                pipe.source, target_dsn, copy_sql, label, copy_format, where))
        else:
            log.info("%s: copying %d partitions into %s.%s (JDBC)", label, len(predicates), schema, table)
            props = engine.jdbc_properties()
            if session_init:
                props["sessionInitStatement"] = session_init
            df = spark.read.jdbc(engine.jdbc_url(), query, predicates=predicates, properties=props)
            df = df.select(*[f"`{c}`" for c in shape.written_columns])
            writer = make_copy_writer(target_dsn, copy_sql, shape.escape_flags, label)
            rows = df.mapInArrow(writer, "partition int, rows long, copied long, seconds double").collect()
            figures = [dict(r.asDict(), how="JDBC") for r in rows]
    except BaseException:
        progress.stop()
        raise
    progress.stop(final_rows=sum(f["copied"] for f in figures))
    return figures


def pipe_partitions(spark, items: list[tuple[int, str]], progress: _Progress, copier_for) -> list[dict]:
    """Runs the pipe copier (`copier_for(where)`) over the (partition, read) items, one Spark task
    each — but while the job's Spark session is still starting (~2-5 s of a job's start:
    spark_session.SessionStarting), the driver pipes key ranges itself, one after another,
    instead of waiting idle (a pipe needs nothing of Spark; tests/bench/full_load.py: 5M rows
    22.3 -> 17.7 s), and Spark takes the rest once it is ready. With a local master of N cores
    the driver is one of N streams then: it keeps the last 1/N of the ranges left and Spark gets
    the others in N-1 tasks — Spark's first tasks start ~1 s after the session, and more streams
    than cores were slower (tests/bench/full_load.py, full_load_mariadb.py). On a cluster the
    driver takes at most half of the ranges before the session is ready and none after: the rest
    are Spark's to spread over its executors. The driver's failure is raised once Spark's job has
    ended; a failure of Spark's stops the driver taking more."""
    if session_ready(spark):
        return spark.sparkContext.parallelize(items, len(items)).mapPartitions(copier_for("")).collect()
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


class FullLoad:
    def __init__(self, cfg: PipelineConfig, spark, environ=None):
        self.cfg = cfg
        self.spark = spark
        self.source: Conn = get_connection(cfg.source.conn_id, environ)
        self.engine: SourceEngine = engines.for_source(self.source)
        self.target: Conn = get_connection(cfg.target.conn_id, environ)
        self.store: Target = targets.for_pipeline(cfg, self.target)
        self.kafka: Conn = get_connection(cfg.kafka.conn_id, environ)
        self._kafka_admin = None
        self._idle: list[tuple] = []   # (source, target) connections a finished table gave back
        self._idle_lock = threading.Lock()

    @property
    def kafka_admin(self):
        """One Kafka admin client for every table of the load (each new one costs ~30 ms)."""
        if self._kafka_admin is None:
            self._kafka_admin = kafka_offsets.admin_client(self.kafka.kafka_access)
        return self._kafka_admin

    # ------------------------------------------------------------------ connections

    def _connections(self) -> tuple:
        """A source and a target connection for one table: one a finished table gave back, else
        new ones. A new PostgreSQL session costs a SCRAM handshake on both ends and a backend's
        start (~10 ms of CPU): 200 small tables opened 400 of them (tests/bench/many_tables.py)."""
        while True:
            with self._idle_lock:
                pair = self._idle.pop() if self._idle else None
            if pair is None:
                break
            if self._alive(pair[0], self.engine.errors) and self._alive(pair[1], self.store.errors):
                return pair
            for conn in pair:   # the server restarted since (or dropped it): a new session
                conn.close()
        src = self.engine.connect()
        try:
            return src, self.store.connect()
        except BaseException:
            src.close()
            raise

    @staticmethod
    def _alive(conn, errors: tuple) -> bool:
        """A kept session still answers (one round trip, ~0.1 ms; a new one costs ~10 ms)."""
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT 1")
            conn.rollback()
            return True
        except errors:
            return False

    def _give_back(self, src, tgt) -> None:
        """Keeps a table's connections for the next one: only after it ended cleanly (its snapshot
        closed, the target's transaction committed), so no session state crosses tables."""
        src.rollback()
        tgt.rollback()
        with self._idle_lock:
            self._idle.append((src, tgt))

    def close(self) -> None:
        with self._idle_lock:
            idle, self._idle = self._idle, []
        for pair in idle:
            for conn in pair:
                conn.close()

    # ------------------------------------------------------------------ driver steps

    def run(self, tables: list[str]) -> list[LoadResult]:
        for name in tables:
            self.cfg.table(name)  # unknown table -> ConfigError naming the pipeline's tables
        try:
            src, tgt = self._connections()
            try:
                self.engine.check_capture(src, f"source of pipeline {self.cfg.name}")
                src.rollback()
                refused = self.engine.refusals(src, self.cfg, tables)   # again: the source may have changed since
                state.migrate(tgt)
                refusals.record(self.cfg, tgt, refused, checked=[])
            except BaseException:
                src.close()
                tgt.close()
                raise
            self._give_back(src, tgt)
            if refused and len(refused) == len(tables):
                raise SourceError(f"pipeline {self.cfg.name}: every table to load is refused: "
                                  + "; ".join(refusals.message(self.cfg, r) for r in refused.values()))
            return self.load_tables([name for name in tables if name not in refused])
        finally:
            self.close()

    def load_tables(self, tables: list[str]) -> list[LoadResult]:
        """Each table's load, `spark.tables_at_once` of them at a time (each its own snapshot,
        epoch and transaction; their Spark jobs share the cores). A table that fails does not stop
        the others: every load runs to its end, each failure is recorded in its table's state, and
        the first one (in the order asked) is raised — its type sets the job's exit status."""
        at_once = min(self.cfg.spark.tables_at_once if self.store.capabilities().concurrent_loads else 1, len(tables))
        if at_once <= 1:
            return [self.load_table(name) for name in tables]
        log.info("%s: loading %d tables, %d at once", self.cfg.name, len(tables), at_once)
        with ThreadPoolExecutor(at_once, thread_name_prefix="tideline-load") as pool:
            futures = [(name, pool.submit(self.load_table, name)) for name in tables]
            outcomes = [(name, fut.exception(), fut) for name, fut in futures]
        failed = [(name, exc) for name, exc, _fut in outcomes if exc is not None]
        if failed:
            if len(failed) > 1:
                log.error("%s: %d of %d tables failed to load: %s", self.cfg.name, len(failed), len(tables),
                          ", ".join(name for name, _exc in failed))
            raise failed[0][1]
        return [fut.result() for _name, _exc, fut in outcomes]

    def load_table(self, table: str) -> LoadResult:
        cfg, tcfg = self.cfg, self.cfg.table(table)
        label = f"{cfg.name}.{table}"
        topic = cfg.topic(table)
        started = time.monotonic()
        src, tgt = self._connections()
        schema, shadow = cfg.target_schema(table), shadow_name(table)
        run_id = None
        try:
            shape = self.engine.describe(src, cfg.source_schema(table), table, tcfg)
            src.rollback()
            self.store.prepare_schema(tgt, schema, label)
            before = state.get(tgt, cfg.name, table)
            tgt.rollback()
            epoch = state.claim_epoch(tgt, cfg.name, table, run_owner("full_load"), topic)
            why = (f"re-snapshot because: {before.last_error}; " if before is not None
                   and before.phase == "needs_resnapshot" and before.last_error else "")
            run_id = state.run_start(tgt, cfg.name, table, "full_load", epoch, f"{why}topic {topic}")
            # 1. the handover position, before the snapshot opens
            # (the id first: a topic recreated in between reloads, never resumes in the wrong one)
            topic_id, offsets = kafka_offsets.handover(self.kafka.kafka_access, topic, admin=self.kafka_admin)
            log.info("%s: epoch %d; stream will resume from %s offsets %s", label, epoch, topic, offsets)
            # 2. the consistent read (the engine says how), held open for the whole read
            snap = self.engine.open_snapshot(src, shape, cfg.spark.parallelism)
            tree = self.engine.partition_tree(src, cfg.source_schema(table), table)   # as the snapshot sees it
            log.info("%s: snapshot %s%s; reading in %d partitions by %s", label, snap.snapshot_id,
                     f" has {snap.rows:,} rows" if snap.rows is not None else "", len(snap.predicates),
                     f"key ({', '.join(shape.primary_key)})" if shape.primary_key else "block range (no key)")
            if self.store.capabilities().snapshot_publish == "commit":
                # 3. one commit of the whole snapshot, the handover offsets in its summary. The state
                # row stays locked from here to the state's commit below: no newer run can claim the
                # table while this load commits, nor between its Iceberg commit and its state.
                with tgt.cursor() as cur:
                    state.check_epoch(cur, cfg.name, table, epoch)
                landed = commit_snapshot(self.spark, self.engine, self.store, src, shape, snap, schema, label,
                                         cfg.name, epoch, offsets)
                self.engine.close_snapshot(src)
                copy_secs = time.monotonic() - started
                snapshot_rows = landed if snap.rows is None else snap.rows
                how, published = "Spark JDBC -> Iceberg", "committed"
                if snapshot_rows != landed:
                    raise LoadVerificationError(
                        f"{label}: the snapshot holds {snapshot_rows:,} rows but the Iceberg commit holds {landed:,}; "
                        f"the stream will not start from it. Rerun the full load.")
            else:
                # 3. shadow table, COPY from every partition
                self.store.begin_snapshot(tgt, shape, schema, shadow)
                small = snap.rows is not None and snap.rows <= DRIVER_COPY_MAX_ROWS and len(snap.predicates) == 1
                figures = copy_source_rows(self.spark, self.engine, self.store, tgt, shape,
                                           self.engine.read_query(src, shape), snap.predicates, schema,
                                           shadow, label, session_init=snap.session_init, started=started,
                                           run_id=run_id, snapshot_conn=src if small else None)
                self.engine.close_snapshot(src)  # the snapshot may close now: every partition has read
                copy_secs = time.monotonic() - started
                read = sum(f["rows"] for f in figures)
                landed = sum(f["copied"] for f in figures)
                snapshot_rows = read if snap.rows is None else snap.rows
                if not (snapshot_rows == read == landed):
                    raise LoadVerificationError(
                        f"{label}: the snapshot holds {snapshot_rows:,} rows but {read:,} were read and "
                        f"{landed:,} stored by COPY; nothing was swapped in. Rerun the full load.")
                # 4. key (rejects duplicates), then swap with the state in one target transaction
                self.store.seal_snapshot(tgt, shape, schema, shadow, epoch)
                tgt.commit()
                how, published = figures[0]["how"], "swapped"
            with tgt, tgt.cursor() as cur:
                state.check_epoch(cur, cfg.name, table, epoch)
                if published == "swapped":
                    self.store.publish_snapshot(cur, shape, schema, shadow, label)
                state.finish_full_load(cur, pipeline=cfg.name, table=table, epoch=epoch, topic=topic,
                                       offsets=offsets, snapshot_id=snap.snapshot_id, snapshot_at=snap.snapshot_at,
                                       snapshot_xmin=snap.position, rows=snapshot_rows, topic_id=topic_id)
                state.set_partitions(cur, cfg.name, table, tree)
                secs = time.monotonic() - started
                state.run_end(cur, run_id, "succeeded", snapshot_rows,
                              f"{why}{len(snap.predicates)} partition{'s' if len(snap.predicates) != 1 else ''} ({how}), {secs:.1f}s "
                              f"(read+copy {copy_secs:.1f}s), "
                              f"resume offsets {offsets}, {self.engine.label} snapshot {snap.snapshot_id}")
            result = LoadResult(table, snapshot_rows, secs, len(snap.predicates), epoch, offsets)
            log.info("%s: loaded %s rows in %.1fs (%s rows/s; read+copy %.1fs); live table %s; "
                     "stream resumes from %s", label, f"{result.rows:,}", secs, f"{result.rows_per_s:,.0f}",
                     copy_secs, published, offsets)
        except BaseException as exc:
            try:
                self._fail(tgt, table, shadow, run_id, exc)
            finally:
                src.close()
                tgt.close()
            raise
        self._give_back(src, tgt)
        return result

    def _fail(self, tgt, table: str, shadow: str, run_id: int | None, exc: BaseException) -> None:
        """Leaves live table and state as they were: drop the shadow, record the error and the run."""
        message = str(exc) if isinstance(exc, TidelineError) else f"{type(exc).__name__}: {exc}"
        log.error("%s.%s: full load failed: %s", self.cfg.name, table, message)
        try:
            tgt.rollback()
            with tgt, tgt.cursor() as cur:
                if self.store.capabilities().snapshot_publish == "shadow_swap":
                    self.store.drop_staging(cur, self.cfg.target_schema(table), shadow)
                if run_id is not None:
                    state.run_end(cur, run_id, "fenced" if isinstance(exc, FencedError) else "failed",
                                  None, message[:2000])
            if run_id is not None:
                state.record_error(tgt, self.cfg.name, table, f"full load: {message[:2000]}")
        except Exception as cleanup_exc:  # the original error matters more; report both
            log.error("%s.%s: cleanup after the failure also failed: %s", self.cfg.name, table, cleanup_exc)
