"""The change stream: Kafka (Debezium events) -> Spark Structured Streaming -> target, exactly once.

Position: the target's state table is the truth. A run starts from the resume offsets recorded
there (by the full load or by the last committed batch); Spark's checkpoint is per run and
disposable, so a lost, stale or foreign checkpoint can never move the position. Each batch is
committed in one target transaction that checks every table's fencing epoch, skips events at
offsets already applied, applies schema changes, deletes and upserts, and advances the offsets.

Three parts: this run *reads* (Spark micro-batches from the positions of tideline.stream.position,
one batch read while the previous commits: tideline.stream.handover); core.change_events and core.batch_events *decode*
(pure: Debezium events -> last image per key); tideline.stream.commit *commits* through the
target's interface. tideline.stream.watch is the failure handling beside it, and
tideline.stream.history what the run leaves in the run history.
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
from datetime import datetime, timezone

from tideline import engines, launcher, state, targets

from tideline.capture import refusals

from tideline import alerts
from tideline.core import column_hash
from tideline.core.batch_events import newest_source_commit
from tideline.core.config import PipelineConfig
from tideline.core.phases import missing_target
from tideline.core.connections import get_connection
from tideline.core.errors import (FencedError, HaltedError, ResnapshotRequired, SourceError, TidelineError,
                                  exit_code)
from tideline.core.table_extras import TableExtras
from tideline.core.table_shape import Column
from tideline.load.full_load import run_owner
from tideline.stream import position
from tideline.stream.commit import BatchCommitter, StreamTable
from tideline.stream.executor_stage import StageSpace, stage_batch, stages_on_executors, task_events
from tideline.stream.handover import TASK_EVENTS, BatchHandover, ReadBatch, read_batch
from tideline.stream.history import StreamHistory
from tideline.stream.watch import ORPHAN_EXIT_S, StreamWatch

log = logging.getLogger("tideline.incremental")

# How long the broker may hold a fetch that finds no new data (Kafka's default: 500 ms). After a
# task reads its range, each consumer's next fetch waits there at the log's end, and a later read of
# that partition waits for it: with 100 topics, 400,000 events took 18.5 s to read, 6.0 s at 10 ms
# (tests/bench/many_streams.py). The consumers fetch only while a task reads, so idle costs nothing.
FETCH_WAIT_MS = 10


class IncrementalRun:
    def __init__(self, cfg: PipelineConfig, spark, mode: str = "continuous", tables: list[str] | None = None,
                 environ=None):
        if mode not in ("continuous", "available_now"):
            raise ValueError(f"mode must be continuous or available_now, not {mode!r}")
        self.cfg, self.spark, self.mode = cfg, spark, mode
        self.requested = tables
        self.source = get_connection(cfg.source.conn_id, environ)
        self._environ = environ
        self.engine = engines.able(engines.for_pipeline(cfg, self.source), engines.Captures)
        self.target = get_connection(cfg.target.conn_id, environ)
        self.store = targets.able(targets.for_pipeline(cfg, self.target), targets.StreamsChanges)
        self.kafka = get_connection(cfg.kafka.conn_id, environ).kafka_access
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
        self.halted: dict[str, str] = {}   # tables halted by this run: name -> why (the others go on)
        self.handed: dict[str, str] = {}   # tables a full load took over: name -> the load (stream.handed)
        self.history = StreamHistory(cfg, self.store, self.kafka, mode, self.owner)
        # one thread commits batch N to the target while Spark's batch thread reads N+1
        self.stage_space: StageSpace | None = None   # stream.stage_on: executors (made in prepare)
        # topics of history tables (every event a version) and of tables with a change log (core.batch_events)
        self._versioned = frozenset(cfg.topic(t.name) for t in cfg.tables if t.history)
        self._logged = frozenset(cfg.topic(t.name) for t in cfg.tables if t.changelog)
        self.task_events = TASK_EVENTS   # events per Spark task of a batch at most
        self.handover = BatchHandover(self._read, self._commit_and_report, self._batch_failed, self._stop_query)
        self.committer = BatchCommitter(cfg, self.store, self.engine, self.owner, self.tables, self.by_topic,
                                        self.halted, self._after_halts, self.handed)
        self.watch = StreamWatch(cfg, self.store, self.engine, self.tables, self.halted, self._needs_resnapshot,
                                 self._stop, environ, launcher.current(), self.handed)

    # ------------------------------------------------------------------ start

    def prepare(self) -> dict[str, dict[str, int]]:
        """Claims the tables, checks Kafka still covers their positions; returns startingOffsets."""
        cfg = self.cfg
        self.store.use(self.spark)
        self._tgt = self.store.connect()
        self._src = self.engine.connect(autocommit=True)
        state.migrate(self._tgt)
        names = self.requested or [t.name for t in cfg.tables if t.mode == "cdc"]
        waiting, ready = [], {}
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
            ready[name] = st
        # again: the source may have changed since the load (every table's catalog read together)
        refused = self.engine.refusals(self._src, cfg, list(ready))
        for name, refusal in refused.items():
            state.refuse(self._tgt, cfg.name, name, refusals.message(cfg, refusal))
            log.error("%s", refusals.message(cfg, refusal))
            waiting.append(f"{name} (refused: {refusal.reason})")
        streamed = [(cfg.source_schema(name), name, cfg.table(name)) for name in ready if name not in refused]
        shapes = self.engine.describe_many(self._src, streamed, for_stream=True)
        for schema, name, _tcfg in streamed:
            shape = shapes[(schema, name)]
            if isinstance(shape, SourceError):
                raise shape
            if not shape.primary_key:
                raise SourceError(f"{cfg.name}.{name}: tables without a primary key can be loaded but not streamed "
                                  f"yet. Add a primary key at the source, or put the table in batch mode.")
            source = {c.name: c for c in shape.columns}
            names = cfg.target_names(name)   # what the target calls it (core.target_names)
            try:   # what the target holds was written otherwise than the config says now: marked, reloaded
                if not self.store.table_exists(self._tgt, cfg.target_schema(name), names.table):
                    raise ResnapshotRequired(missing_target(
                        cfg.name, name, f"{cfg.target_schema(name)}.{names.table}", ready[name].phase,
                        ready[name].raw.get("snapshot_at"), ready[name].snapshot_rows,
                        f"it is reloaded by itself (a full load from a new snapshot), then streamed"), table=name)
                rehashed = column_hash.changed_since_load(shape, ready[name].raw.get("hashed_columns"),
                                                          f"{cfg.name}.{name}") or \
                    names.changed_since_load(cfg.target_schema(name), name, ready[name].raw.get("target_names"),
                                             f"{cfg.name}.{name}")
                if rehashed:
                    raise ResnapshotRequired(rehashed, table=name)
                added = self.store.ensure_extras(self._tgt, cfg.target_schema(name), names.table,
                                                 TableExtras.of(cfg.table(name), cfg.source.kind))
            except ResnapshotRequired as exc:
                self._needs_resnapshot(name, str(exc))
                raise
            self.watch.track_partitions(self._src, name, ready[name])
            if added:
                log.info("%s.%s: added %s to the target table (rows not changed since hold NULL there)", cfg.name,
                         name, ", ".join(added))
            self.tables[name] = StreamTable(name, cfg.topic(name), 0, list(names.shape(shape).primary_key),
                                            self._target_columns(name, source), source=source, names=names)
        if not self.tables:
            raise SourceError(f"pipeline {cfg.name}: no table is ready to stream: {'; '.join(waiting)}. "
                              f"A table streams once a full load put it in phase 'streaming' (the sync DAG does "
                              f"that by itself); a halted table needs the fix its error names first.")
        self.by_topic.update({t.topic: t for t in self.tables.values()})
        for t in self.tables.values():
            t.epoch = state.claim_epoch(self._tgt, cfg.name, t.name, self.owner, t.topic)
            self.history.start(self._tgt, t.name, t.epoch)
        start = self._check_coverage(self._tgt)
        self.committer.attach(self._tgt, self._src)   # the batches' connections from here on
        if stages_on_executors(cfg.stream.stage_on, self.spark):
            self.stage_space = StageSpace(self.store)
        self._tgt = self._src = None
        return start

    def _check_coverage(self, conn) -> dict[str, dict[str, int]]:
        return position.check_coverage(self.cfg, self.store, conn, self.tables.values(), self.kafka, self._watermarks,
                                       self._needs_resnapshot)

    def _target_columns(self, table: str, source: dict[str, Column]) -> list[Column]:
        with self._tgt.cursor() as cur:
            cols = self.committer.columns(cur, table, source)
        self._tgt.rollback()
        return cols

    def _needs_resnapshot(self, table: str, why: str) -> None:
        conn = self.store.connect()
        try:
            state.set_phase(conn, self.cfg.name, table, "needs_resnapshot", why)
        finally:
            conn.close()

    def _abandon(self, failure: TidelineError) -> None:
        """An orphaned stream whose stop hung: its run history says why, then it ends as a kill -9
        would."""
        hung = type(failure)(f"{failure} Its stop did not end the run within {ORPHAN_EXIT_S:.0f} s: it ended hard.")
        closing = threading.Thread(target=self.history.close, args=(hung, self.batches, self.halted), daemon=True)
        closing.start()
        closing.join(15)   # best effort: a target that hangs too must not keep the orphan alive
        self.watch.launcher.end_hard(exit_code(failure))

    def _stop(self, failure: TidelineError) -> None:
        """The watch found a reason to end the run: recorded, and the query stops."""
        self.failure = failure
        if self.query is not None:
            self.query.stop()

    # ------------------------------------------------------------------ run

    def run(self) -> None:
        """Streams until stopped (continuous) or until caught up (available_now). Raises the
        TidelineError that ended it, after recording what it means in the state."""
        checkpoint, previous, cpu_at_start = None, None, time.process_time()
        fence_watch = threading.Event()
        threading.Thread(target=self.watch.run_launcher_check, args=(fence_watch, self._abandon), daemon=True,
                         name="tideline-launcher-watch").start()
        try:
            start = self.prepare()
            if self.failure is not None:   # its task died while it prepared
                raise self.failure
            if self.cfg.stream.checkpoint_dir:
                os.makedirs(self.cfg.stream.checkpoint_dir, exist_ok=True)
            checkpoint = tempfile.mkdtemp(prefix=f"tideline-{self.cfg.name}-", dir=self.cfg.stream.checkpoint_dir)
            stream = self.cfg.stream
            batch_events = position.batch_events(self.cfg, self.kafka, self._watermarks, self.store.capabilities(),
                                                 start)
            self.task_events = TASK_EVENTS if self.stage_space is None else \
                task_events(batch_events, self.spark.sparkContext.defaultParallelism)
            reader = (self.spark.readStream.format("kafka")
                      .options(**self.kafka.spark_options())
                      .option("subscribe", ",".join(sorted(self.by_topic)))
                      .option("startingOffsets", json.dumps(start))
                      .option("failOnDataLoss", "true")
                      .option("maxOffsetsPerTrigger", batch_events)
                      # a big batch is read as tasks of at most TASK_EVENTS events (see there)
                      .option("maxRecordsPerPartition", self.task_events)
                      .option("kafka.isolation.level", "read_committed")
                      .option("kafka.fetch.max.wait.ms", FETCH_WAIT_MS)
                      .load())
            writer = reader.writeStream.foreachBatch(self.handover).option("checkpointLocation", checkpoint)
            writer = (writer.trigger(availableNow=True) if self.mode == "available_now"
                      else writer.trigger(processingTime=f"{stream.trigger_interval_s} seconds"))
            previous = self._install_sigterm()
            cpu_at_start = time.process_time()
            self.query = writer.queryName(f"tideline_{self.cfg.name}").start()
            threading.Thread(target=self.watch.run, args=(fence_watch,), daemon=True,
                             name="tideline-fence-watch").start()
            log.info("streaming %d table(s) of pipeline %s (%s mode)", len(self.tables), self.cfg.name, self.mode)
            try:
                self.query.awaitTermination()
            except Exception as exc:  # the query died: find out why, record it, raise the meaning
                self.handover.drain()
                self._explain_failure(exc)
            self.handover.drain()
            if self.failure is not None:
                self._explain_failure(self.failure)
            if self.halted:
                raise HaltedError(f"pipeline {self.cfg.name}: {len(self.halted)} table(s) halted, the others were "
                                  f"applied: " + " | ".join(self.halted.values()), table=next(iter(self.halted)))
        except (FencedError, HaltedError, ResnapshotRequired) as exc:
            self.history.close(exc, self.batches, self.halted)
            raise   # the state already says what these mean
        except BaseException as exc:
            self.history.record_failure(exc, self.tables)
            self.history.close(exc, self.batches, self.halted)
            raise
        else:
            self.history.close(None, self.batches, self.halted)
        finally:
            fence_watch.set()
            self.handover.shutdown()   # before its connections close
            self.committer.close()
            if self.stage_space is not None:
                self.stage_space.close()
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
            if checkpoint is not None:
                shutil.rmtree(checkpoint, ignore_errors=True)
            for conn in (self._tgt, self._src):
                if conn is not None:
                    conn.close()
            self.history.shut()
        # the driver's Python: what stream.stage_on moves to the executors shows here (tests/bench/incremental.py)
        log.info("pipeline %s: stream stopped after %d committed batches (driver Python CPU %.1fs while streaming, "
                 "batches staged on the %s)", self.cfg.name, self.batches, time.process_time() - cpu_at_start,
                 "executors" if self.stage_space else "driver")

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

    def _stop_query(self) -> None:
        if self.query is not None:
            self.query.stop()

    def _batch_failed(self, exc: BaseException) -> None:
        if exc is self.failure:
            return   # the committer recorded it already
        if not isinstance(self.failure, FencedError):   # fenced: what the batch met after is noise
            self.failure = exc
        if isinstance(exc, ResnapshotRequired) and exc.table:
            self._needs_resnapshot(exc.table, str(exc))
        if not isinstance(exc, HaltedError):   # a halt is raised after its batch committed
            log.error("batch failed, nothing of it was committed: %s", exc)

    def _read(self, df, spark_batch_id: int) -> ReadBatch | None:
        """The batch read and decoded: by the driver (stream.handover) or staged by the tasks
        (stream.executor_stage), as stream.stage_on says."""
        if self.stage_space is None:
            return read_batch(df, spark_batch_id, self._versioned, self._logged)
        return stage_batch(df, spark_batch_id, self.stage_space, {tp: t.target for tp, t in self.by_topic.items()},
                           self.task_events, self._versioned, self._logged)

    def _commit_and_report(self, read: ReadBatch) -> None:
        commit_started = time.monotonic()
        figures = self.committer.commit_through_outages(read.spark_batch_id, read.per_partition, read.bad_rows,
                                                        read.truncates, read.rows, read.started_at)
        if figures is None:
            return
        self.batches += 1
        self.history.count(figures.per_table)
        self.history.mirror(figures.end_offsets)
        newest = newest_source_commit(read.per_partition)
        age = (datetime.now(timezone.utc) - newest).total_seconds() if newest else 0.0
        tables = ", ".join(f"{t} +{u:,}/-{d:,}" for t, (u, d) in sorted(figures.per_table.items()))
        log.info("batch %d: %s events (%s already applied, %s dead letters) -> %s; source-to-target lag %.1fs; "
                 "%.2fs (read+decode %.2fs, commit %.2fs)", figures.batch_id, f"{figures.events:,}",
                 f"{figures.skipped:,}", figures.dead_letters, tables or "no row changes", age,
                 time.monotonic() - read.started, read.read_s, time.monotonic() - commit_started)

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
