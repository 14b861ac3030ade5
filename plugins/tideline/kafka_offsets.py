"""Kafka positions Tideline reasons about: end offsets (the handover) and earliest offsets (retention)."""
from __future__ import annotations

import logging
import re
import time

from confluent_kafka import KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from tideline.core.kafka_access import KafkaAccess, client_config
from tideline.core.errors import SourceError, TransientError

_quiet = logging.getLogger("tideline.rdkafka")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


class OncePerMinute(logging.Filter):
    """librdkafka logs a failure each time it retries: with a broker down, several lines a second
    for as long as it is down (a stream's task log grew 3.5 MB in a 20-minute Kafka outage, mostly
    "Connect to ipv4#… failed: Connection refused"). One line per kind of message (its text with
    the numbers left out) per `every_s` says the same."""

    def __init__(self, every_s: float = 60.0, clock=time.monotonic):
        super().__init__()
        self.every_s, self.clock, self.last = every_s, clock, {}

    def filter(self, record: logging.LogRecord) -> bool:
        kind, now = re.sub(r"\d+", "#", record.getMessage())[:300], self.clock()
        if now - self.last.get(kind, float("-inf")) < self.every_s:
            return False
        if len(self.last) > 1000:
            self.last.clear()
        self.last[kind] = now
        return True


# librdkafka's lines of Tideline's consumers, at most one of a kind a minute, into the job's log
client_log = logging.getLogger("tideline.kafka_client")
client_log.addFilter(OncePerMinute())


def admin_client(kafka: KafkaAccess | str) -> AdminClient:
    return AdminClient(client_config(kafka, {"socket.timeout.ms": 10000}), logger=_quiet)


def partitions(admin: AdminClient, kafka: KafkaAccess | str, topic: str, timeout: float = 15.0) -> list[int]:
    return describe_topic(admin, kafka, topic, timeout)[1]


def describe_topic(admin: AdminClient, kafka: KafkaAccess | str, topic: str,
                   timeout: float = 15.0) -> tuple[str | None, list[int]]:
    """The topic's id (new each time a topic of that name is created; None from a broker that
    gives none) and its partitions, in one request. (A metadata request for one topic,
    `list_topics(topic=...)`, took ~55 ms in librdkafka most of the time: 1/3 of a small table's
    full load, tests/bench/many_tables.py.)"""
    try:
        [fut] = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout).values()
        found = fut.result()
    except KafkaException as exc:
        error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        if error is None or error.code() < 0:   # librdkafka's own: timed out, transport, ...
            raise TransientError(f"Kafka at {kafka} is unreachable while looking up topic {topic!r}: {exc}. "
                                 f"Check that the brokers run and the Kafka connection's bootstrap.servers.") from None
        reason = "it does not exist" if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART else error.str()
        raise _unusable(topic, reason) from None
    if not found.partitions:
        raise _unusable(topic, "it has no partitions")
    return (str(found.topic_id) if getattr(found, "topic_id", None) else None,
            sorted(p.id for p in found.partitions))


def _unusable(topic: str, reason: str) -> SourceError:
    return SourceError(f"Kafka topic {topic!r} cannot be used ({reason}). The change topic must exist before "
                       f"a full load records where the stream resumes: run the sync DAG (its prepare "
                       f"task creates the topics), or check kafka.topic_prefix in the pipeline config.")


# A partition whose leader is moving (a topic created moments ago, a broker restarting): Kafka
# answers with these until the new leader is known, usually within milliseconds.
LEADER_MOVING = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                           KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.FENCED_LEADER_EPOCH,
                           KafkaError.OFFSET_NOT_AVAILABLE})


def leader_moving(exc: KafkaException) -> bool:
    error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    return error is not None and error.code() in LEADER_MOVING


def _list(admin: AdminClient, kafka: KafkaAccess | str, topic: str, parts: list[int], spec: OffsetSpec,
          timeout: float) -> dict[int, int]:
    """Offsets of the topic's partitions; asked again while a partition's leader is moving (for up
    to `timeout`: a full load right after the topic was created met 'Not leader for partition')."""
    request = {TopicPartition(topic, p): spec for p in parts}
    deadline, pause = time.monotonic() + timeout, 0.05
    while True:
        try:
            futures = admin.list_offsets(request, request_timeout=timeout)
            return {tp.partition: fut.result().offset for tp, fut in futures.items()}
        except KafkaException as exc:
            if leader_moving(exc) and time.monotonic() + pause < deadline:
                time.sleep(pause)
                pause = min(pause * 2, 1.0)
                continue
            raise TransientError(f"listing offsets of topic {topic!r} at {kafka} failed: {exc}") from None


