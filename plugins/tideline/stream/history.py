"""What a stream leaves for people besides the rows: its row per table in the run history (how it
ended, events applied), the error that stopped it in each table's state (the watch DAG and
`make status` show it; the next committed batch clears it), and its committed position mirrored
to a Kafka consumer group so lag tools see it. All best effort: the target holds the truth.
"""
from __future__ import annotations

import logging
import threading

from tideline import state
from tideline.core.kafka_access import KafkaAccess, client_config
from tideline.core.config import PipelineConfig
from tideline.core.errors import FencedError

log = logging.getLogger("tideline.incremental.history")


class StreamHistory:
    def __init__(self, cfg: PipelineConfig, store, kafka: KafkaAccess | str, mode: str, owner: str):
        self.cfg, self.store, self.kafka, self.mode, self.owner = cfg, store, kafka, mode, owner
        self.run_ids: dict[str, int] = {}
        self.applied: dict[str, int] = {}  # events applied per table by this run
        self._consumer = None
        self._closing = threading.Lock()   # closed once: by the run, or by an orphan's hard end

    def start(self, conn, table: str, epoch: int) -> None:
        """The table's row for this stream (a stream killed before it closed its row is closed as
        abandoned, with the epoch of the run that took over, when the next stream starts)."""
        self.run_ids[table] = state.run_start(conn, self.cfg.name, table, "incremental", epoch,
                                              f"{self.mode} stream by {self.owner}", self.mode)

    def count(self, per_table: dict[str, tuple[int, int]]) -> None:
        for name, (u, d) in per_table.items():
            self.applied[name] = self.applied.get(name, 0) + u + d

    def close(self, exc: BaseException | None, batches: int, halted: dict[str, str]) -> None:
        """Each table's row in the run history: how this stream ended (best effort: the target may
        be what failed; then the next stream closes the row as abandoned)."""
        if not self.run_ids or not self._closing.acquire(blocking=False):
            return
        outcome = "succeeded" if exc is None else "fenced" if isinstance(exc, FencedError) else "failed"
        try:
            conn = self.store.connect(connect_timeout=5)
        except Exception:
            return
        try:
            with conn, conn.cursor() as cur:
                for name, run_id in self.run_ids.items():
                    why = halted.get(name) or (describe_end(exc) if exc else "")
                    state.run_end(cur, run_id, "failed" if name in halted else outcome,
                                  self.applied.get(name, 0),
                                  f"{self.mode} stream by {self.owner}: {batches} batches" + (f"; {why}" if why else ""))
        except Exception as cannot:
            log.warning("could not close the stream's run history rows: %s", cannot)
        finally:
            conn.close()

    def record_failure(self, exc: BaseException, tables) -> None:
        """The error that stopped the stream, on each of its tables (best effort: the target may be
        what failed) — the watch DAG's stall alert and `make status` show it; the next committed
        batch clears it."""
        why = f"stream stopped: {describe_end(exc)}"
        try:
            conn = self.store.connect(connect_timeout=5)
        except Exception as cannot:
            log.warning("could not record the stream's failure in the target (%s): %s", cannot, why)
            return
        try:
            for name in tables:
                state.record_error(conn, self.cfg.name, name, why)
        except Exception as cannot:
            log.warning("could not record the stream's failure in the target (%s): %s", cannot, why)
        finally:
            conn.close()

    def mirror(self, committed: dict[str, dict[str, int]]) -> None:
        """Mirrors the committed position into a consumer group so lag tools see it (the target
        stays the truth; a failure here is logged, never fatal)."""
        from confluent_kafka import Consumer, TopicPartition
        try:
            if self._consumer is None:
                # never polled, so no Python logger (librdkafka would queue its lines for a poll):
                # its errors only (level 3, e.g. a broker down, several lines a second all along
                # an outage: 3.5 MB of a stream's task log in 20 minutes) are left out; a commit
                # that fails says so below
                self._consumer = Consumer(client_config(self.kafka, {"group.id": f"tideline-{self.cfg.name}",
                                           "enable.auto.commit": False, "log_level": 2}))
            offsets = [TopicPartition(topic, int(p), o) for topic, parts in committed.items()
                       for p, o in parts.items()]
            if offsets:
                self._consumer.commit(offsets=offsets, asynchronous=False)
        except Exception as exc:
            log.warning("could not commit offsets to consumer group tideline-%s (lag tools will lag): %s",
                        self.cfg.name, exc)

    def shut(self) -> None:
        if self._consumer is not None:
            self._consumer.close()


def describe_end(exc: BaseException) -> str:
    """What ended a stream, in words: a py4j connection refused means the Spark driver JVM is gone
    (killed or crashed), which the bare exception does not say."""
    text = f"{type(exc).__name__}: {str(exc).strip()[:1500]}"
    if isinstance(exc, ConnectionError) or type(exc).__name__ == "Py4JNetworkError":
        return f"the Spark driver (JVM) died under the stream ({text}); the task's retry resumes from the committed offsets"
    return text
