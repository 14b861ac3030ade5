"""Capture setup: the pipeline's topics and its Debezium connector on Kafka Connect.

`ensure_capture` is what the DAG's first task runs: topics exist with the pipeline's settings,
the connector runs with the generated config, and its replication slot exists on the source —
all before any snapshot starts, so no change can fall between snapshot and stream.
"""
from __future__ import annotations

import logging
import time

import requests
from confluent_kafka.admin import NewTopic

from tideline import engines
from tideline.engines import connect_secrets as secrets
from tideline.core.kafka_access import KafkaAccess
from tideline.core.config import PipelineConfig
from tideline.core.connections import Conn, get_connection
from tideline.core.debezium import connector_name
from tideline.core.errors import SourceError, TerminalError, TidelineError, TransientError
from tideline.kafka_offsets import admin_client

log = logging.getLogger("tideline.connector")


RESTART_SETTLE_S = 15   # a restarted failed connector must stay running this long to count as healed


class ConnectError(TerminalError):
    """Kafka Connect refused or failed the connector; the message carries Connect's own words."""


def capturing(cfg: PipelineConfig, source: Conn):
    """The pipeline's source as what capture needs of it (engines.Captures and HoldsPosition), or
    the SourceError that says this kind of source has no change capture."""
    return engines.able(engines.for_pipeline(cfg, source), engines.Captures)


def ensure_topics(cfg: PipelineConfig, kafka: KafkaAccess | str, extra: dict[str, dict[str, str]] | None = None) -> list[str]:
    """Creates missing change topics with the pipeline's partitions, replication and retention,
    and the engine's own topics (`extra`: name -> config overrides; one partition each)."""
    admin = admin_client(kafka)
    wanted = [cfg.topic(t.name) for t in cfg.tables if t.mode == "cdc"]
    existing = admin.list_topics(timeout=15).topics
    topic_config = {"retention.ms": str(cfg.kafka.retention_ms), "cleanup.policy": "delete",
                    "min.insync.replicas": str(min(2, cfg.kafka.replication_factor)),
                    "unclean.leader.election.enable": "false",
                    "max.message.bytes": str(cfg.kafka.max_message_bytes)}
    new = [NewTopic(t, cfg.kafka.partitions, cfg.kafka.replication_factor, config=topic_config)
           for t in wanted if t not in existing]
    new += [NewTopic(t, 1, cfg.kafka.replication_factor, config={**topic_config, **overrides})
            for t, overrides in (extra or {}).items() if t not in existing]
    for spec in new:
        create_topic(admin, spec)
        log.info("created topic %s (%d partitions, replication %d, retention %d ms)", spec.topic,
                 spec.num_partitions, spec.replication_factor, cfg.kafka.retention_ms)
    raise_message_limit(admin, [t for t in [*wanted, *(extra or {})] if t in existing], cfg.kafka.max_message_bytes)
    for t in wanted:
        if t in existing and len(existing[t].partitions) != cfg.kafka.partitions:
            log.warning("topic %s has %d partitions, the config says %d; Tideline does not change partition "
                        "counts (it would break per-key order)", t, len(existing[t].partitions),
                        cfg.kafka.partitions)
    return wanted


TOPIC_CREATE_PATIENCE_S = 120   # a busy or electing cluster's time-outs are waited out this long


def _kafka_busy(exc: BaseException) -> bool:
    """A failure the cluster's own state explains and time heals (a time-out, no controller or
    broker yet, too few replicas up): not a refusal of the topic."""
    from confluent_kafka import KafkaError
    err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    return err is not None and (err.retriable() or err.code() in (
        KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
        KafkaError.NOT_CONTROLLER, KafkaError.BROKER_NOT_AVAILABLE, KafkaError.INVALID_REPLICATION_FACTOR))


