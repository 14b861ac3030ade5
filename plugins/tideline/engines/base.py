"""What every source engine is (see tideline.engines); what it may do besides is engines.interfaces."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from tideline.core import source_shapes
from tideline.core.connections import Conn
from tideline.core.errors import SourceError
from tideline.core.table_shape import TableShape


@dataclass(frozen=True)
class SourceCapabilities:
    """What callers may ask of a source beyond a full load, instead of asking its kind. A promise
    is kept by interfaces (engines.interfaces.PROMISES): a source that promises what it does not
    implement is refused when its class is loaded (engines.engine_class), naming what is missing;
    the support table (core.support.SUPPORT) lists only modes its sources promise."""
    capture: bool = False         # its log is read by a Debezium connector (cdc tables)
    batch: bool = False           # reads a batch-mode interval by a cursor column (batch tables)
    verifies: bool = False        # one side of a verify, and a repair's reads
    chunked_loads: bool = False   # a full load of a keyed table in key ranges, each its own short read
    pipes: bool = False           # a full load's rows piped as COPY, without Spark JDBC

    def promised(self) -> list[str]:
        """The capabilities promised, by name (keys of engines.interfaces.PROMISES); a full load always."""
        from tideline.engines.interfaces import PROMISES
        return [name for name in PROMISES if name == "load" or getattr(self, name)]


@dataclass(frozen=True)
class SourceSpec:
    """A kind of source as the registry knows it (engines.<kind>.SOURCE): read without importing
    its driver (its class is `implementation`, "module:Class", imported on first use). What the
    pure core must know of it besides is its line in core.support.SOURCES."""
    kind: str
    conn_types: tuple[str, ...]    # the Airflow connection types of this kind of source
    implementation: str
    description: str = ""
    capabilities: SourceCapabilities = SourceCapabilities()


class SourceEngine(ABC):
    """What every source is: its connections, its catalog (a table described, or refused with the
    reason and the fix) and the doctor's checks. What it does besides, it implements as the
    interfaces of engines.interfaces, one per capability its package declares (a full load,
    ReadsSnapshots, always)."""
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

    # ---------------------------------------------------------------- catalog
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

    # ---------------------------------------------------------------- doctor
    @abstractmethod
    def doctor_checks(self, cfg, streaming: int) -> list:
        """pass / warn / fail of everything the source must provide (tideline.core.doctor_checks)."""
