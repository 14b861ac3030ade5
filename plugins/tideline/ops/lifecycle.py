"""A pipeline's end of life, and what a deleted one left behind.

    python -m tideline.ops.lifecycle decommission NAME --confirm NAME
    python -m tideline.ops.lifecycle orphans

`decommission` takes everything of a pipeline away, in the order that never leaves the source
harmed: its tables are fenced (a running stream stops at its next look, within seconds), then its
connector and the connector's stored position and secrets, then what the source holds for it (the
replication slot — the part that retains WAL — and the publication; its row of the shared
heartbeat table), its Kafka topics, its state rows, and last its YAML (renamed
`<name>.yaml.decommissioned`, so its DAGs leave Airflow at the next parse). The target tables
stay: they are the users' data. The sync DAG's `action=decommission` does the same.

`orphans` lists what pipelines whose YAML was deleted (not decommissioned) left on Kafka Connect,
the sources and Kafka — connectors, slots and their WAL, topics — each with the command to remove it.
"""
from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable


from tideline import engines, state
from tideline.state import ledger
from tideline.core.config import PipelineConfig, load_pipeline, load_pipelines
from tideline.core.connections import Conn, get_connection
from tideline.core.debezium import connector_name, heartbeat_topic
from tideline.core.errors import TerminalError
from tideline.core.names import topic_name
from tideline.entrypoints import pipelines_dir

log = logging.getLogger("tideline.lifecycle")
CONNECTOR_PREFIX = "tideline-"
RETIRED_SUFFIX = ".decommissioned"


class ConfirmationError(TerminalError):
    """A decommission was asked without the pipeline's name typed as its confirmation."""


def check_confirmation(name: str, confirm: str | None) -> None:
    if (confirm or "").strip() != name:
        raise ConfirmationError(f"decommissioning pipeline {name} removes its connector, replication slot, "
                                f"publication, topics, state and DAGs for good: confirm by typing its name "
                                f"({name!r}) as the confirmation (param confirm / --confirm); got {confirm!r}")


def pipeline_topics(cfg: PipelineConfig, engine) -> list[str]:
    """Every Kafka topic of the pipeline: its tables' change topics, the heartbeat topic, the
    engine's own (a MariaDB connector's schema history)."""
    topics = [cfg.topic(t.name) for t in cfg.tables if t.mode == "cdc"]
    if cfg.source.heartbeat_table:
        topics.append(topic_name(cfg.kafka.topic_prefix, cfg.source.schema_, cfg.source.heartbeat_table))
    topics.append(heartbeat_topic(cfg))   # the connector's own heartbeats (Debezium names it)
    return topics + list(engine.capture_topics(cfg))


def check_retirable(cfg: PipelineConfig, config_path: Path | None) -> None:
    """Decommission ends by renaming the pipeline's YAML (its DAGs leave Airflow): a folder this
    process cannot write (a read-only mount in a deployment) is found *before* anything is taken
    down, or the DAGs would stay and their next run set capture up again and reload every table."""
    if config_path is None or not config_path.exists():
        return
    try:
        with tempfile.NamedTemporaryFile(dir=config_path.parent, prefix=".tideline-probe-"):
            pass
    except OSError as exc:
        raise TerminalError(
            f"pipeline {cfg.name} was not decommissioned, and nothing was touched: its YAML's folder "
            f"{config_path.parent} cannot be written here ({exc.strerror or exc}), and decommission ends by "
            f"retiring {config_path.name} so its DAGs leave Airflow. Run it where the pipelines folder is "
            f"writable (the folder the deployment mounts), or delete {config_path.name} there yourself and then "
            f"take down what it held with `tideline orphans` and `tideline remove-orphan`") from None


