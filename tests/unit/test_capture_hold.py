"""core.capture_hold: a slot nobody reads, or one holding too much WAL, is said and alerted with
what to do; an invalidated one says that the DAG reloads by itself."""
from datetime import datetime, timedelta, timezone

from tideline.core.capture_hold import HOLDER_EXPIRING, HOLDER_IDLE, HOLDER_LOST, RETAINED_HIGH, CaptureHold, judge

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=timezone.utc)
MB = 1024 * 1024


def slot(**kw) -> CaptureHold:
    return CaptureHold("replication slot tideline_shop", **{"retained_bytes": 80 * MB, "active": True,
                                                          "status": "reserved", **kw})


def test_a_read_slot_within_bounds_raises_nothing_and_reads_plainly():
    s = slot(limit_bytes=2048 * MB)
    assert judge("shop", s, NOW, 4096, 30) == []
    assert s.line(NOW) == "replication slot tideline_shop: retains 80 MB of WAL, limit 2,048 MB " \
                          "(max_slot_wal_keep_size), read"


def test_a_slot_nobody_reads_is_alerted_after_the_bound_with_the_fix_for_an_unbounded_server():
    s = slot(active=False, inactive_since=NOW - timedelta(minutes=45))
    assert "NOT READ for 45 min" in s.line(NOW) and "no limit" in s.line(NOW)
    [(event, message)] = judge("shop", s, NOW, 4096, 30)
    assert event == HOLDER_IDLE and "no reader for 45 min" in message
    assert "trigger sync_shop" in message and "max_slot_wal_keep_size" in message
    assert judge("shop", slot(active=False, inactive_since=NOW - timedelta(minutes=20)), NOW, 4096, 30) == []


def test_retained_wal_past_the_bound_alerts_and_an_invalidated_slot_says_it_reloads():
    [(event, message)] = judge("shop", slot(retained_bytes=5000 * MB, limit_bytes=8192 * MB), NOW, 4096, 30)
    assert event == RETAINED_HIGH and "retains 5,000 MB" in message and "max_retained_wal_mb=4096" in message
    assert "ALTER SYSTEM" not in message   # a bound is set already
    events = [e for e, _ in judge("shop", slot(status="lost", active=False), NOW, 4096, 30)]
    assert events == [HOLDER_LOST]


def test_a_binlog_position_reads_in_its_own_words():
    b = CaptureHold("binlog position of connector tideline-shop", retained_bytes=3 * MB, expires_in_s=7200)
    assert b.line(NOW) == ("binlog position of connector tideline-shop: retains 3 MB of binlog, expiry purges its "
                           "position in at most 2.0 h")
    assert CaptureHold("replication slot x", missing=True).line(NOW) == "replication slot x: does not exist"


def test_a_binlog_position_near_its_expiry_is_alerted_and_a_purged_one_says_it_reloads():
    near = CaptureHold("binlog position of connector tideline-shop", retained_bytes=3 * MB, expires_in_s=2 * 3600)
    [(event, message)] = judge("shop", near, NOW, 4096, 30)
    assert event == HOLDER_EXPIRING and "purges it in at most 2.0 h" in message
    assert "binlog_expire_logs_seconds" in message and "trigger sync_shop" in message
    assert "max_slot_wal_keep_size" not in message   # a PostgreSQL setting, not said to a MariaDB source
    assert judge("shop", CaptureHold("binlog position of connector tideline-shop", expires_in_s=7 * 86400),
                 NOW, 4096, 30) == []
    [(event, message)] = judge("shop", CaptureHold("binlog position of connector tideline-shop", status="lost"),
                               NOW, 4096, 30)
    assert event == HOLDER_LOST and "the source purged the binlog it is in" in message
    assert "wal_status" not in message
