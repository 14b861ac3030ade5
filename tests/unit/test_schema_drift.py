"""Which source schema changes apply by themselves, and the error for the ones that cannot."""
import pytest

from tideline.core.schema_drift import SchemaChangeError, is_widening, plan
from tideline.core.table_shape import Column


@pytest.mark.parametrize("old,new", [
    ("integer", "bigint"), ("smallint", "integer"), ("integer", "numeric"), ("integer", "numeric(12,0)"),
    ("character varying(10)", "character varying(20)"), ("character varying(10)", "text"),
    ("character varying(10)", "character varying"), ("numeric(10,2)", "numeric(12,2)"),
    ("numeric(10,2)", "numeric(12,4)"), ("numeric(10,2)", "numeric"), ("real", "double precision"),
    ("integer[]", "bigint[]"), ("text", "text"),
])
def test_widening_changes(old, new):
    assert is_widening(old, new)


@pytest.mark.parametrize("old,new", [
    ("bigint", "integer"), ("integer", "text"), ("text", "integer"), ("numeric(10,2)", "numeric(10,4)"),
    ("numeric(12,2)", "numeric(11,2)"), ("numeric", "numeric(30,10)"), ("integer", "numeric(5,0)"),
    ("character varying(20)", "character varying(10)"), ("character(3)", "text"),
    ("timestamp without time zone", "timestamp with time zone"), ("double precision", "real"),
])
def test_narrowing_or_semantic_changes(old, new):
    assert not is_widening(old, new)


def test_plan_adds_widens_and_keeps_dropped():
    src = [Column("id", "bigint", True), Column("total", "numeric(14,2)", False), Column("note", "text", False)]
    tgt = [Column("id", "integer", True), Column("total", "numeric(12,2)", False), Column("legacy", "text", False)]
    p = plan("orders", src, tgt)
    assert [c.name for c in p.add] == ["note"]
    assert p.widen == (("id", "integer", "bigint"), ("total", "numeric(12,2)", "numeric(14,2)"))
    assert p.dropped == ("legacy",)


def test_unsafe_change_names_table_column_and_types():
    with pytest.raises(SchemaChangeError) as info:
        plan("orders", [Column("total", "text", False)], [Column("total", "numeric(12,2)", False)])
    msg = str(info.value)
    assert "table orders, column total" in msg and "numeric(12,2) to text" in msg and "full_reload" in msg


def test_added_column_with_constant_default_is_copied_then_dropped():
    from tideline.core.schema_drift import ddl
    src = [Column("id", "bigint", True), Column("flag", "boolean", False, "true", True)]
    p = plan("t", src, [Column("id", "bigint", True)])
    assert len(ddl("s", "t", p)) == 2


def test_added_column_whose_default_rewrote_rows_needs_resnapshot():
    from tideline.core.errors import ResnapshotRequired
    src = [Column("id", "bigint", True), Column("at", "timestamp with time zone", False, "now()", False)]
    with pytest.raises(ResnapshotRequired, match="column at.*re-snapshot"):
        plan("t", src, [Column("id", "bigint", True)])
    # a constant default after a rewrite is still known exactly
    src = [Column("id", "bigint", True), Column("c", "character varying(5)", False, "'x''y'::character varying")]
    assert [c.name for c in plan("t", src, [Column("id", "bigint", True)]).add] == ["c"]


@pytest.mark.parametrize("expr,constant", [
    ("true", True), ("1.50", True), ("'a'::text", True), ("'{}'::jsonb", True), ("(-1)", True),
    ("now()", False), ("nextval('s'::regclass)", False), ("gen_random_uuid()", False)])
def test_constant_defaults(expr, constant):
    from tideline.core.schema_drift import CONSTANT
    assert bool(CONSTANT.match(expr)) is constant
