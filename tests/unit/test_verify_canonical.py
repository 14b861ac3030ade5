"""Cross-engine verify, the pure part: the MariaDB side's fingerprint SQL, key order and literals,
and batch-mode bounds for MariaDB sources."""
from datetime import datetime, timezone

import pytest

from tideline.engines.mariadb import types as mt
from tideline.core.errors import SourceError
from tideline.core.table_shape import Column, TableShape
from tideline.core import verify_canonical
from tideline.core.verify_canonical import check_keys
from tideline.engines.mariadb.verify import MariaDbDialect
from tideline.core.verify_plan import KeyRange
from tideline.engines.mariadb.engine import batch_bounds


def quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def shape(*cols: tuple[str, str], key=("id",)) -> TableShape:
    columns = []
    for name, mariadb_type in cols:
        m = mt.map_column(mariadb_type, False)
        columns.append(Column(name, m.pg_type, False, encoding=m.encoding, read=mt.read_expr(m, mt.quote(name)),
                              canon=mt.canon_expr(m, mt.quote(name))))
    return TableShape("shop", "t", tuple(columns), tuple(key))


def test_text_keys_compare_by_their_utf8_bytes_and_numbers_exactly():
    d = MariaDbDialect(shape(("id", "varchar(20)"), ("n", "bigint unsigned"), key=("id", "n")), "shop", quote)
    pred = d.range_predicate(KeyRange(("a'b", "18446744073709551615"), None))
    assert pred == ("(CAST(CONVERT(`id` USING utf8mb4) AS BINARY), `n`) >= "
                    "(CAST('a\\'b' AS BINARY), CAST('18446744073709551615' AS DECIMAL(65,30)))")
    assert d.range_predicate(KeyRange()) == "TRUE"


def test_buckets_follow_the_boundaries_like_width_bucket():
    d = MariaDbDialect(shape(("id", "int")), "shop", quote)
    q = d.fingerprint_query("TRUE", [("10",), ("20",)])
    assert ("CASE WHEN (`id`) < (CAST('10' AS DECIMAL(65,30))) THEN 0 WHEN (`id`) < (CAST('20' AS DECIMAL(65,30))) "
            "THEN 1 ELSE 2 END AS bucket") in q
    assert "BIT_XOR(CAST(CONV(LEFT(MD5(CONCAT_WS('\x1f', IFNULL(CAST(`id` AS CHAR), '\x1e'))), 16), 16, 10) " \
           "AS UNSIGNED))" in q


def test_every_column_enters_the_fingerprint_as_its_canonical_text():
    d = MariaDbDialect(shape(("id", "int"), ("f", "float"), ("b", "varbinary(4)"), ("ts", "timestamp(3)"),
                             ("tm", "time(6)"), ("y", "year")), "shop", quote)
    assert "CAST(CAST(`f` AS DOUBLE) AS CHAR)" in d.hash
    assert "CONCAT('\\\\x', LOWER(HEX(`b`)))" in d.hash
    assert "DATE_FORMAT(CASE WHEN `ts` IS NULL THEN NULL" in d.hash and "'%Y-%m-%d %H:%i:%s.%f')" in d.hash
    assert "CAST(CAST(TIME_TO_SEC(`tm`) * 1000000 AS SIGNED) AS CHAR)" in d.hash
    assert "CAST(`y` + 0 AS CHAR)" in d.hash


def test_the_target_prints_what_mariadb_prints():
    assert verify_canonical.target_canon("double precision") == "tideline.mysql_double_text({c}::float8)"
    assert verify_canonical.target_canon("timestamp(3) with time zone") == \
        "to_char({c} AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')"
    assert verify_canonical.target_canon("interval") == "(extract(epoch FROM {c}) * 1000000)::bigint::text"
    assert verify_canonical.target_canon("numeric(20,0)") == "{c}::text"


def test_keys_verify_cannot_order_alike_are_refused_by_name():
    with pytest.raises(SourceError, match=r"key column k \(double precision in the target\)"):
        check_keys(shape(("k", "double"), key=("k",)), "p.t")
    check_keys(shape(("k", "datetime(6)"), ("b", "binary(2)"), key=("k", "b")), "p.t")


def test_batch_bounds_of_a_time_cursor():
    start, end = datetime(2026, 11, 1, tzinfo=timezone.utc), datetime(2026, 11, 2, tzinfo=timezone.utc)
    now = datetime(2026, 11, 1, 12, 0, 0)
    # the interval's end is past now - lag: read up to there, the cursor stops there
    assert batch_bounds(None, start, end, 60, now, True) == (
        "2026-11-01 00:00:00.000000", "2026-11-01 11:59:00.000000", "2026-11-01 11:59:00.000000")
    # a cursor behind the interval's start: read from the cursor
    assert batch_bounds("2026-10-31 06:00:00.000000", start, end, 0, datetime(2026, 11, 3), True) == (
        "2026-10-31 06:00:00.000000", "2026-11-02 00:00:00.000000", "2026-11-02 00:00:00.000000")


def test_batch_bounds_of_an_integer_cursor():
    assert batch_bounds(None, None, None, 0, 41, False) == (None, "42", "42")
    assert batch_bounds("42", None, None, 0, 99, False) == ("42", "100", "100")
    assert batch_bounds("42", None, None, 0, None, False) == ("42", None, "42")   # empty table


@pytest.mark.parametrize("pg_type", ["smallint", "integer", "bigint", "numeric(20,0)", "numeric", "text",
                                     "character varying(20)", "character(3)", "date", "timestamp(6) without time zone",
                                     "timestamp(3) with time zone", "bytea", "real", "double precision", "interval",
                                     "bit(1)", "json", "boolean"])
def test_the_canonical_modes_cuttable_keys_are_exactly_those_mariadb_can_order(pg_type):
    assert verify_canonical.cuttable_key(pg_type) == (mt.key_sql(pg_type) is not None)
