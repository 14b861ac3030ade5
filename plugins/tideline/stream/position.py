"""Where a stream starts and how much it reads at once: each table's committed offsets (the
target's, never a checkpoint's), checked against what Kafka still holds — a gap means the table
needs a reload, never a silent skip — and the events per batch, sized by the events' weight.
"""
from __future__ import annotations

import logging
from typing import Callable

from tideline import kafka_offsets, state
from tideline.core.kafka_access import KafkaAccess
from tideline.core.config import PipelineConfig
from tideline.core.errors import DataLossError
from tideline.core.offsets import coverage_gaps, starting_offsets

log = logging.getLogger("tideline.incremental.position")

Watermarks = dict[str, tuple[dict[int, int], dict[int, int]]]   # topic -> (earliest, latest) per partition


def check_coverage(cfg: PipelineConfig, store, conn, tables, kafka: KafkaAccess | str, watermarks: Watermarks,
                   needs_resnapshot: Callable[[str, str], None]) -> dict[str, dict[str, int]]:
    """Kafka must still hold every committed resume offset (the target's applied position);
    otherwise the table is marked for a reload and DataLossError raised. Returns Spark's
    startingOffsets; fills `watermarks`."""
    start: dict[str, dict[str, int]] = {}
    for t in tables:
        st = state.get(conn, cfg.name, t.name)
        with conn.cursor() as cur:
            resume = store.applied_offsets(cur, cfg.name, cfg.target_schema(t.name), cfg.target_table(t.name),
                                           st.resume_offsets)
        conn.rollback()
        watermarks[t.topic] = kafka_offsets.watermarks(kafka, t.topic)
        earliest, latest = watermarks[t.topic]
        t.partitions = st.raw.get("topic_partitions")
        gaps = coverage_gaps(t.topic, resume, earliest, latest, t.partitions, st.raw.get("topic_id"),
                             kafka_offsets.topic_id(kafka, t.topic) if st.raw.get("topic_id") else None)
        if gaps:
            reason = "; ".join(g.describe() for g in gaps)
            what = ("Kafka no longer holds what the stream needs" if any(g.partition >= 0 for g in gaps)
                    else "the stream cannot resume exactly")
            needs_resnapshot(t.name, f"{what}: {reason}")
            raise DataLossError(f"{cfg.name}.{t.name}: {reason}. The table is marked needs_resnapshot; "
                                f"the sync DAG reloads it by itself (or run action=full_reload).")
        begin = starting_offsets(resume, latest)
        if cfg.table(t.name).changelog:   # its change log may lack events the table has (a reload moved it on)
            begin = _log_start(cfg, store, conn, t, begin, earliest)
        start[t.topic] = {str(p): o for p, o in begin.items()}
        lag = sum(latest[p] - o for p, o in starting_offsets(resume, latest).items())
        log.info("%s.%s: epoch %d, resuming %s at %s (%s events behind)", cfg.name, t.name, t.epoch,
                 t.topic, dict(sorted(resume.items())), f"{lag:,}")
    return start


def _log_start(cfg: PipelineConfig, store, conn, t, begin: dict[int, int], earliest: dict[int, int]) -> dict[int, int]:
    """Where a table with a change log starts reading: its own position, or the log's where the log
    is behind it — a reload records Kafka's end as the table's position while the stream that
    stopped for it had logged less. The table applies only what is past its own position
    (drop_applied); the log takes what it lacks. What Kafka no longer holds is lost to the log:
    said in the log, once."""
    with conn.cursor() as cur:
        logged = store.log_position(cur, cfg.target_schema(t.name), cfg.target_table(t.name), t.topic)
    conn.rollback()
    out = dict(begin)
    for p, at in (logged or {}).items():
        if p in out and at < out[p]:
            if at < earliest.get(p, 0):
                log.warning("%s.%s: its change log lacks offsets %d..%d of %s partition %d, which Kafka no longer "
                            "holds (retention): the log has a gap there", cfg.name, t.name, at, earliest[p] - 1,
                            t.topic, p)
            out[p] = max(at, earliest.get(p, 0))
    return out


def batch_events(cfg: PipelineConfig, kafka: KafkaAccess | str, watermarks: Watermarks, caps,
                 start: dict[str, dict[str, int]] | None = None) -> int:
    """Events per batch for this run (stream.max_offsets_per_trigger, else the target's
    Capabilities.batch_events), from the size of the topics' events — the newest, and those at
    `start` (check_coverage's startingOffsets) — and stream.max_batch_mb (else the target's
    Capabilities.batch_mb); logged when the size lowers it."""
    stream = cfg.stream
    most = stream.events_at_most(caps.batch_events)
    mean = kafka_offsets.mean_event_bytes(kafka, watermarks, starts=start)
    events = stream.batch_events(mean, caps.batch_events, caps.batch_mb)
    if events < most:
        log.info("batches of at most %s events: the topics' events weigh %s bytes on average (the newest "
                 "or those at the resume position, whichever weigh more), and "
                 "stream.max_batch_mb=%g (at most %s events per batch)", f"{events:,}", f"{mean:,.0f}",
                 stream.mb_at_most(caps.batch_mb), f"{most:,}")
    return events
