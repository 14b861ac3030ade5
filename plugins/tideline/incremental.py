"""The change stream: Kafka (Debezium events) -> Spark Structured Streaming -> target, exactly once.

Position: the target's state table is the truth. A run starts from the resume offsets recorded
there (by the full load or by the last committed batch); Spark's checkpoint is per run and
disposable, so a lost, stale or foreign checkpoint can never move the position. Each batch is
committed in one target transaction that checks every table's fencing epoch, skips events at
offsets already applied, applies schema changes, deletes and upserts, and advances the offsets.
"""
from __future__ import annotations

import json
import os
import logging
import shutil
import signal
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone

import psycopg2
import pyarrow as pa
import pyarrow.compute as pc

from tideline import alerts, engines, kafka_offsets, refusals, state, targets
from tideline.core import schema_drift
from tideline.core.batch_events import SplitBatch, newest_source_commit, split_batch
from tideline.core.change_events import RECORD_COLUMNS, decode_records, too_large_marker
from tideline.core.config import PipelineConfig
from tideline.core.connections import get_connection
from tideline.core.errors import (DataLossError, FencedError, HaltedError, ResnapshotRequired, SourceError,
                                  TidelineError)
from tideline.core.offsets import coverage_gaps, merge_committed, starting_offsets
from tideline.core.source_shapes import partition_tree_change
from tideline.core.table_shape import Column
from tideline.full_load import run_owner
from tideline.targets import ApplyRefused

log = logging.getLogger("tideline.incremental")

FENCE_CHECK_S = 10.0   # how soon an idle stream notices that a newer run took its tables
CAPTURE_CHECK_S = 30.0  # how soon a stream says that capture failed (no table receives a change)


# Events per Spark task of a batch. Each task's result (its raw records as Arrow, ~3.5 MB at the
# benchmark's ~570 bytes per event) is held by the driver JVM until Python has collected it; results
# this small die young, where 25,000-event results overflowed the young generation into the old one
# and cost ~10 full collections per 200,000-event batch (~1.5 s; tests/bench/incremental.py: 28
# full GCs per run -> 2). A small batch stays one task per Kafka partition.
TASK_EVENTS = 6_250


@dataclass
class StreamTable:
    name: str
    topic: str
    epoch: int
    primary_key: list[str]
    columns: list[Column] = field(default_factory=list)
    partitions: int | None = None   # the change topic's partition count at the full load
    source: dict[str, Column] = field(default_factory=dict)   # the source's columns: how events carry
                                                               # each, what existing rows hold


@dataclass
class BatchFigures:
    events: int = 0
    upserts: int = 0
    deletes: int = 0
    skipped: int = 0
    dead_letters: int = 0
    per_table: dict[str, tuple[int, int]] = field(default_factory=dict)
    batch_id: int | None = None
    end_offsets: dict[str, dict[str, int]] = field(default_factory=dict)


@dataclass
class _ReadBatch:
    """A batch read and decoded by Spark's batch thread, waiting for the committer."""
    spark_batch_id: int
    batch: SplitBatch
    started: float
    started_at: datetime
    read_s: float


def connection_lost(exc: BaseException) -> bool:
    """A failure of the connection or the server's availability (not of the data): worth waiting
    out. psycopg2 gives no SQLSTATE when the connection itself broke."""
    code = getattr(exc, "pgcode", None)
    return code is None or code[:2] in ("08", "57", "53", "40")


def _unapplied(part: dict, committed: dict[str, dict[int, int]]) -> int:
    """Events of one batch partition (offsets lo..hi) at or above the table's committed position."""
    return part["hi"] - max(part["lo"], committed[part["topic"]].get(part["partition"], 0)) + 1


