"""librdkafka's repeated lines (a broker down: several a second) reach the job's log once a minute
per kind of message (kafka_offsets.OncePerMinute)."""
import logging

from tideline.kafka_offsets import OncePerMinute, client_log


def record(message: str) -> logging.LogRecord:
    return logging.LogRecord("tideline.kafka_client", logging.ERROR, __file__, 1, message, None, None)


def test_a_repeated_failure_passes_once_a_minute_and_another_kind_passes_at_once():
    now = [0.0]
    once = OncePerMinute(clock=lambda: now[0])
    refused = "FAIL [thrd:127.0.0.1:59092/bootstrap]: Connect to ipv4#127.0.0.1:59092 failed: Connection refused " \
              "(after {}ms in state CONNECT)"
    passed = []
    for i in range(600):   # ten minutes of a line every second, its numbers changing
        now[0] = float(i)
        passed.append(once.filter(record(refused.format(i % 7))))
    assert sum(passed) == 10 and passed[0] and passed[60]
    assert once.filter(record("SASL authentication failed"))   # another kind is not held back


def test_the_consumers_logger_filters():
    assert any(isinstance(f, OncePerMinute) for f in client_log.filters)
