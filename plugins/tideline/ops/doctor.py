"""`python -m tideline.ops.doctor [--pipeline NAME]`: checks every part a pipeline depends on and says
pass / warn / fail with what to do. Also run by the sync DAG's `prepare` task (before it plans).

Gathers facts here; the judgements are tideline.core.doctor_checks.
"""
from __future__ import annotations

import argparse
import re
import sys
from typing import Callable

from confluent_kafka.admin import ConfigResource

from tideline import engines, sqlfiles, state, targets
from tideline.state import ledger
from tideline.capture.connector import ConnectClient
from tideline.core.kafka_access import KafkaAccess
from tideline.core import doctor_checks as dc
from tideline.core.config import PipelineConfig, load_pipelines
from tideline.core.connections import Conn, get_connection
from tideline.core.errors import TransientError
from tideline.core.debezium import connector_name
from tideline.kafka_offsets import admin_client

ICON = {dc.PASS: "ok  ", dc.WARN: "WARN", dc.FAIL: "FAIL"}


def _latest_state_version() -> int:
    return max(int(re.match(r"(\d+)_", p.name).group(1))
               for p in (sqlfiles.SQL_DIR / "state").glob("[0-9][0-9][0-9]_*.sql"))


def _unreachable(part: str, what: str, exc: Exception) -> dc.Check:
    return dc.Check(part, what, dc.FAIL, f"cannot be reached: {str(exc).strip()[:300]}",
                    "check the connection and that the service runs")


def source_checks(cfg: PipelineConfig, source: Conn, streaming: int) -> list[dc.Check]:
    """The source's own checks, by its engine (capture settings, tables, columns, log retention)."""
    return engines.for_pipeline(cfg, source).doctor_checks(cfg, streaming)


def encryption_checks(source: Conn | None, target: Conn | None, kafka: Conn | None) -> list[dc.Check]:
    """How each connection travels: TLS verified, TLS unverified, or in clear (dc.encryption)."""
    out = []
    for part, c in (("source", source), ("target", target)):
        if c is not None:
            mode = c.tls.get("sslmode", "prefer" if c.conn_type.startswith("postgres") else "")
            out.append(dc.encryption(part, c.conn_id, [c.host or "localhost"], mode, mode == "verify-full"))
    if kafka is not None:
        access = kafka.kafka_access
        verified = access.protocol.endswith("SSL") and access.security.get(
            "ssl.endpoint.identification.algorithm", "https") == "https"
        out.append(dc.encryption("kafka", kafka.conn_id, [b.rsplit(":", 1)[0] for b in access.bootstrap.split(",")],
                                 access.protocol, verified))
    return out


def kafka_checks(cfg: PipelineConfig, kafka: KafkaAccess | str, skip: set[str] = frozenset(),
                 made: bool = True) -> list[dc.Check]:
    """Each cdc table's topic (but those of `skip`, the refused tables): exists (`made`: the
    pipeline has streamed, so it should), partitions, replication, min ISR and retention against
    the pipeline's durability and allowed downtime."""
    admin = admin_client(kafka)
    topics = admin.list_topics(timeout=15).topics
    out = []
    for t in cfg.tables:
        if t.mode != "cdc" or t.name in skip:
            continue
        name = cfg.topic(t.name)
        meta = topics.get(name)
        if meta is None:
            out += dc.topic(cfg, name, None, made)
            continue
        configs = list(admin.describe_configs([ConfigResource("topic", name)]).values())[0].result(15)
        out += dc.topic(cfg, name, {
            "partitions": len(meta.partitions),
            "replication_factor": min(len(p.replicas) for p in meta.partitions.values()),
            "min_insync_replicas": int(configs["min.insync.replicas"].value),
            "unclean_leader_election": configs["unclean.leader.election.enable"].value == "true",
            "retention_ms": int(configs["retention.ms"].value)})
    return out


def target_checks(cfg: PipelineConfig, target: Conn, resolve: Callable[[str], Conn]) -> tuple[list[dc.Check], int]:
    """The target's checks, and how many of the pipeline's cdc tables stream (for the slot check)."""
    cdc = [t.name for t in cfg.tables if t.mode == "cdc"]
    store = targets.for_pipeline(cfg, target)
    with store.connect() as conn:
        can_create = {schema: store.can_create(conn, schema) for schema in cfg.target_schemas}
    conn.close()
    with state.of_pipeline(cfg, resolve) as conn, conn.cursor() as cur:
        cur.execute("SELECT CASE WHEN to_regnamespace('tideline') IS NULL THEN has_database_privilege("
                    "current_database(), 'CREATE') ELSE has_schema_privilege('tideline', 'USAGE, CREATE') END")
        state_ok = cur.fetchone()[0]
        cur.execute("SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user")
        role = dc.target_role(*cur.fetchone())
        version, streaming, halted = ledger.summary(cur, cfg.name, cdc)
    conn.close()
    return [dc.target_privileges(schema, ok, state_ok) for schema, ok in can_create.items()] + [role] \
        + [dc.state_version(version, _latest_state_version())] \
        + [dc.halted_table(t, e) for t, e in halted], streaming


