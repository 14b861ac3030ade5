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

from tideline.core import lake_types
from tideline.core.errors import RefusedValue
from tideline.core.table_shape import TableShape
from tideline.targets.iceberg.snapshots import SUMMARY_EPOCH, SUMMARY_OFFSETS, SUMMARY_PIPELINE

log = logging.getLogger("tideline.full_load")
CHAR_AS_STRING = "spark.sql.legacy.charVarcharAsString"


def read_columns(engine, shape: TableShape) -> list[lake_types.LakeColumn]:
    """Each column's Iceberg type and how its values travel from this engine: typed, or parsed by
    Spark from the exact text an engine reads every value as (engine.values_as_text)."""
    if engine.values_as_text:
        return [lake_types.lake_column_from_text(c) for c in shape.columns]
    return lake_types.lake_columns(shape)


def read_query(engine, shape: TableShape, columns: list[lake_types.LakeColumn], where: str | None = None) -> str:
    """A derived table for Spark JDBC with each column as core.lake_types says it travels (`read`,
    over the engine's own expression of the column's value), a `__tl_bad_<i>` flag per column with
    a `refuse` rule, and the key aliases the snapshot's predicates compare (engine.keyed_read); only
    the rows matching `where` (a repair's range) when given."""
    q, selects = engine.quote, []
    for i, col in enumerate(columns):
        value = engine.column_value(shape.column(col.name), "t")
        read = col.read.replace("{c}", value)
        if col.refuse:
            bad = f"coalesce({col.refuse.replace('{c}', value)}, false)"
            if not col.read_nulls_refused:
                read = f"CASE WHEN {bad} THEN NULL ELSE {read} END"
            selects.append(f"{bad} AS {q(lake_types.BAD_FLAG.format(i))}")
        selects.append(f"{read} AS {q(col.name)}")
    return engine.keyed_read(shape, selects, where)


def commit_snapshot(spark, engine, store, src, shape: TableShape, snap, schema: str, label: str, pipeline: str,
                    epoch: int, offsets: dict[int, int]) -> int:
    """Reads the snapshot and commits it as the table's rows; returns the rows the commit holds."""
    store.use(spark)
    columns = read_columns(engine, shape)
    props = engine.jdbc_read_properties()
    if snap.session_init:
        props["sessionInitStatement"] = snap.session_init
    # JDBC's CHAR/VARCHAR columns as plain strings: Spark 4.0's optimizer breaks (SimplifyCasts,
    # PLAN_VALIDATION_FAILED) on the length checks it adds for them when writing a V2 table
    previous = spark.conf.get(CHAR_AS_STRING, "false")
    spark.conf.set(CHAR_AS_STRING, "true")
    try:
        df = spark.read.jdbc(engine.jdbc_url(), read_query(engine, shape, columns), predicates=snap.predicates,
                             properties=props)
        df = df.selectExpr(*lake_types.spark_projection(label, shape, columns))
        log.info("%s: writing %d partitions into %s (one Iceberg commit): %s", label, len(snap.predicates),
                 store.table_id(schema, shape.name),
                 ", ".join(f"{c.name} {c.iceberg}{' (exact text)' if c.as_text else ''}" for c in columns))
        try:
            store.write_snapshot(spark, df, schema, shape.name, {
                SUMMARY_OFFSETS: json.dumps({str(p): o for p, o in sorted(offsets.items())}),
                SUMMARY_EPOCH: str(epoch), SUMMARY_PIPELINE: pipeline}, list(shape.columns))
        except Exception as exc:   # a refused value: Spark wraps the message raise_error gave
            refused = re.search(re.escape(label) + r": column .*?and reload", str(exc))
            if refused:
                raise RefusedValue(refused.group(0), table=shape.name) from None
            raise
    finally:
        spark.conf.set(CHAR_AS_STRING, previous)
    summary = store.current_summary(schema, shape.name) or {}
    return int(summary.get("total-records", -1))
