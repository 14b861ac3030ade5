"""What a pipeline's capture holds on its source, and when that harms the source — pure.

A PostgreSQL replication slot keeps every WAL segment from its restart_lsn on: a slot nobody
reads (its connector stopped, its pipeline deleted) retains WAL without bound until the source's
disk is full — the classic way a CDC tool takes down the database it reads. A MariaDB source
keeps its binlogs by time (binlog_expire_logs_seconds): capture that stays behind longer than
that loses its position. Engines gather the facts (engines.*.capture_hold); status, the view,
the metrics and the watch DAG's alerts read them through here.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class CaptureHold:
    holder: str                          # "replication slot tideline_demo", "binlog position of ..."
    retained_bytes: int | None = None    # WAL the slot keeps / binlog bytes from the position on
    active: bool | None = None           # a reader is attached (a slot's walsender)
    status: str | None = None            # a slot's wal_status: reserved, extended, unreserved, lost
    inactive_since: datetime | None = None   # the server's own (PostgreSQL 17+), else the watch's
    limit_bytes: int | None = None       # max_slot_wal_keep_size (None: unlimited)
    expires_in_s: float | None = None    # binlogs: at most this long until expiry purges the position
    missing: bool = False                # the holder does not exist (yet, or any more)

    def line(self, now: datetime | None = None) -> str:
        """One line for status and the view."""
        if self.missing:
            return f"{self.holder}: does not exist"
        parts = []
        if self.retained_bytes is not None:
            kind = "WAL" if self.is_slot else "binlog"
            parts.append(f"retains {mb(self.retained_bytes)} of {kind}")
        if self.limit_bytes is not None:
            parts.append(f"limit {mb(self.limit_bytes)} (max_slot_wal_keep_size)")
        elif self.status is not None:
            parts.append("no limit (max_slot_wal_keep_size unlimited)")
        if self.status in ("unreserved", "lost"):
            parts.append(f"wal_status {self.status}")
        if self.active is not None:
            if self.active:
                parts.append("read")
            else:
                since = (f" for {minutes(self.inactive_for_s(now)):.0f} min" if self.inactive_since and now else "")
                parts.append(f"NOT READ{since}")
        if self.expires_in_s is not None:
            parts.append(f"expiry purges its position in at most {self.expires_in_s / 3600:.1f} h")
        return f"{self.holder}: " + ", ".join(parts)

    @property
    def is_slot(self) -> bool:
        return "slot" in self.holder

    def inactive_for_s(self, now: datetime | None) -> float | None:
        if self.active or self.inactive_since is None or now is None:
            return None
        return max(0.0, (now - self.inactive_since).total_seconds())


def mb(n: int | float) -> str:
    return f"{n / 1024 / 1024:,.0f} MB"


def minutes(seconds: float | None) -> float:
    return (seconds or 0) / 60


RETAINED_HIGH = "source_log_retained"
HOLDER_IDLE = "source_log_unread"
HOLDER_LOST = "source_log_lost"
HOLDER_EXPIRING = "source_log_expiring"
EXPIRY_WARN_S = 6 * 3600   # a MariaDB position this close to its binlog's expiry: a person has hours to act


def judge(pipeline: str, hold: CaptureHold, now: datetime, max_retained_mb: float,
          inactive_minutes: float) -> list[tuple[str, str]]:
    """(alert event, message with what to do) for each way the hold harms or will harm the source."""
    out = []
    if hold.missing:
        return out
    if hold.status == "lost":
        how = ("was invalidated by the source (wal_status lost): the WAL it needed is gone" if hold.is_slot else
               "is gone: the source purged the binlog it is in (binlog expiry or PURGE BINARY LOGS)")
        out.append((HOLDER_LOST, f"{hold.holder} {how} and changes were missed. The running stream stops and the sync "
                                 f"DAG re-creates capture and reloads the tables by itself; if no stream runs, "
                                 f"trigger sync_{pipeline}"))
    if hold.retained_bytes is not None and hold.retained_bytes > max_retained_mb * 1024 * 1024:
        out.append((RETAINED_HIGH, f"{hold.holder} retains {mb(hold.retained_bytes)} of the source's log (alert "
                                   f"above alerts.max_retained_wal_mb={max_retained_mb:g}). "
                                   + _what_to_do(pipeline, hold)))
    if hold.status != "lost" and hold.expires_in_s is not None and hold.expires_in_s < EXPIRY_WARN_S:
        out.append((HOLDER_EXPIRING, f"{hold.holder}: binlog expiry purges it in at most "
                                     f"{max(hold.expires_in_s, 0) / 3600:.1f} h (alert below "
                                     f"{EXPIRY_WARN_S // 3600} h), and then the tables reload from a new "
                                     f"snapshot. " + _what_to_do(pipeline, hold)
                                     + " To give capture more time, raise binlog_expire_logs_seconds on the source."))
    idle = hold.inactive_for_s(now)
    if idle is not None and idle >= inactive_minutes * 60:
        out.append((HOLDER_IDLE, f"{hold.holder} has had no reader for {minutes(idle):.0f} min (alert after "
                                 f"alerts.slot_inactive_minutes={inactive_minutes:g}): its connector is not reading "
                                 f"and the source keeps its log for it. " + _what_to_do(pipeline, hold)))
    return out


def _what_to_do(pipeline: str, hold: CaptureHold) -> str:
    limit = ("" if hold.limit_bytes is not None or hold.status is None else
             " Bound the damage on the source: ALTER SYSTEM SET max_slot_wal_keep_size = '<a few times the WAL of "
             "the longest allowed downtime>'; SELECT pg_reload_conf();")
    return (f"Check the connector (make status, the Kafka Connect log) and trigger sync_{pipeline}, which restarts "
            f"it; a pipeline no longer wanted is decommissioned with its action (sync_{pipeline}, action "
            f"decommission) or `python -m tideline.ops.lifecycle decommission {pipeline}`.{limit}")