def create_topic(admin, spec: NewTopic) -> None:
    """Creates one topic, waiting out a busy cluster (its time-outs, an election: _kafka_busy) for
    TOPIC_CREATE_PATIENCE_S with backoff; a try that timed out may have created it, which the
    next finds as "already exists". A refusal (a config the broker rejects) is the SourceError
    that names it; a cluster still busy after that is a TransientError (the task is retried)."""
    from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_exponential

    def once() -> None:
        try:
            admin.create_topics([spec])[spec.topic].result(30)
        except Exception as exc:   # noqa: BLE001 — classified below
            if "already exists" in str(exc):
                return
            if _kafka_busy(exc):
                log.warning("creating Kafka topic %s: %s; trying again", spec.topic, exc)
                raise
            raise SourceError(f"creating Kafka topic {spec.topic!r} failed: {exc}") from None
    try:
        for attempt in Retrying(retry=retry_if_exception(_kafka_busy), stop=stop_after_delay(TOPIC_CREATE_PATIENCE_S),
                                wait=wait_exponential(multiplier=1, max=15), reraise=True):
            with attempt:
                once()
    except SourceError:
        raise
    except Exception as exc:   # noqa: BLE001 — still busy after the patience
        raise TransientError(f"creating Kafka topic {spec.topic!r}: the cluster did not answer for "
                             f"{TOPIC_CREATE_PATIENCE_S} s ({exc}); the task is retried") from None


def raise_message_limit(admin, topics: list[str], limit: int) -> None:
    """Existing topics take events as big as the pipeline carries (a topic made before the limit
    was set, or by hand, keeps the broker's 1 MB default, and capture would stop at a big row)."""
    if not topics:
        return
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
    described = admin.describe_configs([ConfigResource("topic", t) for t in topics])
    low = [res.name for res, fut in described.items() if int(fut.result(30)["max.message.bytes"].value) < limit]
    entry = [ConfigEntry("max.message.bytes", str(limit), incremental_operation=AlterConfigOpType.SET)]
    for res, fut in (admin.incremental_alter_configs([ConfigResource("topic", t, incremental_configs=entry)
                                                      for t in low]).items() if low else []):
        fut.result(30)
        log.info("topic %s now takes messages of up to %d bytes", res.name, limit)


class ConnectClient:
    rebalance_wait_s = 15.0

    def __init__(self, base_url: str, timeout: float = 30.0):
        self.base = base_url.rstrip("/")
        self.timeout = timeout

    def _call(self, method: str, path: str, **kw):
        """One REST call; a 409 (a rebalance, or a config change in flight: Connect's "try again")
        is retried for up to rebalance_wait_s, then raised as transient."""
        deadline, pause = time.monotonic() + self.rebalance_wait_s, 0.25
        while True:
            try:
                resp = requests.request(method, f"{self.base}{path}", timeout=self.timeout, **kw)
            except requests.RequestException as exc:
                raise TransientError(f"Kafka Connect at {self.base} is unreachable ({exc}). Is the worker "
                                     f"running?") from None
            if resp.status_code != 409 or time.monotonic() + pause > deadline:
                break
            time.sleep(pause)
            pause = min(pause * 2, 2.0)
        if resp.status_code == 409:
            raise TransientError(f"Kafka Connect {method} {path} still answered 409 after "
                                 f"{self.rebalance_wait_s:.0f}s: {resp.text[:300]} (the workers are rebalancing)")
        if resp.status_code >= 400:
            try:
                message = resp.json().get("message", resp.text)
            except ValueError:
                message = resp.text
            if resp.status_code == 404:
                return None
            raise ConnectError(f"Kafka Connect {method} {path} answered {resp.status_code}: {message}")
        return resp.json() if resp.content else None

    def names(self) -> list[str]:
        """Every connector of the cluster."""
        return self._call("GET", "/connectors") or []

    def put_config(self, name: str, config: dict) -> dict:
        return self._call("PUT", f"/connectors/{name}/config", json=config)

    def config(self, name: str) -> dict | None:
        return self._call("GET", f"/connectors/{name}/config")

    def status(self, name: str) -> dict | None:
        return self._call("GET", f"/connectors/{name}/status")

    def restart(self, name: str, only_failed: bool = True) -> None:
        self._call("POST", f"/connectors/{name}/restart?includeTasks=true&onlyFailed={str(only_failed).lower()}")

    def delete(self, name: str) -> None:
        self._call("DELETE", f"/connectors/{name}")

    def stop(self, name: str) -> None:
        self._call("PUT", f"/connectors/{name}/stop")

    def delete_offsets(self, name: str) -> None:
        self._call("DELETE", f"/connectors/{name}/offsets")

    def resume(self, name: str) -> None:
        self._call("PUT", f"/connectors/{name}/resume")

    def offsets(self, name: str) -> dict | None:
        """The connector's stored source offsets ({"offsets": [{"partition": .., "offset": ..}]})."""
        return self._call("GET", f"/connectors/{name}/offsets")


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


