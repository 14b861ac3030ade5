"""What every target is (see tideline.targets); what it may do besides is targets.interfaces.

Shaped by what every target must do for Tideline's guarantees: hold a table of a source shape and
evolve it; publish a snapshot atomically (readers see the old rows or the new, never half); apply
one batch of changes together with the offsets it consumed and the fencing check, atomically;
and be read back for verify. How a target does each is its own business: PostgreSQL uses a shadow
table and one transaction that also holds Tideline's state; a lake table one commit per snapshot.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable

from tideline.core.connections import Conn
from tideline.core.errors import LoadVerificationError, TargetError
from tideline.state.database import StateDatabase
from tideline.state.staging import ChangeStaging
from tideline.core.table_extras import TableExtras
from tideline.core.table_shape import TableShape


@dataclass(frozen=True)
class Capabilities:
    """What callers may ask of a target instead of asking its kind. A promise is kept by an
    interface (targets.interfaces.PROMISES): a target that promises what it does not implement is
    refused when its class is loaded (targets.target_class), naming what is missing."""
    holds_state: bool          # Tideline's state schema lives in the target, in the same transactions
    snapshot_publish: str      # how a full load goes live: "shadow_swap" (rename in one transaction) | "commit"
    copy_in: bool              # accepts PostgreSQL COPY (text and binary) streamed by the load's tasks
    stream: bool = True        # applies the change stream's batches (cdc tables)
    batch: bool = False        # merges batch-mode intervals (batch tables, a batch_<name> DAG)
    verifies: bool = True      # can be one side of a verify and be repaired from the source
    maintenance: bool = False  # every commit adds files: needs compaction and expiry (a maintain_<name> DAG)
    concurrent_loads: bool = True   # several tables' full loads may run at once in one Spark application
    chunked_loads: bool = False     # a full load may fill its shadow in chunks over several runs (load.chunked):
                                    # publish_snapshot keeps the shadow a resumed load (SnapshotLoad.resumed) filled
    batch_events: int = 200_000     # a stream batch's events at most, unless stream.max_offsets_per_trigger says
    batch_mb: float = 128           # ... and their raw records' weight at most, unless stream.max_batch_mb says
    writes_in_jvm: bool = False     # its loads' and stream's writes are Spark jobs (the JVM moves the rows):
                                    # the jobs' driver JVM needs its optimizing compiler (core.settings)
    table_extras: bool = False      # soft deletes and change-metadata columns (core.table_extras): its loads
                                    # fill them and its stream's apply writes them
    partitioning: bool = False      # a table's partition_by (core.lake_partition): its loads create the table so
    history: bool = False           # a table's history (SCD2, core.table_extras): versions by the source's times
    loads_from_csv: bool = False    # its loads write a CSV-reading source's rows as data files (SnapshotLoad.spread)

    def promised(self) -> list[str]:
        """The capabilities this target promises beyond the full load, by name (keys of
        targets.interfaces.PROMISES: each names the interface its class implements)."""
        from tideline.targets.interfaces import PROMISES
        return [name for name in PROMISES if getattr(self, name)]


@dataclass(frozen=True)
class TargetSpec:
    """A kind of target as the registry knows it (targets.<kind>.TARGET): read without importing
    the target's client (its class is `implementation`, "module:Class", imported on first use)."""
    kind: str
    conn_types: tuple[str, ...]    # the Airflow connection types of this kind of target
    capabilities: Capabilities
    implementation: str
    description: str = ""
    jars_env: str = ""   # the environment variable listing the jars its Spark jobs need (comma-separated)
    packages: tuple[str, ...] = ()   # the same jars as Maven coordinates, where the variable is unset
    # "module:function" of (connection) -> why that connection cannot hold Tideline's state, or None;
    # "" = it always can. A pipeline whose target connection cannot must name state.conn_id.
    state_refusal: str = ""

    def refuses_state(self, conn) -> str | None:
        """Why the target connection `conn` cannot hold Tideline's state (None: it can)."""
        if not self.state_refusal:
            return None
        import importlib
        module, _, name = self.state_refusal.partition(":")
        return getattr(importlib.import_module(module), name)(conn)

    def spark_jars(self) -> list[str]:
        """Jars a Spark job writing into this kind of target needs beyond the stack's own."""
        import os
        return [j for j in os.environ.get(self.jars_env, "").split(",") if j] if self.jars_env else []

    def spark_jars_and_packages(self, environ=None) -> tuple[str, str]:
        """(--jars, --packages) of a job writing into this kind of target (tideline.spark_packages)."""
        from tideline.spark_packages import jars_and_packages
        return jars_and_packages(self.jars_env, self.packages, environ)


