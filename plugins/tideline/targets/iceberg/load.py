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
from tideline.core.errors import SourceError
from tideline.core.table_shape import TableShape
from tideline.targets.iceberg.snapshots import SUMMARY_EPOCH, SUMMARY_OFFSETS, SUMMARY_PIPELINE

log = logging.getLogger("tideline.full_load")
CHAR_AS_STRING = "spark.sql.legacy.charVarcharAsString"


def commit_snapshot(spark, engine, store, src, shape: TableShape, snap, schema: str, label: str, pipeline: str,
                    epoch: int, offsets: dict[int, int]) -> int:
    """Reads the snapshot and commits it as the table's rows; returns the rows the commit holds."""
    store.use(spark)
    columns = engine.lake_columns(shape)
    props = engine.lake_jdbc_properties()
    if snap.session_init:
        props["sessionInitStatement"] = snap.session_init
    # JDBC's CHAR/VARCHAR columns as plain strings: Spark 4.0's optimizer breaks (SimplifyCasts,
    # PLAN_VALIDATION_FAILED) on the length checks it adds for them when writing a V2 table
    previous = spark.conf.get(CHAR_AS_STRING, "false")
    spark.conf.set(CHAR_AS_STRING, "true")
    try:
        df = spark.read.jdbc(engine.jdbc_url(), engine.lake_read_query(src, shape, columns), predicates=snap.predicates,
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
                raise SourceError(refused.group(0), table=shape.name) from None
            raise
    finally:
        spark.conf.set(CHAR_AS_STRING, previous)
    summary = store.current_summary(schema, shape.name) or {}
    return int(summary.get("total-records", -1))
