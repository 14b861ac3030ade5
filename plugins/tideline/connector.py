"""Capture setup: the pipeline's topics and its Debezium connector on Kafka Connect.

`ensure_capture` is what the DAG's first task runs: topics exist with the pipeline's settings,
the connector runs with the generated config, and its replication slot exists on the source —
all before any snapshot starts, so no change can fall between snapshot and stream.
"""
from __future__ import annotations

import logging
import time

import psycopg2
import requests
from confluent_kafka.admin import NewTopic

from tideline.core.config import PipelineConfig
from tideline.core.connections import Conn
from tideline.core.debezium import connector_config, connector_name, heartbeat_table_ddl
from tideline.core.errors import SourceError, TerminalError, TransientError
from tideline.kafka_offsets import admin_client

log = logging.getLogger("tideline.connector")


class ConnectError(TerminalError):
    """Kafka Connect refused or failed the connector; the message carries Connect's own words."""


def ensure_topics(cfg: PipelineConfig, bootstrap: str) -> list[str]:
    """Creates missing change topics with the pipeline's partitions, replication and retention."""
    admin = admin_client(bootstrap)
    wanted = [cfg.topic(t.name) for t in cfg.tables if t.mode == "cdc"]
    existing = admin.list_topics(timeout=15).topics
    topic_config = {"retention.ms": str(cfg.kafka.retention_ms), "cleanup.policy": "delete",
                    "min.insync.replicas": str(min(2, cfg.kafka.replication_factor)),
                    "unclean.leader.election.enable": "false"}
    new = [NewTopic(t, cfg.kafka.partitions, cfg.kafka.replication_factor, config=topic_config)
           for t in wanted if t not in existing]
    for topic, fut in (admin.create_topics(new).items() if new else []):
        try:
            fut.result(30)
            log.info("created topic %s (%d partitions, replication %d, retention %d ms)", topic,
                     cfg.kafka.partitions, cfg.kafka.replication_factor, cfg.kafka.retention_ms)
        except Exception as exc:
            if "already exists" not in str(exc):
                raise SourceError(f"creating Kafka topic {topic!r} failed: {exc}") from None
    for t in wanted:
        if t in existing and len(existing[t].partitions) != cfg.kafka.partitions:
            log.warning("topic %s has %d partitions, the config says %d; Tideline does not change partition "
                        "counts (it would break per-key order)", t, len(existing[t].partitions),
                        cfg.kafka.partitions)
    return wanted


class ConnectClient:
    def __init__(self, base_url: str, timeout: float = 30.0):
        self.base = base_url.rstrip("/")
        self.timeout = timeout

    def _call(self, method: str, path: str, **kw):
        try:
            resp = requests.request(method, f"{self.base}{path}", timeout=self.timeout, **kw)
        except requests.RequestException as exc:
            raise TransientError(f"Kafka Connect at {self.base} is unreachable ({exc}). Is the worker running?") \
                from None
        if resp.status_code >= 400:
            try:
                message = resp.json().get("message", resp.text)
            except ValueError:
                message = resp.text
            if resp.status_code == 404:
                return None
            raise ConnectError(f"Kafka Connect {method} {path} answered {resp.status_code}: {message}")
        return resp.json() if resp.content else None

    def put_config(self, name: str, config: dict) -> dict:
        return self._call("PUT", f"/connectors/{name}/config", json=config)

    def status(self, name: str) -> dict | None:
        return self._call("GET", f"/connectors/{name}/status")

    def restart(self, name: str) -> None:
        self._call("POST", f"/connectors/{name}/restart?includeTasks=true&onlyFailed=true")

    def delete(self, name: str) -> None:
        self._call("DELETE", f"/connectors/{name}")

    def stop(self, name: str) -> None:
        self._call("PUT", f"/connectors/{name}/stop")

    def delete_offsets(self, name: str) -> None:
        self._call("DELETE", f"/connectors/{name}/offsets")

    def resume(self, name: str) -> None:
        self._call("PUT", f"/connectors/{name}/resume")


