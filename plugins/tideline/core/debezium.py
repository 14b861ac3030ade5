"""Debezium, from Tideline's side: the connector config it runs, and how each change-event value
(JSON, with the representation modes set below) becomes a PostgreSQL value of the target column.

Every column travels as its PostgreSQL text form (Tideline's converter in the connector), so a
value that COPY can load in the full load is loaded the same way by the stream.
"""
from __future__ import annotations

import re

from psycopg2 import sql

from tideline.core import wire_encodings as mt
from tideline.core.config import PipelineConfig
from tideline.core.connections import Conn
from tideline.core.settings import RETRY_WAIT_MS

CONNECTOR_CLASS = "io.debezium.connector.postgresql.PostgresConnector"
TEXT_CONVERTER = "dev.tideline.debezium.PgTextConverter"
SLIM_SOURCE = "dev.tideline.connect.SlimSource"
GUARD_SIZE = "dev.tideline.connect.GuardSize"
# Debezium's stand-in for an unchanged TOASTed column it did not receive (REPLICA IDENTITY DEFAULT).
UNAVAILABLE = "__debezium_unavailable_value"


def connector_name(cfg: PipelineConfig) -> str:
    return f"tideline-{cfg.name}"


def heartbeat_topic(cfg: PipelineConfig) -> str:
    return f"__debezium-heartbeat.{cfg.kafka.topic_prefix}"


def regex_literal(name: str) -> str:
    return re.escape(name)


def captured_tables(cfg: PipelineConfig) -> str:
    """table.include.list: the cdc tables and the heartbeat table, as exact regexes."""
    names = [(cfg.source_schema(t.name), t.name) for t in cfg.tables if t.mode == "cdc"]
    names += [(cfg.source.schema_, cfg.source.heartbeat_table)] if cfg.source.heartbeat_table else []
    return ",".join(f"{regex_literal(s)}\\.{regex_literal(t)}" for s, t in names)


def common_connector_config(cfg: PipelineConfig, source: Conn) -> dict[str, str]:
    """What every source engine's connector is given: streaming only (Spark does the snapshot),
    the captured tables, heartbeats, JSON events, and a producer that loses nothing."""
    return {
        "tasks.max": "1",
        "database.hostname": source.host or "localhost",
        "database.user": source.login or "",
        "database.password": source.password or "",
        "topic.prefix": cfg.kafka.topic_prefix,
        "table.include.list": captured_tables(cfg),
        # Spark does the snapshot; the connector only streams from its position.
        "snapshot.mode": "no_data",
        # Truncates are captured so the apply can stop loudly instead of silently diverging.
        "skipped.operations": "none",
        "tombstones.on.delete": "true",
        # Low capture latency: hand changes to Kafka every 100 ms.
        "poll.interval.ms": "100",
        # Idle tables must not hold the source's log: each heartbeat writes a row to the (captured)
        # heartbeat table, so there is always a recent change whose position can be confirmed.
        "heartbeat.interval.ms": "10000",
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable": str(cfg.kafka.json_schemas).lower(),
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": str(cfg.kafka.json_schemas).lower(),
        # No loss on the producer side.
        "producer.override.acks": "all",
        "producer.override.enable.idempotence": "true",
        "producer.override.max.in.flight.requests.per.connection": "5",
        # Bigger record batches under load (a batch otherwise closes at 16 KB, ~28 events): the
        # stream's Kafka reads parse ~1/3 less per event; at most 10 ms more capture latency.
        "producer.override.batch.size": "524288",
        # Big rows: one event may weigh up to kafka.max_message_mb (the topics take as much), and
        # the producer's buffer holds two of them.
        "producer.override.max.request.size": str(cfg.kafka.max_message_bytes),
        "producer.override.buffer.memory": str(max(32 << 20, 2 * cfg.kafka.max_message_bytes)),
        "producer.override.linger.ms": "10",
        # No __debezium.context.* headers (connector name, task, run id) on every record: nothing
        # reads them, and parsing them was ~1/10 of the stream's read time (tests/bench/incremental.py).
        "extended.headers.enabled": "false",
        "errors.tolerance": "none",
        # A source it cannot reach or log in to is retried for connect.retry_minutes, then the task
        # FAILS (Debezium's default retries forever with the task RUNNING: capture silently stopped).
        "errors.max.retries": str(cfg.connect.max_retries),
        "retriable.restart.connector.wait.ms": str(RETRY_WAIT_MS),
        # kafka.source_fields: only those fields of the `source` block (stack/jvm/slim-source), ~half the bytes.
        # Then an event too big for the topic becomes a marker with its key (GuardSize, same jar): the
        # stream halts that table alone, naming key and size, instead of the task failing for all.
        "transforms": "slim,guard" if cfg.kafka.source_fields else "guard",
        **({"transforms.slim.type": SLIM_SOURCE,
            "transforms.slim.keep": ",".join(cfg.kafka.source_fields)} if cfg.kafka.source_fields else {}),
        "transforms.guard.type": GUARD_SIZE,
        "transforms.guard.max.bytes": str(cfg.kafka.max_message_bytes),
        # Topics Tideline did not pre-create (heartbeats) get the pipeline's settings.
        "topic.creation.default.partitions": "1",
        "topic.creation.default.replication.factor": str(cfg.kafka.replication_factor),
        "topic.creation.default.cleanup.policy": "delete",
        "topic.creation.default.retention.ms": str(cfg.kafka.retention_ms),
        "topic.creation.default.max.message.bytes": str(cfg.kafka.max_message_bytes),
    }