def run(cfg: PipelineConfig, resolve: Callable[[str], Conn] = get_connection) -> list[dc.Check]:
    """Every check, in the order a person would fix things: connections, source, Kafka, Connect, target."""
    checks: list[dc.Check] = []
    conns: dict[str, Conn] = {}
    for conn_id in dict.fromkeys(cfg.job_conn_ids + [cfg.spark.conn_id]):
        try:
            conns[conn_id] = resolve(conn_id)
            checks.append(dc.connection(conn_id, None))
        except Exception as exc:
            checks.append(dc.connection(conn_id, str(exc).strip()[:300]))
    source, target = conns.get(cfg.source.conn_id), conns.get(cfg.target.conn_id)
    kafka, connect = conns.get(cfg.kafka.conn_id), conns.get(cfg.connect.conn_id)
    checks += encryption_checks(source, target, kafka)
    streaming = 0
    if target is not None:
        try:
            target_found, streaming = target_checks(cfg, target, conns.get)
            checks += target_found
        except state.ERRORS as exc:   # every target's connections are its state database's
            checks.append(_unreachable("target", "database", exc))
    if source is not None:
        engine = engines.for_pipeline(cfg, source)
        try:
            checks += engine.doctor_checks(cfg, streaming)
        except (TransientError, *engine.errors) as exc:
            checks.append(_unreachable("source", "database", exc))
    has_cdc = any(t.mode == "cdc" for t in cfg.tables)
    if kafka is not None and has_cdc:
        try:
            # a refused table is left out of capture: its topic is never made, and not missed
            refused = {c.table for c in checks if c.table is not None and c.status == dc.FAIL}
            checks += kafka_checks(cfg, kafka.kafka_access, skip=refused, made=streaming > 0)
        except Exception as exc:
            checks.append(_unreachable("kafka", "brokers", exc))
    if connect is not None and has_cdc:
        try:
            checks.append(dc.connector(connector_name(cfg),
                                       ConnectClient(connect.http_base_url()).status(connector_name(cfg)),
                                       made=streaming > 0))
        except Exception as exc:
            checks.append(_unreachable("connect", "worker", exc))
    return checks


def unanswered(cfg: PipelineConfig, resolve: Callable[[str], Conn] = get_connection,
               timeout_s: int = 10) -> list[str]:
    """The parts a stream needs that do not answer now, each as '<part> (<conn id>): <error>' —
    the state database and the target, the source, Kafka, and a Spark master (spark://) — or [].
    A quick look (seconds), not the doctor's checks: the stream task asks it after its job failed
    and while it waits (core.keep_alive)."""
    import socket
    out = []

    def look(part: str, conn_id: str, probe) -> None:
        try:
            probe(resolve(conn_id))
        except Exception as exc:   # whatever the client raises is the answer: the part is away
            text = (str(exc).strip() or type(exc).__name__).splitlines()[0][:200]
            out.append(f"{part} ({conn_id}): {text}")

    def target(conn: Conn) -> None:
        targets.for_pipeline(cfg, conn).probe(timeout_s)   # its state database, and what its catalog calls

    def source(conn: Conn) -> None:
        engines.for_pipeline(cfg, conn).connect(autocommit=True, connect_timeout=timeout_s).close()

    def kafka(conn: Conn) -> None:
        admin_client(conn.kafka_access).list_topics(timeout=timeout_s)

    def spark(conn: Conn) -> None:
        master = conn.host or ""
        if master.startswith("spark://"):
            for hostport in master[len("spark://"):].split(","):
                host, port = hostport.rsplit(":", 1)
                socket.create_connection((host, int(port)), timeout=timeout_s).close()

    look("target", cfg.target.conn_id, target)
    look("source", cfg.source.conn_id, source)
    if any(t.mode == "cdc" for t in cfg.tables):
        look("kafka", cfg.kafka.conn_id, kafka)
    look("spark master", cfg.spark.conn_id, spark)
    return out


def format_checks(checks: list[dc.Check]) -> list[str]:
    lines = []
    for c in checks:
        lines.append(f"[{ICON[c.status]}] {c.part:<8} {c.name}: {c.detail}")
        if c.fix and c.status != dc.PASS:
            lines.append(f"{'':16}→ {c.fix}")
    return lines


def main(argv: list[str] | None = None) -> int:
    from tideline.entrypoints import pipelines_dir
    ap = argparse.ArgumentParser(description="Check every part Tideline pipelines depend on")
    ap.add_argument("--pipeline", help="one pipeline (default: all)")
    ap.add_argument("--pipelines-dir", default=None)
    args = ap.parse_args(argv)
    from tideline.commands import for_commands
    for_commands()
    good, bad = load_pipelines(pipelines_dir(args.pipelines_dir))
    worst = 0
    for path, err in bad.items():
        print(f"[FAIL] config   {path}: {err}")
        worst = 1
    names = [args.pipeline] if args.pipeline else sorted(good)
    for name in names:
        if name not in good:
            print(f"[FAIL] config   no pipeline {name!r}; pipelines: {', '.join(sorted(good)) or 'none'}")
            return 1
        checks = run(good[name])
        print(f"== pipeline {name}: {sum(c.status == dc.PASS for c in checks)} pass, "
              f"{sum(c.status == dc.WARN for c in checks)} warn, {sum(c.status == dc.FAIL for c in checks)} fail")
        print("\n".join(format_checks(checks)))
        worst = max(worst, int(any(c.status == dc.FAIL for c in checks)))
    if not args.pipeline:   # what pipelines deleted without decommissioning left on the source and Kafka
        from tideline.ops.lifecycle import orphan_lines
        for line in orphan_lines(pipelines_dir(args.pipelines_dir)):
            print(f"[WARN] {line}")
    return worst


if __name__ == "__main__":
    sys.exit(main())
