"""What a target may do beyond loading a table, one small interface per capability.

Every target is a `Target` (base.py: its connections, its tables, the full load's atomic publish).
It then implements the interfaces of the capabilities its package declares, and only those: the
registry (targets.target_class) refuses a class whose declaration promises a capability it does
not implement (PROMISES below), naming the interface and its missing methods. A caller that needs
a capability asks for it by its interface (`targets.able(target, StreamsChanges)`), never by kind.

  TakesCopy       copy_in        the load's tasks stream PostgreSQL COPY into the target
  StreamsChanges  stream         a stream batch's changes applied with its offsets and fencing
  KeepsChangeLog  table_extras   a table's change log (every event, exactly once)
  MergesBatches   batch          batch-mode intervals upserted by key
  Verifies        verifies       one side of a verify, and repair from the source
  Maintains       maintenance    compaction and expiry of a table's files
"""
from __future__ import annotations

import io
from abc import ABC, abstractmethod
from dataclasses import dataclass

from tideline.core.apply_failure import FailedEvent
from tideline.core.errors import TidelineError
from tideline.core.table_extras import TableExtras
from tideline.core.table_shape import Column, TableShape


class ApplyRefused(TidelineError):
    """The target refuses a change event of one table (deterministically); `event` says which.
    The stream halts that table alone, or dead-letters the event."""

    def __init__(self, message: str, event: FailedEvent):
        super().__init__(message, table=event.table)
        self.event = event


@dataclass(frozen=True)
class CommitStamp:
    """What a table's share of a stream batch commits with: the run's fencing epoch and the
    table's topic offsets after the batch (a target that keeps its own position stores them in
    the same commit as the rows)."""
    pipeline: str
    epoch: int
    offsets: dict[int, int]


@dataclass(frozen=True)
class StagedTable:
    """One table's staged changes as a stream batch applies them: where they go (the target's
    schema and table), the topic they came from, the columns and key they carry, what an event
    the target refuses becomes (dead letter, or the table halts), and its soft deletes and
    metadata columns (core.table_extras)."""
    schema: str
    table: str
    topic: str
    columns: list[Column]
    primary_key: list[str]
    dead_letter: bool = False
    extras: TableExtras = TableExtras()


class TakesCopy(ABC):
    what = "a COPY load"   # in an error, what a target without it cannot do

    @abstractmethod
    def copy_statement(self, conn, schema: str, table: str, columns: list[str], copy_format: str) -> str:
        """The statement each load task streams its rows with (PostgreSQL COPY, text or binary)."""


class StreamsChanges(ABC):
    """A stream batch: its decoded changes staged beside the state (the target's ChangeStaging),
    then each table's applied in the caller's transaction, kept or undone alone."""
    what = "the change stream"   # in an error, what a target without it cannot do


    @abstractmethod
    def columns(self, cur, schema: str, table: str) -> list[tuple]:
        """The table's columns as (name, type, not_null, generated), in order."""

    @abstractmethod
    def evolve(self, cur, schema: str, table: str, drift) -> None:
        """Adds and widens columns (core.schema_drift's plan) in the caller's transaction."""

    @abstractmethod
    def apply_changes(self, cur, staged: StagedTable, stamp: CommitStamp) -> tuple[tuple[int, int], int]:
        """Applies one table's staged changes: ((upserts, deletes), dead letters). Raises
        ApplyRefused naming the first change the target refuses."""

    def applied_offsets(self, cur, pipeline: str, schema: str, table: str,
                        recorded: dict[int, int] | None) -> dict[int, int] | None:
        """The table's position: the offsets below which every event is applied. `recorded` is the
        state's (committed with the rows when the target holds the state); a target that commits
        the offsets with its rows elsewhere says which is further."""
        return recorded

    def ensure_extras(self, conn, schema: str, table: str, extras: TableExtras) -> list[str]:
        """Before a stream applies a table: the extra columns its config asks for (an option set
        after the table was loaded) added to the target table, committed; the names added."""
        if extras:
            raise self.not_built("soft deletes and metadata columns")
        return []

    def stage_changes(self, cur, rows, table_of_topic: dict[str, str]) -> None:
        """One batch's decoded changes (last image per key), staged for apply_changes."""
        self.staging.stage_changes(cur, rows, table_of_topic)

    def stage_log(self, cur, log, table_of_topic: dict[str, str]) -> None:
        """One batch's every event of the tables with a change log, staged for append_changes."""
        self.staging.stage_log(cur, log, table_of_topic)

    def hash_log(self, cur, table: str, columns: list[Column]) -> None:
        """The table's staged log images with its hashed columns hashed (hash_columns)."""
        self.staging.hash_log(cur, table, columns)

    def leave_filter(self, cur, table: str, columns: list[Column], predicate: str) -> int:
        """The staged upserts of `table` its row_filter does not keep become deletes (staging)."""
        return self.staging.leave_filter(cur, table, columns, predicate)

    def begin_table(self, cur) -> None:
        """One table's share of a batch starts: it is kept or undone alone (a halt concerns one table)."""
        self.staging.begin_table(cur)

    def undo_table(self, cur) -> None:
        self.staging.undo_table(cur)

    def end_table(self, cur) -> None:
        self.staging.end_table(cur)


