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
