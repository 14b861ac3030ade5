"""Which COPY format a load pipes a table in: binary only when every column it writes has a
binary form that means the same in the target (source_columns.sql decides per column)."""
from tideline.core.table_shape import Column, TableShape, copy_options


def shape(*columns: Column) -> TableShape:
    return TableShape("public", "t", columns, ("id",))


def test_binary_only_when_every_written_column_is_portable():
    portable = Column("id", "bigint", True, binary_copy=True)
    assert shape(portable, Column("n", "jsonb", False, binary_copy=True)).copy_format == "binary"
    assert shape(portable, Column("r", "regclass", False)).copy_format == "text"


def test_generated_columns_are_not_written_so_they_do_not_decide():
    gen = Column("g", "public.hstore", False, generated="h || h")
    assert shape(Column("id", "bigint", True, binary_copy=True), gen).copy_format == "binary"
    assert shape(gen).copy_format == "text"   # nothing written: nothing to pipe in binary


def test_copy_options():
    assert copy_options("binary") == " (FORMAT binary)"
    assert copy_options("text") == copy_options() == ""


def test_how_a_column_is_moved_is_not_part_of_what_it_is():
    """Schema drift compares source and target columns; the target's are read without it."""
    assert Column("id", "bigint", True, binary_copy=True) == Column("id", "bigint", True)
