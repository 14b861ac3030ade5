"""Kafka topic lookups (tideline.kafka_offsets.describe_topic): a broker that cannot be reached is
a transient failure that names the address and what to check, never a missing topic."""
import pytest

from tideline import kafka_offsets
from tideline.core.errors import TransientError

NOBODY = "127.0.0.1:1"   # nothing listens on port 1


def test_an_unreachable_kafka_is_a_transient_error_naming_it():
    admin = kafka_offsets.admin_client(NOBODY)
    with pytest.raises(TransientError, match=r"Kafka at 127\.0\.0\.1:1 is unreachable while looking up topic 'orders'"):
        kafka_offsets.handover(NOBODY, "orders", timeout=1, admin=admin)


class _Offsets:
    """Answers list_offsets like an AdminClient: first `moving` times with a partition whose leader
    is moving (or with `error`), then with offset 42 for every partition asked."""

    def __init__(self, moving: int, error: int | None = None):
        from confluent_kafka import KafkaError
        self.moving, self.error, self.calls = moving, error or KafkaError.NOT_LEADER_FOR_PARTITION, 0

    def list_offsets(self, request, request_timeout):
        from concurrent.futures import Future
        from types import SimpleNamespace

        from confluent_kafka import KafkaError, KafkaException
        self.calls += 1
        out = {}
        for tp in request:
            fut = Future()
            if self.calls <= self.moving:
                fut.set_exception(KafkaException(KafkaError(self.error)))
            else:
                fut.set_result(SimpleNamespace(offset=42))
            out[tp] = fut
        return out


def test_offsets_are_asked_again_while_a_partitions_leader_is_moving():
    admin = _Offsets(moving=3)
    assert kafka_offsets._list(admin, "k:9092", "orders", [0, 1], None, timeout=10) == {0: 42, 1: 42}
    assert admin.calls == 4


def test_a_leader_that_never_settles_is_a_transient_error_within_the_timeout():
    admin = _Offsets(moving=10**6)
    with pytest.raises(TransientError, match="listing offsets of topic 'orders' at k:9092 failed.*Not leader"):
        kafka_offsets._list(admin, "k:9092", "orders", [0], None, timeout=0.5)
    assert 2 <= admin.calls <= 10


def test_other_errors_are_not_asked_again():
    from confluent_kafka import KafkaError
    admin = _Offsets(moving=1, error=KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(TransientError):
        kafka_offsets._list(admin, "k:9092", "orders", [0], None, timeout=10)
    assert admin.calls == 1
