"""The MariaDB → PostgreSQL type rules and the binlog checks, pure."""
from __future__ import annotations

import pytest

from tideline.engines.mariadb import types as mt
from tideline.engines.mariadb.capture import capture_problems, gtids_cover, mariadb_privileges, parse_gtids


@pytest.mark.parametrize("column_type, pg_type, encoding", [
    ("tinyint(4)", "smallint", mt.TEXT),
    ("tinyint(1)", "smallint", mt.TEXT),                 # BOOLEAN holds 2 and -5 too: a number, not boolean
    ("tinyint(3) unsigned", "smallint", mt.TEXT),
    ("smallint(5) unsigned", "integer", mt.TEXT),
    ("mediumint(8) unsigned", "integer", mt.TEXT),
    ("int(11)", "integer", mt.TEXT),
    ("int(10) unsigned", "bigint", mt.TEXT),
    ("bigint(20)", "bigint", mt.TEXT),
    ("bigint(20) unsigned", "numeric(20,0)", mt.TEXT),    # 18446744073709551615 does not fit bigint
    ("decimal(65,30)", "numeric(65,30)", mt.TEXT),
    ("decimal(10,0) unsigned zerofill", "numeric(10,0)", mt.TEXT),
    ("float", "real", mt.TEXT),
    ("double", "double precision", mt.TEXT),
    ("bit(1)", "bit(1)", mt.BOOL_BIT),
    ("bit(64)", "bit(64)", mt.BITS_LE_HEX),
    ("char(3)", "character(3)", mt.TEXT),
    ("varchar(255)", "character varying(255)", mt.TEXT),
    ("mediumtext", "text", mt.TEXT),
    ("varbinary(16)", "bytea", mt.HEX),
    ("longblob", "bytea", mt.HEX),
    ("date", "date", mt.EPOCH_DAYS),
    ("datetime", "timestamp(0) without time zone", mt.EPOCH_MILLIS),
    ("datetime(3)", "timestamp(3) without time zone", mt.EPOCH_MILLIS),
    ("datetime(6)", "timestamp(6) without time zone", mt.EPOCH_MICROS),
    ("timestamp(6)", "timestamp(6) with time zone", mt.ZONED),
    ("time(6)", "interval", mt.MICRO_DURATION),           # -838:59:59 .. 838:59:59 do not fit time
    ("year(4)", "smallint", mt.YEAR),
    ("enum('a','b c')", "text", mt.TEXT),
    ("set('x','y')", "text", mt.TEXT),
    ("json", "json", mt.TEXT),
])
def test_each_type_has_one_exact_rule(column_type, pg_type, encoding):
    m = mt.map_column(column_type, not_null=False)
    assert (m.pg_type, m.encoding) == (pg_type, encoding)


def test_zero_dates_are_null_or_the_epoch_in_not_null_columns_as_debezium_emits_them():
    assert "THEN NULL ELSE" in mt.read_expr(mt.map_column("date", not_null=False), "`d`")
    assert "THEN '1970-01-01' ELSE" in mt.read_expr(mt.map_column("date", not_null=True), "`d`")
    assert "'1970-01-01 00:00:00+00'" in mt.read_expr(mt.map_column("timestamp", not_null=True), "`t`")
    # ...or, in a NOT NULL column with a real default, that default (Debezium's fallback)
    assert "THEN '2000-01-01' ELSE" in mt.read_expr(mt.map_column("date", True, "'2000-01-01'"), "`d`")
    assert "THEN '1970-01-01' ELSE" in mt.read_expr(mt.map_column("date", True, "'0000-00-00'"), "`d`")
    assert "THEN '1970-01-01 00:00:00' ELSE" in mt.read_expr(mt.map_column("datetime", True, "current_timestamp()"),
                                                             "`d`")
    assert "CONCAT(CAST(`t` AS CHAR), '+00')" in mt.read_expr(mt.map_column("timestamp(3)", not_null=False), "`t`")


@pytest.mark.parametrize("column_type", ["point", "geometry", "linestring", "polygon", "vector(3)"])
def test_types_without_an_exact_counterpart_are_refused(column_type):
    with pytest.raises(mt.UnsupportedType):
        mt.map_column(column_type, not_null=False)


def test_binlog_settings_capture_needs_are_named_with_their_fix():
    good = {"log_bin": True, "binlog_format": "ROW", "binlog_row_image": "FULL"}
    assert capture_problems(good) == []
    bad = capture_problems({"log_bin": False, "binlog_format": "MIXED", "binlog_row_image": "MINIMAL"})
    assert len(bad) == 3
    assert "log_bin" in bad[0] and "binlog_format is MIXED" in bad[1] and "binlog_row_image is MINIMAL" in bad[2]


