"""The pure part of verify: ranges, the SQL it sends, and how fingerprints become a report."""
from psycopg2 import sql

from tideline.core.table_shape import Column, TableShape
from tideline.core.verify_plan import (Finding, KeyRange, VerifyReport, bucket_expr, classify, diff_hashes,
                                       range_predicate, row_hash)

ONE = TableShape("public", "t", (Column("id", "bigint", True), Column("doc", "json", False),
                                 Column("n", "numeric", False)), ("id",))
TWO = TableShape("public", "t", (Column("region", "text", True), Column("code", "integer", True),
                                 Column("v", "text", False)), ("region", "code"))


def render(composed) -> str:
    """psycopg2.sql without a connection: identifiers and literals rendered for reading."""
    def walk(node):
        if isinstance(node, sql.Composed):
            return "".join(walk(n) for n in node.seq)
        if isinstance(node, sql.SQL):
            return node.string
        if isinstance(node, sql.Identifier):
            return ".".join(f'"{s}"' for s in node.strings)
        if isinstance(node, sql.Literal):
            return repr(node.wrapped)
        raise TypeError(node)
    return walk(composed)


def test_split_covers_the_range_without_gaps():
    whole = KeyRange()
    parts = whole.split([("10",), ("20",)])
    assert parts == [KeyRange(None, ("10",)), KeyRange(("10",), ("20",)), KeyRange(("20",), None)]
    assert KeyRange(("5",), ("30",)).split([("10",)]) == [KeyRange(("5",), ("10",)), KeyRange(("10",), ("30",))]
    assert whole.describe() == "the whole table"
    assert KeyRange(("a", "1"), None).describe() == "keys ≥ (a, 1)"


def test_range_predicate_compares_typed_key_tuples_in_c_collation():
    text = render(range_predicate(TWO, KeyRange(("R1", "5"), ("R2", "0")), frozenset({"region"})))
    assert text == ('("region" COLLATE "C", "code") >= (\'R1\'::text, \'5\'::integer) AND '
                    '("region" COLLATE "C", "code") < (\'R2\'::text, \'0\'::integer)')
    assert render(range_predicate(ONE, KeyRange())) == "TRUE"


def test_bucket_expression_binary_search_for_one_column_case_for_composite():
    assert render(bucket_expr(ONE, [("10",), ("20",)])) == "width_bucket(\"id\", ARRAY['10', '20']::bigint[])"
    case = render(bucket_expr(TWO, [("R1", "5")], frozenset({"region"})))
    assert case == ('CASE WHEN ("region" COLLATE "C", "code") < (\'R1\'::text, \'5\'::integer) THEN 0 ELSE 1 END')


def test_row_hash_uses_text_for_types_without_a_hash_function():
    assert render(row_hash(ONE, frozenset({"doc", "n"}))) == \
        'hash_record_extended(ROW("id", "doc"::text, "n"::text), 0)'
    assert "md5(ROW(" in render(row_hash(ONE, frozenset(), binary=False))


def test_diff_and_classify():
    src = {("1",): 10, ("2",): 20, ("3",): 30}
    tgt = {("2",): 20, ("3",): 31, ("4",): 40}
    assert diff_hashes(src, tgt) == [Finding("missing", ("1",)), Finding("different", ("3",)),
                                     Finding("extra", ("4",))]
    assert [classify(1, None), classify(None, 1), classify(1, 2), classify(1, 1)] == \
        ["missing", "extra", "different", None]


def test_report_keeps_totals_complete_and_the_sample_bounded():
    r = VerifyReport("orders", source_rows=10, target_rows=9)
    for i in range(5):
        r.add(Finding("missing", (str(i),)), sample_limit=2)
    r.ranges = [KeyRange(None, ("9",))]
    assert r.counts["missing"] == 5 and len(r.samples) == 2 and not r.equal
    assert r.summary() == "orders: source 10 rows, target 9 rows; DIFFERENT: 5 missing in 1 key range(s)"
    assert r.sample_lines() == ["  missing   key (0)", "  missing   key (1)"]
    clean = VerifyReport("orders", 3, 3, settled=2)
    assert clean.equal and clean.summary().endswith("equal; 2 in-flight change(s) settled on re-check")


def test_an_integer_key_is_cut_by_value_into_about_per_cut_rows_and_never_more_cuts_than_allowed():
    from tideline.core.verify_plan import integer_cuts
    cuts = integer_cuts(1, 2_000_000, 2_000_000, 64, 50_000)
    assert len(cuts) == 31_249 and cuts[0] == ("65",) and cuts[-1] == (str(1 + 31_249 * 64),)
    assert list(cuts) == [cuts[i] for i in range(len(cuts))] and cuts[-1] == list(cuts)[-1]
    assert all(int(b[0]) - int(a[0]) == 64 for a, b in zip(cuts, list(cuts)[1:]))
    # a row's sub-range is (key - lo) / width, the same numbering as KeyRange.split gives
    subs = KeyRange().split(list(cuts))
    for key in (1, 64, 65, 128, 129, 2_000_000):
        i = (key - cuts.lo) // cuts.width
        assert (subs[i].lo is None or int(subs[i].lo[0]) <= key) and (subs[i].hi is None or key < int(subs[i].hi[0]))
    assert render(bucket_expr(ONE, cuts)) == '(("id"::bigint - 1) / 64)'
    # sparse keys (every 10th value): the width grows, the count of cuts stays ~rows/per_cut
    sparse = integer_cuts(10, 1_000_000, 100_000, 64, 50_000)
    assert 1_500 <= len(sparse) <= 1_563 and sparse.width == 640
    # negative keys and the cap
    capped = integer_cuts(-5_000_000, 5_000_000, 10_000_000, 64, 1_000)
    assert len(capped) == 999 and all(-5_000_000 < int(c[0]) <= 5_000_000 for c in capped)
    assert len(integer_cuts(7, 7, 1, 64, 100)) == 0   # one key: nothing to cut


def test_pg_dialect_reads_only_the_sub_ranges_asked_for():
    from tideline.core.verify_plan import PgDialect
    d = PgDialect(ONE, "s", sql.SQL("h"))
    text = render(d.any_range_predicate([KeyRange(("1",), ("65",)), KeyRange(("129",), None)]))
    assert text == "(((\"id\") >= ('1'::bigint) AND (\"id\") < ('65'::bigint)) OR ((\"id\") >= ('129'::bigint)))"


def test_a_part_of_a_split_is_the_same_range_as_split_makes():
    from tideline.core.verify_plan import integer_cuts
    rng = KeyRange(("5",), ("900",))
    for cuts in (integer_cuts(5, 899, 895, 64, 100), [("10",), ("20",)]):
        subs = rng.split(list(cuts))
        assert [rng.part(cuts, i) for i in range(len(subs))] == subs
    from tideline.core.verify_plan import PgDialect
    d = PgDialect(ONE, "s", sql.SQL("h"))
    assert render(d.any_range_predicate([KeyRange(None, ("65",)), KeyRange(("129",), ("193",))], integer=True)) == \
        '(("id" < 65) OR ("id" >= 129 AND "id" < 193))'