class KeepsChangeLog(ABC):
    what = "a change log"   # in an error, what a target without it cannot do

    @abstractmethod
    def log_position(self, cur, schema: str, table: str, topic: str) -> dict[int, int] | None:
        """The next Kafka offset per partition the table's change log lacks (None: no log yet)."""

    @abstractmethod
    def append_changes(self, cur, pipeline: str, schema: str, table: str, stamp: CommitStamp) -> int:
        """The table's staged events appended to its change log (core.table_extras.changes_table),
        each exactly once: an event at a Kafka position the log holds is not appended again."""


class MergesBatches(ABC):
    what = "batch mode"   # in an error, what a target without it cannot do

    @abstractmethod
    def begin_interval(self, conn, shape: TableShape, schema: str, stage: str) -> None:
        """An empty staging table for one batch-mode interval's rows."""

    @abstractmethod
    def ensure_table(self, cur, shape: TableShape, schema: str, label: str) -> None:
        """The live table exists with the shape's key, its columns added or widened as the source's."""

    @abstractmethod
    def merge_interval(self, cur, shape: TableShape, schema: str, stage: str) -> None:
        """Upserts the staged rows into the live table by key, inside the caller's transaction."""

    @abstractmethod
    def drop_staging(self, cur, schema: str, name: str) -> None:
        """An interval that failed (or was merged) leaves no trace; the live table stays."""


class Verifies(ABC):
    """One side of a verify (core.verify_side), and the repair of what a verify found: the
    source's rows of a range replace the target's, behind the caller's fence."""
    what = "verify and repair"   # in an error, what a target without it cannot do


    @abstractmethod
    def verify_side(self, label: str = "target"):
        """The target as one side of a verify (tideline.core.verify_side), on its own connection."""

    @abstractmethod
    def range_where(self, conn, shape: TableShape, column: str, lo: str, hi: str, as_time: bool) -> str:
        """The target's rows with `column` between lo and hi (values of its type, or UTC times)."""

    @abstractmethod
    def key_ranges_where(self, conn, shape: TableShape, ranges: list) -> str:
        """The target's rows inside any of the key ranges (a verify's findings)."""

    @abstractmethod
    def repair_from_source(self, cur, engine, src, shape: TableShape, schema: str, source_where: str,
                           target_where: str, delete_missing: bool, label: str,
                           extras: TableExtras = TableExtras()) -> tuple[int, int, int]:
        """Reads the source's rows matching `source_where` (one consistent read, made now: the
        caller holds the fence) and makes them the target's rows matching `target_where`, in the
        caller's transaction. `shape` is the target's (core.target_names): the source is read by
        its own names. Returns (read, upserted, deleted). RepairsByCopy does it for a target that
        takes the source's COPY text."""

    def value_problem(self, conn, typ: str, value: str) -> str | None:
        """Why `value` is not a value of the (target) type `typ`, in the target's words; None if it
        is. The state database's input functions (the same types as a PostgreSQL target's, and as an
        Iceberg catalog's declared columns)."""
        return self.state_db.value_problem(conn, typ, value)

    def in_order(self, conn, typ: str, lo: str, hi: str) -> bool:
        """lo <= hi in the type's order."""
        return self.state_db.in_order(conn, typ, lo, hi)

    def utc_text(self, conn, value: str) -> str:
        """A point in time (any form the target reads) as UTC text, which every engine's session reads."""
        return self.state_db.utc_text(conn, value)


class RepairsByCopy(Verifies):
    """A repair read as the source's COPY text (SourceEngine.copy_out) and applied by the target
    (apply_repair): for a target that takes the source's text as it is."""

    def repair_from_source(self, cur, engine, src, shape: TableShape, schema: str, source_where: str,
                           target_where: str, delete_missing: bool, label: str,
                           extras: TableExtras = TableExtras()) -> tuple[int, int, int]:
        order, rows = engine.order_now(src, label) if extras.source_order else None, io.BytesIO()
        engine.copy_out(src, shape.at_source, source_where, rows)
        rows.seek(0)
        return self.apply_repair(cur, shape, schema, rows, target_where, delete_missing, extras, order)

    @abstractmethod
    def apply_repair(self, cur, shape: TableShape, schema: str, rows, where, delete_missing: bool,
                     extras: TableExtras = TableExtras(), order: int | None = None) -> tuple[int, int, int]:
        """The source's rows of a range (COPY text in `rows`, read after the source's log `order`:
        TableExtras.source_order) replace the table's rows of that range, in the caller's transaction
        (behind the fence): upsert them and, when the range is over the key, delete the table's rows
        matching `where` that the source no longer has. Returns (read, upserted, deleted)."""


class Maintains(ABC):
    what = "table maintenance"   # in an error, what a target without it cannot do

    @abstractmethod
    def maintain(self, spark, schema: str, table: str, settings, fence) -> dict | None:
        """Compacts a table's files and expires what readers no longer need; `fence()` is a context
        manager holding off the stream's commits while files are rewritten. Returns the figures
        before and after; None when the table does not exist yet."""


# a capability (targets.base.Capabilities) and the interface a target promising it implements
PROMISES: dict[str, tuple[type, ...]] = {
    "copy_in": (TakesCopy,),
    "stream": (StreamsChanges,),
    "table_extras": (KeepsChangeLog,),
    "history": (StreamsChanges,),
    "batch": (MergesBatches,),
    "verifies": (Verifies,),
    "maintenance": (Maintains,),
}
