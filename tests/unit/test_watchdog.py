"""The watchdog's judgement: stalled = events pending and no batch for longer than the bound."""
from datetime import datetime, timedelta, timezone

from tideline.core.watchdog import describe, stalled_for

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc)


def test_pending_events_and_no_batch_for_longer_than_the_bound_is_a_stall():
    assert stalled_for(10, NOW - timedelta(minutes=20), NOW, 900) == 1200
    assert stalled_for(10, NOW - timedelta(minutes=5), NOW, 900) is None     # committed recently
    assert stalled_for(0, NOW - timedelta(days=3), NOW, 900) is None         # idle source, nothing pending
    assert stalled_for(5, None, NOW, 900) == float("inf")                     # never committed anything


def test_the_alert_names_pipeline_lag_and_the_last_error():
    text = describe("shop", "orders", 12345, 1330, "stream stopped: OperationalError: connection refused",
                    NOW - timedelta(minutes=22))
    for part in ("orders", "pipeline shop", "22m10s", "12,345 events", "connection refused", "trigger sync_shop"):
        assert part in text, part
    assert "none recorded" in describe("shop", "orders", 1, float("inf"), None, None)