def decommission(cfg: PipelineConfig, resolve: Callable[[str], Conn] = get_connection,
                 config_path: Path | None = None) -> list[str]:
    """Removes the pipeline (see the module's docstring); returns what it removed, in words.
    Idempotent: run again after a failure part way, it removes what is left."""
    from tideline.capture.connector import remove_connector
    from tideline.engines import connect_secrets
    from tideline.kafka_offsets import admin_client
    check_retirable(cfg, config_path)
    done: list[str] = []
    target = state.of_pipeline(cfg, resolve)
    try:
        state.migrate(target)
        tables = ledger.tables_in_phases(target, cfg.name, None, ())
        target.rollback()
        for table in tables:   # first: a running stream applies nothing more and stops
            state.park(target, cfg.name, table, "removed", "decommission", "the pipeline is being decommissioned")
        if tables:
            done.append(f"fenced {len(tables)} table(s): a running stream stops")
        remove_connector(cfg, resolve(cfg.connect.conn_id))
        connect_secrets.remove(connector_name(cfg))
        done.append(f"connector {connector_name(cfg)} and its stored position")
        source = resolve(cfg.source.conn_id)
        engine = engines.for_pipeline(cfg, source)
        done.append(engine.drop_capture(cfg))
        if cfg.source.heartbeat_table:
            done.append(_forget_heartbeat(cfg, engine))
        admin = admin_client(resolve(cfg.kafka.conn_id).kafka_access)
        present = set(admin.list_topics(timeout=15).topics)
        topics = [t for t in pipeline_topics(cfg, engine) if t in present]
        for topic, fut in (admin.delete_topics(topics, operation_timeout=30).items() if topics else ()):
            fut.result(60)
        done.append(f"{len(topics)} Kafka topic(s)" + (f": {', '.join(topics)}" if topics else ""))
        done += _drop_leftovers(cfg, resolve, [(cfg.target_schema(t), cfg.target_table(t)) if t in cfg.table_names
                                               else (cfg.target.schema_, t) for t in tables])
        done.append(f"{ledger.delete_pipeline(target, cfg.name)} state row(s)")
    finally:
        target.close()
    if config_path is not None and config_path.exists():
        retired = config_path.with_name(config_path.name + RETIRED_SUFFIX)
        config_path.rename(retired)
        done.append(f"its YAML, now {retired.name} (its DAGs leave Airflow at the next parse)")
    for line in done:
        log.warning("%s decommissioned: %s", cfg.name, line)
    return done


def remove_tables(cfg: PipelineConfig, resolve: Callable[[str], Conn] = get_connection, delete_topics: bool = False,
                  drop_target: bool = False) -> list[str]:
    """The tables of the pipeline's state that its YAML no longer names (their capture stopped
    when the publication and connector were set to the YAML's tables, before this): each becomes
    phase 'removed' (fenced: a stream still holding it applies nothing more). With `delete_topics`
    (action=remove) their topics go at once, else Kafka's retention empties them; with
    `drop_target` their target tables are dropped, else they stay. Returns what it did, in words."""
    from tideline import targets
    from tideline.kafka_offsets import admin_client
    target = resolve(cfg.target.conn_id)
    conn = state.of_pipeline(cfg, resolve)
    try:
        rows = state.removed_tables(conn, cfg.name, [t.name for t in cfg.tables])
        gone = [r[:3] for r in rows]   # where its load put it: the YAML no longer says
        landed = {t: (schema or cfg.target.schema_, name) for t, _p, _t, schema, name in rows}
        done = []
        for table, phase, _topic in gone:
            if phase != "removed":
                state.park(conn, cfg.name, table, "removed", "removed from the YAML",
                           f"removed from pipeline {cfg.name}'s YAML: its capture stopped; its target table stays "
                           f"(trigger sync_{cfg.name} with action=remove and drop_target to drop it)")
                done.append(f"{table}: removed (its capture stopped)")
    finally:
        conn.close()
    topics = [topic for _t, _p, topic in gone if topic]
    if delete_topics and topics:
        admin = admin_client(resolve(cfg.kafka.conn_id).kafka_access)
        present = set(admin.list_topics(timeout=15).topics)
        doomed = [t for t in topics if t in present]
        for fut in (admin.delete_topics(doomed, operation_timeout=30).values() if doomed else ()):
            fut.result(60)
        done += [f"topic {t} deleted" for t in doomed]
    done += _drop_leftovers(cfg, resolve, [landed[table] for table, _p, _t in gone])
    if drop_target:
        store = targets.for_pipeline(cfg, target)
        for schema, name in (landed[table] for table, _p, _t in gone):
            if store.drop_table(schema, name):
                done.append(f"target table {schema}.{name} dropped")
    for line in done:
        log.warning("%s: %s", cfg.name, line)
    return done