def test_replication_privileges():
    assert mariadb_privileges("GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO x").status == "pass"
    admin = mariadb_privileges("GRANT ALL PRIVILEGES ON *.* TO `admin`@`%` WITH GRANT OPTION")
    assert admin.status == "warn" and "holds ALL PRIVILEGES ON *.*" in admin.detail   # works, but more than needed
    writer = mariadb_privileges("GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO x GRANT SELECT, DELETE ON "
                                "`shop`.* TO x")
    assert writer.status == "warn" and "DELETE ON `shop`.*" in writer.detail
    beats = ("GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO x GRANT SELECT, INSERT, UPDATE ON "
             "`shop`.`tideline_heartbeat` TO x")
    assert mariadb_privileges(beats, "`shop`.`tideline_heartbeat`").status == "pass"   # the heartbeat is its to write
    assert mariadb_privileges(beats, "`shop`.`beats`").status == "warn"
    check = mariadb_privileges("GRANT SELECT ON `shop`.* TO x")
    assert check.status == "fail" and "REPLICATION SLAVE, REPLICATION CLIENT" in check.fix


def test_gtid_sets():
    assert parse_gtids("0-1-15,1-2-7") == {0: 15, 1: 7}
    assert parse_gtids("") == {}
    assert gtids_cover(parse_gtids("0-1-15,1-2-7"), parse_gtids("0-1-15"))
    assert not gtids_cover(parse_gtids("0-1-14"), parse_gtids("0-1-15"))
    assert not gtids_cover(parse_gtids("1-1-99"), parse_gtids("0-1-1"))


def test_what_existing_rows_hold_when_a_column_is_added():
    dec = mt.map_column("decimal(8,2)", False)
    assert mt.existing_rows_value("1.25", dec) == ("1.25", True, "1.25")
    assert mt.existing_rows_value("'it''s'", mt.map_column("varchar(9)", False)) == ("'it''s'", True, "it's")
    assert mt.existing_rows_value("NULL", dec) == (None, False, None)
    assert mt.existing_rows_value(None, dec) == (None, False, None)
    ts = mt.map_column("timestamp(6)", False)
    assert mt.existing_rows_value("'2020-01-01 00:00:00.000000'", ts)[2] == "2020-01-01 00:00:00.000000+00"
    # an expression: unknown per row, so adding such a column needs a reload
    assert mt.existing_rows_value("current_timestamp(6)", ts) == ("current_timestamp(6)", False, None)


def test_an_integer_key_is_cut_by_value_without_ranking_the_table_unless_its_keys_lie_unevenly():
    from tideline.core.verify_plan import integer_cuts
    from tideline.engines.mariadb.keys import integer_type, uneven

    def value_cuts(lo, hi, parts):   # as the full load asks: `parts` ranges of equal width
        return [int(c) for (c,) in integer_cuts(lo, hi, parts, 1, parts)]
    assert value_cuts(1, 1_000_000, 4) == [250_001, 500_001, 750_001]   # what NTILE gives a dense key
    assert value_cuts(-10, 10, 3) == [-3, 4]
    assert value_cuts(5, 6, 4) == [6] and value_cuts(7, 7, 4) == []       # fewer values than partitions
    assert value_cuts(0, 18_446_744_073_709_551_615, 2) == [9_223_372_036_854_775_808]   # unsigned BIGINT
    assert all(integer_type(t) for t in ("smallint", "integer", "bigint", "numeric(20,0)"))
    assert not any(integer_type(t) for t in ("numeric(12,2)", "text", "character varying(20)", "date"))
    # InnoDB's estimates of each value range's rows (rough: up to 2x, capped at half the table)
    assert not uneven([17_504, 35_010, 35_010, 17_504])   # dense keys: value cuts stand
    assert uneven([35_010, 21])             # the soak's markers at 10^12 above ids 1..70,000: ranked instead
    assert uneven([40_000, 40_000, 40_000, 7_900]) and not uneven([40_000, 40_000, 40_000, 8_100])   # a quarter share
    assert not uneven([3, 0])               # too few rows to matter


def test_keys_read_in_slices_of_their_own_order_are_those_whose_max_order_and_comparison_agree():
    from tideline.engines.mariadb.engine import _keyset_type
    for pg_type in ("character varying(40)", "character(3)", "bytea", "numeric(20,6)", "date",
                    "timestamp(6) without time zone", "timestamp(0) with time zone"):
        assert _keyset_type(pg_type), pg_type
    # enum and set map to text (MAX compares labels, ORDER BY their numbers); text keys have prefix indexes;
    # integer keys are cut by value instead
    for pg_type in ("text", "numeric(20,0)", "bigint", "real", "interval", "bit(3)", "json", ""):
        assert not _keyset_type(pg_type), pg_type
