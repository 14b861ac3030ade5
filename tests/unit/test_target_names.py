"""target_name and rename (core.target_names): refused when the config is read or the table is
described, the target's shape of a source shape, and the reload a change of names asks for."""
from __future__ import annotations

import pytest

from tideline.core.config import ConfigError, parse_pipeline
from tideline.core.errors import SourceError
from tideline.core.table_shape import Column, TableShape
from tideline.core.target_names import TargetNames


def pipeline(*tables: dict, target: dict | None = None):
    return parse_pipeline({"name": "p", "source": {"conn_id": "src", "schema": "public"},
                           "target": target or {"conn_id": "tgt", "schema": "analytics"},
                           "kafka": {"topic_prefix": "tl.p"}, "tables": list(tables)}, "p.yaml")


def refusal(*tables: dict, target: dict | None = None) -> str:
    with pytest.raises(ConfigError) as e:
        pipeline(*tables, target=target)
    return str(e.value)


SHAPE = TableShape("public", "orders", (Column("id", "integer", True), Column("note", "text", False),
                                        Column("total", "numeric(12,2)", False),
                                        Column("twice", "numeric", False, generated="(total * 2)")), ("id",))


def test_the_target_shape_names_the_table_and_columns_as_the_target_and_keeps_the_source_s():
    names = TargetNames("sales_orders", {"id": "order_id", "note": "remark"})
    shape = names.shape(SHAPE)
    assert (shape.name, shape.column_names, shape.primary_key) == ("sales_orders", ["order_id", "remark", "total",
                                                                                    "twice"], ("order_id",))
    assert [c.source_name for c in shape.columns] == ["id", "note", "total", "twice"]
    assert shape.at_source is SHAPE and shape.column("remark").at_source == SHAPE.column("note")
    assert [c.type for c in shape.columns] == [c.type for c in SHAPE.columns]
    assert TargetNames("orders").shape(SHAPE) is SHAPE   # nothing renamed: the source's own
    assert names.source_column("remark") == "note" and names.source_column("total") == "total"
    assert names.partition_by(["bucket(16, id)", "note"]) == ("bucket(16, order_id)", "remark")


def test_a_config_names_the_target_table_and_columns_and_keeps_the_pipeline_s_names_for_the_source():
    cfg = pipeline({"name": "orders", "target_name": "sales_orders", "rename": {"note": "remark"}},
                   {"name": "items"})
    assert cfg.target_table("orders") == "sales_orders" and cfg.target_table("items") == "items"
    assert cfg.target_names("orders") == TargetNames("sales_orders", {"note": "remark"})
    assert cfg.topic("orders") == "tl.p.public.orders"   # the source's table, as Debezium names it


@pytest.mark.parametrize("tables, says", [
    ([{"name": "a", "rename": {"x": "y", "z": "y"}}], "rename gives two columns the name 'y'"),
    ([{"name": "a", "rename": {"x": "_tideline_op"}}], "names starting _tideline_ are Tideline's own"),
    ([{"name": "a", "columns": ["q"], "rename": {"x": "y"}}], "rename names column 'x', which the table does not sync"),
    ([{"name": "a", "exclude_columns": ["x"], "rename": {"x": "y"}}], "which the table does not sync"),
    ([{"name": "a", "columns": ["x", "y"], "rename": {"x": "y"}}], "which another synced column keeps"),
    ([{"name": "a", "target_name": "b"}, {"name": "b"}], "would both land in the target table analytics.b"),
    ([{"name": "a", "rename": {"x": 'y"z'}}], "cannot carry in a name"),
])
def test_a_rename_or_target_name_that_cannot_hold_is_refused_naming_the_field(tables, says):
    message = refusal(*tables)
    assert says in message and "p.yaml" in message


def test_two_tables_may_swap_column_names_and_land_in_other_schemas_under_one_name():
    cfg = pipeline({"name": "a", "columns": ["x", "y"], "rename": {"x": "y", "y": "x"}},
                   {"name": "b", "target_name": "a", "target_schema": "elsewhere"})
    assert cfg.target_names("a").shape(TableShape("public", "a", (Column("x", "int", True), Column("y", "int", False)),
                                                  ("x",))).column_names == ["y", "x"]


def test_what_only_the_source_s_catalog_shows_is_refused_when_the_table_is_described():
    with pytest.raises(SourceError, match="rename names nope, which the source table does not have"):
        TargetNames("orders", {"nope": "x"}).check(SHAPE, "p.orders")
    with pytest.raises(SourceError, match="the name total, which another synced column keeps"):
        TargetNames("orders", {"note": "total"}).check(SHAPE, "p.orders")
    with pytest.raises(SourceError, match="generated column twice is computed from total"):
        TargetNames("orders", {"total": "amount"}).check(SHAPE, "p.orders")
    TargetNames("orders", {"note": "total", "total": "note"}).check(SHAPE.__class__(
        "public", "orders", SHAPE.columns[:3], ("id",)), "p.orders")   # a swap holds


def test_a_load_records_where_the_table_landed_and_a_stream_that_finds_it_moved_reloads_it():
    names = TargetNames("sales_orders", {"note": "remark"})
    recorded = names.recorded("analytics")
    assert recorded == {"schema": "analytics", "table": "sales_orders", "columns": {"note": "remark"}}
    assert names.changed_since_load("analytics", "orders", recorded, "p.orders") is None
    plain = TargetNames("orders")
    assert plain.changed_since_load("analytics", "orders", None, "p.orders") is None   # loaded before names were kept
    why = names.changed_since_load("analytics", "orders", None, "p.orders")
    assert "target_name orders -> sales_orders" in why and "rename note: note -> remark" in why and "reloaded" in why
    why = plain.changed_since_load("elsewhere", "orders", plain.recorded("analytics"), "p.orders")
    assert "target_schema analytics -> elsewhere" in why


def test_a_chunked_load_cut_off_before_a_rename_starts_over_and_one_without_resumes():
    from tideline.core.chunked_load import shape_digest
    assert shape_digest(TargetNames("orders").shape(SHAPE)) == shape_digest(SHAPE)
    renamed = {shape_digest(TargetNames("orders", {"note": "remark"}).shape(SHAPE)),
               shape_digest(TargetNames("sales").shape(SHAPE))}
    assert shape_digest(SHAPE) not in renamed and len(renamed) == 2