def connector_config(cfg: PipelineConfig, source: Conn) -> dict[str, str]:
    """The PostgreSQL connector's config, generated from the pipeline (never written by hand)."""
    return {
        **common_connector_config(cfg, source),
        "connector.class": CONNECTOR_CLASS,
        "plugin.name": "pgoutput",
        "database.port": str(source.port or 5432),
        "database.dbname": source.schema or "",
        # TLS as the connection's extra says (sslmode verify-full, sslrootcert, client certificate)
        **{f"database.{k}": v for k, v in source.tls.items()},
        "slot.name": cfg.slot_name,
        "publication.name": cfg.publication_name,
        # Tideline owns the publication (engines.postgres.prepare_capture): exactly the carried
        # tables, partition trees published via their root.
        "publication.autocreate.mode": "disabled",
        # Every column as its PostgreSQL text form (stack/jvm/pg-text-converter): the stream carries
        # what the full load carries, and the apply casts it back like COPY does. Types Debezium
        # does not know (composites, geometry, tsquery, ...) reach the converter as their text.
        "converters": "pgtext",
        "pgtext.type": TEXT_CONVERTER,
        "include.unknown.datatypes": "true",
        **({"heartbeat.action.query": heartbeat_query(cfg)} if cfg.source.heartbeat_table else {}),
    }


def heartbeat_query(cfg: PipelineConfig) -> str:
    """The statement the connector runs at each heartbeat (identifiers validated by the config)."""
    return (f'INSERT INTO "{cfg.source.schema_}"."{cfg.source.heartbeat_table}" (pipeline, beat_at) '
            f"VALUES ('{cfg.name}', now()) ON CONFLICT (pipeline) DO UPDATE SET beat_at = now()")


def heartbeat_table_ddl(cfg: PipelineConfig) -> str:
    return (f'CREATE TABLE IF NOT EXISTS "{cfg.source.schema_}"."{cfg.source.heartbeat_table}" '
            f"(pipeline text PRIMARY KEY, beat_at timestamptz NOT NULL)")


# ----------------------------------------------------------------------------- values

