"""The coverage check behind the sensor: does Kafka still hold every offset each streaming table
must resume from, and how long until retention reaches the oldest one still needed?"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import ConfigResource

from tideline import kafka_offsets, state
from tideline.core.config import PipelineConfig
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


def _retention_ms(bootstrap: str, topic: str) -> int:
    admin = kafka_offsets.admin_client(bootstrap)
    fut = admin.describe_configs([ConfigResource("topic", topic)])
    configs = list(fut.values())[0].result(15)
    return int(configs["retention.ms"].value)


def _oldest_needed_timestamp_ms(bootstrap: str, topic: str, resume: dict[int, int], latest: dict[int, int]):
    """Timestamp of the oldest message the stream still needs (the one at its resume offset)."""
    needed = [(p, o) for p, o in resume.items() if o < latest.get(p, 0)]
    if not needed:
        return None
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tideline-coverage-probe",
                         "enable.auto.commit": False})
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


def check(cfg: PipelineConfig, target_conn, bootstrap: str, tables: list[str]) -> list[TableCoverage]:
    out = []
    for name in tables:
        st = state.get(target_conn, cfg.name, name)
        target_conn.rollback()
        if st is None or st.phase != "streaming" or st.resume_offsets is None:
            continue
        topic = cfg.topic(name)
        earliest, latest = kafka_offsets.watermarks(bootstrap, topic)
        gaps = coverage_gaps(topic, st.resume_offsets, earliest, latest)
        lag = {p: max(0, end - st.resume_offsets.get(p, 0)) for p, end in latest.items()}
        headroom = None
        if not gaps and any(lag.values()):
            oldest = _oldest_needed_timestamp_ms(bootstrap, topic, st.resume_offsets, latest)
            if oldest is not None:
                headroom = (oldest + _retention_ms(bootstrap, topic)) / 1000 - time.time()
        out.append(TableCoverage(name, gaps, lag, headroom))
    return out


def describe_headroom(seconds: float | None) -> str:
    if seconds is None:
        return "caught up (retention cannot take anything the stream needs)"
    if seconds <= 0:
        return "retention is deleting the oldest needed message now"
    h, rem = divmod(int(seconds), 3600)
    return f"the oldest needed message expires in {h}h{rem // 60:02d}m"