def first_cause(trace: str) -> str:
    """A Java trace said as a person reads it: the deepest cause first, then the outer error."""
    lines = [line.strip() for line in trace.splitlines() if line.strip()]
    causes = [line.removeprefix("Caused by: ") for line in lines if line.startswith("Caused by: ")]
    head = lines[0] if lines else "(no trace)"
    return f"{causes[-1]} (in: {head})" if causes and causes[-1] != head else head


def capture_failure(cfg: PipelineConfig, connect: Conn) -> str | None:
    """None while the pipeline's connector and its task run; else what is wrong with capture, its
    cause first — a failed task means no table of the pipeline receives a change, which must never
    look like a quiet source."""
    name = connector_name(cfg)
    client = ConnectClient(connect.http_base_url(), timeout=10)
    try:
        status = client.status(name)
    except (TransientError, ConnectError) as exc:
        return str(exc)
    if status is None:
        return f"connector {name} does not exist on Kafka Connect: no change is captured. Run the sync DAG."
    trace = _failure_trace(status)
    if trace:
        return (f"connector {name} FAILED on Kafka Connect: {first_cause(trace)[:1500]}. No table of pipeline "
                f"{cfg.name} receives changes until it runs again: fix the cause, then trigger the sync DAG "
                f"(it restarts the connector)")
    state = status["connector"]["state"]
    if state != "RUNNING" or not status.get("tasks"):
        return f"connector {name} is {state} with {len(status.get('tasks') or [])} task(s): no change is captured"
    try:
        engine = capturing(cfg, get_connection(cfg.source.conn_id))
        config = client.config(name)
    except (TidelineError, KeyError) as exc:   # no source connection given to this caller: Connect's word stands
        log.debug("capture connection not checked: %s", exc)
        return None
    cause = engine.capture_disconnected(cfg, config or {})
    if cause:
        return (f"connector {name} FAILED to capture: its task says RUNNING but {cause}. No table of pipeline "
                f"{cfg.name} receives changes until it reads again: fix the cause (the source connection's "
                f"credentials and reachability), then trigger the sync DAG (it re-creates the connector's config)")
    return None


def _failure_trace(status: dict) -> str | None:
    if status["connector"]["state"] == "FAILED":
        return status["connector"].get("trace", "(no trace)")
    for task in status.get("tasks", []):
        if task["state"] == "FAILED":
            return task.get("trace", "(no trace)")
    return None


def ensure_connector(cfg: PipelineConfig, connect: Conn, source: Conn, timeout: float = 120.0,
                     kafka: KafkaAccess | None = None) -> dict:
    """Creates or updates the connector and waits until it and its task run and the source side
    of capture is in place (the slot exists / the connector streams past a marker)."""
    engine = capturing(cfg, source)
    engine.ensure_heartbeat_table(cfg)
    client = ConnectClient(connect.http_base_url())
    name = connector_name(cfg)
    config, rotated = secrets.externalize(name, engine.connector_config(cfg, kafka))
    existed = client.status(name) is not None
    client.put_config(name, config)
    if rotated and existed:   # same config, a new password behind its reference: only a restart reads it
        log.info("connector %s: the source credentials changed in the Airflow connection; restarting it to read "
                 "them", name)
        client.restart(name, only_failed=False)
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
                    f"connector {name} cannot resume: the {engine.label} source no longer has the log position it "
                    f"stopped at ({engine.position_holder(cfg)}), so changes were missed. Run the sync DAG: its "
                    f"prepare task recreates capture and marks the tables for a reload.\n{trace[:1500]}")
            elif trace:
                raise ConnectError(f"connector {name} failed on Kafka Connect: {first_cause(trace)}\n{trace[:3000]}")
            elif status["connector"]["state"] in ("PAUSED", "STOPPED"):
                log.warning("connector %s is %s; resuming it", name, status["connector"]["state"])
                client.resume(name)
            elif status["connector"]["state"] == "RUNNING" and status.get("tasks") and \
                    all(t["state"] == "RUNNING" for t in status["tasks"]):
                break
        time.sleep(1)
    else:
        raise TransientError(f"connector {name} did not reach RUNNING within {timeout:.0f}s; last status: {status}")
    if restarted:   # a task restarted after a failure may fail again at its first record: watch it a while
        settle = time.time() + RESTART_SETTLE_S
        while time.time() < settle:
            time.sleep(1)
            trace = _failure_trace(client.status(name) or {"connector": {"state": "MISSING"}, "tasks": []})
            if trace:
                raise ConnectError(f"connector {name} failed again right after its restart: {first_cause(trace)}. "
                                   f"Fix the cause, then trigger the sync DAG.\n{trace[:3000]}")
    engine.wait_capture_ready(cfg, client, name, deadline)
    log.info("connector %s running; %s in place", name, engine.position_holder(cfg))
    return status