def _drop_leftovers(cfg: PipelineConfig, resolve: Callable[[str], Conn], places: list[tuple[str, str]]) -> list[str]:
    """What cut-off chunked loads left beside each (schema, target table): Tideline's own, always dropped."""
    from tideline import targets
    store = targets.for_pipeline(cfg, resolve(cfg.target.conn_id))
    leftovers = [(schema, store.load_leftover(table)) for schema, table in places]
    return [f"{schema}.{left}, a cut-off chunked load's rows" for schema, left in leftovers
            if left and store.drop_table(schema, left)]


def _forget_heartbeat(cfg: PipelineConfig, engine) -> str:
    """The pipeline's row of the source's heartbeat table (shared by the pipelines of a schema)."""
    conn = engine.connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            table = ".".join(engine.quote(p) for p in (cfg.source.schema_, cfg.source.heartbeat_table))
            try:
                cur.execute(f"DELETE FROM {table} WHERE pipeline = %s", (cfg.name,))
            except engine.errors as exc:   # never made (capture never ran), or another's to keep
                return f"heartbeat table {cfg.source.heartbeat_table}: nothing removed ({str(exc).strip()[:200]})"
    finally:
        conn.close()
    return f"its row of the heartbeat table {cfg.source.heartbeat_table} (the table is shared: it stays)"


def orphan_lines(folder: Path, resolve: Callable[[str], Conn] = get_connection) -> list[str]:
    """The orphans in a line each, for the doctor and status (a Connect or Kafka that does not
    answer is said, never raised: the rest of the report stands)."""
    try:
        return [f"ORPHAN {o.describe()}" for o in orphans(folder, resolve)]
    except Exception as exc:   # whatever the look met: said in the report, not raised
        return [f"orphans not checked: {(str(exc).strip() or type(exc).__name__).splitlines()[0][:300]}"]


@dataclass
class Orphan:
    connector: str
    state: str
    slot: str | None = None
    database: str | None = None
    retained: str | None = None
    topics: list[str] = field(default_factory=list)
    publication: str | None = None
    connect: str = ""   # the Connect connection it was found on

    def describe(self) -> str:
        held = f"; slot {self.slot} on {self.database}" + (f" retains {self.retained}" if self.retained else "") \
            if self.slot else ""
        return (f"connector {self.connector} ({self.state}) has no pipeline YAML{held}; {len(self.topics)} topic(s)"
                f". Remove it: python -m tideline.ops.lifecycle remove-orphan {self.connector} --confirm "
                f"{self.connector}")


@dataclass(frozen=True)
class Reach:
    """The connections a look for orphans goes through: by default those the folder's pipelines
    use (a deleted pipeline's leftovers sit on the same Connect, Kafka and source database)."""
    connect: list[str]
    kafka: str | None
    sources: list[str]

    @classmethod
    def of(cls, folder: Path, connect: list[str] | None = None, kafka: str | None = None,
           sources: list[str] | None = None) -> "Reach":
        good, _bad = load_pipelines(folder)
        return cls(connect or sorted({c.connect.conn_id for c in good.values()}),
                   kafka or next((c.kafka.conn_id for c in good.values()), None),
                   sources or sorted({c.source.conn_id for c in good.values()}))


def orphans(folder: Path, resolve: Callable[[str], Conn] = get_connection, reach: Reach | None = None) -> list[Orphan]:
    """Tideline's connectors on the Kafka Connect clusters of `reach` that belong to no pipeline
    YAML of `folder`, with their slot, the WAL it retains, and their topics."""
    from tideline.capture.connector import ConnectClient
    reach = reach or Reach.of(folder)
    known = {connector_name(c) for c in load_pipelines(folder)[0].values()}
    out = []
    for conn_id in reach.connect:
        client = ConnectClient(resolve(conn_id).http_base_url(), timeout=15)
        for name in client.names():
            if not name.startswith(CONNECTOR_PREFIX) or name in known:
                continue
            config = client.config(name) or {}
            status = client.status(name) or {}
            orphan = Orphan(name, (status.get("connector") or {}).get("state", "?"), config.get("slot.name"),
                            config.get("database.dbname"), publication=config.get("publication.name"),
                            connect=conn_id)
            orphan.topics = _topics_of(config, resolve, reach.kafka)
            source = _source_of(orphan, reach, resolve)
            if source is not None:
                orphan.retained = engines.for_source(source).orphan_retained(orphan.slot)
            out.append(orphan)
    return out


