"""Source types -> Iceberg types (core.lake_types): exact types, exact text, refused values."""
from __future__ import annotations

import pytest

from tideline.core import lake_types
from tideline.core.lake_types import lake_column, lake_columns, spark_projection
from tideline.core.table_shape import Column, TableShape


def col(t: str, name: str = "c") -> Column:
    return Column(name, t, False)


@pytest.mark.parametrize("pg_type, iceberg, as_text", [
    ("smallint", "int", False), ("integer", "int", False), ("bigint", "long", False),
    ("real", "float", False), ("double precision", "double", False), ("boolean", "boolean", False),
    ("numeric(12,2)", "decimal(12,2)", False), ("numeric(38,0)", "decimal(38,0)", False),
    ("numeric(5)", "decimal(5,0)", False),
    ("numeric(39,2)", "string", True),   # beyond Iceberg's 38 digits: its exact text
    ("numeric", "string", True),         # no declared scale: any value's exact text
    ("text", "string", False), ("character varying(20)", "string", False), ("character(3)", "string", True),
    ("bytea", "binary", False), ("date", "date", False),
    ("timestamp without time zone", "timestamp", False), ("timestamp(3) with time zone", "timestamptz", False),
    ("time without time zone", "string", True), ("time with time zone", "string", True),
    ("interval", "string", True), ("uuid", "string", True), ("json", "string", True), ("jsonb", "string", True),
    ("inet", "string", True), ("money", "string", True), ("mood", "string", True),
    ("integer[]", "list<int>", False), ("smallint[]", "list<int>", False), ("text[]", "list<string>", False),
    ("double precision[]", "list<double>", False), ("numeric[]", "string", True), ("uuid[]", "string", True),
])
def test_each_type_maps_to_the_iceberg_type_that_holds_it(pg_type, iceberg, as_text):
    c = lake_column(col(pg_type))
    assert (c.iceberg, c.as_text) == (iceberg, as_text)


def test_values_a_type_cannot_hold_are_refused_not_rounded():
    assert lake_column(col("date")).refuse == "NOT isfinite({c})"
    assert "infinity" in lake_column(col("timestamp with time zone")).why
    # PostgreSQL's timestamps go on past what 64-bit microseconds since 1970 hold (294247 AD)
    assert lake_column(col("timestamp with time zone")).refuse == (
        "NOT isfinite({c}) OR {c} > '294247-01-10 04:00:54.775806+00'")
    assert lake_column(col("timestamp without time zone")).refuse.endswith("{c} > '294247-01-10 04:00:54.775806'")
    assert lake_column(col("numeric(10,2)")).refuse == "{c} = 'NaN'"
    assert "dimension" in lake_column(col("integer[]")).why
    # types whose every value fits have no refusal
    assert all(lake_column(col(t)).refuse is None for t in ("bigint", "double precision", "numeric", "text", "bytea"))


def test_dates_and_times_travel_as_epoch_numbers_exact_for_bc_dates():
    d, ts = lake_column(col("date")), lake_column(col("timestamp without time zone"))
    assert d.read == "({c} - DATE '1970-01-01')" and d.spark == "date_add(DATE'1970-01-01', {v})"
    assert "extract(epoch FROM {c})" in ts.read and ts.spark_type == "timestamp_ntz"
    assert lake_column(col("timestamp with time zone")).spark_type == "timestamp"


def test_decimals_keep_their_declared_precision_through_jdbc():
    # NULLIF keeps the column's numeric(12,2) in the result's description (a CASE would not)
    dec = lake_column(col("numeric(12,2)"))
    assert dec.read == "NULLIF({c}, 'NaN')" and dec.read_nulls_refused and dec.iceberg == "decimal(12,2)"


def test_exact_text_is_the_output_function_s_text():
    # char(n) keeps its padding and inet its form only through the output function (concat);
    # uuid and json(b) have no cast to text of their own, so ::text is that text
    assert lake_column(col("character(3)")).read == "CASE WHEN {c} IS NULL THEN NULL ELSE concat({c}) END"
    assert lake_column(col("inet")).read == "CASE WHEN {c} IS NULL THEN NULL ELSE concat({c}) END"
    assert [lake_column(col(t)).read for t in ("uuid", "jsonb", "json", "text")] == ["{c}::text"] * 4


def test_the_projection_names_table_column_and_key_of_a_refused_value():
    shape = TableShape("public", "orders", (Column("id", "bigint", True), Column("due", "date", False),
                                             Column("o'dd`name", "text", False)), ("id",))
    out = spark_projection("shop.orders", shape, lake_columns(shape))
    assert out[0] == "`id` AS `id`"
    assert "raise_error" in out[1] and "__tl_bad_1" in out[1] and "'shop.orders: column due holds infinity" in out[1]
    assert "concat('id=', cast(`id` as string))" in out[1]
    assert out[2] == "`o'dd``name` AS `o'dd``name`"


def test_a_source_read_as_exact_text_is_parsed_by_spark_into_the_same_types():
    from tideline.core.lake_types import lake_column_from_text
    got = {t: (c.iceberg, c.spark) for t in ("numeric(20,0)", "real", "date", "timestamp(6) with time zone",
                                               "bytea", "interval", "character(3)", "smallint")
           for c in [lake_column_from_text(col(t))]}
    assert got["numeric(20,0)"] == ("decimal(20,0)", "cast({v} as decimal(20,0))")
    assert got["real"] == ("float", "cast({v} as float)")
    assert got["date"] == ("date", "cast({v} as date)")
    assert got["timestamp(6) with time zone"] == ("timestamptz", "cast({v} as timestamp)")
    assert got["bytea"] == ("binary", "unhex(substr({v}, 3))")
    assert got["interval"] == ("string", "{v}") and got["character(3)"] == ("string", "{v}")
    assert got["smallint"] == ("int", "cast({v} as int)")
    assert all(lake_column_from_text(col(t)).refuse is None for t in ("date", "numeric(5,2)"))


@pytest.mark.parametrize("old,new,follows", [
    ("integer", "bigint", "long"), ("smallint", "integer", "same"), ("real", "double precision", "double"),
    ("numeric(10,2)", "numeric(20,2)", "decimal(20,2)"), ("numeric(10,2)", "numeric(12,4)", None),
    ("numeric(30,2)", "numeric(40,2)", None), ("integer", "numeric(20,0)", None),
    ("character varying(10)", "text", "same"), ("text[]", "text[]", "same"),
])
def test_an_iceberg_column_follows_only_the_widenings_iceberg_can_promote(old, new, follows):
    assert lake_types.iceberg_widening(old, new) == follows