@dataclass
class SnapshotLoad:
    """One table's snapshot as the full load hands it to its target (Target.publish_snapshot): the
    consistent read already open on `src`, the state connection `tgt`, and the load's own parts a
    target calls back — `fill` pipes the snapshot's rows into a table by COPY (and closes the
    snapshot: every partition has read), `fence` checks the load still owns the table (locking its
    state row until the transaction ends), `record` writes the state that goes live with the rows."""
    spark: object
    engine: object
    src: object
    tgt: object
    shape: TableShape
    snap: object
    schema: str
    label: str
    pipeline: str
    epoch: int
    offsets: dict[int, int]
    fill: Callable[[str], list[dict]]
    fence: Callable[[object], None]
    record: Callable[[object, "Published"], None]
    resumed: bool = False   # a chunked load resumed: its shadow holds the chunks earlier runs committed
    # a chunked load (load.chunked.ChunkedRead) for a target that stages its chunks itself (not by
    # COPY: Iceberg), with `chunk_done(cur, {chunk: rows})` recording staged chunks in the state
    # transaction the target holds, and the chunks it may read at once
    chunked: object | None = None
    chunk_done: Callable[[object, dict], None] | None = None
    parallelism: int = 1
    extras: TableExtras = TableExtras()   # soft deletes and metadata columns the table carries (core.table_extras)
    partition_by: tuple[str, ...] = ()    # its partition transforms (a target that partitions: core.lake_partition)
    where: str | None = None              # the rows its row_filter keeps, in the source's SQL (a target that reads)
    spread: Callable[..., list[dict]] | None = None   # load.copy_rows.spread_partitions: for pipes.lake_files

    def verified(self, read: int, stored: int, mismatch: str) -> int:
        """The snapshot's rows, when the rows read and stored agree with it; else the load stops
        before (or, for a target whose write is its commit, instead of) advancing the state:
        `mismatch` says what was read and stored, and what did not go live."""
        rows = self.snap.rows if self.snap.rows is not None else read
        if not rows == read == stored:
            raise LoadVerificationError(f"{self.label}: the snapshot holds {rows:,} rows but {mismatch}. "
                                        f"Rerun the full load.")
        return rows


@dataclass(frozen=True)
class Published:
    """A snapshot gone live: its rows, how they travelled, what went live ("swapped", "committed")
    and the seconds its rows took to read and store."""
    rows: int
    how: str
    published: str
    copy_secs: float


