"""Apache Iceberg tables as a target (README: "Targets", "Iceberg").

The rows live in Iceberg tables of a catalog, written by Spark (and by Tideline's own Parquet
writer); the catalog is the one the Airflow connection names (targets.iceberg.catalog): Iceberg's
JDBC catalog in a PostgreSQL database, a REST catalog, or another type Iceberg knows, with its
warehouse on a file system or object storage (S3). A snapshot goes live in one Iceberg commit whose
summary carries the Kafka offsets the stream resumes from and the run's fencing epoch, so the truth
about a table's position is in the table itself.

Tideline's bookkeeping (phases, runs, halts) cannot live in a lake table: it goes to schema
`tideline` of a PostgreSQL database — the one the pipeline's `state.conn_id` names, else the JDBC
catalog's own (`connect`), beside the catalog's tables.
"""
from __future__ import annotations

import functools
import json
import logging
import threading
import time

from tideline.core.readable import ago
from tideline.core.errors import ConfigError, TargetError
from tideline.core.table_extras import TableExtras
from tideline.core.table_shape import Column
from tideline.targets.base import Published, SnapshotLoad, Target
from tideline.targets.interfaces import CommitStamp, KeepsChangeLog, Maintains, StagedTable, StreamsChanges, Verifies
from tideline.targets.iceberg.apply import LakeApply
from tideline.targets.iceberg.schema import COLUMNS_PROPERTY, add_extras, columns_property, evolve
from tideline.targets.iceberg.snapshots import (SUMMARY_EPOCH, SUMMARY_OFFSETS, SUMMARY_PIPELINE, newest_stamped,
                                                summary_of)

log = logging.getLogger("tideline.targets.iceberg")

# the table's columns as the source declares them ([name, type, not null, generated]): how the
# stream decodes each column's events and what schema drift compares with
# merge-on-read: a commit of changes writes delete files, not a rewrite of the data files it touches.
# Format version 3: those deletes are deletion vectors (one bitmap per data file, merged by each
# commit) instead of position delete files every later MERGE's scan of the table must read and sort:
# a MERGE of 180,000 changes into a 250,000-row table 3.6-3.7 -> 2.3-2.5 s, of 90 changes after a
# few big ones 1.5-2.0 -> 0.7-0.9 s (one local session). PyIceberg reads them.
# Every commit also writes a metadata file: keep the last 50, not one per commit forever.
TABLE_PROPERTIES = {"format-version": "3", "write.delete.mode": "merge-on-read",
                    "write.update.mode": "merge-on-read", "write.merge.mode": "merge-on-read",
                    "write.metadata.delete-after-commit.enabled": "true",
                    "write.metadata.previous-versions-max": "50"}