def end_offsets(kafka: KafkaAccess | str, topic: str, timeout: float = 15.0) -> dict[int, int]:
    """Next offset to be written, per partition."""
    admin = admin_client(kafka)
    return _list(admin, kafka, topic, partitions(admin, kafka, topic, timeout), OffsetSpec.latest(), timeout)


def earliest_offsets(kafka: KafkaAccess | str, topic: str, timeout: float = 15.0) -> dict[int, int]:
    """Oldest offset still retained, per partition."""
    admin = admin_client(kafka)
    return _list(admin, kafka, topic, partitions(admin, kafka, topic, timeout), OffsetSpec.earliest(),
                 timeout)


def handover(kafka: KafkaAccess | str, topic: str, timeout: float = 15.0,
             admin: AdminClient | None = None) -> tuple[str | None, dict[int, int]]:
    """What a full load records before its snapshot, with one client (`admin`, shared by a load's
    tables, or a new one): the topic's id (a recreated topic has another) and its end offsets."""
    admin = admin or admin_client(kafka)
    found, parts = describe_topic(admin, kafka, topic, timeout)
    return found, _list(admin, kafka, topic, parts, OffsetSpec.latest(), timeout)


def topic_id(kafka: KafkaAccess | str, topic: str, timeout: float = 15.0) -> str | None:
    """The broker's id of the topic (see describe_topic); a missing topic: the error that says what to do."""
    return describe_topic(admin_client(kafka), kafka, topic, timeout)[0]


def watermarks(kafka: KafkaAccess | str, topic: str, timeout: float = 15.0) -> tuple[dict[int, int], dict[int, int]]:
    """(earliest retained, log end) per partition, with one client and one metadata lookup."""
    admin = admin_client(kafka)
    parts = partitions(admin, kafka, topic, timeout)
    return (_list(admin, kafka, topic, parts, OffsetSpec.earliest(), timeout),
            _list(admin, kafka, topic, parts, OffsetSpec.latest(), timeout))


def mean_event_bytes(kafka: KafkaAccess | str, marks: dict[str, tuple[dict[int, int], dict[int, int]]], sample: int = 200,
                     timeout: float = 10.0, starts: dict[str, dict] | None = None) -> float | None:
    """The largest mean size (key + value bytes) of `sample` events of any partition of the topics
    in `marks` (each topic's watermarks()) — its newest, and, given each partition's resume offset
    in `starts` (Spark's startingOffsets), those a backlog's first batch reads: what a batch's raw
    records weigh per event. Both, because one end of a topic may be unlike the rest (deletes with
    their tombstones weigh half an update). None when the topics hold no events."""
    newest: dict[tuple[str, int], tuple[int, int]] = {}
    backlog: dict[tuple[str, int], tuple[int, int]] = {}
    for topic, (earliest, latest) in marks.items():
        for p, end in latest.items():
            first = earliest.get(p, 0)
            if end > first:
                newest[(topic, p)] = (max(first, end - sample), end)
            resume = max(first, int((starts or {}).get(topic, {}).get(str(p), end)))
            if resume < end - sample:
                backlog[(topic, p)] = (resume, resume + sample)
    means = [sum(s) / len(s) for ranges in (newest, backlog) if ranges
             for s in _event_sizes(kafka, ranges, timeout).values() if s]
    return max(means) if means else None


def _event_sizes(kafka: KafkaAccess | str, ranges: dict[tuple[str, int], tuple[int, int]],
                 timeout: float) -> dict[tuple[str, int], list[int]]:
    """Each partition's event sizes over its [first, end) offsets in `ranges`."""
    from confluent_kafka import Consumer

    consumer = Consumer(client_config(kafka, {"group.id": "tideline-event-size", "enable.auto.commit": False,
                         "enable.partition.eof": True, "isolation.level": "read_committed"}), logger=client_log)
    sizes: dict[tuple[str, int], list[int]] = {tp: [] for tp in ranges}
    try:
        consumer.assign([TopicPartition(t, p, lo) for (t, p), (lo, _end) in ranges.items()])
        pending, deadline = set(ranges), time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=500, timeout=1.0):
                tp = (msg.topic(), msg.partition())
                if tp not in pending:
                    continue
                if msg.error() is None:
                    sizes[tp].append(len(msg.key() or b"") + len(msg.value() or b""))
                if msg.error() is not None or msg.offset() + 1 >= ranges[tp][1]:
                    pending.discard(tp)
    finally:
        consumer.close()
    return sizes
