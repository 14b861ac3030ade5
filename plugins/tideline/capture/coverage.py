"""The coverage check behind the sensor: does Kafka still hold every offset each streaming table
must resume from, and how long until retention reaches the oldest one still needed?"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import ConfigResource

from tideline import kafka_offsets, state
from tideline.core.kafka_access import KafkaAccess, client_config
from tideline.core.config import PipelineConfig
from tideline.core.errors import SourceError
from tideline.core.offsets import Gap, coverage_gaps

log = logging.getLogger("tideline.coverage")


@dataclass
class TableCoverage:
    table: str
    gaps: list[Gap]
    lag: dict[int, int]          # events between the resume position and the log end, per partition
    headroom_s: float | None     # None: nothing pending, retention cannot hurt

    @property
    def pending(self) -> int:
        return sum(self.lag.values())


def _retention_ms(kafka: KafkaAccess | str, topic: str) -> int:
    admin = kafka_offsets.admin_client(kafka)
    fut = admin.describe_configs([ConfigResource("topic", topic)])
    configs = list(fut.values())[0].result(15)
    return int(configs["retention.ms"].value)


def _oldest_needed_timestamp_ms(kafka: KafkaAccess | str, topic: str, resume: dict[int, int], latest: dict[int, int]):
    """Timestamp of the oldest message the stream still needs (the one at its resume offset)."""
    needed = [(p, o) for p, o in resume.items() if o < latest.get(p, 0)]
    if not needed:
        return None
    consumer = Consumer(client_config(kafka, {"group.id": "tideline-coverage-probe",
                         "enable.auto.commit": False}), logger=kafka_offsets.client_log)
    try:
        consumer.assign([TopicPartition(topic, p, o) for p, o in needed])
        oldest, seen, deadline = None, set(), time.time() + 15
        while len(seen) < len(needed) and time.time() < deadline:
            msg = consumer.poll(1.0)
            if msg is None or msg.error() or msg.partition() in seen:
                continue
            seen.add(msg.partition())
            ts = msg.timestamp()[1]
            oldest = ts if oldest is None else min(oldest, ts)
        return oldest
    finally:
        consumer.close()


def check(cfg: PipelineConfig, target_conn, kafka: KafkaAccess | str, tables: list[str],
          strict: bool = True) -> list[TableCoverage]:
    """Coverage of each streaming or paused table. strict=False (status, the view: they show, they
    never act) reports a topic that cannot be used (deleted, Kafka's data lost) as that table's gap
    instead of raising, so one missing topic does not hide every other table's figures."""
    out = []
    for name in tables:
        st = state.get(target_conn, cfg.name, name)
        target_conn.rollback()
        # a paused table too: it keeps its position only as long as Kafka keeps its events
        if st is None or st.phase not in ("streaming", "paused") or st.resume_offsets is None:
            continue
        topic = cfg.topic(name)
        try:
            earliest, latest = kafka_offsets.watermarks(kafka, topic)
        except SourceError as exc:
            if strict:
                raise
            out.append(TableCoverage(name, [Gap(topic, -1, 0, None, None, str(exc))], {}, None))
            continue
        gaps = coverage_gaps(topic, st.resume_offsets, earliest, latest, st.raw.get("topic_partitions"),
                             st.raw.get("topic_id"),
                             kafka_offsets.topic_id(kafka, topic) if st.raw.get("topic_id") else None)
        lag = {p: max(0, end - st.resume_offsets.get(p, 0)) for p, end in latest.items()}
        headroom = None
        if not gaps and any(lag.values()):
            oldest = _oldest_needed_timestamp_ms(kafka, topic, st.resume_offsets, latest)
            if oldest is not None:
                headroom = (oldest + _retention_ms(kafka, topic)) / 1000 - time.time()
        out.append(TableCoverage(name, gaps, lag, headroom))
    return out


def describe_headroom(seconds: float | None) -> str:
    if seconds is None:
        return "caught up (retention cannot take anything the stream needs)"
    if seconds <= 0:
        return "retention is deleting the oldest needed offset now"
    return f"the oldest needed offset expires in {hours_minutes(seconds)}"


def hours_minutes(seconds: float) -> str:
    h, rem = divmod(int(max(seconds, 0)), 3600)
    return f"{h}h{rem // 60:02d}m"


def review(cfg: PipelineConfig, target_conn, kafka: KafkaAccess | str, tables: list[str], notify,
           mark: bool = True, checked: list[TableCoverage] | None = None) -> list[str]:
    """The coverage verdict: tables Kafka no longer covers are returned and, with mark, marked
    needs_resnapshot (the sync DAG reloads them); covered ones are logged with their lag and
    headroom, and headroom under the pipeline's threshold raises an alert.
    notify(event, message, subject=table)."""
    from tideline import alerts
    lost = []
    threshold_s = cfg.alerts.headroom_below_hours * 3600
    for r in (checked if checked is not None else check(cfg, target_conn, kafka, tables)):
        st = state.get(target_conn, cfg.name, r.table)
        target_conn.rollback()
        if st is not None and st.phase == "paused":   # never marked: a person paused it, a person resumes it
            _warn_paused(cfg, r, notify)
            continue
        if r.gaps:
            why = "Kafka no longer holds what the stream needs: " + "; ".join(g.describe() for g in r.gaps)
            if mark:
                state.set_phase(target_conn, cfg.name, r.table, "needs_resnapshot", why)
                notify(alerts.RESNAPSHOT_STARTED, f"{r.table}: {why}. Re-snapshotting it automatically.",
                       subject=r.table)
            else:
                notify(alerts.PIPELINE_FAILED, f"{r.table}: {why}. The next sync run re-snapshots it.",
                       subject=r.table)
            lost.append(r.table)
            continue
        log.info("%s.%s: covered; %s events pending; %s", cfg.name, r.table, f"{r.pending:,}",
                 describe_headroom(r.headroom_s))
        if r.headroom_s is not None and r.headroom_s < threshold_s:
            notify(alerts.HEADROOM_LOW, f"{r.table}: {describe_headroom(r.headroom_s)} "
                                        f"({r.pending:,} events pending; alert threshold "
                                        f"{cfg.alerts.headroom_below_hours:g}h). Start the stream, or raise "
                                        f"the topic's retention.ms", subject=r.table)
    return lost


def _warn_paused(cfg: PipelineConfig, r: TableCoverage, notify) -> None:
    """A paused table keeps its position only as long as Kafka keeps its events: said at every
    look, with the time retention takes it — resumed after that, the table reloads by itself."""
    from datetime import datetime, timedelta, timezone

    from tideline import alerts
    if r.gaps:
        notify(alerts.HEADROOM_LOW, f"{r.table} is paused and Kafka's retention already deleted events it needs "
                                    f"({'; '.join(g.describe() for g in r.gaps)}): resuming it (action=resume) "
                                    f"reloads it from a new snapshot", subject=r.table)
    elif r.headroom_s is not None:
        when = datetime.now(timezone.utc) + timedelta(seconds=r.headroom_s)
        message = (f"{r.table} is paused: Kafka's retention deletes its position in {hours_minutes(r.headroom_s)}"
                   f" (at {when:%Y-%m-%d %H:%M} UTC; {r.pending:,} events wait). Resume it before then "
                   f"(sync_{cfg.name}, action=resume), or resuming reloads it")
        log.warning("%s.%s", cfg.name, message)
        if r.headroom_s < cfg.alerts.headroom_below_hours * 3600:
            notify(alerts.HEADROOM_LOW, message, subject=r.table)

