"""The one interface of a source engine (see tideline.engines)."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from tideline.core.kafka_access import KafkaAccess
from tideline.core import source_shapes
from tideline.core.connections import Conn
from tideline.core.errors import SourceError
from tideline.core.table_shape import CTID_ALIAS, KEY_ALIAS, Column, TableShape


@dataclass
class Snapshot:
    """A consistent read of one table, planned: the partitions' predicates (rendered SQL) and the
    statement each partition's session runs first to join the read."""
    snapshot_id: str            # what identifies the read in the state (exported snapshot, GTID set)
    snapshot_at: object         # the source's clock when it opened
    position: str | None        # the source's log position at that time (xmin, GTID set)
    rows: int | None            # rows in the snapshot, when one count can see all of it
    predicates: list[str] = field(default_factory=list)
    session_init: str | None = None
    # the SQL value, in each partition's session, of the snapshot's place in the source's log
    # order: a history table from a source whose versions follow that order seeds it
    # (core.table_extras.SOURCE_ORDER; SourceEngine.order_snapshot)
    order: str | None = None


@dataclass(frozen=True)
class SourceSpec:
    """A kind of source as the registry knows it (engines.<kind>.SOURCE): read without importing
    its driver (its class is `implementation`, "module:Class", imported on first use). What the
    pure core must know of it besides is its line in core.support.SOURCES."""
    kind: str
    conn_types: tuple[str, ...]    # the Airflow connection types of this kind of source
    implementation: str
    description: str = ""