class IncrementalRun:
    def __init__(self, cfg: PipelineConfig, spark, mode: str = "continuous", tables: list[str] | None = None,
                 environ=None):
        if mode not in ("continuous", "available_now"):
            raise ValueError(f"mode must be continuous or available_now, not {mode!r}")
        self.cfg, self.spark, self.mode = cfg, spark, mode
        self.requested = tables
        self.source = get_connection(cfg.source.conn_id, environ)
        self._environ = environ
        self._capture_said: str | None = None
        self._trees: dict[str, dict] = {}   # partitioned tables: their partitions as last seen
        self.engine = engines.for_source(self.source)
        self.target = get_connection(cfg.target.conn_id, environ)
        self.store = targets.for_target(self.target)
        self.bootstrap = get_connection(cfg.kafka.conn_id, environ).kafka_bootstrap
        self.owner = run_owner("incremental")
        self.tables: dict[str, StreamTable] = {}
        self.by_topic: dict[str, StreamTable] = {}
        # each topic's (earliest, latest) offsets as the coverage check saw them at the start
        self._watermarks: dict[str, tuple[dict[int, int], dict[int, int]]] = {}
        self.failure: BaseException | None = None
        self.batches = 0
        self.query = None
        self._tgt = None
        self._src = None
        self._consumer = None
        self.halted: dict[str, str] = {}   # tables halted by this run: name -> why (the others go on)
        self.run_ids: dict[str, int] = {}
        self.applied: dict[str, int] = {}  # events applied per table by this run
        # one thread commits batch N to the target while Spark's batch thread reads N+1
        self._committer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tideline-commit")
        self._inflight: Future | None = None

    # ------------------------------------------------------------------ start

    def prepare(self) -> dict[str, dict[str, int]]:
        """Claims the tables, checks Kafka still covers their positions; returns startingOffsets."""
        cfg = self.cfg
        self._tgt = self.store.connect()
        self._src = self.engine.connect(autocommit=True)
        state.migrate(self._tgt)
        names = self.requested or [t.name for t in cfg.tables if t.mode == "cdc"]
        waiting = []
        for name in names:
            tcfg = cfg.table(name)
            if tcfg.mode != "cdc":
                raise SourceError(f"{cfg.name}.{name} is in batch mode; the change stream only applies cdc tables")
            st = state.get(self._tgt, cfg.name, name)
            if st is None or st.phase != "streaming" or st.resume_offsets is None:
                phase = st.phase if st else "new"
                why = f": {st.last_error}" if st and st.last_error else ""
                log.warning("%s.%s is %s%s: not streamed by this run (the sync DAG loads it first)",
                            cfg.name, name, phase, why)
                waiting.append(f"{name} ({phase}{why})")
                continue
            refusal = self.engine.refusal(self._src, cfg, name)   # again: the source may have changed
            if refusal is not None:
                state.refuse(self._tgt, cfg.name, name, refusals.message(cfg, refusal))
                log.error("%s", refusals.message(cfg, refusal))
                waiting.append(f"{name} (refused: {refusal.reason})")
                continue
            shape = self.engine.describe(self._src, cfg.source_schema(name), name, tcfg, for_stream=True)
            if not shape.primary_key:
                raise SourceError(f"{cfg.name}.{name}: tables without a primary key can be loaded but not streamed "
                                  f"yet. Add a primary key at the source, or put the table in batch mode.")
            source = {c.name: c for c in shape.columns}
            self._track_partitions(name, st)
            self.tables[name] = StreamTable(name, cfg.topic(name), 0, list(shape.primary_key),
                                            self._target_columns(name, source), source=source)
        if not self.tables:
            raise SourceError(f"pipeline {cfg.name}: no table is ready to stream: {'; '.join(waiting)}. "
                              f"A table streams once a full load put it in phase 'streaming' (the sync DAG does "
                              f"that by itself); a halted table needs the fix its error names first.")
        self.by_topic = {t.topic: t for t in self.tables.values()}
        for t in self.tables.values():
            t.epoch = state.claim_epoch(self._tgt, cfg.name, t.name, self.owner, t.topic)
            # the run history: a stream killed before it could close its row is closed as
            # abandoned, with the epoch of the run that took over, when the next stream starts
            self.run_ids[t.name] = state.run_start(self._tgt, cfg.name, t.name, "incremental", t.epoch,
                                                   f"{self.mode} stream by {self.owner}")
        return self._check_coverage(self._tgt)

    def _batch_events(self) -> int:
        """Events per batch for this run, from the size of the newest events in the topics
        (stream.max_batch_mb); logged when the size lowers it."""
        stream = self.cfg.stream
        mean = kafka_offsets.mean_event_bytes(self.bootstrap, self._watermarks)
        events = stream.batch_events(mean)
        if events < stream.max_offsets_per_trigger:
            log.info("batches of at most %s events: the newest events weigh %s bytes on average, and "
                     "stream.max_batch_mb=%g (stream.max_offsets_per_trigger=%s)", f"{events:,}", f"{mean:,.0f}",
                     stream.max_batch_mb, f"{stream.max_offsets_per_trigger:,}")
        return events

    def _check_coverage(self, conn) -> dict[str, dict[str, int]]:
        """Kafka must still hold every committed resume offset; otherwise the table needs a reload."""
        start: dict[str, dict[str, int]] = {}
        for t in self.tables.values():
            st = state.get(conn, self.cfg.name, t.name)
            conn.rollback()
            self._watermarks[t.topic] = kafka_offsets.watermarks(self.bootstrap, t.topic)
            earliest, latest = self._watermarks[t.topic]
            t.partitions = st.raw.get("topic_partitions")
            gaps = coverage_gaps(t.topic, st.resume_offsets, earliest, latest, t.partitions)
            if gaps:
                reason = "; ".join(g.describe() for g in gaps)
                what = ("Kafka no longer holds what the stream needs" if any(g.partition >= 0 for g in gaps)
                        else "the stream cannot resume exactly")
                self._needs_resnapshot(t.name, f"{what}: {reason}")
                raise DataLossError(f"{self.cfg.name}.{t.name}: {reason}. The table is marked needs_resnapshot; "
                                    f"the sync DAG reloads it by itself (or run action=full_reload).")
            start[t.topic] = {str(p): o for p, o in starting_offsets(st.resume_offsets, latest).items()}
            lag = sum(latest[p] - o for p, o in starting_offsets(st.resume_offsets, latest).items())
            log.info("%s.%s: epoch %d, resuming %s at %s (%s events behind)", self.cfg.name, t.name, t.epoch,
                     t.topic, dict(sorted(st.resume_offsets.items())), f"{lag:,}")
        return start

    def _target_columns(self, table: str, source: dict[str, Column]) -> list[Column]:
        with self._tgt.cursor() as cur:
            cols = self._columns_in_txn(cur, table, source)
        self._tgt.rollback()
        return cols

    def _needs_resnapshot(self, table: str, why: str) -> None:
        conn = self.store.connect()
        try:
            state.set_phase(conn, self.cfg.name, table, "needs_resnapshot", why)
        finally:
            conn.close()

    # ------------------------------------------------------------------ run

    def run(self) -> None:
        """Streams until stopped (continuous) or until caught up (available_now). Raises the
        TidelineError that ended it, after recording what it means in the state."""
        checkpoint, previous = None, None
        fence_watch = threading.Event()
        try:
            start = self.prepare()
            if self.cfg.stream.checkpoint_dir:
                os.makedirs(self.cfg.stream.checkpoint_dir, exist_ok=True)
            checkpoint = tempfile.mkdtemp(prefix=f"tideline-{self.cfg.name}-", dir=self.cfg.stream.checkpoint_dir)
            stream = self.cfg.stream
            batch_events = self._batch_events()
            reader = (self.spark.readStream.format("kafka")
                      .option("kafka.bootstrap.servers", self.bootstrap)
                      .option("subscribe", ",".join(sorted(self.by_topic)))
                      .option("startingOffsets", json.dumps(start))
                      .option("failOnDataLoss", "true")
                      .option("maxOffsetsPerTrigger", batch_events)
                      # a big batch is read as tasks of at most TASK_EVENTS events (see there)
                      .option("maxRecordsPerPartition", TASK_EVENTS)
                      .option("kafka.isolation.level", "read_committed")
                      .load())
            writer = reader.writeStream.foreachBatch(self._apply_batch).option("checkpointLocation", checkpoint)
            writer = (writer.trigger(availableNow=True) if self.mode == "available_now"
                      else writer.trigger(processingTime=f"{stream.trigger_interval_s} seconds"))
            previous = self._install_sigterm()
            self.query = writer.queryName(f"tideline_{self.cfg.name}").start()
            threading.Thread(target=self._watch_fence, args=(fence_watch,), daemon=True,
                             name="tideline-fence-watch").start()
            log.info("streaming %d table(s) of pipeline %s (%s mode)", len(self.tables), self.cfg.name, self.mode)
            try:
                self.query.awaitTermination()
            except Exception as exc:  # the query died: find out why, record it, raise the meaning
                self._drain()
                self._explain_failure(exc)
            self._drain()
            if self.failure is not None:
                self._explain_failure(self.failure)
            if self.halted:
                raise HaltedError(f"pipeline {self.cfg.name}: {len(self.halted)} table(s) halted, the others were "
                                  f"applied: " + " | ".join(self.halted.values()), table=next(iter(self.halted)))
        except (FencedError, HaltedError, ResnapshotRequired) as exc:
            self._close_runs(exc)
            raise   # the state already says what these mean
        except BaseException as exc:
            self._record_failure(exc)
            self._close_runs(exc)
            raise
        else:
            self._close_runs(None)
        finally:
            fence_watch.set()
            self._committer.shutdown(wait=True)   # before its connections close
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
            if checkpoint is not None:
                shutil.rmtree(checkpoint, ignore_errors=True)
            for conn in (self._tgt, self._src):
                if conn is not None:
                    conn.close()
            if self._consumer is not None:
                self._consumer.close()
        log.info("pipeline %s: stream stopped after %d committed batches", self.cfg.name, self.batches)

    def _watch_fence(self, stopped: threading.Event) -> None:
        """A stream with nothing to apply never reaches the fence in a batch: an orphan (its task
        killed, a newer attempt streaming) would idle on forever. Every FENCE_CHECK_S it looks
        whether a newer run took its tables, and stops this one if so."""
        last_capture_check = 0.0
        while not stopped.wait(FENCE_CHECK_S):
            if time.monotonic() - last_capture_check >= CAPTURE_CHECK_S:
                last_capture_check = time.monotonic()
                self._check_capture()
            try:
                if self._check_partitions() and self.query is not None:
                    self.query.stop()
                    return
            except Exception as exc:   # the source is away: the next check sees the tree again
                log.warning("%s: partitions not checked: %s", self.cfg.name, exc)
            live = {n: t.epoch for n, t in self.tables.items() if n not in self.halted}
            try:
                conn = self.store.connect(connect_timeout=5)
                try:
                    with conn.cursor() as cur:
                        cur.execute("SELECT table_name, epoch, epoch_owner FROM tideline.table_state "
                                    "WHERE pipeline = %s AND table_name = ANY(%s)", (self.cfg.name, list(live)))
                        taken = [(n, e, o) for n, e, o in cur.fetchall() if e != live[n]]
                finally:
                    conn.close()
            except psycopg2.Error:
                continue   # the target is away: the batch path waits outages out
            if taken and self.query is not None:
                name, epoch, owner = taken[0]
                self.failure = FencedError(
                    f"{self.cfg.name}.{name}: this run holds fencing epoch {live[name]} but the table's epoch is now "
                    f"{epoch} (claimed by {owner}). A newer run replaced this one; it stops while idle.",
                    table=name)
                log.warning("%s", self.failure)
                self.query.stop()
                return

    def _track_partitions(self, name: str, st) -> None:
        """A partitioned table's partitions: compared with the ones its state knows (a table loaded
        before they were recorded starts from what is there now); a change that moved rows
        without change events marks it for a reload now."""
        known = st.raw.get("source_partitions")
        tree = self.engine.partition_tree(self._src, self.cfg.source_schema(name), name, known)
        if tree is None:
            return
        why = partition_tree_change(known, tree) if known is not None else None
        if why:
            self._needs_resnapshot(name, f"{name}: {why}")
            raise ResnapshotRequired(f"{self.cfg.name}.{name}: {why}. The table is marked needs_resnapshot; the "
                                     f"sync DAG reloads it by itself.", table=name)
        self._save_tree(name, tree, known)

    def _save_tree(self, name: str, tree: dict, known: dict | None) -> None:
        self._trees[name] = tree
        if tree != known:
            conn = self.store.connect(connect_timeout=5)
            try:
                with conn, conn.cursor() as cur:
                    state.set_partitions(cur, self.cfg.name, name, tree)
            finally:
                conn.close()

    def _check_partitions(self) -> bool:
        """While streaming: a partition attached with rows, detached or dropped ends the run with
        the table marked for a reload (exit 4: the DAG reloads it and streams on). True if so."""
        if not self._trees:
            return False
        src = self.engine.connect(autocommit=True, connect_timeout=5)
        try:
            for name, known in list(self._trees.items()):
                if name in self.halted:
                    continue
                tree = self.engine.partition_tree(src, self.cfg.source_schema(name), name, known) or {}
                why = partition_tree_change(known, tree)
                if why:
                    self._needs_resnapshot(name, f"{name}: {why}")
                    self.failure = ResnapshotRequired(f"{self.cfg.name}.{name}: {why}. The table is marked "
                                                      f"needs_resnapshot; the sync DAG reloads it by itself.",
                                                      table=name)
                    log.error("%s", self.failure)
                    return True
                self._save_tree(name, tree, known)
        finally:
            src.close()
        return False

    def _check_capture(self) -> None:
        """A failed connector sends nothing, so the stream would look caught up while the source
        moves on: said in each table's state (last_error, cleared by the next batch) and alerted,
        once per distinct failure."""
        from tideline.connector import capture_failure
        try:
            failure = capture_failure(self.cfg, get_connection(self.cfg.connect.conn_id, self._environ))
        except Exception as exc:   # no Connect connection given to this job: the watch DAG still checks
            log.debug("capture check skipped: %s", exc)
            return
        if failure is None or failure == self._capture_said:
            if failure is None and self._capture_said is not None:
                log.warning("%s: capture runs again", self.cfg.name)
            self._capture_said = failure
            return
        self._capture_said = failure
        log.error("%s: %s", self.cfg.name, failure)
        conn = self.store.connect(connect_timeout=5)
        try:
            for name in self.tables:
                if name not in self.halted:
                    state.record_error(conn, self.cfg.name, name, f"capture: {failure}")
        finally:
            conn.close()
        alerts.notify(self.cfg, alerts.CAPTURE_FAILED, failure)

    def _close_runs(self, exc: BaseException | None) -> None:
        """Each table's row in the run history: how this stream ended (best effort: the target may
        be what failed; then the next stream closes the row as abandoned)."""
        if not self.run_ids:
            return
        outcome = "succeeded" if exc is None else "fenced" if isinstance(exc, FencedError) else "failed"
        try:
            conn = self.store.connect(connect_timeout=5)
        except Exception:
            return
        try:
            with conn, conn.cursor() as cur:
                for name, run_id in self.run_ids.items():
                    why = self.halted.get(name) or (_describe_end(exc) if exc else "")
                    state.run_end(cur, run_id, "failed" if name in self.halted else outcome,
                                  self.applied.get(name, 0),
                                  f"{self.mode} stream by {self.owner}: {self.batches} batches" + (f"; {why}" if why
                                                                                                 else ""))
        except Exception as cannot:
            log.warning("could not close the stream's run history rows: %s", cannot)
        finally:
            conn.close()

    def _record_failure(self, exc: BaseException) -> None:
        """The error that stopped the stream, on each of its tables (best effort: the target may be
        what failed) — the watch DAG's stall alert and `make status` show it; the next committed
        batch clears it."""
        why = f"stream stopped: {_describe_end(exc)}"
        try:
            conn = self.store.connect(connect_timeout=5)
        except Exception as cannot:
            log.warning("could not record the stream's failure in the target (%s): %s", cannot, why)
            return
        try:
            for name in self.tables:
                state.record_error(conn, self.cfg.name, name, why)
        except Exception as cannot:
            log.warning("could not record the stream's failure in the target (%s): %s", cannot, why)
        finally:
            conn.close()

    def _install_sigterm(self):
        if threading.current_thread() is not threading.main_thread():
            return None

        def stop(_sig, _frame):
            log.info("SIGTERM: stopping the stream after the current batch")
            if self.query is not None:
                threading.Thread(target=self.query.stop, daemon=True).start()
        return signal.signal(signal.SIGTERM, stop)

    def _explain_failure(self, exc: BaseException) -> None:
        """Raises what ended the query: the batch's own TidelineError, or DataLossError when Spark's
        failOnDataLoss fired and the committed position is really gone, or else the query's error."""
        cause = self.failure or exc
        if isinstance(cause, TidelineError):
            raise cause
        text = str(exc)
        if "failOnDataLoss" in text or "data may have been missed" in text or "OffsetOutOfRange" in text:
            # Retention overtook the running stream: confirm against the committed position
            # (raises DataLossError and marks the table when it is so).
            conn = self.store.connect()
            try:
                self._check_coverage(conn)
            finally:
                conn.close()
        raise exc

    # ------------------------------------------------------------------ one batch

    def _apply_batch(self, df, spark_batch_id: int) -> None:
        """Spark's batch thread: reads and decodes batch N while batch N-1 commits in the committer
        thread, then waits for that commit (raising its failure) and hands N over. At most one
        batch commits while the next is read. The target's state stays the only position:
        Spark's checkpoint may record N-1 before it committed, but a run whose commit failed ends,
        and the next run resumes from the target."""
        try:
            read = self._read_batch(df, spark_batch_id)
            self._wait_for_commit()
            if read is not None:
                self._inflight = self._committer.submit(self._commit_batch, read)
        except BaseException as exc:
            self._batch_failed(exc)
            raise

    def _batch_failed(self, exc: BaseException) -> None:
        if exc is self.failure:
            return   # the committer recorded it already
        if not isinstance(self.failure, FencedError):   # fenced: what the batch met after is noise
            self.failure = exc
        if isinstance(exc, ResnapshotRequired) and exc.table:
            self._needs_resnapshot(exc.table, str(exc))
        if not isinstance(exc, HaltedError):   # a halt is raised after its batch committed
            log.error("batch failed, nothing of it was committed: %s", exc)

    def _wait_for_commit(self) -> None:
        inflight, self._inflight = self._inflight, None
        if inflight is not None:
            inflight.result()

    def _drain(self) -> None:
        """Waits for the batch still committing when the query ends. Its failure is not lost: the
        committer put it in self.failure, which run() raises."""
        try:
            self._wait_for_commit()
        except BaseException:   # noqa: BLE001 — recorded in self.failure by _commit_batch
            pass

    def _read_batch(self, df, spark_batch_id: int) -> _ReadBatch | None:
        started, started_at = time.monotonic(), datetime.now(timezone.utc)
        # one Spark job reads the raw records; the driver decodes them (core.change_events)
        events = decode_records(df.select(*RECORD_COLUMNS).toArrow())
        if not events.num_rows:
            return None
        batch = split_batch(events)
        return _ReadBatch(spark_batch_id, batch, started, started_at, time.monotonic() - started)

    def _commit_batch(self, read: _ReadBatch) -> None:
        """The committer thread: commits one read batch; a failure also stops the query (an idle
        stream would never call _apply_batch again to hear of it)."""
        try:
            self._commit_and_report(read)
        except BaseException as exc:
            self._batch_failed(exc)
            if self.query is not None:
                threading.Thread(target=self.query.stop, daemon=True, name="tideline-stop").start()
            raise

    def _commit_and_report(self, read: _ReadBatch) -> None:
        batch = read.batch
        commit_started = time.monotonic()
        figures = self._commit_through_outages(read.spark_batch_id, batch.per_partition, batch.bad_rows,
                                               batch.truncates, batch.rows, read.started_at)
        if figures is None:
            return
        self.batches += 1
        for name, (u, d) in figures.per_table.items():
            self.applied[name] = self.applied.get(name, 0) + u + d
        self._commit_consumer_group(figures.end_offsets)
        newest = newest_source_commit(batch.per_partition)
        age = (datetime.now(timezone.utc) - newest).total_seconds() if newest else 0.0
        tables = ", ".join(f"{t} +{u:,}/-{d:,}" for t, (u, d) in sorted(figures.per_table.items()))
        log.info("batch %d: %s events (%s already applied, %s dead letters) -> %s; source-to-target lag %.1fs; "
                 "%.2fs (read+decode %.2fs, commit %.2fs)", figures.batch_id, f"{figures.events:,}",
                 f"{figures.skipped:,}", figures.dead_letters, tables or "no row changes", age,
                 time.monotonic() - read.started, read.read_s, time.monotonic() - commit_started)

    def _commit_through_outages(self, *batch) -> BatchFigures | None:
        """Commits the batch, waiting out a database that restarts or refuses connections for up
        to stream.outage_wait_minutes: the failed attempt committed nothing, so the batch is simply
        run again on new connections (its offsets decide what applies). Then the stream catches up
        by itself, with no task restart."""
        deadline = time.monotonic() + self.cfg.stream.outage_wait_minutes * 60
        delay, lost_at = 1.0, None
        while True:
            try:
                if lost_at is not None:
                    self._reconnect()
                figures = self._commit(*batch)
                if lost_at is not None:
                    log.warning("connection back after %.0fs; batch committed", time.monotonic() - lost_at)
                return figures
            except (psycopg2.OperationalError, psycopg2.InterfaceError) as exc:
                if not connection_lost(exc) or time.monotonic() + delay > deadline:
                    raise
                lost_at = lost_at or time.monotonic()
                log.warning("database connection lost during the batch (%s); nothing of it committed; trying "
                            "again in %.0fs (gives up after stream.outage_wait_minutes=%g)",
                            str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__, delay,
                            self.cfg.stream.outage_wait_minutes)
                time.sleep(delay)
                delay = min(delay * 2, 15.0)

    def _reconnect(self) -> None:
        for conn in (self._tgt, self._src):
            try:
                conn.close()
            except Exception:   # already broken: nothing to close
                pass
        self._tgt = self.store.connect(connect_timeout=10)
        self._src = self.engine.connect(autocommit=True, connect_timeout=10)

    def _commit(self, spark_batch_id, per_partition, bad_rows, truncates, rows: pa.Table,
                started_at: datetime) -> BatchFigures | None:
        cfg, conn = self.cfg, self._tgt
        live = {t.topic for t in self.tables.values() if t.name not in self.halted}
        per_partition = [r for r in per_partition if r["topic"] in live]   # a halted table keeps its offsets
        bad_rows = [b for b in bad_rows if b["topic"] in live]
        truncates = [t for t in truncates if t["topic"] in live]
        if self.halted and rows.num_rows:
            rows = rows.filter(pc.is_in(rows.column("topic"), pa.array(sorted(live), pa.string())))
        figures = BatchFigures(events=sum(r["n"] for r in per_partition))
        if not per_partition:
            return None
        halting: dict[str, tuple[str, dict | None]] = {}
        with conn, conn.cursor() as cur:
            # 1. fencing: lock every state row this run owns; any newer epoch refuses the batch
            current: dict[str, dict[int, int]] = {}
            for t in sorted(self.tables.values(), key=lambda t: t.name):
                if t.topic not in live:
                    continue
                state.check_epoch(cur, cfg.name, t.name, t.epoch)
                cur.execute("SELECT resume_offsets FROM tideline.table_state WHERE pipeline = %s AND table_name = %s",
                            (cfg.name, t.name))
                current[t.topic] = {int(p): int(o) for p, o in (cur.fetchone()[0] or {}).items()}
            # 2. exactly once: events below the committed position were applied by an earlier batch
            fresh = [r for r in per_partition if r["hi"] >= current[r["topic"]].get(r["partition"], 0)]
            if not fresh:
                log.info("spark batch %d holds only events already applied; skipped", spark_batch_id)
                return None
            rows = self._filter_applied(rows, current)
            figures.skipped = figures.events - sum(_unapplied(r, current) for r in fresh)
            bad_rows = [b for b in bad_rows if b["offset"] >= current[b["topic"]].get(b["partition"], 0)]
            truncates = [t for t in truncates if t["offset"] >= current[t["topic"]].get(t["partition"], 0)]
            for r in fresh:   # partitions added while the stream runs: see coverage_gaps
                t = self.by_topic[r["topic"]]
                if t.partitions is not None and r["partition"] >= t.partitions:
                    raise ResnapshotRequired(
                        f"{cfg.name}.{t.name}: events arrived on partition {r['partition']} of {t.topic}, which had "
                        f"{t.partitions} partition(s) at the full load; keys now hash to other partitions, so one "
                        f"key's changes can no longer be put in order. The table is reloaded by itself.",
                        table=t.name)
            if truncates:
                t = truncates[0]
                table = self.by_topic[t["topic"]].name
                raise ResnapshotRequired(
                    f"{cfg.name}.{table}: the source table was truncated (event at {t['topic']} partition "
                    f"{t['partition']} offset {t['offset']}); a truncate cannot be ordered against changes on "
                    f"other partitions, so the table is reloaded instead.", table=table)
            if bad_rows:
                figures.dead_letters, unparsed = self._bad_messages(cur, bad_rows)
                halting.update(unparsed)
            # 3. per table, under its own savepoint: schema drift, then the rows. A table the
            # target refuses is halted alone; the others are applied and advance.
            touched = sorted({self.by_topic[tp].name for tp in pc.unique(rows.column("topic")).to_pylist()}
                             - set(halting)) if rows.num_rows else []
            if rows.num_rows:
                self.store.stage_changes(cur, rows, {tp: t.name for tp, t in self.by_topic.items()})
            for name in touched:
                applied = self._apply_isolated(cur, self.tables[name])
                if isinstance(applied, tuple) and isinstance(applied[0], str):
                    halting[name] = applied
                else:
                    figures.per_table[name], dead = applied
                    figures.dead_letters += dead
            for name, (why, event) in halting.items():
                state.halt_in(cur, pipeline=cfg.name, table=name, epoch=self.tables[name].epoch, error=why,
                              event=event)
            figures.upserts = sum(u for u, _ in figures.per_table.values())
            figures.deletes = sum(d for _, d in figures.per_table.values())
            # 4. the new position, the batch record, all in this transaction
            batch_id = state.next_batch_id(cur, cfg.name)
            start_offsets, end_offsets, table_events = {}, {}, {}
            for t in self.tables.values():
                batch_max = {r["partition"]: r["hi"] for r in per_partition if r["topic"] == t.topic}
                if not batch_max or t.name in halting:
                    continue
                new = merge_committed(current[t.topic], batch_max)
                table_events[t.name] = sum(_unapplied(r, current) for r in fresh if r["topic"] == t.topic)
                state.advance_stream(cur, pipeline=cfg.name, table=t.name, epoch=t.epoch, offsets=new,
                                     batch_id=batch_id, events=table_events[t.name])
                start_offsets[t.topic] = {str(p): current[t.topic].get(p, 0) for p in sorted(batch_max)}
                end_offsets[t.topic] = {str(p): new[p] for p in sorted(batch_max)}
            if end_offsets:   # a batch whose every table halted applied nothing: no batch record
                figures.events = sum(r["n"] for r in per_partition if r["topic"] in end_offsets)
                state.commit_batch(cur, pipeline=cfg.name, batch_id=batch_id, run=self.owner,
                                   spark_batch_id=spark_batch_id,
                                   tables=sorted(self.by_topic[tp].name for tp in end_offsets),
                                   start=start_offsets, end=end_offsets, events=figures.events,
                                   upserts=figures.upserts, deletes=figures.deletes,
                                   dead_letters=figures.dead_letters, started_at=started_at,
                                   source_ts_max=newest_source_commit(per_partition, end_offsets),
                                   table_events=table_events)
        self._after_halts(halting)
        if not end_offsets:
            return None
        figures.batch_id, figures.end_offsets = batch_id, end_offsets
        return figures

    def _apply_isolated(self, cur, table: StreamTable):
        """((upserts, deletes), dead letters) — or (why, event) when the table must halt."""
        self.store.begin_table(cur)
        try:
            self._evolve(cur, table)
            applied = self.store.apply_changes(cur, self.cfg.name, self.cfg.target_schema(table.name), table.name,
                                               table.topic, table.columns, table.primary_key,
                                               dead_letter=self.cfg.stream.on_bad_message == "dead_letter")
        except (schema_drift.SchemaChangeError, SourceError) as exc:   # e.g. a column added that cannot stream
            self.store.undo_table(cur)
            return str(exc), None
        except ApplyRefused as exc:
            self.store.undo_table(cur)
            return str(exc), exc.event.as_state()
        self.store.end_table(cur)
        return applied

    def _after_halts(self, halting: dict[str, tuple[str, dict | None]]) -> None:
        """Committed halts: said in the log and the alert; the stream goes on without those tables,
        and stops (exit 6) once none is left."""
        for name, (why, _event) in halting.items():
            self.halted[name] = why
            log.error("HALTED %s", why)
            alerts.notify(self.cfg, alerts.TABLE_HALTED, why)
        if halting and len(self.halted) == len(self.tables):
            raise HaltedError(f"pipeline {self.cfg.name}: every table of this stream is halted: "
                              + " | ".join(self.halted.values()), table=next(iter(self.halted)))

    @staticmethod
    def _filter_applied(rows: pa.Table, current: dict[str, dict[int, int]]) -> pa.Table:
        if rows.num_rows == 0:
            return rows
        keep = None
        for topic, parts in current.items():   # few topics x partitions: one vector pass each
            for partition, floor in parts.items():
                if floor <= 0:
                    continue
                here = pc.and_(pc.equal(rows.column("topic"), topic), pc.equal(rows.column("partition"), partition))
                ok = pc.or_(pc.invert(here), pc.greater_equal(rows.column("offset"), floor))
                keep = ok if keep is None else pc.and_(keep, ok)
        return rows if keep is None else rows.filter(keep)

    def _bad_messages(self, cur, bad_rows) -> tuple[int, dict[str, tuple[str, dict]]]:
        """Unparseable events: dead letters (count), or, with on_bad_message: stop, the tables whose
        topics hold one, to halt (each at its first bad event)."""
        halting = {}
        for b in bad_rows:   # a row too big for Kafka: always halts, never a skipped event
            table = self.by_topic[b["topic"]].name
            too_large = too_large_marker(b["value"])
            if too_large is None or table in halting:
                continue
            at = f"topic {b['topic']} partition {b['partition']} offset {b['offset']}"
            halting[table] = (
                f"{self.cfg.name}.{table}: the row with key {b['key']} changed at {at} is about "
                f"{too_large[0] / 1048576:,.1f} MB as a change event, above the {too_large[1] / 1048576:,.0f} MB the "
                f"pipeline carries (kafka.max_message_mb): the connector sent a marker in its place, so the change "
                f"itself is not on Kafka. The table is HALTED before it; the other tables keep streaming. Raise "
                f"kafka.max_message_mb above {too_large[0] / 1048576:,.0f} (at most 90), then trigger the sync DAG "
                f"with action=full_reload for {table!r}.",
                {"table": table, "topic": b["topic"], "partition": b["partition"], "offset": b["offset"],
                 "key": b["key"], "error": f"change event too large: {too_large[0]} bytes, limit {too_large[1]}"})
        bad_rows = [b for b in bad_rows if self.by_topic[b["topic"]].name not in halting]
        if not bad_rows:
            return 0, halting
        first = bad_rows[0]
        where = f"topic {first['topic']} partition {first['partition']} offset {first['offset']}"
        if self.cfg.stream.on_bad_message == "stop":
            for b in bad_rows:   # ordered by topic, partition, offset
                table = self.by_topic[b["topic"]].name
                if table in halting:
                    continue
                at = f"topic {b['topic']} partition {b['partition']} offset {b['offset']}"
                halting[table] = (
                    f"{self.cfg.name}.{table}: cannot parse the change event at {at} (key {b['key']}, value starts "
                    f"{str(b['value'])[:120]!r}). The table is HALTED before it (nothing of it from this batch on "
                    f"was applied; the other tables keep streaming). Fix or remove the producer of that message, "
                    f"then trigger the sync DAG to resume; or set stream.on_bad_message: dead_letter in the "
                    f"pipeline config to record such events in tideline.dead_letters and go on.",
                    {"table": table, "topic": b["topic"], "partition": b["partition"], "offset": b["offset"],
                     "key": b["key"], "error": "not a Debezium change event"})
            return 0, halting
        for b in bad_rows:
            cur.execute("INSERT INTO tideline.dead_letters (pipeline, topic, kafka_partition, kafka_offset, key, "
                        "value, error) VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                        (self.cfg.name, b["topic"], b["partition"], b["offset"], b["key"], b["value"],
                         "not a Debezium change event (unparseable JSON, unknown op, or missing key/row image)"))
        log.warning("pipeline %s: %d unparseable events recorded in tideline.dead_letters, first at %s",
                    self.cfg.name, len(bad_rows), where)
        return len(bad_rows), halting

    def _evolve(self, cur, table: StreamTable) -> None:
        """Source catalog vs target: add/widen in this transaction, or stop with the reason."""
        shape = self.engine.describe(self._src, self.cfg.source_schema(table.name), table.name,
                                        self.cfg.table(table.name), check_key=False, for_stream=True)
        try:
            drift = schema_drift.plan(f"{self.cfg.name}.{table.name}", list(shape.columns), table.columns)
        except TidelineError as exc:
            exc.table = exc.table or table.name   # plan() names the table only in its message
            raise
        if drift.changes_target:
            self.store.evolve(cur, self.cfg.target_schema(table.name), table.name, drift)
            log.info("%s.%s: schema change applied: added %s, widened %s", self.cfg.name, table.name,
                     [c.name for c in drift.add] or "-", [f"{c}: {o} -> {n}" for c, o, n in drift.widen] or "-")
            table.source = {c.name: c for c in shape.columns}
            table.columns = self._columns_in_txn(cur, table.name, table.source)

    def _columns_in_txn(self, cur, table: str, source: dict[str, Column]) -> list[Column]:
        """The target's columns, each with how the source's events carry it and what the source's
        existing rows hold for it (core.apply_sql: an event from before the column was added)."""
        out = []
        for n, t, nn, g in self.store.columns(cur, self.cfg.target_schema(table), table):
            src = source.get(n)
            out.append(Column(n, t, nn, generated=g, encoding=src.encoding if src else "pgtext",
                              has_missing=bool(src and src.has_missing),
                              missing_value=src.missing_value if src else None))
        return out

    def _commit_consumer_group(self, committed: dict[str, dict[str, int]]) -> None:
        """Mirrors the committed position into a consumer group so lag tools see it (the target
        stays the truth; a failure here is logged, never fatal)."""
        from confluent_kafka import Consumer, TopicPartition
        try:
            if self._consumer is None:
                self._consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"tideline-{self.cfg.name}",
                                           "enable.auto.commit": False})
            offsets = [TopicPartition(topic, int(p), o) for topic, parts in committed.items()
                       for p, o in parts.items()]
            if offsets:
                self._consumer.commit(offsets=offsets, asynchronous=False)
        except Exception as exc:
            log.warning("could not commit offsets to consumer group tideline-%s (lag tools will lag): %s",
                        self.cfg.name, exc)


def _describe_end(exc: BaseException) -> str:
    """What ended a stream, in words: a py4j connection refused means the Spark driver JVM is gone
    (killed or crashed), which the bare exception does not say."""
    text = f"{type(exc).__name__}: {str(exc).strip()[:1500]}"
    if isinstance(exc, ConnectionError) or type(exc).__name__ == "Py4JNetworkError":
        return f"the Spark driver (JVM) died under the stream ({text}); the task's retry resumes from the committed offsets"
    return text