def recover_lost_capture(cfg: PipelineConfig, connect: Conn, source: Conn, target: Conn) -> list[str]:
    """When the source lost the log position capture needs (a dropped slot or lost WAL, purged
    binlogs), changes were missed at the source side: the tables that were streaming are marked
    needs_resnapshot (first, so a crash here still leaves them marked), the connector is removed
    with its stored position and the source side reset, so ensure_connector starts capture afresh
    — and the sync DAG reloads those tables by itself."""
    engine = capturing(cfg, source)
    client = ConnectClient(connect.http_base_url())
    why = engine.lost_capture(cfg, client, connector_name(cfg))
    if why is None:
        return []
    marked = mark_for_resnapshot(cfg, target, [t.name for t in cfg.tables if t.mode == "cdc"], why)
    if marked or client.status(connector_name(cfg)) is not None:
        log.error("%s. Recreating the connector and its source position.", why)
        remove_connector(cfg, connect)
    engine.reset_capture(cfg)
    return marked


def drop_capture(cfg: PipelineConfig, connect: Conn, source: Conn) -> None:
    """Takes a pipeline's capture down for good: the connector (with its stored position) and
    what the source holds for it (slot, publication), so nothing keeps pinning the source's log."""
    remove_connector(cfg, connect)
    secrets.remove(connector_name(cfg))
    capturing(cfg, source).drop_capture(cfg)


def ensure_capture(cfg: PipelineConfig, kafka: Conn, connect: Conn, source: Conn, target: Conn | None = None,
                   notify=None) -> list[str]:
    """Topics, publication, connector and the source's position in place, for the tables that
    can be carried (the others are refused first, in their state when the target is given). With
    the target given, a lost position is recovered first; returns the tables marked for a
    re-snapshot (lost position, or changes an earlier setup sent where the stream never reads)."""
    from tideline.capture import refusals
    engine = capturing(cfg, source)
    cfg = refusals.carried(cfg, refusals.check_and_record(cfg, source, target, notify))
    ensure_topics(cfg, kafka.kafka_access, engine.capture_topics(cfg))
    marked = recover_lost_capture(cfg, connect, source, target) if target is not None else []
    missed = engine.prepare_capture(cfg)
    if missed and target is not None:
        marked += mark_for_resnapshot(cfg, target, missed, "its changes were published by partition to topics the "
                                                            "stream does not read (a publication made before "
                                                            "partitioned tables were carried via their root); "
                                                            "the publication is repaired")
    ensure_connector(cfg, connect, source, kafka=kafka.kafka_access)
    return marked


def mark_for_resnapshot(cfg: PipelineConfig, target: Conn, tables: list[str], why: str) -> list[str]:
    """Marks those of `tables` that stream needs_resnapshot with the reason; returns them."""
    from tideline import state
    conn = state.of_pipeline(cfg, state.given(target))
    marked = []
    try:
        state.migrate(conn)
        for name in tables:
            st = state.get(conn, cfg.name, name)
            conn.rollback()
            if st is not None and st.phase == "streaming":
                state.set_phase(conn, cfg.name, name, "needs_resnapshot", why)
                marked.append(name)
    finally:
        conn.close()
    if marked:
        log.error("%s; tables marked for a re-snapshot: %s", why, ", ".join(marked))
    return marked
