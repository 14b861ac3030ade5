"""The watchdog's judgement, pure: a stream that has committed nothing for longer than the bound
while Kafka holds events for it is stalled — whether its task died, sits in retries, failed, or
was never started. The watch DAG (outside the task that can die) gathers the facts and alerts."""
from __future__ import annotations

from datetime import datetime


def stalled_for(pending: int, last_progress_at: datetime | None, now: datetime, bound_s: float) -> float | None:
    """Seconds the table's stream has been stalled, or None when it is not (nothing pending, or
    a batch committed within the bound). No progress recorded at all counts from never."""
    if pending <= 0:
        return None
    if last_progress_at is None:
        return float("inf")
    idle = (now - last_progress_at).total_seconds()
    return idle if idle > bound_s else None


def describe(pipeline: str, table: str, pending: int, stalled_s: float, last_error: str | None,
             last_error_at: datetime | None) -> str:
    since = "ever" if stalled_s == float("inf") else f"{int(stalled_s // 60)}m{int(stalled_s % 60):02d}s"
    seen = (f"{last_error[:1000]} (at {last_error_at:%Y-%m-%d %H:%M:%S %Z})" if last_error and last_error_at
            else last_error[:1000] if last_error else "none recorded by the stream")
    return (f"{table}: the stream of pipeline {pipeline} has committed no batch for {since} while Kafka holds "
            f"{pending:,} events for it. Last error seen: {seen}. The sync_{pipeline} DAG's stream task is not "
            f"applying — dead, in retries, failed, or not started: look at its latest run, fix what the error "
            f"names, and trigger sync_{pipeline} (it resumes from the committed offsets).")
