"""What a running stream watches besides its batches — the failure handling that no batch brings:
a newer run that took its tables (fencing, seen even while idle), a connector that stopped
capturing (said in each table's state and alerted), and a partition tree that moved rows without
change events (the table is marked for a reload). Each check that must end the run hands its
error to `stop`, which records it and stops the query.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from tideline import state
from tideline.state import ledger
from tideline.core.config import PipelineConfig
from tideline.core.connections import get_connection
from tideline.stream.handed import hand_over
from tideline.core.errors import (FencedError, OrphanedError, PipelineRemovedError, ResnapshotRequired,
                                   TidelineError)
from tideline.core.source_shapes import partition_tree_change
from tideline.launcher import Launcher
from tideline import alerts

log = logging.getLogger("tideline.incremental.watch")

FENCE_CHECK_S = 10.0   # how soon an idle stream notices that a newer run took its tables
LAUNCHER_CHECK_S = 5.0  # how soon a stream whose Airflow task died stops
ORPHAN_EXIT_S = 30.0    # how long such a stream may take to stop before it ends itself hard
CAPTURE_CHECK_S = 30.0  # how soon a stream says that capture failed (no table receives a change)
CONNECTOR_RESTART_MAX_S = 300.0   # a connector failing again and again is restarted at most this often


def _after(seconds: float, fn: Callable, *args) -> None:
    time.sleep(seconds)   # in a daemon thread: a process that ended meanwhile never wakes here
    fn(*args)


class StreamWatch:
    """Runs beside the stream (its own thread, every FENCE_CHECK_S) over the run's tables."""

    def __init__(self, cfg: PipelineConfig, store, engine, tables: dict, halted: dict[str, str],
                 needs_resnapshot: Callable[[str, str], None], stop: Callable[[TidelineError], None], environ=None,
                 launcher: Launcher | None = None, handed: dict[str, str] | None = None):
        self.cfg, self.store, self.engine = cfg, store, engine
        self.handed = handed if handed is not None else {}   # tables a full load took over (stream.handed)
        self.launcher = launcher   # the Airflow task that started the job, if any
        self.tables, self.halted = tables, halted   # the run's own, shared
        self.needs_resnapshot, self.stop = needs_resnapshot, stop
        self._environ = environ
        self._capture_said: str | None = None
        self._config_missing = 0
        self._next_restart, self._restart_delay = 0.0, CAPTURE_CHECK_S   # restart_failed_connector
        self._trees: dict[str, dict] = {}   # partitioned tables: their partitions as last seen

    def run(self, stopped: threading.Event) -> None:
        """A stream with nothing to apply never reaches the fence in a batch: an orphan (its task
        killed, a newer attempt streaming) would idle on forever. Every FENCE_CHECK_S it looks
        whether the task that started it is gone or a newer run took its tables, and stops this
        one if so."""
        last_capture_check = 0.0
        while not stopped.wait(FENCE_CHECK_S):
            if time.monotonic() - last_capture_check >= CAPTURE_CHECK_S:
                last_capture_check = time.monotonic()
                self.check_capture()
            try:
                moved = self.check_partitions()
            except Exception as exc:   # the source is away: the next check sees the tree again
                log.warning("%s: partitions not checked: %s", self.cfg.name, exc)
                moved = None
            if moved is not None:
                self.stop(moved)
                return
            removed = self.check_config()
            if removed is not None:
                self.stop(removed)
                return
            live = {n: t.epoch for n, t in self.tables.items() if n not in self.halted and n not in self.handed}
            try:
                conn = self.store.connect(connect_timeout=5)
                try:
                    with conn.cursor() as cur:
                        taken = [(n, e, o) for n, e, o in ledger.epochs(cur, self.cfg.name, list(live)) if e != live[n]]
                finally:
                    conn.close()
            except self.store.errors:
                continue   # the target is away: the batch path waits outages out
            taken = [(n, e, o) for n, e, o in taken
                     if not hand_over(self.cfg.name, self.tables, self.halted, self.handed, n, o)]
            if taken:
                name, epoch, owner = taken[0]
                fenced = FencedError(
                    f"{self.cfg.name}.{name}: this run holds fencing epoch {live[name]} but the table's epoch is now "
                    f"{epoch} (claimed by {owner}). A newer run replaced this one; it stops while idle.",
                    table=name)
                log.warning("%s", fenced)
                self.stop(fenced)
                return

    def run_launcher_check(self, stopped: threading.Event, abandon: Callable[[TidelineError], None]) -> None:
        """Its own thread, from the run's start (a stream still preparing counts too), so a check of
        the other loop blocked on a service that is away cannot delay it: every LAUNCHER_CHECK_S,
        whether the Airflow task that started the job is gone. If so the run stops; if it has not
        ended ORPHAN_EXIT_S later (its stop or its exit hangs somewhere, and nobody is left to end
        it), `abandon` ends the process."""
        if self.launcher is None:
            return
        while not stopped.wait(LAUNCHER_CHECK_S):
            if self.launcher.gone():
                # first its log to a file, then the hard end on a clock of its own: nothing after
                # this may wait on a log line, or on the stop
                try:
                    kept = self.launcher.keep_output(self.cfg.name)
                except OSError as exc:   # the folder cannot be written: the orphan still ends
                    kept = f"nowhere (its log file could not be opened: {exc})"
                orphaned = OrphanedError(
                    f"pipeline {self.cfg.name}: the process that started this stream (pid {self.launcher.pid}, the "
                    f"Airflow task, through spark-submit) is gone — killed, or its scheduler was — and nothing would "
                    f"stop this stream: it stops itself. What it committed stays; the task's retry or the next run "
                    f"of sync_{self.cfg.name} resumes from the committed offsets. Its log from then on: {kept}")
                threading.Thread(target=_after, args=(ORPHAN_EXIT_S, abandon, orphaned), daemon=True,
                                 name="tideline-orphan-end").start()
                # a thread of its own: a stop that hangs (its JVM frozen, say) must not hang this one
                threading.Thread(target=self.stop, args=(orphaned,), daemon=True, name="tideline-orphan-stop").start()
                log.error("%s", orphaned)
                return

    def track_partitions(self, src, name: str, st) -> None:
        """A partitioned table's partitions: compared with the ones its state knows (a table loaded
        before they were recorded starts from what is there now); a change that moved rows
        without change events marks it for a reload now."""
        known = st.raw.get("source_partitions")
        tree = self.engine.partition_tree(src, self.cfg.source_schema(name), name, known)
        if tree is None:
            return
        why = partition_tree_change(known, tree) if known is not None else None
        if why:
            self.needs_resnapshot(name, f"{name}: {why}")
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

    def check_partitions(self) -> ResnapshotRequired | None:
        """While streaming: a partition attached with rows, detached or dropped ends the run with
        the table marked for a reload (exit 4: the DAG reloads it and streams on): the error, or None."""
        if not self._trees:
            return None
        src = self.engine.connect(autocommit=True, connect_timeout=5)
        try:
            for name, known in list(self._trees.items()):
                if name in self.halted:
                    continue
                tree = self.engine.partition_tree(src, self.cfg.source_schema(name), name, known) or {}
                why = partition_tree_change(known, tree)
                if why:
                    self.needs_resnapshot(name, f"{name}: {why}")
                    moved = ResnapshotRequired(f"{self.cfg.name}.{name}: {why}. The table is marked "
                                               f"needs_resnapshot; the sync DAG reloads it by itself.", table=name)
                    log.error("%s", moved)
                    return moved
                self._save_tree(name, tree, known)
        finally:
            src.close()
        return None

    def check_config(self) -> PipelineRemovedError | None:
        """A pipeline whose YAML was deleted has no DAG left to show or stop its stream: the stream
        stops itself (within FENCE_CHECK_S), saying why and what to do."""
        path = self.cfg.loaded_from
        if path is None or path.exists():
            self._config_missing = 0
            return None
        self._config_missing += 1   # two looks in a row: an editor that saves by delete-and-write is no deletion
        if self._config_missing < 2:
            return None
        removed = PipelineRemovedError(
            f"pipeline {self.cfg.name}: its config {path} was deleted while its stream ran, so nothing would show or "
            f"stop this stream: it stops (what it committed stays). Its connector, replication slot and topics stay "
            f"until removed: python -m tideline.ops.lifecycle orphans lists them and the command that removes "
            f"them — or put the YAML back and trigger sync_{self.cfg.name}")
        log.error("%s", removed)
        return removed

    def check_hold(self, connect) -> ResnapshotRequired | None:
        """What capture holds on the source (capture.hold: since when nobody reads the slot is kept
        in the state), and whether the source lost it: a slot the server invalidated
        (max_slot_wal_keep_size), a binlog purged. Then changes were missed at the source, and no
        replay can bring them: the run ends for a re-snapshot, and the sync DAG's next run re-creates
        capture and reloads the tables (capture.connector.recover_lost_capture)."""
        from tideline.capture import hold
        from tideline.capture.connector import ConnectClient
        from tideline.core.debezium import connector_name
        try:
            src = self.engine.connect(autocommit=True, connect_timeout=5)
            try:
                conn = self.store.connect(connect_timeout=5)
                try:
                    found = hold.look(self.cfg, self.engine, src, conn, connect)
                finally:
                    conn.close()
            finally:
                src.close()
            if found.status != "lost" and not found.missing:
                return None
            why = self.engine.lost_capture(self.cfg, ConnectClient(connect.http_base_url(), timeout=10),
                                           connector_name(self.cfg))
        except Exception as exc:   # a part is away: the next look sees it again
            log.warning("%s: what capture holds on the source was not checked: %s", self.cfg.name, exc)
            return None
        if why is None:
            return None
        log.error("%s: %s", self.cfg.name, why)
        for name in self.tables:   # marked first: a crash from here on still leaves them marked
            if name not in self.halted:
                self.needs_resnapshot(name, f"capture lost its source position: {why}")
        return ResnapshotRequired(f"pipeline {self.cfg.name}: {why}. This stream stops; the sync DAG re-creates "
                                  f"capture and reloads its tables by itself")

    def restart_failed_connector(self, connect, failure: str | None) -> None:
        """A connector whose task FAILED (Debezium gives up on a source or Kafka away for longer than
        connect.retry_minutes) captures nothing until restarted: the stream restarts it, at most
        every CONNECTOR_RESTART_MAX_S once the first tries fail again (a lost source position is
        not among these: check_hold ends the run for a reload first). The failure stays said and
        alerted until capture runs."""
        from tideline.capture.connector import ConnectClient
        from tideline.core.debezium import connector_name
        now = time.monotonic()
        if failure is None or "FAILED" not in failure:
            self._restart_delay = CAPTURE_CHECK_S
            return
        if now < self._next_restart:
            return
        try:
            ConnectClient(connect.http_base_url(), timeout=15).restart(connector_name(self.cfg))
        except Exception as exc:   # Connect away: the next look tries again
            log.warning("%s: the failed connector was not restarted: %s", self.cfg.name, exc)
            return
        self._next_restart = now + self._restart_delay
        log.warning("%s: restarted the failed connector %s (next restart no sooner than %.0f s if it fails again)",
                    self.cfg.name, connector_name(self.cfg), self._restart_delay)
        self._restart_delay = min(self._restart_delay * 2, CONNECTOR_RESTART_MAX_S)

    def check_capture(self) -> None:
        """A failed connector sends nothing, so the stream would look caught up while the source
        moves on: said in each table's state (last_error, cleared by the next batch) and alerted,
        once per distinct failure."""
        from tideline.capture.connector import capture_failure
        try:
            connect = get_connection(self.cfg.connect.conn_id, self._environ)
            failure = capture_failure(self.cfg, connect)
        except Exception as exc:   # no Connect connection given to this job: the watch DAG still checks
            log.debug("capture check skipped: %s", exc)
            return
        lost = self.check_hold(connect)
        if lost is not None:
            self.stop(lost)
            return
        self.restart_failed_connector(connect, failure)
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
