"""A full load into a target that publishes a snapshot in one commit (an Iceberg table).

The same consistent read as a shadow-table load (the engine's exported snapshot, one Spark task
per key range), but Spark writes the rows itself: each column travels as core.lake_types says,
a value the table's type cannot hold fails the write before its commit (naming table, column and
key), and the one commit that replaces the table's rows carries the offsets the stream resumes
from and the load's fencing epoch in its snapshot summary.
"""
from __future__ import annotations

import json
import logging
import re
from contextlib import contextmanager

from pyspark.sql import functions as F

from tideline.core import lake_types
from tideline.core.errors import LoadVerificationError, RefusedValue
from tideline.core.table_extras import DELETED_AT, PREFIX, TableExtras, spark_loaded
from tideline.core.table_shape import TableShape
from tideline.targets.iceberg import files
from tideline.targets.iceberg.reads import ORDER_READ, read_columns, read_query
from tideline.targets.iceberg.schema import COLUMNS_PROPERTY, columns_property
from tideline.targets.iceberg.snapshots import SUMMARY_EPOCH, SUMMARY_OFFSETS, SUMMARY_PIPELINE

log = logging.getLogger("tideline.full_load")
CHAR_AS_STRING = "spark.sql.legacy.charVarcharAsString"
SPARK_HOW = "Spark JDBC -> Iceberg"


@contextmanager
def lake_reader(spark, engine, shape: TableShape, label: str, session_init: str | None,
                extras: TableExtras = TableExtras(), where: str | None = None, seeded_at=None,
                order: str | None = None):
    """`read(predicates)`: the source's rows of those key ranges as a DataFrame of the lake's
    columns (core.lake_types) and the table's extra columns as a load writes them
    (core.table_extras), one Spark task per predicate, each session running `session_init`
    first; with the session set as writing them needs while the block runs. `order`
    (Snapshot.order): each session's place in the source's order, which its versions start at."""
    columns = read_columns(engine, shape)
    added = [f"{value} AS {lake_types.spark_ident(name)}" for name, value in spark_loaded(
        extras, seeded_at, f"CAST({lake_types.spark_ident(ORDER_READ)} AS BIGINT)" if order else None)]
    props = engine.jdbc_read_properties()
    if session_init:
        props["sessionInitStatement"] = session_init
    # JDBC's CHAR/VARCHAR columns as plain strings: Spark 4.0's optimizer breaks (SimplifyCasts,
    # PLAN_VALIDATION_FAILED) on the length checks it adds for them when writing a V2 table
    previous = spark.conf.get(CHAR_AS_STRING, "false")
    spark.conf.set(CHAR_AS_STRING, "true")
    try:
        yield lambda predicates: spark.read.jdbc(engine.jdbc_url(), read_query(engine, shape, columns, where, order),
                                                 predicates=predicates, properties=props).selectExpr(
            *lake_types.spark_projection(label, shape, columns), *added)
    finally:
        spark.conf.set(CHAR_AS_STRING, previous)


def commit_snapshot(spark, engine, store, src, shape: TableShape, snap, schema: str, label: str, pipeline: str,
                    epoch: int, offsets: dict[int, int], extras: TableExtras = TableExtras(),
                    partition_by: tuple[str, ...] = (), where: str | None = None, spread=None,
                    properties: dict[str, str] | None = None) -> tuple[str, int]:
    """Reads the snapshot and commits it as the table's rows; returns how its rows travelled and
    the rows of the snapshot the commit holds. A table with soft deletes keeps the rows the snapshot lacks, marked deleted:
    its snapshot goes through the staging table first, so the source is read once. With `spread`
    (SnapshotLoad.spread) a table files.files_refusal lets through is written as data files without
    Spark JDBC (files.commit_files), the table given `properties`."""
    columns = read_columns(engine, shape)
    summary = {SUMMARY_OFFSETS: json.dumps({str(p): o for p, o in sorted(offsets.items())}),
               SUMMARY_EPOCH: str(epoch), SUMMARY_PIPELINE: pipeline}
    current = store.iceberg_table(schema, shape.name)
    keeping = (extras.soft_deletes or extras.history) and current is not None
    if spread is not None and files.files_refusal(engine, columns, extras, partition_by, keeping) is None:
        return files.HOW, files.commit_files(spark, engine, store, shape, snap, schema, label, summary, current, where,
                                             spread, {**properties, COLUMNS_PROPERTY: columns_property(
                                                 list(shape.columns))})
    store.use(spark)
    staging = store.table_id(schema, staging_name(shape.name))
    with lake_reader(spark, engine, shape, label, snap.session_init, extras, where, snap.snapshot_at,
                     snap.order) as read:
        df = read(snap.predicates)
        log.info("%s: writing %d partitions into %s (one Iceberg commit): %s", label, len(snap.predicates),
                 store.table_id(schema, shape.name),
                 ", ".join(f"{c.name} {c.iceberg}{' (exact text)' if c.as_text else ''}" for c in columns))
        if keeping:
            _refusing(label, shape, lambda: df.writeTo(staging).using("iceberg").createOrReplace())
            df = spark.table(staging)
        carried = _publish(store, spark, df, schema, shape, summary, keeping, label, partition_by,
                           snap.snapshot_at if extras.history else None)
    if keeping:
        spark.sql(f"DROP TABLE IF EXISTS {staging}")
    return SPARK_HOW, int((store.current_summary(schema, shape.name) or {}).get("total-records", -1)) - carried


