"""What a source may do beyond being described, one small interface per capability.

Every source is a `SourceEngine` (base.py: its connections, its catalog, its refusals and the
doctor's checks) and `ReadsSnapshots` (a full load). It implements the rest as its package
declares its capabilities (base.SourceCapabilities), and only those: the registry
(engines.engine_class) refuses a class whose declaration promises a capability it does not
implement (PROMISES below), naming the interface and its missing methods. A caller that needs one
asks for it by its interface (`engines.able(engine, Captures)`), never by kind.

  ReadsSnapshots   (every source)   a consistent snapshot, planned into partitions
  LoadsInChunks    chunked_loads    key ranges each read in a short transaction of its own
  PipesRows        pipes            rows piped as COPY without Spark JDBC
  Captures         capture          a Debezium connector reads its log
  HoldsPosition    capture          what capture holds on the source (slot, binlog)
  ReadsIntervals   batch            batch mode's interval reads by a cursor column
  VerifiesSource   verifies         one side of a verify, and a repair's reads
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from tideline.core.errors import SourceError
from tideline.core.kafka_access import KafkaAccess
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


class ReadsSnapshots(ABC):
    """A table's consistent snapshot, planned into partitions each read in its own session
    (Spark JDBC by default), and the neutral facts a target that reads the source itself builds
    its read from (targets.iceberg.load). Every source implements it."""
    what = "a full load"   # in an error, what a source without it cannot do

    # (a target writing through Spark JDBC builds its own read from these: targets.iceberg.load)
    values_as_text = False   # column_value() is the exact text PostgreSQL's input function of the column's
                             # type reads, not a typed value (an engine whose driver's types are not exact)

    # csv_reader() runs a `COPY (query) TO STDOUT WITH (FORMAT csv)` of the source: a lake target
    # then writes a load's data files from Arrow's CSV reader without Spark (pipes.lake_files)
    reads_csv = False   # (a PipesRows source's csv_reader)
    row_locator: str | None = None   # what tells rows apart in a keyless table's read (PostgreSQL: ctid)

    @abstractmethod
    def read_query(self, conn, shape: TableShape, where: str | None = None) -> str:
        """A derived table for Spark JDBC: every written column as the exact text COPY reads (of
        the rows matching `where`, over `t.<column>`, when given)."""

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

    def close_snapshot(self, conn) -> None:
        conn.rollback()

    def order_snapshot(self, snap: Snapshot, label: str) -> None:
        """Makes each partition's session of `snap` know the snapshot's place in the source's log
        order (snap.order), for a history table whose versions follow it
        (TableExtras.source_order). Only a source whose commit times cannot order versions has
        one."""
        raise SourceError(f"{label}: a {self.kind} source orders a history table's versions by commit time")

    def order_now(self, conn, label: str) -> int:
        """The source's place in that order now (order_snapshot), for a repair's versions."""
        raise SourceError(f"{label}: a {self.kind} source orders a history table's versions by commit time")

    def oldest_transaction_s(self, conn) -> float | None:
        """Seconds the oldest open transaction of this source role has been open (a full load's
        snapshot holds one: the source's vacuum cannot pass it), or None when none is open or
        the engine cannot tell."""
        return None


class LoadsInChunks(ABC):
    """A chunked load (load.chunked): key ranges read each in its own short transaction instead
    of one snapshot held for the whole table."""
    what = "a chunked load"   # in an error, what a source without it cannot do

    @abstractmethod
    def plan_chunks(self, conn, shape: TableShape, chunk_rows: int) -> tuple[int | None, list[str]]:
        """(the table's estimated rows, one key-range predicate per chunk covering the whole key
        space), in a short transaction of its own; only for a table with a key."""

    # what each chunk's source session runs first (its own short read; None: nothing)
    chunk_session_init: str | None = None

    def estimate_rows(self, conn, shape: TableShape) -> int | None:
        """The catalog's estimate of the table's rows (no scan), None when it has none."""
        return None


class PipesRows(ABC):
    """A full load's rows piped source → target as PostgreSQL COPY text or binary, never
    through Spark's JVM or a value decoded in Python (pipes.copy_pipe); or a CSV COPY a lake
    target writes data files from (pipes.lake_files)."""
    what = "a load without Spark JDBC"   # in an error, what a source without it cannot do

    # several of its pipes run well side by side in one Python process (few Python calls per MB
    # moved), so on a local master the driver pipes a load itself, with no Spark session
    # (load.full_load.session_needed); not when the pipe calls into Python once per row
    pipes_in_threads = False

    @abstractmethod
    def pipe(self, conn, shape: TableShape, where: str | None, predicates: list[str],
             session_init: str | None):
        """A pipes.copy_pipe.Pipe reading the written columns of the rows `read_query(conn, shape,
        where)` reads, one statement per partition `predicate`, each run in a session that ran
        `session_init` first, as PostgreSQL COPY text or binary (`shape.copy_format` where the
        engine can): a load then pipes each partition source → target without Spark JDBC or a
        value decoded in Python."""

    def csv_reader(self, session_init: str | None):
        """What runs such a COPY in a session that ran `session_init` first
        (pipes.copy_pipe.PostgresPipeSource.copy_out). None: the rows are read with Spark JDBC."""
        return None


class Captures(ABC):
    """Change capture by a Debezium connector: the source checked and prepared for it, the
    connector's config and topics generated from the pipeline, and capture known to be reading."""
    what = "change capture"   # in an error, what a source without it cannot do

    @abstractmethod
    def check_capture(self, conn, what: str) -> None:
        """Refuses, naming the setting and the fix, a source that change capture cannot read."""

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


class HoldsPosition(ABC):
    """What capture holds on the source to keep its place in the log (a slot, the binlog),
    how much it retains, when it was lost, and how it is cleared and dropped."""
    what = "change capture"   # in an error, what a source without it cannot do

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


class ReadsIntervals(ABC):
    """Batch mode: a run's interval of a cursor column read without a snapshot."""
    what = "batch mode"   # in an error, what a source without it cannot do

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


class VerifiesSource(ABC):
    """One side of a verify (core.verify_side), and the rows a repair reads (COPY text)
    with the source's predicates over key ranges and value ranges."""
    what = "verify and repair"   # in an error, what a source without it cannot do

    @abstractmethod
    def verify_side(self, label: str = "source"):
        """This database as one side of a verify (tideline.core.verify_side), on its own connection."""

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


# a capability (engines.base.SourceCapabilities) and the interfaces a source promising it implements
PROMISES: dict[str, tuple[type, ...]] = {
    "load": (ReadsSnapshots,),
    "chunked_loads": (LoadsInChunks,),
    "pipes": (PipesRows,),
    "capture": (Captures, HoldsPosition),
    "batch": (ReadsIntervals,),
    "verifies": (VerifiesSource,),
}