class SourceEngine(ABC):
    kind: str = ""
    label: str = ""
    errors: tuple[type[BaseException], ...] = ()   # the driver's error classes (the database said no)

    def __init__(self, source: Conn):
        self.source = source

    # ---------------------------------------------------------------- connections
    @abstractmethod
    def connect(self, autocommit: bool = False, connect_timeout: int | None = None):
        """A DB-API connection to the source."""

    @abstractmethod
    def jdbc_url(self) -> str: ...

    @abstractmethod
    def jdbc_properties(self) -> dict[str, str]:
        """Spark JDBC read properties (driver, credentials, fetch size)."""

    def row_count(self, conn, schema: str, table: str) -> int | None:
        """Rows in a source table now (None when it cannot be read): for status lines."""
        try:
            with conn.cursor() as cur:
                cur.execute(f"SELECT count(*) FROM {self.quote(schema)}.{self.quote(table)}")
                return cur.fetchone()[0]
        except self.errors:   # status shows "-" for a table it cannot count; the doctor says why
            conn.rollback()
            return None

    def count_where(self, conn, schema: str, table: str, where: str) -> int:
        """Rows of a source table matching `where`, in the connection's transaction (a snapshot's)."""
        with conn.cursor() as cur:
            cur.execute(f"SELECT count(*) FROM {self.quote(schema)}.{self.quote(table)} WHERE {where}")
            return cur.fetchone()[0]

    @staticmethod
    def quote(name: str) -> str:
        """An identifier quoted for this engine's SQL."""
        return '"' + name.replace('"', '""') + '"'

    @abstractmethod
    def verify_side(self, label: str = "source"):
        """This database as one side of a verify (tideline.core.verify_side), on its own connection."""

    # ---------------------------------------------------------------- catalog
    @abstractmethod
    def check_capture(self, conn, what: str) -> None:
        """Refuses, naming the setting and the fix, a source that change capture cannot read."""

    @abstractmethod
    def relation(self, conn, schema: str, table: str) -> source_shapes.Relation | None:
        """The catalog's facts about a named relation (kind, log, identity, partition tree), or None."""

    def refusal(self, conn, cfg, name: str) -> source_shapes.Refusal | None:
        """Why a table of the pipeline cannot be carried exactly (its shape, or a column the stream
        cannot carry), with the fix — or None. Run before capture, load and stream start."""
        return self.refusals(conn, cfg, [name]).get(name)

    def refusals(self, conn, cfg, names: list[str]) -> dict[str, source_shapes.Refusal]:
        """refusal() of several tables, by name; their columns described together (describe_many:
        a load of 200 tables spent ~1 s describing them one by one)."""
        pipeline = {(cfg.source_schema(t.name), t.name) for t in cfg.tables}
        found, streamed = {}, []
        try:
            for name in names:
                tcfg, schema = cfg.table(name), cfg.source_schema(name)
                try:
                    refusal = source_shapes.refusal(self.relation(conn, schema, name), schema, name, tcfg.mode,
                                                    frozenset(pipeline - {(schema, name)}))
                except SourceError as exc:
                    refusal = source_shapes.Refusal(name, str(exc).rstrip("."), "")   # its message names the fix
                if refusal is not None:
                    found[name] = refusal
                elif tcfg.mode == "cdc":
                    streamed.append((schema, name, tcfg))
            shapes = self.describe_many(conn, streamed, check_key=False, for_stream=True)
        finally:
            conn.rollback()
        for schema, name, _tcfg in streamed:
            if isinstance(shapes[(schema, name)], SourceError):
                found[name] = source_shapes.Refusal(name, str(shapes[(schema, name)]).rstrip("."), "")
        return found

    def partition_tree(self, conn, schema: str, table: str, known: dict | None = None) -> dict[str, dict] | None:
        """A partitioned table's partitions ({oid: {"name", "created_as_partition"}}) where
        attaching or detaching one changes rows without change events; None when not partitioned
        (or the engine's partitions are carried by its log, as MariaDB's are). Partitions not in
        `known` (the tree as last seen) are judged exactly: created as one, or attached."""
        return None

    def table_checks(self, conn, cfg) -> list:
        """The doctor's line per table: carried exactly, or refused with the reason and the fix."""
        from tideline.core import doctor_checks as dc
        return [dc.table_shape(t.name, self.refusal(conn, cfg, t.name)) for t in cfg.tables]

    @abstractmethod
    def describe(self, conn, schema: str, table: str, tcfg=None, check_key: bool = True,
                 for_stream: bool = False) -> TableShape:
        """The table as the pipeline syncs it: columns typed for the target, key, how each is read
        and carried. for_stream: also refuse columns the change stream cannot carry exactly."""

    def describe_many(self, conn, tables: list[tuple[str, str, object]], check_key: bool = True,
                      for_stream: bool = False) -> dict[tuple[str, str], TableShape | SourceError]:
        """describe() of several (schema, table, table config) at once, as a stream batch checks
        every table it applies: each one's shape, or the SourceError that refuses it (raised by the
        caller, for that table alone). One by one here; an engine that reads many tables'
        catalog in one round trip overrides it."""
        out = {}
        for schema, table, tcfg in tables:
            try:
                out[(schema, table)] = self.describe(conn, schema, table, tcfg, check_key, for_stream)
            except SourceError as exc:
                out[(schema, table)] = exc
        return out

    # ---------------------------------------------------------------- full load
    @abstractmethod
    def read_query(self, conn, shape: TableShape, where: str | None = None) -> str:
        """A derived table for Spark JDBC: every written column as the exact text COPY reads (of
        the rows matching `where`, over `t.<column>`, when given)."""

    # ------------------------------------------ neutral facts for a target that reads the source itself
    # (a target writing through Spark JDBC builds its own read from these: targets.iceberg.load)
    values_as_text = False   # column_value() is the exact text PostgreSQL's input function of the column's
                             # type reads, not a typed value (an engine whose driver's types are not exact)
    row_locator: str | None = None   # what tells rows apart in a keyless table's read (PostgreSQL: ctid)

    def jdbc_read_properties(self) -> dict[str, str]:
        """Spark JDBC properties of a read whose text must print alike whatever the server's defaults."""
        return self.jdbc_properties()

    def column_value(self, column: Column, alias: str = "t") -> str:
        """The source expression of a column's value over the table aliased `alias`."""
        return f"{alias}.{self.quote(column.name)}"

    def keyed_read(self, shape: TableShape, selects: list[str], where: str | None = None) -> str:
        """A derived table for Spark JDBC: the key aliases the snapshot's predicates compare (or the
        row locator of a keyless table), then `selects` (expressions over `t`, each with its alias),
        of the rows matching `where` (over the table's own columns) when given."""
        q = self.quote
        keys = [f"t.{q(k)} AS {q(KEY_ALIAS.format(i))}" for i, k in enumerate(shape.primary_key)]
        if not keys and self.row_locator:
            keys = [f"t.{self.row_locator} AS {q(CTID_ALIAS)}"]
        return (f"(SELECT {', '.join(keys + selects)} FROM {q(shape.schema)}.{q(shape.name)} t"
                f"{f' WHERE {where}' if where else ''}) AS tideline_read")

    @abstractmethod
    def open_snapshot(self, conn, shape: TableShape, parts: int) -> Snapshot:
        """Opens the consistent read on `conn` (kept open until the partitions have read) and
        plans `parts` partitions."""

    # plan_chunks() plans a chunked load (load.chunked): key ranges read each in its own short
    # transaction instead of one snapshot held for the whole table
    loads_in_chunks = False

    def plan_chunks(self, conn, shape: TableShape, chunk_rows: int) -> tuple[int | None, list[str]]:
        """(the table's estimated rows, one key-range predicate per chunk covering the whole key
        space), in a short transaction of its own; only for a table with a key."""
        raise NotImplementedError(f"{self.label} sources load in one consistent snapshot")

    # what each chunk's source session runs first (its own short read; None: nothing)
    chunk_session_init: str | None = None

    def estimate_rows(self, conn, shape: TableShape) -> int | None:
        """The catalog's estimate of the table's rows (no scan), None when it has none."""
        return None

    # pipe() gives a pipe: a full load's rows never pass through Spark's JVM
    pipes_copy = False
    # several of its pipes run well side by side in one Python process (few Python calls per MB
    # moved), so on a local master the driver pipes a load itself, with no Spark session
    # (load.full_load.session_needed); not when the pipe calls into Python once per row
    pipes_in_threads = False

    def pipe(self, conn, shape: TableShape, where: str | None, predicates: list[str],
             session_init: str | None):
        """A pipes.copy_pipe.Pipe reading the written columns of the rows `read_query(conn, shape,
        where)` reads, one statement per partition `predicate`, each run in a session that ran
        `session_init` first, as PostgreSQL COPY text or binary (`shape.copy_format` where the
        engine can): a load then pipes each partition source → target without Spark JDBC or a
        value decoded in Python. None: read with Spark JDBC."""
        return None

    # csv_reader() runs a `COPY (query) TO STDOUT WITH (FORMAT csv)` of the source: a lake target
    # then writes a load's data files from Arrow's CSV reader without Spark (pipes.lake_files)
    reads_csv = False

    def csv_reader(self, session_init: str | None):
        """What runs such a COPY in a session that ran `session_init` first
        (pipes.copy_pipe.PostgresPipeSource.copy_out). None: the rows are read with Spark JDBC."""
        return None

    def order_snapshot(self, snap: Snapshot, label: str) -> None:
        """Makes each partition's session of `snap` know the snapshot's place in the source's log
        order (snap.order), for a history table whose versions follow it
        (TableExtras.source_order). Only a source whose commit times cannot order versions has
        one."""
        raise SourceError(f"{label}: a {self.kind} source orders a history table's versions by commit time")

    def order_now(self, conn, label: str) -> int:
        """The source's place in that order now (order_snapshot), for a repair's versions."""
        raise SourceError(f"{label}: a {self.kind} source orders a history table's versions by commit time")

    def close_snapshot(self, conn) -> None:
        conn.rollback()

    # ---------------------------------------------------------------- capture
    @abstractmethod
    def connector_config(self, cfg, kafka: KafkaAccess | None = None) -> dict[str, str]:
        """The Debezium connector's config, generated from the pipeline."""

    def prepare_capture(self, cfg) -> list[str]:
        """What the source must hold before the connector starts, for exactly the carried tables
        of `cfg`. Returns tables whose changes an earlier setup sent where the stream never reads."""
        return []

    @abstractmethod
    def capture_topics(self, cfg) -> dict[str, dict[str, str]]:
        """Topics the connector needs besides the change topics: name -> config overrides."""

    @abstractmethod
    def position_holder(self, cfg) -> str:
        """What keeps the connector's place in the source's log, in words (slot, binlog position)."""

    @abstractmethod
    def ensure_heartbeat_table(self, cfg) -> None:
        """The source table the connector's heartbeats write to exists."""

    @abstractmethod
    def wait_capture_ready(self, cfg, client, connector: str, deadline: float) -> None:
        """Returns once every change committed from now on is sure to reach Kafka."""

    def capture_disconnected(self, cfg, connector_config: dict[str, str]) -> str | None:
        """Why a connector whose task says RUNNING reads nothing from the source, or None. Debezium
        retries a source it cannot reach or log in to at task start forever, its task RUNNING
        (errors.max.retries does not apply there): capture stopped while looking healthy. None
        where the engine cannot tell."""
        return None

    def current_values(self, conn, schema: str, table: str, key: list[str], keys: list[str],
                       columns: list[str]) -> dict[int, dict]:
        """The source rows' current values for change events that left values out (only
        PostgreSQL's do: an unchanged TOASTed value); see stream.source_fill."""
        raise NotImplementedError(f"{type(self).__name__}: change events never leave values out here")

    def oldest_transaction_s(self, conn) -> float | None:
        """Seconds the oldest open transaction of this source role has been open (a full load's
        snapshot holds one: the source's vacuum cannot pass it), or None when none is open or
        the engine cannot tell."""
        return None

    @abstractmethod
    def capture_hold(self, conn, cfg, stored_position=None):
        """What the pipeline's capture holds on the source (core.capture_hold.CaptureHold) —
        a slot's retained WAL, the binlog kept for the connector's position. `stored_position()`
        gives the connector's stored offsets, for an engine whose position lives in Connect."""

    @abstractmethod
    def lost_capture(self, cfg, client, connector: str) -> str | None:
        """Why changes were missed at the source side (the position capture needs is gone), or None."""

    @abstractmethod
    def reset_capture(self, cfg) -> None:
        """Clears the source's side of a lost position so capture can start afresh."""

    @abstractmethod
    def drop_capture(self, cfg) -> str:
        """Removes what the source holds for the pipeline's capture; says what, in words."""

    holds_slots = False   # capture holds a named slot on the source that outlives its connector (orphans)

    def orphan_retained(self, slot: str) -> str | None:
        """What an orphaned connector's slot retains on the source, in words (None: nothing, or no slot)."""
        return None

    def drop_orphan_hold(self, slot: str, publication: str | None) -> str:
        """Drops what an orphaned connector held on the source (its slot, its publication); says what."""
        raise NotImplementedError(f"{type(self).__name__}: capture holds nothing on the source that outlives it")

    # ---------------------------------------------------------------- batch mode
    @abstractmethod
    def cursor_bounds(self, conn, shape: TableShape, col, current: str | None, start, end, lag_s: int,
                      time: bool) -> tuple[str | None, str | None, str | None, str | None]:
        """[lower, upper) of a batch run's cursor column and the cursor after it, as text, and the
        read's WHERE over `t.<column>` in this engine's SQL (None: nothing to read yet). Times: the
        run's interval [start, end), never closer to the source's now than lag_s, from the cursor
        when an earlier run could not read up to its interval's end. Integers: above the cursor,
        up to the largest value now."""

    @abstractmethod
    def interval_read(self, conn, shape: TableShape, where: str, parts: int) -> tuple[str, list[str], str | None]:
        """Spark JDBC read of the rows matching `where`: (query, one predicate per partition,
        session init). No snapshot: batch mode upserts, so a row read twice is harmless."""

    # ---------------------------------------------------------------- repair
    @abstractmethod
    def copy_out(self, conn, shape: TableShape, where: str, out) -> int:
        """Writes the written columns of the rows matching `where` (this engine's SQL) to `out`
        as PostgreSQL COPY text, one consistent read; returns the rows."""

    @abstractmethod
    def key_ranges_where(self, conn, shape: TableShape, ranges: list) -> str:
        """This engine's predicate for rows in any of the verify's key ranges (target key order)."""

    @abstractmethod
    def range_where(self, conn, shape: TableShape, column: str, lo: str, hi: str, as_time: bool) -> str:
        """This engine's predicate `column BETWEEN lo AND hi`: key values as their text (checked by
        the caller), or times as UTC timestamps."""

    # ---------------------------------------------------------------- doctor
    @abstractmethod
    def doctor_checks(self, cfg, streaming: int) -> list:
        """pass / warn / fail of everything the source must provide (tideline.core.doctor_checks)."""
