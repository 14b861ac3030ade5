"""A look at what a pipeline's capture holds on its source (core.capture_hold), with since when
nobody reads it kept in the state — the server says so only from PostgreSQL 17 on. The running
stream looks every half minute, the watch DAG on its schedule, status and the view when asked."""
from __future__ import annotations

from dataclasses import replace

from tideline import sqlfiles
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
    with state_conn, state_conn.cursor() as cur:
        cur.execute(sqlfiles.load("state/record_hold"), {"pipeline": cfg.name, "holder": hold.holder,
                                                         "unread": unread, "server_since": hold.inactive_since,
                                                         "retained": hold.retained_bytes})
        since = cur.fetchone()[0]
    return replace(hold, inactive_since=since) if unread else hold
