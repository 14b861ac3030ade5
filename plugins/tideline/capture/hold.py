"""A look at what a pipeline's capture holds on its source (core.capture_hold), with since when
nobody reads it kept in the state — the server says so only from PostgreSQL 17 on. The running
stream looks every half minute, the watch DAG on its schedule, status and the view when asked."""
from __future__ import annotations

from dataclasses import replace

from tideline.state import ledger
from tideline.core.capture_hold import CaptureHold
from tideline.core.connections import Conn
from tideline.core.debezium import connector_name


def look(cfg, engine, source_conn, state_conn, connect: Conn | None) -> CaptureHold:
    """The hold, its unread_since filled from the state's record (and the record updated)."""
    from tideline.capture.connector import ConnectClient

    def stored():
        return ConnectClient(connect.http_base_url(), timeout=10).offsets(connector_name(cfg)) if connect else None
    hold = engine.capture_hold(source_conn, cfg, stored)
    if hold.missing:
        return hold
    unread = hold.active is False
    since = ledger.record_hold(state_conn, cfg.name, hold.holder, unread, hold.inactive_since, hold.retained_bytes)
    return replace(hold, inactive_since=since) if unread else hold