def _topics_of(config: dict, resolve, kafka_conn_id: str | None) -> list[str]:
    from tideline.kafka_offsets import admin_client
    prefix = config.get("topic.prefix")
    if not prefix or kafka_conn_id is None:
        return []
    topics = admin_client(resolve(kafka_conn_id).kafka_access).list_topics(timeout=15).topics
    return sorted(t for t in topics if t.startswith(prefix + "."))


def _source_of(orphan: Orphan, reach: Reach, resolve) -> Conn | None:
    """A PostgreSQL connection of `reach` to the database the orphan's slot is on."""
    if not orphan.slot:
        return None
    for conn_id in reach.sources:
        conn = resolve(conn_id)
        if engines.engine_class(engines.kind_of_connection(conn)).holds_slots and conn.schema == orphan.database:
            return conn
    return None


def remove_orphan(connector: str, folder: Path, resolve: Callable[[str], Conn] = get_connection,
                  confirm: str | None = None, reach: Reach | None = None) -> list[str]:
    """An orphan's connector (with its stored position), slot and publication, and topics. Refused
    for a connector that still has a pipeline YAML: decommission that."""
    from tideline.capture.connector import ConnectClient
    from tideline.kafka_offsets import admin_client
    check_confirmation(connector, confirm)
    reach = reach or Reach.of(folder)
    found = {o.connector: o for o in orphans(folder, resolve, reach)}
    if connector not in found:
        raise TerminalError(f"{connector} is not an orphan on Kafka Connect {', '.join(reach.connect) or '(none)'} "
                            f"(it has a pipeline YAML in {folder}, or no such connector): decommission its pipeline "
                            f"instead, or name the connections with --connect/--kafka/--source")
    orphan = found[connector]
    source = _source_of(orphan, reach, resolve)
    if orphan.slot and source is None:
        raise TerminalError(f"{connector}'s slot {orphan.slot} is on database {orphan.database}, which no source "
                            f"connection of {', '.join(reach.sources) or '(none)'} reaches: name one with --source")
    client = ConnectClient(resolve(orphan.connect).http_base_url())
    client.stop(connector)
    client.delete_offsets(connector)
    client.delete(connector)
    done = [f"connector {connector} and its stored position"]
    if source is not None:
        done.append(engines.for_source(source).drop_orphan_hold(orphan.slot, orphan.publication))
    if orphan.topics:
        admin = admin_client(resolve(reach.kafka).kafka_access)
        for fut in admin.delete_topics(orphan.topics, operation_timeout=30).values():
            fut.result(60)
        done.append(f"{len(orphan.topics)} topic(s): {', '.join(orphan.topics)}")
    return done


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    d = sub.add_parser("decommission", help="remove a pipeline and everything it holds")
    d.add_argument("pipeline")
    d.add_argument("--confirm", required=True, help="the pipeline's name again")
    o = sub.add_parser("orphans", help="what pipelines deleted without decommissioning left behind")
    r = sub.add_parser("remove-orphan", help="remove an orphan's connector, slot, publication and topics")
    r.add_argument("connector")
    r.add_argument("--confirm", required=True, help="the connector's name again")
    for p in (o, r):   # by default, the connections the remaining pipelines use
        p.add_argument("--connect", action="append", help="Kafka Connect connection id(s) to look on")
        p.add_argument("--kafka", help="Kafka connection id of the orphans' topics")
        p.add_argument("--source", action="append", help="source connection id(s) of the orphans' slots")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from tideline.commands import for_commands
    for_commands()
    folder = pipelines_dir()
    try:
        if args.command == "decommission":
            check_confirmation(args.pipeline, args.confirm)
            path = folder / f"{args.pipeline}.yaml"
            if not path.exists():
                raise TerminalError(f"no pipeline {args.pipeline} in {folder} (a deleted pipeline's leftovers: "
                                    f"python -m tideline.ops.lifecycle orphans)")
            for line in decommission(load_pipeline(path), config_path=path):
                print(f"removed: {line}")
        elif args.command == "orphans":
            found = orphans(folder, reach=Reach.of(folder, args.connect, args.kafka, args.source))
            for o in found:
                print(o.describe())
            if not found:
                print("no orphans: every Tideline connector belongs to a pipeline YAML")
        else:
            for line in remove_orphan(args.connector, folder, confirm=args.confirm,
                                      reach=Reach.of(folder, args.connect, args.kafka, args.source)):
                print(f"removed: {line}")
    except TerminalError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