class IcebergTarget(Target, StreamsChanges, KeepsChangeLog, Verifies, Maintains):
    """Its state_db is the catalog's PostgreSQL database (errors: that database's, the state's)."""
    kind = "iceberg"

    def __init__(self, conn, state=None):
        super().__init__(conn, state)
        self.spark = None   # the session the stream's commits run in (use)
        self.seen: dict[tuple[str, str], int | None] = {}   # each table's snapshot a batch was cut against

    @property
    def catalog(self) -> str:
        """The catalog's name in Spark SQL: the connection id."""
        return self.conn.conn_id

    @functools.cached_property
    def settings(self):
        """Which catalog the connection names, and how its warehouse is reached (targets.iceberg.catalog)."""
        from tideline.targets.iceberg.catalog import catalog_settings
        return catalog_settings(self.conn)

    @property
    def warehouse(self) -> str | None:
        """The warehouse the connection names: a location (file:///…, s3://…), or for a REST catalog
        the name it serves the warehouse by (None: its default)."""
        return self.settings.warehouse

    # ---------------------------------------------------------------- Spark
    def spark_conf(self) -> dict[str, str]:
        """The session settings that make the catalog a Spark SQL catalog (read when it is first
        named, so they can be set on a running session). Spark redacts the password, secret,
        token and credential in its UI and logs (spark_session.REDACTION)."""
        k = f"spark.sql.catalog.{self.catalog}"
        return {k: "org.apache.iceberg.spark.SparkCatalog",
                **{f"{k}.{key}": value for key, value in self.settings.iceberg_properties().items()},
                # every statement sees the table's newest metadata: the stream's commits check what
                # landed before them (and a schema change, committed through Iceberg's API)
                f"{k}.cache-enabled": "false"}

    def probe(self, timeout_s: float) -> None:
        """The state database, and the REST catalog and object store (a stream waits for them)."""
        from tideline.targets.iceberg.catalog import probe_endpoints
        super().probe(timeout_s)
        probe_endpoints(self.settings, timeout_s)

    def _object_store_jvm(self, jvm) -> None:
        """The object store's checksum settings as JVM system properties (the Java SDK reads them)."""
        if self.settings.store is not None:
            for key, value in self.settings.store.jvm_properties().items():
                jvm.java.lang.System.setProperty(key, value)

    def object_store_environment(self) -> None:
        """The object store's checksum settings in this process's environment (pyarrow's and
        PyIceberg's S3 clients read them when they are made)."""
        import os
        if self.settings.store is not None:
            os.environ.update(self.settings.store.environment())

    def use(self, spark) -> None:
        """Registers the catalog in a running Spark session; says so when the session lacks the jar."""
        self.spark = spark
        for key, value in self.spark_conf().items():
            spark.conf.set(key, value)
        self._object_store_jvm(spark.sparkContext._jvm)
        try:
            spark.sparkContext._jvm.java.lang.Class.forName("org.apache.iceberg.spark.SparkCatalog", True,
                                                            spark.sparkContext._jvm.Thread.currentThread()
                                                            .getContextClassLoader())
        except Exception:   # noqa: BLE001 — py4j wraps the ClassNotFoundException
            raise TargetError(f"the Spark session has no Iceberg runtime jar (catalog {self.catalog}): submit the "
                              f"job with --jars $TIDELINE_ICEBERG_JARS (make setup fetches it)") from None

    def session(self):
        """The Spark session this target works in: the job's (use), or one started here for work
        that runs in an Airflow task's own process (verify, repair), in local mode or on the
        cluster TIDELINE_SPARK_MASTER names."""
        if self.spark is None:
            from tideline.spark_session import get_session
            _jars, packages = self._spec().spark_jars_and_packages()   # coordinates of what no jar file names
            self.use(get_session(f"tideline-{self.catalog}", extra_jars=self.spark_jars(), packages=packages))
        return self.spark

    def java_catalog(self, jvm, hadoop_conf):
        """The catalog through Iceberg's Java API alone, without a Spark session (the same
        settings the session's catalog gets: spark_conf); the caller closes it."""
        self._object_store_jvm(jvm)
        prefix, props = f"spark.sql.catalog.{self.catalog}.", jvm.java.util.HashMap()
        for key, value in self.spark_conf().items():
            if key.startswith(prefix):
                props.put(key[len(prefix):], value)
        return jvm.org.apache.iceberg.CatalogUtil.buildIcebergCatalog(self.catalog, props, hadoop_conf)

    def table_id(self, schema: str, table: str) -> str:
        return f"{self.catalog}.`{schema}`.`{table}`"

    def java_table(self, spark, schema: str, table: str):
        """The table in Iceberg's Java API, for what Spark SQL does not offer (actions, a schema
        transaction)."""
        return spark.sparkContext._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
            spark._jsparkSession, self.table_id(schema, table))

    # ---------------------------------------------------------------- tables
    def prepare_schema(self, conn, schema: str, label: str) -> None:
        """Namespaces are made by the Spark write (write_snapshot): nothing to do in the catalog's database."""

    def can_create(self, conn, schema: str) -> bool:
        """The role may write the catalog's tables (or create them, on a new catalog database); a
        catalog of another type is asked for its namespaces (it says no by raising)."""
        if self.settings.type != "jdbc":
            self.pyiceberg_catalog().list_namespaces()
            return True
        with conn.cursor() as cur:
            cur.execute("SELECT CASE WHEN to_regclass('iceberg_tables') IS NULL THEN has_database_privilege("
                        "current_database(), 'CREATE') ELSE has_table_privilege('iceberg_tables', "
                        "'INSERT, UPDATE, DELETE') END")
            return cur.fetchone()[0]

    def row_count(self, conn, schema: str, table: str, exact: bool = True) -> int | None:
        """Rows of the current snapshot, from its summary (Iceberg keeps the totals): the data files'
        records less their position deletes (the stream writes no equality deletes); no scan."""
        summary = self.current_summary(schema, table)
        if not summary or "total-records" not in summary:
            return None
        return int(summary["total-records"]) - int(summary.get("total-position-deletes", 0))

    def table_facts(self, schema: str, table: str) -> dict | None:
        """The current snapshot (id, when, by which epoch), how many snapshots are kept, and the
        data and delete files a reader opens: what grows with every commit until maintenance."""
        t = self.iceberg_table(schema, table)
        snap = t.current_snapshot() if t is not None else None
        if snap is None:
            return None
        summary = summary_of(snap)
        facts = {"snapshot": snap.snapshot_id, "committed_ms": snap.timestamp_ms,
                 "epoch": int(summary[SUMMARY_EPOCH]) if SUMMARY_EPOCH in summary else None,
                 "snapshots": len(t.snapshots()), "data_files": int(summary.get("total-data-files", 0)),
                 "delete_files": int(summary.get("total-delete-files", 0))}
        age = time.time() - snap.timestamp_ms / 1000
        files = f"{facts['data_files']:,} data + {facts['delete_files']:,} delete files"
        return {**facts, "files": facts["data_files"] + facts["delete_files"],
                "short": f"{facts['snapshots']:,} snapshots, {files}",
                "title": f"Iceberg snapshot {snap.snapshot_id}",
                "line": (f"iceberg snapshot {snap.snapshot_id} committed {ago(age)}"
                         f"{'' if facts['epoch'] is None else ' (epoch ' + str(facts['epoch']) + ')'}; "
                         f"{facts['snapshots']} snapshots, {facts['data_files']} data files, "
                         f"{facts['delete_files']} delete files")}

    def maintain(self, spark, schema: str, table: str, settings, fence) -> dict | None:
        from tideline.targets.iceberg.maintenance import maintain_table
        if self.iceberg_table(schema, table) is None:
            return None
        return maintain_table(self, spark, schema, table, settings, fence)

    # ---------------------------------------------------------------- verify and repair
    def verify_side(self, label: str = "target"):
        from tideline.targets.iceberg.verify import IcebergSide
        return IcebergSide(self, label)

    def repair_from_source(self, cur, engine, src, shape, schema: str, source_where: str, target_where: str,
                           delete_missing: bool, label: str, extras: TableExtras = TableExtras()
                           ) -> tuple[int, int, int]:
        from tideline.targets.iceberg import repair as iceberg_repair
        return iceberg_repair.repair_from_source(self, engine, src, shape, schema, source_where, target_where,
                                                 delete_missing, label, extras)

    def range_where(self, conn, shape, column: str, lo: str, hi: str, as_time: bool) -> str:
        from tideline.targets.iceberg import repair as iceberg_repair
        return iceberg_repair.range_where(shape, column, lo, hi, as_time)

    def key_ranges_where(self, conn, shape, ranges: list) -> str:
        from tideline.targets.iceberg import repair as iceberg_repair
        return iceberg_repair.key_ranges_where(shape, ranges)

    def stored_so_far(self, state_conn, schema: str, table: str) -> tuple[int, int] | None:
        return None   # a snapshot's files are invisible until its commit; the load logs its tasks

    # ---------------------------------------------------------------- snapshots
    def publish_snapshot(self, load: SnapshotLoad) -> Published:
        """One commit of the whole snapshot, read by Spark, the handover offsets and the epoch in
        its summary (targets.iceberg.load). The state row is locked (load.fence) from before the
        commit to the state's own commit: no newer run can claim the table while this load
        commits, nor between its Iceberg commit and its state. A commit whose rows are not the
        snapshot's is never recorded: the stream does not start from it."""
        from tideline.targets.iceberg.load import commit_chunks, commit_snapshot
        from tideline.targets.iceberg.schema import check_partitioning
        check_partitioning(load.shape, load.partition_by, load.label)
        tgt = load.tgt
        started = time.monotonic()
        if load.chunked is not None:   # chunks staged commit by commit, then one commit goes live
            def fence_and_record(commit, staged):
                with tgt, tgt.cursor() as cur:   # the state row locked while a group commits
                    load.fence(cur)
                    load.chunk_done(cur, commit() if commit is not None else staged)
            how, landed = commit_chunks(self, load, load.chunked, load.parallelism, TABLE_PROPERTIES, fence_and_record)
        else:
            with tgt.cursor() as cur:
                load.fence(cur)
            how, landed = commit_snapshot(load.spark, load.engine, self, load.src, load.shape, load.snap,
                                          load.schema, load.label, load.pipeline, load.epoch, load.offsets,
                                          load.extras, load.partition_by, load.where, load.spread, TABLE_PROPERTIES)
            load.engine.close_snapshot(load.src)
        copy_secs = time.monotonic() - started
        rows = load.verified(landed, landed, f"the Iceberg commit holds {landed:,}; the stream will not start from it")
        published = Published(rows, how, "committed", copy_secs)
        with tgt, tgt.cursor() as cur:
            load.fence(cur)
            load.record(cur, published)
        return published

    def write_snapshot(self, spark, df, schema: str, table: str, summary: dict[str, str],
                       columns: list[Column], partition_by: tuple[str, ...] = ()) -> None:
        """The DataFrame's rows become the table's rows in one commit (created, or replaced with
        the new schema and partitioning), whose snapshot summary carries `summary`; the source's
        `columns` go in the table's properties."""
        # the PyIceberg catalog the commit's summary is read from next (current_summary) opens
        # while Spark writes, off the load's critical path (0.4 s: import, SQLAlchemy engine)
        threading.Thread(target=self._open_quietly, daemon=True, name="tideline-pyiceberg-open").start()
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {self.catalog}.`{schema}`")
        if partition_by:   # Spark's writer has no truncate transform: the SQL statement takes them all
            from tideline.targets.iceberg.schema import create_partitioned
            create_partitioned(self, spark, df, schema, table, summary, {**TABLE_PROPERTIES,
                               COLUMNS_PROPERTY: columns_property(columns)}, partition_by)
            return
        writer = df.writeTo(self.table_id(schema, table)).using("iceberg")
        for key, value in {**TABLE_PROPERTIES, COLUMNS_PROPERTY: columns_property(columns)}.items():
            writer = writer.tableProperty(key, value)
        for key, value in summary.items():
            writer = writer.option(f"snapshot-property.{key}", value)
        writer.createOrReplace()

    def current_summary(self, schema: str, table: str) -> dict[str, str] | None:
        """The current snapshot's summary, read from the catalog and the table's metadata file
        without Spark (PyIceberg); None when the table does not exist yet."""
        catalog = self.pyiceberg_catalog()
        from pyiceberg.exceptions import NoSuchTableError
        try:
            t = catalog.load_table((schema, table))
        except NoSuchTableError:
            return None
        snap = t.current_snapshot()
        if snap is None:
            return None
        return dict(snap.summary.additional_properties) if snap.summary else {}

    def resume_offsets(self, schema: str, table: str) -> tuple[dict[int, int], int] | None:
        """The offsets and epoch in the table's current snapshot (what a stream resumes from)."""
        summary = self.current_summary(schema, table)
        if not summary or SUMMARY_OFFSETS not in summary:
            return None
        return ({int(p): int(o) for p, o in json.loads(summary[SUMMARY_OFFSETS]).items()},
                int(summary.get(SUMMARY_EPOCH, 0)))

    @functools.cached_property
    def _pyiceberg(self):
        return self._open_pyiceberg()

    def _open_quietly(self) -> None:
        try:
            self.pyiceberg_catalog()
        except Exception:   # noqa: BLE001 — the next pyiceberg_catalog() opens it again and raises why
            log.debug("opening the PyIceberg catalog ahead failed; it is opened again when needed", exc_info=True)

    def pyiceberg_catalog(self):
        """The same catalog through PyIceberg (no Spark): status, tests, and any reader; opened
        once per target object (status asks it for every table)."""
        return self._pyiceberg

    def _open_pyiceberg(self):
        from pyiceberg.catalog import load_catalog
        self.object_store_environment()
        return load_catalog(self.catalog, **self.settings.pyiceberg_properties())

    def load_leftover(self, table: str) -> str | None:
        from tideline.targets.iceberg.load import staging_name
        return staging_name(table)

    def drop_table(self, schema: str, table: str) -> bool:
        """Drops the table from the catalog (its files are left to the warehouse's own cleanup:
        readers of an older snapshot may still hold them)."""
        from pyiceberg.exceptions import NoSuchTableError
        try:
            self.pyiceberg_catalog().drop_table((schema, table))
            return True
        except NoSuchTableError:
            return False

    def table_exists(self, conn, schema: str, table: str) -> bool:
        """In the catalog (the state connection `conn` is not needed: the catalog says)."""
        return self.iceberg_table(schema, table) is not None

    def iceberg_table(self, schema: str, table: str):
        """The table's newest metadata (PyIceberg), or None."""
        from pyiceberg.exceptions import NoSuchTableError
        try:
            return self.pyiceberg_catalog().load_table((schema, table))
        except NoSuchTableError:
            return None

    # ---------------------------------------------------------------- stream

    def ensure_extras(self, conn, schema: str, table: str, extras: TableExtras) -> list[str]:
        return add_extras(self, schema, table, extras)
    def columns(self, cur, schema: str, table: str) -> list[tuple]:
        """The source's columns the table was written with (its property), in the table's order."""
        t = self.iceberg_table(schema, table)
        if t is None or COLUMNS_PROPERTY not in t.properties:
            raise TargetError(f"Iceberg table {schema}.{table} of catalog {self.catalog} "
                              f"{'does not exist' if t is None else 'was not written by Tideline (no ' + COLUMNS_PROPERTY + ' property)'}: "
                              f"run the sync DAG with action=full_reload for it")
        declared = {c[0]: c for c in json.loads(t.properties[COLUMNS_PROPERTY])}
        return [tuple(declared[f.name]) for f in t.schema().fields if f.name in declared]

    def applied_offsets(self, cur, pipeline: str, schema: str, table: str,
                        recorded: dict[int, int] | None) -> dict[int, int] | None:
        """The newest Tideline commit's offsets (a commit whose state update was lost is still
        applied), or the state's where they are further (a batch whose events changed no row)."""
        t = self.iceberg_table(schema, table)
        snap = t.current_snapshot() if t is not None else None
        self.seen[(schema, table)] = snap.snapshot_id if snap else None
        stamped = newest_stamped(t, snap)
        if stamped is None or stamped.get(SUMMARY_PIPELINE) != pipeline:
            return recorded
        committed = {int(p): int(o) for p, o in json.loads(stamped[SUMMARY_OFFSETS]).items()}
        if recorded is None:
            return committed
        return {p: max(recorded.get(p, 0), committed.get(p, 0)) for p in recorded.keys() | committed.keys()}

    def apply_changes(self, cur, staged: StagedTable, stamp: CommitStamp) -> tuple[tuple[int, int], int]:
        """One MERGE commit carrying the stamp (iceberg_apply), while the caller holds the fence."""
        apply = LakeApply(self, stamp.pipeline, staged.schema, staged.table, staged.topic, staged.columns,
                          staged.primary_key, dead_letter=staged.dead_letter, extras=staged.extras)
        counts = apply.run(cur, stamp)
        return counts, len(apply.dead_lettered)

    def log_position(self, cur, schema: str, table: str, topic: str) -> dict[int, int] | None:
        from tideline.targets.iceberg.changelog import log_position
        return log_position(self, schema, table)

    def append_changes(self, cur, pipeline: str, schema: str, table: str, stamp: CommitStamp) -> int:
        from tideline.targets.iceberg.changelog import append_changes
        return append_changes(self, cur, pipeline, schema, table)

    def evolve(self, cur, schema: str, table: str, drift) -> None:
        evolve(self, schema, table, drift)
