"""The hand-over between Spark's batch thread and the committer thread.

Spark's batch thread reads and decodes batch N (one Spark job for the raw records; the driver
decodes them, core.change_events) while batch N-1 commits in the committer thread, then waits
for that commit (raising its failure) and hands N over. At most one batch commits while the next
is read. The target stays the only position: Spark's checkpoint may record N-1 before it
committed, but a run whose commit failed ends, and the next run resumes from the target.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

from tideline.core.batch_events import SplitBatch, split_batch
from tideline.core.change_events import RECORD_COLUMNS, decode_records


@dataclass
class ReadBatch:
    """A batch read and decoded by Spark's batch thread, waiting for the committer."""
    spark_batch_id: int
    batch: SplitBatch
    started: float
    started_at: datetime
    read_s: float


def read_batch(df, spark_batch_id: int) -> ReadBatch | None:
    """One Spark job reads the batch's raw records; the driver decodes them. None when empty."""
    started, started_at = time.monotonic(), datetime.now(timezone.utc)
    events = decode_records(df.select(*RECORD_COLUMNS).toArrow())
    if not events.num_rows:
        return None
    return ReadBatch(spark_batch_id, split_batch(events), started, started_at, time.monotonic() - started)


class BatchHandover:
    """`foreachBatch`'s function. `commit(read)` runs in the committer thread; `failed(exc)` hears
    every failure on either thread (once per exception object is the caller's concern), and a
    commit failure also calls `stop_query` — an idle stream would never call back to hear of it."""

    def __init__(self, commit: Callable[[ReadBatch], None], failed: Callable[[BaseException], None],
                 stop_query: Callable[[], None]):
        self._commit, self._failed, self._stop_query = commit, failed, stop_query
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tideline-commit")
        self._inflight: Future | None = None

    def __call__(self, df, spark_batch_id: int) -> None:
        try:
            read = read_batch(df, spark_batch_id)
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