class Target(ABC):
    """What every target is: its connections, its tables and the full load's atomic publish. What
    it may do besides, it implements as the interfaces of tideline.targets.interfaces, one per
    capability its package declares. A target's connections and Tideline's state are the state
    room's (tideline.state): every target composes a StateDatabase (where its state lives) and a
    ChangeStaging (a stream batch staged beside the state) instead of inheriting another target's classes."""
    kind: str = ""
    errors: tuple[type[BaseException], ...] = StateDatabase.errors   # the driver's error classes (the target said no)
    spec: TargetSpec | None = None   # its package's declaration, set when the registry loads the class

    def __init__(self, conn: Conn, state: Conn | None = None):
        self.conn = conn
        self.state_db = StateDatabase(state or conn)   # the pipeline's state.conn_id, else the target's own
        self.staging = ChangeStaging()


    @classmethod
    def spark_jars(cls) -> list[str]:
        """Jars a Spark job writing into this kind of target needs beyond the stack's own (its spec's)."""
        return cls._spec().spark_jars()

    def use(self, spark) -> None:
        """Prepares a running Spark session to write into this target (nothing, for most)."""

    def not_built(self, what: str) -> TargetError:
        """What a target that lacks an operation raises (its capabilities do not promise it)."""
        return TargetError(f"the {self.kind} target (connection {self.conn.conn_id!r}) cannot do {what} in this "
                           f"version of Tideline; see the support matrix (docs/reference/support.md)")

    @classmethod
    def capabilities(cls) -> Capabilities:
        """Its kind's capabilities, as its package declares them (targets.<kind>.TARGET)."""
        return cls._spec().capabilities

    @classmethod
    def _spec(cls) -> TargetSpec:
        if cls.spec is None:
            raise TypeError(f"{cls.__name__} was not loaded through the target registry (targets.target_class), "
                            f"which gives it its declaration")
        return cls.spec

    # ---------------------------------------------------------------- connections (the state room's)
    def connect(self, autocommit: bool = False, connect_timeout: int | None = None):
        """A DB-API connection to Tideline's state (the target itself, when it holds_state)."""
        return self.state_db.connect(autocommit, connect_timeout)

    def probe(self, timeout_s: float) -> None:
        """Raises, saying which, when a part this target needs does not answer (its state
        database here): what a waiting stream looks at before it submits again (core.keep_alive)."""
        self.connect(connect_timeout=max(1, int(timeout_s))).close()

    def lost_connection(self, exc: BaseException) -> bool:
        """A failure of the connection or the server's availability (not of the data): worth
        waiting out and running the batch again."""
        return self.state_db.lost_connection(exc)

    def dsn(self) -> str:
        """What the load's tasks connect with to write their share of a snapshot."""
        return self.state_db.dsn()

    # ---------------------------------------------------------------- tables
    @abstractmethod
    def prepare_schema(self, conn, schema: str, label: str) -> None:
        """The schema (namespace) exists and may receive tables, or a TargetError saying the grant."""

    @abstractmethod
    def can_create(self, conn, schema: str) -> bool:
        """The target role may create tables in the schema (or create the schema): the doctor's check."""

    @abstractmethod
    def row_count(self, conn, schema: str, table: str, exact: bool = True) -> int | None:
        """Rows in a table: counted, or (exact=False, for views refreshed every few seconds) from the
        target's statistics without a scan. None when it cannot be read (status shows "-")."""

    @abstractmethod
    def table_exists(self, conn, schema: str, table: str) -> bool:
        """Whether the synced table is in the target (one the state says is loaded: ops.in_target)."""

    @abstractmethod
    def drop_table(self, schema: str, table: str) -> bool:
        """Drops the synced table (removed from its pipeline with drop_target, by a person only); True when there was one."""

    def load_leftover(self, table: str) -> str | None:   # a chunked load cut off keeps its rows there (Tideline's)
        return None

    def table_facts(self, schema: str, table: str) -> dict | None:
        """What status and the view show about a table beyond its rows, in the target's terms (an
        Iceberg table's snapshot and files), or None. Besides its own keys, `line` (status's line),
        `short` (the view's cell) and `files` (the files a reader opens), shown without knowing the target."""
        return None

    # ---------------------------------------------------------------- full load
    @abstractmethod
    def publish_snapshot(self, load: SnapshotLoad) -> Published:
        """Makes the snapshot open on load.src the table's rows, atomically for readers (the old
        rows or the new, never half) and together with load.record (the state that starts the
        stream from load.offsets), after load.fence. A target that takes COPY fills a table out of
        readers' sight with load.fill; one that writes through Spark reads the snapshot itself.
        Raises LoadVerificationError (load.verified) when the rows stored are not the snapshot's."""

    def discard_snapshot(self, cur, shape: TableShape, schema: str) -> None:
        """A snapshot that failed leaves no trace; the live table stays (nothing, for a target whose
        snapshot is one commit)."""

    @abstractmethod
    def stored_so_far(self, state_conn, schema: str, table: str) -> tuple[int, int] | None:
        """(rows, bytes) a running load has stored in `table` so far, for its progress chart; read
        through the state connection (the target itself when it holds_state); None when unknown."""
