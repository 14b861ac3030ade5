"""Full load of one or more tables: one consistent snapshot per table, which its target makes the
table's rows atomically together with the state (Target.publish_snapshot: PostgreSQL fills a shadow
table by the COPY pipes of load.copy_rows and swaps it in; Iceberg commits Spark's write once).

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
from tideline.load import chunked
from tideline.load.copy_rows import copy_source_rows, spread_partitions
from tideline.state import chunks
from tideline.core.config import PipelineConfig
from tideline.core.connections import Conn, get_connection
from tideline.core import column_hash
from tideline.core.chunked_load import use_chunks
from tideline.core.errors import FencedError, LoadVerificationError, RefusedValue, SourceError, TidelineError
from tideline.core.settings import CLIENT_COMPILER_ONLY
from tideline.core.table_extras import TableExtras
from tideline.core.table_shape import TableShape
from tideline.engines import SourceEngine
from tideline.spark_session import master_cores, master_url
from tideline.targets import Published, SnapshotLoad, Target

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
    return {"spark.driver.extraJavaOptions": PIPED_LOAD_JAVA_OPTIONS} if loads_by_pipe(source, target_kind) else {}


def loads_by_pipe(source: Conn, target_kind: str) -> bool:
    """Whether every row of a load goes source -> target as a COPY piped by Python, never
    through the JVM (a source that pipes, engines.PipesRows, into a target that does not write in the JVM)."""
    return (engines.spec(engines.kind_of_connection(source)).capabilities.pipes
            and not targets.capabilities(target_kind).writes_in_jvm)


def session_needed(cfg: PipelineConfig) -> bool:
    """Whether a full load of `cfg` starts its Spark session at once: not when its master is
    local and every row is piped by an engine whose pipes run well side by side in one process
    (SourceEngine.pipes_in_threads) — the driver pipes the ranges itself, as many at once as the
    master has cores (spark_session.driver_streams): Spark in local mode would only run the same
    pipes in Python workers on the same host, after a SparkContext's start-up that competes with
    the databases for the cores (tests/bench/full_load_mariadb.py) — nor when its tables' data
    files are written from CSV (files_written). Anything that does use the session starts it then."""
    engine, target = engines.engine_class(cfg.source.kind), targets.capabilities(cfg.target.kind)
    piped = issubclass(engine, engines.PipesRows) and engine.pipes_in_threads and not target.writes_in_jvm
    return master_cores(master_url()) is None or not (piped or files_written(cfg))


def files_written(cfg: PipelineConfig) -> bool:
    """Whether a load of `cfg` writes its tables' data files itself, from the source's CSV (an
    engine that reads CSV into a target that loads from it: Capabilities.loads_from_csv), with no
    option that only Spark's writer fills (extra columns, partition transforms): it then needs a
    Spark session for nothing but its commits, which Iceberg's Java API makes without one
    (spark_session.jvm_now). A table that turns out to need Spark (a list column) starts it."""
    if not (engines.engine_class(cfg.source.kind).reads_csv and targets.capabilities(cfg.target.kind).loads_from_csv):
        return False
    return not any(TableExtras.of(t).columns or t.partition_by for t in cfg.tables)


def run_owner(kind: str) -> str:
    """Who claims an epoch, in words a person can trace back to a task."""
    airflow = os.environ.get("AIRFLOW_CTX_DAG_RUN_ID")
    where = f" (dag run {airflow}, try {os.environ.get('AIRFLOW_CTX_TRY_NUMBER', '?')})" if airflow else ""
    return f"{kind} pid {os.getpid()} on {socket.gethostname()} at {datetime.now().isoformat(timespec='seconds')}{where}"


class FullLoad:
    """`handover(topic) -> (topic id, offsets)`: where the stream will resume, taken before each
    table's snapshot opens — Kafka's end offsets (kafka_offsets.handover) unless given; the target
    contract tests (tests/contract) give a position of their own to run a load without Kafka."""

    def __init__(self, cfg: PipelineConfig, spark, environ=None, handover=None, retained=None):
        self.cfg = cfg
        self.spark = spark
        self.source: Conn = get_connection(cfg.source.conn_id, environ)
        self.engine: SourceEngine = engines.for_pipeline(cfg, self.source)
        self.target: Conn = get_connection(cfg.target.conn_id, environ)
        self.store: Target = targets.for_pipeline(cfg, self.target)
        self.kafka: Conn = get_connection(cfg.kafka.conn_id, environ)
        self._kafka_admin = None
        self._idle: list[tuple] = []   # (source, target) connections a finished table gave back
        self._idle_lock = threading.Lock()
        self.handover = handover or (lambda topic: kafka_offsets.handover(self.kafka.kafka_access, topic,
                                                                          admin=self.kafka_admin))
        # `retained(topic) -> (topic id, earliest offsets)`: what a chunked load resumed after a
        # stop is checked against (its stream resumes from offsets taken before its first chunk)
        self.retained = retained or (lambda topic: (
            kafka_offsets.topic_id(self.kafka.kafka_access, topic),
            kafka_offsets.watermarks(self.kafka.kafka_access, topic)[0]))

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
                if isinstance(self.engine, engines.Captures):   # a load starts the stream's position
                    self.engine.check_capture(src, f"source of pipeline {self.cfg.name}")
                src.rollback()
                refused = self.engine.refusals(src, self.cfg, tables)   # again: the source may have changed since
                state.migrate(tgt)
                refusals.record(self.cfg, tgt, refused, checked=[])
                landed = state.loaded_by_task(tgt, self.cfg.name, tables, os.environ)
                tgt.rollback()
            except BaseException:
                src.close()
                tgt.close()
                raise
            self._give_back(src, tgt)
            if refused and len(refused) == len(tables):
                raise SourceError(f"pipeline {self.cfg.name}: every table to load is refused: "
                                  + "; ".join(refusals.message(self.cfg, r) for r in refused.values()))
            if landed:   # a retry of the task: what its earlier try loaded stays as it landed
                log.info("%s: %s loaded by an earlier try of this task: not loaded again", self.cfg.name,
                         ", ".join(landed))
            return self.load_tables([name for name in tables if name not in refused and name not in landed])
        finally:
            self.close()

    def load_tables(self, tables: list[str]) -> list[LoadResult]:
        """Each table's load, `spark.tables_at_once` of them at a time (each its own snapshot,
        epoch and transaction; their Spark jobs share the cores). A table that fails does not stop
        the others: every load runs to its end, each failure is recorded in its table's state, and
        the first one (in the order asked) is raised — its type sets the job's exit status."""
        at_once = min(self.cfg.spark.tables_at_once if self.store.capabilities().concurrent_loads else 1, len(tables))
        outcomes: list[tuple[str, BaseException | None, LoadResult | None]] = []
        if at_once <= 1:
            for name in tables:
                try:
                    outcomes.append((name, None, self.load_table(name)))
                except Exception as exc:   # noqa: BLE001 — recorded in its table's state, raised below
                    outcomes.append((name, exc, None))
        else:
            log.info("%s: loading %d tables, %d at once", self.cfg.name, len(tables), at_once)
            with ThreadPoolExecutor(at_once, thread_name_prefix="tideline-load") as pool:
                futures = [(name, pool.submit(self.load_table, name)) for name in tables]
                outcomes = [(name, fut.exception(), None if fut.exception() else fut.result())
                            for name, fut in futures]
        failed = [(name, exc) for name, exc, _r in outcomes if exc is not None]
        halted = [name for name, exc in failed if isinstance(exc, RefusedValue)]
        if halted:   # halted alone (load_table): the others load and stream; the watch DAG alerts
            log.error("%s: %s HALTED: a value its target cannot hold (see its state); the other tables go on",
                      self.cfg.name, ", ".join(halted))
        failed = [(name, exc) for name, exc in failed if name not in halted]
        if failed:
            if len(failed) > 1:
                log.error("%s: %d of %d tables failed to load: %s", self.cfg.name, len(failed), len(tables),
                          ", ".join(name for name, _exc in failed))
            raise failed[0][1]
        return [r for _name, exc, r in outcomes if r is not None]

    def load_table(self, table: str) -> LoadResult:
        cfg, tcfg = self.cfg, self.cfg.table(table)
        extras = TableExtras.of(tcfg, cfg.source.kind)
        label = f"{cfg.name}.{table}"
        topic = cfg.topic(table)
        started = time.monotonic()
        src, tgt = self._connections()
        schema = cfg.target_schema(table)
        run_id = shape = landing = read = None
        try:
            shape = self.engine.describe(src, cfg.source_schema(table), table, tcfg)
            src.rollback()
            names = cfg.target_names(table)
            landing = names.shape(shape)   # the target's names for it (core.target_names); the source reads its own
            in_chunks, mode = self._mode(src, shape, tcfg)
            where = chunked.kept_rows(cfg, table)   # the table's row_filter: every read keeps only its rows
            self.store.prepare_schema(tgt, schema, label)
            before = state.get(tgt, cfg.name, table)
            tgt.rollback()
            epoch = state.claim_epoch(tgt, cfg.name, table, run_owner("full_load"), topic)
            why = (f"re-snapshot because: {before.last_error}; " if before is not None
                   and before.phase == "needs_resnapshot" and before.last_error else "")
            run_id = state.run_start(tgt, cfg.name, table, "full_load", epoch, f"{why}{mode}; topic {topic}")
            if in_chunks:   # offsets, plan, then chunks each in its own transaction (load.chunked)
                read = chunked.open_read(self, src, tgt, shape, table, epoch)
                snap, offsets, topic_id, why = read.snap, read.offsets, read.topic_id, f"{why}{read.why}; "
                tree = self.engine.partition_tree(src, cfg.source_schema(table), table)
                src.rollback()   # no transaction held on the source while the chunks read
            else:
                if chunks.abandon_open(tgt, cfg.name, table, f"{mode}: a consistent load replaced it"):
                    log.warning("%s: a chunked load cut off earlier is given up: %s", label, mode)
                # 1. the handover position, before the snapshot opens
                # (the id first: a topic recreated in between reloads, never resumes in the wrong one)
                topic_id, offsets = self.handover(topic)
                # 2. the consistent read (the engine says how), held open for the whole read
                snap = self.engine.open_snapshot(src, shape, cfg.spark.parallelism)
                if extras.source_order:   # its versions follow the source's log
                    self.engine.order_snapshot(snap, label)
                if where is not None and snap.rows is not None:   # the rows the filter keeps, in the snapshot
                    snap.rows = self.engine.count_where(src, cfg.source_schema(table), table, where)
                tree = self.engine.partition_tree(src, cfg.source_schema(table), table)   # as the snapshot sees it
            state.expect_rows(tgt, run_id, snap.rows if read is None else read.rows_estimate)
            log.info("%s: epoch %d; stream will resume from %s offsets %s", label, epoch, topic, offsets)
            log.info("%s: %s%s; reading in %d partitions by %s", label,
                     read.why if read is not None else f"snapshot {snap.snapshot_id}",
                     f" has {snap.rows:,} rows" if snap.rows is not None else "", len(snap.predicates),
                     f"key ({', '.join(shape.primary_key)})" if shape.primary_key else "block range (no key)")

            def fill(into: str) -> list[dict]:
                """The snapshot's rows COPYed into `into` (a target that takes COPY); closes the snapshot."""
                if read is not None:
                    return chunked.fill(self, read, src, tgt, landing, schema, into, label, epoch, started, run_id)
                small = snap.rows is not None and snap.rows <= DRIVER_COPY_MAX_ROWS and len(snap.predicates) == 1
                figures = copy_source_rows(self.spark, self.engine, self.store, tgt, landing.ordered(snap.order),
                                           self.engine.read_query(src, shape.ordered(snap.order), where),
                                           snap.predicates, schema, into,
                                           label, session_init=snap.session_init, started=started, run_id=run_id,
                                           snapshot_conn=src if small else None, where=where)
                self.engine.close_snapshot(src)  # the snapshot may close now: every partition has read
                return figures

            def record(cur, published: Published) -> None:
                """The state that starts the stream from the handover offsets, with the rows."""
                state.finish_full_load(cur, pipeline=cfg.name, table=table, epoch=epoch, topic=topic,
                                       offsets=offsets, snapshot_id=snap.snapshot_id, snapshot_at=snap.snapshot_at,
                                       snapshot_xmin=snap.position, rows=published.rows, topic_id=topic_id,
                                       hashed=column_hash.hashed_columns(shape), names=names.recorded(schema))
                state.set_partitions(cur, cfg.name, table, tree)
                if read is not None:
                    chunks.end(cur, read.load_id, "succeeded")
                parts = len(snap.predicates)
                state.run_end(cur, run_id, "succeeded", published.rows,
                              f"{why}{parts} partition{'s' if parts != 1 else ''} ({published.how}), "
                              f"{time.monotonic() - started:.1f}s (read+copy {published.copy_secs:.1f}s), "
                              f"resume offsets {offsets}, {self.engine.label} snapshot {snap.snapshot_id}")

            # 3. the target makes the snapshot its rows, atomically, with the state (Target.publish_snapshot)
            published = self.store.publish_snapshot(SnapshotLoad(
                self.spark, self.engine, src, tgt, landing, snap, schema, label, cfg.name, epoch, offsets, fill=fill,
                fence=lambda cur: state.check_epoch(cur, cfg.name, table, epoch), record=record,
                resumed=read is not None and read.resumed, chunked=read, parallelism=cfg.spark.parallelism,
                chunk_done=lambda cur, staged: chunked.staged(cur, read, staged, epoch, run_id),
                extras=extras, partition_by=names.partition_by(tcfg.partition_by), where=where,
                spread=lambda items, copier_for, in_threads=False: spread_partitions(
                    self.spark, items, copier_for, label, started,
                    (self.store, run_id, schema, landing.name) if run_id is not None else None, in_threads)))
            secs = time.monotonic() - started
            result = LoadResult(table, published.rows, secs, len(snap.predicates), epoch, offsets)
            log.info("%s: loaded %s rows in %.1fs (%s rows/s; read+copy %.1fs); live table %s; "
                     "stream resumes from %s", label, f"{result.rows:,}", secs, f"{result.rows_per_s:,.0f}",
                     published.copy_secs, published.published, offsets)
        except BaseException as exc:
            try:   # a chunked load keeps its shadow table and chunks for the next run to resume
                self._fail(tgt, table, landing if read is None or isinstance(exc, LoadVerificationError) else None,
                           run_id, exc)
                if isinstance(exc, RefusedValue) and run_id is not None:
                    self._halt(tgt, table, epoch, exc)
            finally:
                src.close()
                tgt.close()
            raise
        self._give_back(src, tgt)
        return result

    def _halt(self, tgt, table: str, epoch: int, exc: RefusedValue) -> None:
        """The table halts with the value's message and what to do: nothing of it is loaded, and it
        waits for a person (the watch DAG alerts it) while the pipeline's other tables go on."""
        with tgt, tgt.cursor() as cur:
            state.halt_in(cur, pipeline=self.cfg.name, table=table, epoch=epoch, event=None, during_load=True,
                          error=f"full load: {str(exc).rstrip('. ')}. Once fixed, trigger sync_{self.cfg.name} "
                                f"(action=auto, or Resume in the view; or action=full_reload and tables=[{table}]): it "
                                f"is loaded again from a new snapshot, never streamed without its rows.")

    def _mode(self, src, shape: TableShape, tcfg) -> tuple[bool, str]:
        """(load in chunks?, why): the table's `snapshot` setting, and for `auto` its size (the
        catalog's estimate); chunks need a key, a source engine and a target that can."""
        can = (isinstance(self.engine, engines.LoadsInChunks) and self.store.capabilities().chunked_loads
               and bool(shape.primary_key))
        if tcfg.history:   # its first versions start at one point in time: the snapshot's
            return False, "history: one consistent snapshot"
        estimate = self.engine.estimate_rows(src, shape) if can and tcfg.snapshot == "auto" else None
        return use_chunks(tcfg.snapshot, estimate, can)

    def _fail(self, tgt, table: str, shape: TableShape | None, run_id: int | None, exc: BaseException) -> None:
        """Leaves live table and state as they were: the target discards what the snapshot left
        (not given a shape: a chunked load's shadow table is kept to resume), the error and the
        run are recorded."""
        message = str(exc) if isinstance(exc, TidelineError) else f"{type(exc).__name__}: {exc}"
        log.error("%s.%s: full load failed: %s", self.cfg.name, table, message)
        try:
            tgt.rollback()
            with tgt, tgt.cursor() as cur:
                if shape is not None:
                    self.store.discard_snapshot(cur, shape, self.cfg.target_schema(table))
                if run_id is not None:
                    state.run_end(cur, run_id, "fenced" if isinstance(exc, FencedError) else "failed",
                                  None, message[:2000])
            if run_id is not None:
                state.record_error(tgt, self.cfg.name, table, f"full load: {message[:2000]}")
        except Exception as cleanup_exc:  # the original error matters more; report both
            log.error("%s.%s: cleanup after the failure also failed: %s", self.cfg.name, table, cleanup_exc)
