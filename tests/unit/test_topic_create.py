"""Creating a change topic waits out a busy cluster and names a refusal (capture.connector.create_topic)."""
from concurrent.futures import Future

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewTopic

from tideline.capture import connector
from tideline.core.errors import SourceError, TransientError


class Admin:
    """The AdminClient's create_topics as a cluster answers it: one outcome per call, in order."""

    def __init__(self, *outcomes):
        self.outcomes, self.calls = list(outcomes), 0

    def create_topics(self, specs):
        self.calls += 1
        fut = Future()
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if outcome is None:
            fut.set_result(None)
        else:
            fut.set_exception(KafkaException(KafkaError(outcome)))
        return {specs[0].topic: fut}


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr(connector, "TOPIC_CREATE_PATIENCE_S", 3)


def test_a_time_out_is_waited_out_and_a_create_that_landed_meanwhile_counts():
    admin = Admin(KafkaError._TIMED_OUT, KafkaError.TOPIC_ALREADY_EXISTS)
    connector.create_topic(admin, NewTopic("t.orders", 2, 3))
    assert admin.calls == 2


def test_a_refusal_is_named_at_once():
    admin = Admin(KafkaError.POLICY_VIOLATION)
    with pytest.raises(SourceError, match="creating Kafka topic 't.orders' failed"):
        connector.create_topic(admin, NewTopic("t.orders", 2, 3))
    assert admin.calls == 1


def test_a_cluster_busy_past_the_patience_is_a_transient_error():
    admin = Admin(*[KafkaError.NOT_CONTROLLER] * 100)
    with pytest.raises(TransientError, match="did not answer for 3 s"):
        connector.create_topic(admin, NewTopic("t.orders", 2, 3))
    assert admin.calls >= 2
