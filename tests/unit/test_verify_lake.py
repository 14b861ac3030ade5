"""Verify into Iceberg, the pure part: which keys both engines order alike, the Spark side's
range SQL, and each Iceberg type's canonical text on both sides (the integration test,
test_iceberg_verify, checks that the two sides agree on real values)."""
import pytest

from tideline.core import verify_lake as vl
from tideline.core.errors import SourceError
from tideline.core.table_shape import Column, TableShape
from tideline.core.verify_plan import KeyRange


def shape(*cols: tuple[str, str], key=("id",)) -> TableShape:
    return TableShape("public", "t", tuple(Column(n, t, False) for n, t in cols), tuple(key))


@pytest.mark.parametrize("typ", ["smallint", "integer", "bigint", "numeric(12,2)", "numeric(38,0)", "text",
                                 "character varying(20)", "uuid"])
def test_keys_both_engines_order_alike_are_accepted(typ):
    assert vl.key_problem(Column("k", typ, True)) is None


@pytest.mark.parametrize("typ", ["date", "timestamp with time zone", "numeric", "numeric(50,5)", "character(3)",
                                 "citext", "bytea", "double precision"])
def test_other_keys_are_refused_naming_the_column(typ):
    with pytest.raises(SourceError, match=f"key column k is {typ.replace('(', '.').replace(')', '.')}"):
        vl.check_keys(shape(("k", typ), key=("k",)), "p.t")


def test_spark_ranges_compare_composite_keys_as_structs_with_typed_literals():
    d = vl.SparkLakeDialect(shape(("a", "text"), ("b", "numeric(12,2)"), key=("a", "b")), "cat.`s`.`t`")
    assert d.range_predicate(KeyRange(("it's", "1.50"), ("z", "-2.00"))) == (
        "struct(`a`, `b`) >= struct('it\\'s', CAST('1.50' AS decimal(12,2))) AND "
        "struct(`a`, `b`) < struct('z', CAST('-2.00' AS decimal(12,2)))")
    assert d.range_predicate(KeyRange()) == "TRUE"
    one = vl.SparkLakeDialect(shape(("id", "integer")), "t")
    assert one.keys_predicate([("1",), ("2",)]) == "`id` IN (CAST('1' AS int), CAST('2' AS int))"


def test_the_row_hash_is_computed_below_the_aggregate():
    d = vl.SparkLakeDialect(shape(("id", "bigint"), ("f", "real")), "t")
    q = d.fingerprint_query("TRUE", [("10",)])
    assert q.startswith("SELECT bucket, count(*), coalesce(bit_xor(h), 0) FROM (SELECT CASE WHEN `id` < "
                        "CAST('10' AS bigint) THEN 0 ELSE 1 END AS bucket, ")
    assert "java_method('java.lang.Float', 'floatToRawIntBits', `f`)" in q and q.endswith("GROUP BY bucket")


@pytest.mark.parametrize("typ, pg, spark", [
    ("bigint", "{c}::text", "cast({v} as string)"),
    ("numeric(10,2)", "{c}::text", "cast({v} as string)"),
    ("date", "CASE WHEN isfinite({c}) THEN ({c} - DATE '1970-01-01')::text ELSE {c}::text END",
     "cast(unix_date({v}) as string)"),
    ("timestamp with time zone", "CASE WHEN isfinite({c}) THEN ((extract(epoch FROM {c}) * 1000000)::bigint)::text ELSE {c}::text END",
     "cast(unix_micros({v}) as string)"),
    ("timestamp without time zone", "CASE WHEN isfinite({c}) THEN ((extract(epoch FROM {c}) * 1000000)::bigint)::text ELSE {c}::text END",
     "cast(unix_micros(cast({v} as timestamp)) as string)"),
    ("bytea", "encode({c}, 'hex')", "lower(hex({v}))"),
    ("text", "{c}::text", "{v}"),
    ("inet", "CASE WHEN {c} IS NULL THEN NULL ELSE concat({c}) END", "{v}"),
    ("jsonb", "{c}::text", "{v}"),
])
def test_each_iceberg_type_has_one_canonical_text_on_both_sides(typ, pg, spark):
    col = Column("c", typ, False)
    assert (vl.pg_canon(col), vl.spark_canon(col)) == (pg, spark)


def test_floats_hash_as_their_bits_with_one_nan_and_lists_element_by_element():
    f8 = Column("c", "double precision", False)
    assert "float8send" in vl.pg_canon(f8) and "'NaN'" in vl.pg_canon(f8)
    assert "doubleToRawLongBits" in vl.spark_canon(f8) and "isnan" in vl.spark_canon(f8)
    arr = Column("c", "real[]", False)
    assert "unnest({c}) WITH ORDINALITY" in vl.pg_canon(arr) and "float4send(u.e)" in vl.pg_canon(arr)
    assert "transform({v}, x__ ->" in vl.spark_canon(arr) and "floatToRawIntBits', x__)" in vl.spark_canon(arr)
