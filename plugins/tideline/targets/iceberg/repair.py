"""Repair of an Iceberg table: the source's rows of a range replace the table's, in one commit.

Spark reads the range from the source as the full load does (core.lake_types: each value in the
form the table holds it, a value the table cannot hold refused naming column and key), once, while
the caller holds the table's fence; then one MERGE upserts those rows and, for a key range, deletes
the table's rows in the range the source no longer has (WHEN NOT MATCHED BY SOURCE). The commit
carries no offsets: the stream's position is untouched, and the stream's own checks pass over it
as over a compaction's commit (targets.iceberg.snapshots).
"""
from __future__ import annotations

import logging
import re
import uuid

from tideline.core import lake_types, verify_lake
from tideline.core.errors import SourceError, TargetError
from tideline.core.lake_types import spark_ident
from tideline.core.table_extras import DELETED_AT, PREFIX, TableExtras, spark_loaded
from tideline.core.table_shape import TableShape
from tideline.targets.iceberg.load import CHAR_AS_STRING
from tideline.targets.iceberg.reads import read_columns, read_query
from tideline.targets.iceberg.apply import commit_with
from tideline.targets.iceberg.history import repair_merge_sql

log = logging.getLogger("tideline.repair")
SUMMARY_REPAIR = "tideline.repair"


def key_ranges_where(shape: TableShape, ranges: list) -> str:
    """Spark SQL: the table's rows inside any of the key ranges (a verify's findings)."""
    verify_lake.check_keys(shape, shape.name)
    dialect = verify_lake.SparkLakeDialect(shape, "")
    return " OR ".join(f"({dialect.range_predicate(r)})" for r in ranges)


def range_where(shape: TableShape, column: str, lo: str, hi: str, as_time: bool) -> str:
    """Spark SQL: `column` between lo and hi — values of a key's type, or UTC times (the session's
    time zone is UTC, so a timestamp without zone compares as UTC, as the source's does)."""
    col = shape.column(column)
    lake = lake_types.lake_column(col)
    ident = spark_ident(column)
    if as_time:
        if lake.iceberg not in ("timestamp", "timestamptz"):
            raise TargetError(f"{shape.name}.{column} is {col.type}, stored in Iceberg as {lake.iceberg}: a time-range "
                              f"repair needs a timestamp column", table=shape.name)
        typ = lake.spark_type
        return (f"{ident} BETWEEN CAST({lake_types.spark_literal(lo)} AS {typ}) "
                f"AND CAST({lake_types.spark_literal(hi)} AS {typ})")
    problem = verify_lake.key_problem(col)
    if problem:
        raise TargetError(f"{shape.name}: a key-range repair of an Iceberg table: {problem}", table=shape.name)
    dialect = verify_lake.SparkLakeDialect(shape, "")
    return f"{ident} BETWEEN {dialect.literal(column, lo)} AND {dialect.literal(column, hi)}"


def repair_from_source(target, engine, src, shape: TableShape, schema: str, source_where: str, target_where: str,
                       delete_missing: bool, label: str, extras: TableExtras = TableExtras()) -> tuple[int, int, int]:
    """Repaired rows are as a load writes them (core.table_extras); with soft deletes, the rows
    the source no longer has are marked deleted, not deleted."""
    spark = target.session()
    columns = read_columns(engine, shape)
    previous = spark.conf.get(CHAR_AS_STRING, "false")
    spark.conf.set(CHAR_AS_STRING, "true")   # as the full load (targets.iceberg.load)
    view, table_id = f"tl_repair_{uuid.uuid4().hex[:12]}", target.table_id(schema, shape.name)
    try:
        df = spark.read.jdbc(engine.jdbc_url(), read_query(engine, shape, columns, source_where),
                             properties=engine.jdbc_read_properties())
        rows = df.selectExpr(*lake_types.spark_projection(label, shape, columns),
                             *[f"{v} AS {spark_ident(n)}" for n, v in spark_loaded(extras)]).persist()
        try:
            try:
                read = rows.count()   # the one read of the source, now, behind the fence
            except Exception as exc:   # a refused value: Spark wraps the message raise_error gave
                refused = re.search(re.escape(label) + r": column .*?and reload", str(exc))
                if refused:
                    raise SourceError(refused.group(0).replace("nothing was committed", "nothing was repaired"),
                                      table=shape.name) from None
                raise
            rows.createOrReplaceTempView(view)
            if extras.history:   # versions closed and opened, never overwritten (targets.iceberg.history)
                opening, gone, merge = repair_merge_sql(table_id, view, shape, target_where, delete_missing)
                opened, deleted = spark.sql(opening).first()[0], spark.sql(gone).first()[0]
                commit_with(spark, {SUMMARY_REPAIR: label}, lambda: spark.sql(merge))
                return read, opened, deleted
            on = " AND ".join(f"t.{spark_ident(k)} <=> s.{spark_ident(k)}" for k in shape.primary_key)
            deleted = 0
            gone = ""
            if delete_missing:
                live = f" AND {spark_ident(DELETED_AT)} IS NULL" if extras.soft_deletes else ""
                deleted = spark.sql(f"SELECT count(*) FROM (SELECT * FROM {table_id} WHERE ({target_where}){live}) t "
                                    f"LEFT ANTI JOIN {view} s ON {on}").first()[0]
                marks = ", ".join(f"t.{spark_ident(n)} = {'current_timestamp()' if n == DELETED_AT else v}"
                                  for n, v in spark_loaded(extras) if n != PREFIX + "op")
                marks += f", t.{spark_ident(PREFIX + 'op')} = 'd'" if PREFIX + "op" in extras.names else ""
                gone = (f" WHEN NOT MATCHED BY SOURCE AND ({target_where}){live} THEN "
                        + (f"UPDATE SET {marks}" if extras.soft_deletes else "DELETE"))
            merge = (f"MERGE INTO {table_id} t USING {view} s ON {on} WHEN MATCHED THEN UPDATE SET * "
                     f"WHEN NOT MATCHED THEN INSERT *{gone}")
            commit_with(spark, {SUMMARY_REPAIR: label}, lambda: spark.sql(merge))
            return read, read, deleted
        finally:
            spark.catalog.dropTempView(view)
            rows.unpersist()
    finally:
        spark.conf.set(CHAR_AS_STRING, previous)