def _publish(store, spark, df, schema: str, shape: TableShape, summary: dict[str, str], keep_deleted: bool,
             label: str, partition_by: tuple[str, ...] = (), versions_at=None) -> int:
    """The rows of `df` become the table's in one commit; with `keep_deleted`, with the live
    table's rows whose key `df` lacks too, marked deleted (their own delete time kept); a history
    table's (`versions_at`: the snapshot's time), with the live table's versions
    (targets.iceberg.history). Returns the rows carried over that way."""
    carried = 0
    if keep_deleted and versions_at is not None:
        from tideline.targets.iceberg.history import keep_versions
        df, carried = keep_versions(spark, spark.table(store.table_id(schema, shape.name)), df, shape, versions_at,
                                    label)
    elif keep_deleted:
        live = spark.table(store.table_id(schema, shape.name))
        gone = live.join(df.select(*shape.primary_key), list(shape.primary_key), "left_anti")
        gone = gone.withColumn(DELETED_AT, F.coalesce(F.col(DELETED_AT), F.current_timestamp())
                               if DELETED_AT in gone.columns else F.current_timestamp())
        if PREFIX + "op" in gone.columns:
            gone = gone.withColumn(PREFIX + "op", F.lit("d"))
        carried = gone.count()
        df = df.unionByName(gone.select(*[c for c in df.columns if c in gone.columns]), allowMissingColumns=True)
        if carried:
            log.info("%s: %s rows the new snapshot lacks kept, marked deleted (deletes: soft)", label, f"{carried:,}")
    _refusing(label, shape, lambda: store.write_snapshot(spark, df, schema, shape.name, summary, list(shape.columns),
                                                         partition_by))
    return carried


SUMMARY_LOAD, SUMMARY_CHUNKS = "tideline.chunked-load", "tideline.chunks"


def staging_name(table: str) -> str:
    """The Iceberg table a chunked load's chunks are committed into before they go live."""
    return f"{table}__tl_load"


def staged_chunks(store, schema: str, table: str, load_id: int) -> dict[int, int] | None:
    """The chunks of load `load_id` the staging table's commits hold (chunk -> rows; a commit of
    several chunks counts its rows on its first): the truth about what is done, whatever the state
    recorded (a run killed between its Iceberg commit and its state's). None: no staging table."""
    from pyiceberg.exceptions import NoSuchTableError
    try:
        t = store.pyiceberg_catalog().load_table((schema, staging_name(table)))
    except NoSuchTableError:
        return None
    done: dict[int, int] = {}
    for snap in t.snapshots():
        summary = dict(snap.summary.additional_properties) if snap.summary else {}
        if summary.get(SUMMARY_LOAD) == str(load_id):
            group = json.loads(summary[SUMMARY_CHUNKS])
            for i, chunk in enumerate(group):
                done[int(chunk)] = int(summary.get("added-records", 0)) if i == 0 else 0
    return done