def remove_connector(cfg: PipelineConfig, connect: Conn, timeout: float = 60.0) -> None:
    """Stops the connector, forgets its source offsets (a new one with the same name would
    otherwise resume from a position the slot may no longer have), and deletes it."""
    client = ConnectClient(connect.http_base_url())
    name = connector_name(cfg)
    if client.status(name) is None:
        return
    client.stop(name)
    deadline = time.time() + timeout
    while time.time() < deadline:
        status = client.status(name)
        if status is None or status["connector"]["state"] == "STOPPED":
            break
        time.sleep(0.5)
    client.delete_offsets(name)
    client.delete(name)


def _failure_trace(status: dict) -> str | None:
    if status["connector"]["state"] == "FAILED":
        return status["connector"].get("trace", "(no trace)")
    for task in status.get("tasks", []):
        if task["state"] == "FAILED":
            return task.get("trace", "(no trace)")
    return None


def ensure_heartbeat_table(cfg: PipelineConfig, source: Conn) -> None:
    """The source table the connector's heartbeats write to (see source.heartbeat_table)."""
    if not cfg.source.heartbeat_table:
        return
    conn = psycopg2.connect(source.postgres_dsn())
    try:
        for attempt in (1, 2):   # two pipelines creating it at once: the loser sees it exist
            try:
                with conn, conn.cursor() as cur:
                    cur.execute(heartbeat_table_ddl(cfg))
                return
            except psycopg2.errors.UniqueViolation:
                if attempt == 2:
                    raise
            except psycopg2.Error as exc:
                raise SourceError(
                    f"cannot create the heartbeat table {cfg.source.schema_}.{cfg.source.heartbeat_table} on the "
                    f"source ({str(exc).strip()}). Create it as a privileged user: {heartbeat_table_ddl(cfg)}; and "
                    f"GRANT INSERT, UPDATE on it to the source role — or set source.heartbeat_table: null (then "
                    f"idle synced tables let the slot pin WAL)") from None
    finally:
        conn.close()


def ensure_connector(cfg: PipelineConfig, connect: Conn, source: Conn, timeout: float = 120.0) -> dict:
    """Creates or updates the connector and waits until it and its task run and the slot exists."""
    ensure_heartbeat_table(cfg, source)
    client = ConnectClient(connect.http_base_url())
    name = connector_name(cfg)
    client.put_config(name, connector_config(cfg, source))
    deadline = time.time() + timeout
    status, restarted = None, False
    while time.time() < deadline:
        status = client.status(name)
        if status:
            trace = _failure_trace(status)
            if trace and not restarted:
                log.warning("connector %s failed, restarting it once: %s", name, trace.splitlines()[0])
                client.restart(name)
                restarted = True
            elif trace and "no longer available on the server" in trace:
                raise ConnectError(
                    f"connector {name} cannot resume: the source no longer has the WAL position it stopped at "
                    f"(replication slot {cfg.slot_name} was dropped or lost its WAL), so changes were missed. "
                    f"Remove the connector with its offsets (tideline.connector.remove_connector) and run the "
                    f"sync DAG with action=full_reload.\n{trace[:1500]}")
            elif trace:
                raise ConnectError(f"connector {name} failed on Kafka Connect:\n{trace[:3000]}")
            elif status["connector"]["state"] in ("PAUSED", "STOPPED"):
                log.warning("connector %s is %s; resuming it", name, status["connector"]["state"])
                client.resume(name)
            elif status["connector"]["state"] == "RUNNING" and status.get("tasks") and \
                    all(t["state"] == "RUNNING" for t in status["tasks"]):
                break
        time.sleep(1)
    else:
        raise TransientError(f"connector {name} did not reach RUNNING within {timeout:.0f}s; last status: {status}")
    _wait_for_slot(cfg, source, deadline)
    log.info("connector %s running; slot %s exists", name, cfg.slot_name)
    return status


def _wait_for_slot(cfg: PipelineConfig, source: Conn, deadline: float) -> None:
    with psycopg2.connect(source.postgres_dsn()) as conn, conn.cursor() as cur:
        while True:
            cur.execute("SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s", (cfg.slot_name,))
            row = cur.fetchone()
            conn.rollback()
            if row is not None:
                if row[0] == "lost":
                    raise SourceError(f"replication slot {cfg.slot_name} exists but its WAL is lost; changes were "
                                      f"missed: drop the slot and run a full reload")
                return
            if time.time() > deadline:
                raise TransientError(f"replication slot {cfg.slot_name} did not appear on the source; "
                                     f"see the Kafka Connect log for the connector's errors")
            time.sleep(0.5)


