"""An Iceberg table's schema following what it carries: columns added at the source and Iceberg's
type promotions (the stream's schema drift), and the extra columns a table's options add
(core.table_extras) — through Iceberg's own Java API in the job's Spark session (PyIceberg writes no
format version 3 metadata), each in one commit."""
from __future__ import annotations

import json
import uuid

from tideline.core import lake_partition, lake_types
from tideline.core.errors import ResnapshotRequired, SchemaChangeError, TargetError
from tideline.core.table_extras import VALID_FROM, TableExtras
from tideline.core.table_shape import Column

COLUMNS_PROPERTY = "tideline.columns"   # the source's columns as the table carries them (table property)


def columns_property(columns: list[Column]) -> str:
    return json.dumps([[c.name, c.type, c.not_null, c.generated] for c in columns])


def evolve(target, schema: str, table: str, drift) -> None:
    """Added columns and Iceberg's type promotions (int to long, float to double, a decimal's
    precision) in one commit with the columns property (Iceberg's own API in the stream's Spark
    session: PyIceberg writes no format version 3 metadata); anything else halts the table."""
    label = f"{schema}.{table}"
    for c in drift.add:
        if c.default is not None:
            raise ResnapshotRequired(
                f"table {label}, column {c.name}: added at the source with the default {c.default}, which the "
                f"existing rows hold without change events; Tideline does not give an Iceberg table's existing "
                f"rows a value without rewriting them, so the table is reloaded by itself.", table=table)
    promote = []
    for name, old, new in drift.widen:
        now = lake_types.iceberg_widening(old, new)
        if now == "same":
            continue
        if now is not None:
            promote.append((name, now))
            continue
        was, wanted = (lake_types.lake_column(Column(name, ty, False)).iceberg for ty in (old, new))
        raise SchemaChangeError(
            f"table {label}, column {name}: type changed at the source from {old} to {new}; the Iceberg column "
            f"({was}) cannot become {wanted} without rewriting its values (Iceberg widens int to long, float "
            f"to double and a decimal's precision only). The table is HALTED at its last committed batch. To "
            f"continue: run the sync DAG with action=full_reload for this table.", table=table)
    t = target.iceberg_table(schema, table)
    declared = json.loads(t.properties[COLUMNS_PROPERTY])
    widened = {name: new for name, _old, new in drift.widen}
    declared = [[n, widened.get(n, ty), nn, g] for n, ty, nn, g in declared] + json.loads(
        columns_property(list(drift.add)))
    spark = target.session()
    jvm = spark.sparkContext._jvm
    tx = target.java_table(spark, schema, table).newTransaction()
    update = tx.updateSchema()
    for c in drift.add:
        update = update.addColumn(c.name, java_iceberg_type(lake_types.lake_column(c).iceberg, jvm))
    for name, now in promote:
        update = update.updateColumn(name, java_iceberg_type(now, jvm))
    update.commit()
    tx.updateProperties().set(COLUMNS_PROPERTY, json.dumps(declared)).commit()
    tx.commitTransaction()


def check_partitioning(shape, partition_by: tuple[str, ...], label: str) -> None:
    """Each transform against its column's Iceberg type (core.lake_partition), before the load
    reads anything: a misfit names the table, column, type and what the transform takes."""
    for f in map(lake_partition.parse, partition_by):
        if f.column not in shape.column_names:
            raise TargetError(f"{label}: partition_by {f.text} names column {f.column}, which the source table "
                              f"does not have (it has {', '.join(shape.column_names)})", table=shape.name)
        misfit = f.misfit(lake_types.lake_column(shape.column(f.column)).iceberg)
        if misfit:
            raise TargetError(f"{label}: {misfit}. Change partition_by in the pipeline's YAML.", table=shape.name)


def create_partitioned(target, spark, df, schema: str, table: str, summary: dict[str, str],
                       properties: dict[str, str], partition_by: tuple[str, ...]) -> None:
    """`df`'s rows as the table's, created or replaced partitioned by `partition_by`, in one
    commit carrying `summary` (CREATE OR REPLACE TABLE ... AS SELECT, in the stream's commit
    metadata: targets.iceberg.apply.commit_with)."""
    from tideline.targets.iceberg.apply import commit_with
    view = f"tl_snapshot_{uuid.uuid4().hex[:12]}"
    df.createOrReplaceTempView(view)
    fields = ", ".join(lake_partition.parse(t).spark_sql() for t in partition_by)
    props = ", ".join(f"{lake_types.spark_literal(k)} = {lake_types.spark_literal(v)}" for k, v in properties.items())
    try:
        commit_with(spark, summary, lambda: spark.sql(
            f"CREATE OR REPLACE TABLE {target.table_id(schema, table)} USING iceberg PARTITIONED BY ({fields}) "
            f"TBLPROPERTIES ({props}) AS SELECT * FROM {view}"))
    finally:
        spark.catalog.dropTempView(view)


def add_extras(target, schema: str, table: str, extras: TableExtras) -> list[str]:
    """The extra columns the table's options ask for that it lacks (an option set after its load);
    rows written before hold NULL in them. The names added."""
    t = target.iceberg_table(schema, table)
    have = {f.name for f in t.schema().fields} if t is not None else None
    if have and extras.history != (VALID_FROM in have):
        raise ResnapshotRequired(f"{schema}.{table}: history was {'set' if extras.history else 'dropped'} after the "
                                 f"table was loaded; it is reloaded by itself", table=table)
    added = [c for c in extras.columns if have is not None and c.name not in have]
    if added:
        spark = target.session()
        update = target.java_table(spark, schema, table).updateSchema()
        for c in added:
            update = update.addColumn(c.name, java_iceberg_type(c.iceberg_type, spark.sparkContext._jvm))
        update.commit()
    return [c.name for c in added]


def java_iceberg_type(iceberg: str, jvm):
    """A lake_types Iceberg type name as a type of Iceberg's Java API (a list's element id is
    assigned by the schema update)."""
    types = jvm.org.apache.iceberg.types.Types
    if iceberg.startswith("list<"):
        return types.ListType.ofOptional(0, types.fromPrimitiveString(iceberg[5:-1]))
    return types.fromPrimitiveString(iceberg)