def value_expr(raw: sql.Composable, pg_type: str, encoding: str = mt.PG_TEXT) -> sql.Composable:
    """SQL turning a change event's value (`raw`, e.g. after->>'col') into the target column's
    type. From PostgreSQL sources it is the column's PostgreSQL text form (our converter), read by
    the same input function COPY applies to the full load's text; from MariaDB it is Debezium's
    representation (`encoding`, core.wire_encodings), decoded exactly. NULL stays NULL."""
    t = sql.SQL(pg_type)
    if encoding in (mt.PG_TEXT, mt.TEXT, mt.ZONED):
        return sql.SQL("({})::{}").format(raw, t)
    if encoding == mt.EPOCH_DAYS:
        return sql.SQL("(date '1970-01-01' + ({})::int)").format(raw)
    if encoding in (mt.EPOCH_MILLIS, mt.EPOCH_MICROS):
        # whole days and the rest apart: interval * bigint multiplies in float8, exact only
        # below 2^53 units (a day of µs is), not for centuries of them
        per_day, unit = (86_400_000, "1 millisecond") if encoding == mt.EPOCH_MILLIS else \
            (86_400_000_000, "1 microsecond")
        return sql.SQL("(timestamp '1970-01-01' + make_interval(days => div(({r})::bigint, {d})::int) "
                       "+ mod(({r})::bigint, {d}) * interval {u})::{t}").format(
            r=raw, d=sql.Literal(per_day), u=sql.Literal(unit), t=t)
    if encoding == mt.YEAR:
        return sql.SQL("(CASE WHEN {r} = '1900' THEN 0 ELSE ({r})::smallint END)").format(r=raw)
    if encoding == mt.MICRO_DURATION:
        return sql.SQL("(({})::bigint * interval '1 microsecond')").format(raw)
    if encoding == mt.HEX:
        return sql.SQL("decode({}, 'hex')").format(raw)
    if encoding == mt.BOOL_BIT:
        return sql.SQL("(CASE {} WHEN 'true' THEN B'1' WHEN 'false' THEN B'0' END)").format(raw)
    if encoding == mt.BITS_LE_HEX:
        # io.debezium.data.Bits: little-endian bytes (base64 in JSON); reversed to big-endian,
        # read as a bit string, cut to the column's width
        n = int(pg_type[pg_type.index("(") + 1:-1])
        return sql.SQL(
            "(SELECT substring(v from length(v) - {n} + 1)::{t} FROM (SELECT ('x' || string_agg(substr(h, i, 2), '' "
            "ORDER BY i DESC))::bit varying AS v FROM (SELECT encode(decode({r}, 'base64'), 'hex') AS h) q, "
            "generate_series(1, length(h), 2) i) w)").format(n=sql.Literal(n), t=t, r=raw)
    raise ValueError(f"unknown event encoding {encoding!r}")


def may_be_unavailable(pg_type: str, encoding: str = mt.PG_TEXT) -> bool:
    """Types stored out of line (TOAST) whose unchanged value Debezium may not have (PostgreSQL
    only: a MariaDB binlog with full row images always carries every column)."""
    return encoding == mt.PG_TEXT and (pg_type.endswith("]") or pg_type.startswith(("text", "character", "json", "jsonb", "bytea", "xml",
                                                         "numeric", "tsvector", "citext", "hstore", "bit varying",
                                                         "path", "polygon")))


def unavailable_test(raw: sql.Composable, pg_type: str) -> sql.Composable:  # noqa: ARG001 — one form for all
    """SQL that is true when the event carries Debezium's placeholder instead of the value."""
    return sql.SQL("({} = {})").format(raw, sql.Literal(UNAVAILABLE))


def unstreamable(columns) -> list:
    """Columns whose values the change stream cannot carry exactly. Debezium's pgoutput decoder
    moves every `time with time zone` value to UTC before any converter sees it (the offset is
    lost), so such a column (or an array of it) is refused before any work, not found in a batch."""
    return [c for c in columns if c.generated is None and "with time zone" in c.type and c.type.startswith("time")
            and not c.type.startswith("timestamp")]


def unstreamable_message(label: str, columns) -> str:
    cols = ", ".join(f"{c.name} ({c.type})" for c in columns)
    return (f"{label}: column(s) {cols} cannot be streamed exactly: Debezium converts time with time zone values "
            f"to UTC, losing their offset. Either leave the column out of the sync (exclude_columns: "
            f"[{', '.join(c.name for c in columns)}] in the table's config), change the source column to "
            f"timestamp with time zone or time, or sync the table in batch mode (mode: batch).")