def slot_status(cfg: PipelineConfig, source: Conn) -> tuple[str, bool] | None:
    """(wal_status, active) of the pipeline's replication slot, or None when it does not exist."""
    with psycopg2.connect(source.postgres_dsn()) as conn, conn.cursor() as cur:
        cur.execute("SELECT wal_status, active FROM pg_replication_slots WHERE slot_name = %s", (cfg.slot_name,))
        row = cur.fetchone()
    conn.close()
    return (row[0], row[1]) if row else None


def recover_lost_slot(cfg: PipelineConfig, connect: Conn, source: Conn, target: Conn) -> list[str]:
    """When the slot is gone or its WAL lost, changes were missed at the source side: the tables
    that were streaming are marked needs_resnapshot (first, so a crash here still leaves them
    marked), the connector is removed with its stored position and the dead slot dropped, so
    ensure_connector starts capture afresh — and the sync DAG reloads those tables by itself."""
    from tideline import state
    slot = slot_status(cfg, source)
    if slot is not None and slot[0] != "lost":
        return []
    why = (f"replication slot {cfg.slot_name} " + ("no longer exists at the source" if slot is None else
                                                  "lost the WAL it held (wal_status lost)")
           + ": changes made while it was missing were never captured")
    conn = psycopg2.connect(target.postgres_dsn())
    marked = []
    try:
        state.migrate(conn)
        for t in cfg.tables:
            st = state.get(conn, cfg.name, t.name)
            conn.rollback()
            if t.mode == "cdc" and st is not None and st.phase == "streaming":
                state.set_phase(conn, cfg.name, t.name, "needs_resnapshot", why)
                marked.append(t.name)
    finally:
        conn.close()
    client = ConnectClient(connect.http_base_url())
    if marked or client.status(connector_name(cfg)) is not None:
        log.error("%s; tables marked for a re-snapshot: %s. Recreating the connector and its slot.", why,
                  ", ".join(marked) or "none")
        remove_connector(cfg, connect)
    if slot is not None:
        _drop_slot(cfg, source)
    return marked


def _drop_slot(cfg: PipelineConfig, source: Conn, timeout: float = 60.0) -> None:
    """Drops the pipeline's (lost) slot once the stopped connector's walsender has let go of it."""
    conn = psycopg2.connect(source.postgres_dsn())
    conn.autocommit = True
    try:
        deadline = time.time() + timeout
        with conn.cursor() as cur:
            while True:
                cur.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (cfg.slot_name,))
                row = cur.fetchone()
                if row is None:
                    return
                if not row[0]:
                    cur.execute("SELECT pg_drop_replication_slot(%s)", (cfg.slot_name,))
                    return
                if time.time() > deadline:
                    raise TransientError(f"replication slot {cfg.slot_name} is still in use {timeout:.0f}s after its "
                                         f"connector stopped; it cannot be recreated yet (retry the run)")
                time.sleep(0.5)
    finally:
        conn.close()


def drop_capture(cfg: PipelineConfig, connect: Conn, source: Conn) -> None:
    """Takes a pipeline's capture down for good: connector (with its stored position), replication
    slot and publication — so nothing keeps pinning WAL on the source."""
    remove_connector(cfg, connect)
    _drop_slot(cfg, source)
    conn = psycopg2.connect(source.postgres_dsn())
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(f'DROP PUBLICATION IF EXISTS "{cfg.publication_name}"')
    finally:
        conn.close()


def ensure_capture(cfg: PipelineConfig, kafka: Conn, connect: Conn, source: Conn, target: Conn | None = None) \
        -> list[str]:
    """Topics, connector and slot in place. With the target given, a lost slot is recovered first
    (returns the tables it marked for a re-snapshot)."""
    ensure_topics(cfg, kafka.kafka_bootstrap)
    marked = recover_lost_slot(cfg, connect, source, target) if target is not None else []
    ensure_connector(cfg, connect, source)
    return marked