def commit_chunks(store, load, chunked, parallelism: int, properties: dict[str, str],
                  fence_and_record) -> tuple[str, int]:
    """A chunked load into Iceberg: the chunks not yet staged, `spark.parallelism` at a time (each
    its own source transaction), appended to the staging table in one commit per group carrying
    the load and its chunks in the summary; then the staging table's rows become the table's rows
    in one commit with the handover offsets and the epoch, and the staging table is dropped.
    `fence_and_record(chunks_rows)` locks the state row for the group's commit and records its
    chunks once it landed; the staging table gets the table's `properties`. The chunks are data
    files written from the source's CSV where files.files_refusal allows (files.FileStaging: the
    staging table's files then go live as they are), else Spark writes them (SparkStaging).
    Returns how the rows travelled and the rows of the live commit."""
    shape, schema, label = load.shape, load.schema, load.label
    staging = staging_name(shape.name)
    done = staged_chunks(store, schema, shape.name, chunked.load_id) if chunked.resumed else None
    current = store.iceberg_table(schema, shape.name)
    keeping = load.extras.soft_deletes and current is not None
    with_files = (load.spread is not None and files.FileStaging.fits(load.engine, shape, current) and files.files_refusal(
        load.engine, read_columns(load.engine, shape), load.extras, load.partition_by, keeping) is None)
    stager = (files.FileStaging(store, load, current, staging) if with_files
              else SparkStaging(store, load, staging, keeping))
    with stager:
        if done is None:   # a new load (or its staging table lost): an empty staging table of the load's shape
            stager.create(properties)
            done = {}
        pending = [c for c in range(len(chunked.ranges)) if c not in done]
        fence_and_record(None, {c: n for c, n in done.items()})   # what a killed run staged and never recorded
        group_size = max(1, parallelism)
        for start in range(0, len(pending), group_size):
            group = pending[start:start + group_size]
            fence_and_record(lambda group=group: stager.append(chunked, group, {
                SUMMARY_LOAD: str(chunked.load_id), SUMMARY_CHUNKS: json.dumps(group)}), None)
            log.info("%s: chunks %s staged (%d of %d)", label, group, start + len(group), len(pending))
        staged = sum((staged_chunks(store, schema, shape.name, chunked.load_id) or {}).values())
        carried = stager.publish({SUMMARY_OFFSETS: json.dumps({str(p): o for p, o in sorted(load.offsets.items())}),
                                  SUMMARY_EPOCH: str(load.epoch), SUMMARY_PIPELINE: load.pipeline},
                                 {**properties, COLUMNS_PROPERTY: columns_property(list(shape.columns))})
        landed = int((store.current_summary(schema, shape.name) or {}).get("total-records", -1)) - carried
        if landed != staged:
            raise LoadVerificationError(f"{label}: the chunks staged {staged:,} rows but the table's commit holds "
                                        f"{landed:,}; the stream will not start from it. Rerun the full load.")
        stager.drop()
    return (files.HOW if with_files else SPARK_HOW), landed


class SparkStaging:
    """A chunked load's groups of chunks read with Spark JDBC and appended by Spark's writer to
    the staging table, whose rows Spark then writes as the live table's (with a soft-delete
    table's rows the snapshot lacks, marked deleted)."""

    def __init__(self, store, load, staging: str, keeping: bool):
        self.store, self.load, self.staging, self.keeping = store, load, staging, keeping
        self.spark = load.spark
        self.table = store.table_id(load.schema, staging)

    def __enter__(self):
        load = self.load
        self.store.use(self.spark)
        self._reader = lake_reader(self.spark, load.engine, load.shape, load.label, load.engine.chunk_session_init,
                                   load.extras, load.where)
        self.read = self._reader.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._reader.__exit__(*exc)

    def create(self, properties: dict[str, str]) -> None:
        self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {self.store.catalog}.`{self.load.schema}`")
        self.spark.sql(f"DROP TABLE IF EXISTS {self.table}")
        writer = self.read(["1=0"]).writeTo(self.table).using("iceberg")
        for key, value in properties.items():
            writer = writer.tableProperty(key, value)
        writer.create()

    def append(self, chunked, group: list[int], summary: dict[str, str]) -> dict[int, int]:
        writer = self.read([chunked.ranges[c] for c in group]).writeTo(self.table)
        for key, value in summary.items():
            writer = writer.option(f"snapshot-property.{key}", value)
        _refusing(self.load.label, self.load.shape, writer.append)
        added = int((self.store.current_summary(self.load.schema, self.staging) or {}).get("added-records", 0))
        return {c: added if i == 0 else 0 for i, c in enumerate(group)}

    def publish(self, summary: dict[str, str], _properties: dict[str, str]) -> int:
        load = self.load
        return _publish(self.store, self.spark, self.spark.table(self.table), load.schema, load.shape, summary,
                        self.keeping, load.label, load.partition_by)

    def drop(self) -> None:
        self.spark.sql(f"DROP TABLE IF EXISTS {self.table}")


def _refusing(label: str, shape: TableShape, write) -> None:
    """Runs a write; a value Iceberg cannot hold (raise_error in the projection) becomes the
    table's RefusedValue, naming column and key."""
    try:
        write()
    except Exception as exc:   # a refused value: Spark wraps the message raise_error gave
        refused = re.search(re.escape(label) + r": column .*?and reload", str(exc))
        if refused:
            raise RefusedValue(refused.group(0), table=shape.name) from None
        raise
