"""How a lake load reads the source: each column's Iceberg type and the exact value it travels
as (core.lake_types), as one derived table with a refusal flag beside each column that has one.
Spark JDBC reads it (targets.iceberg.load, repair), and so does a COPY to CSV
(targets.iceberg.files)."""
from __future__ import annotations

from tideline.core import lake_types
from tideline.core.table_shape import TableShape


ORDER_READ = "__tl_order"   # the snapshot's place in the source's order, as read


def read_columns(engine, shape: TableShape) -> list[lake_types.LakeColumn]:
    """Each column's Iceberg type and how its values travel from this engine: typed, or parsed by
    Spark from the exact text an engine reads every value as (engine.values_as_text)."""
    if engine.values_as_text:
        return [lake_types.lake_column_from_text(c) for c in shape.columns]
    return lake_types.lake_columns(shape)


def read_query(engine, shape: TableShape, columns: list[lake_types.LakeColumn], where: str | None = None,
               order: str | None = None) -> str:
    """A derived table for Spark JDBC with each column as core.lake_types says it travels (`read`,
    over the engine's own expression of the column's value), a `__tl_bad_<i>` flag per column with
    a `refuse` rule, and the key aliases the snapshot's predicates compare (engine.keyed_read); only
    the rows matching `where` (a repair's range) when given; with `order` (Snapshot.order), its
    value as ORDER_READ."""
    q, selects = engine.quote, []
    for i, col in enumerate(columns):   # read by the source's names, named as the target's (core.target_names)
        value = engine.column_value(shape.column(col.name).at_source, "t")
        read = col.read.replace("{c}", value)
        if col.refuse:
            bad = f"coalesce({col.refuse.replace('{c}', value)}, false)"
            if not col.read_nulls_refused:
                read = f"CASE WHEN {bad} THEN NULL ELSE {read} END"
            selects.append(f"{bad} AS {q(lake_types.BAD_FLAG.format(i))}")
        selects.append(f"{read} AS {q(col.name)}")
    if order:
        selects.append(f"{order} AS {q(ORDER_READ)}")
    return engine.keyed_read(shape.at_source, selects, where)
