"""Verify across engines: a MariaDB source and its PostgreSQL target fingerprint rows alike.

The two databases share no hash function over typed values, so both hash the same text: each
synced column's *canonical text* (a source's own expression, e.g. engines.mariadb.types' Mapping.canon;
target_canon in PostgreSQL — the value's plain text where both print it alike; MariaDB's layout of floats, six
fractional digits of date-times in UTC, microseconds of durations, \\x-hex of bytes where they
differ), NULL as U+001E, joined with U+001F. A row's fingerprint is the first 64 bits of the MD5
of that UTF-8 text; a range's is (count, XOR of the rows'), as between two PostgreSQL databases
(core.verify_plan). MariaDB's BIT_XOR is unsigned and PostgreSQL's bigint signed: both are read
modulo 2^64 (MASK).

Key order is the target's: numbers by value, date-times by time, bytes by bytes, text by its
UTF-8 bytes ("C" collation there, a binary cast here — which cannot use the key's index, so
ranges over text keys scan the table). Keys travel as their canonical text, which PostgreSQL's
input functions read back and each source casts (engines.mariadb.types.key_sql). A key of another type
(float, time, bit, json) cannot be cut into ranges: verify refuses the table, naming the column.
"""
from __future__ import annotations

from psycopg2 import sql

from tideline.core.errors import SourceError
from tideline.core.table_shape import TableShape

SEP, NUL = "\x1f", "\x1e"
MASK = (1 << 64) - 1


def target_canon(pg_type: str) -> str:
    """The PostgreSQL expression ({c} = the quoted target column) whose text equals the MariaDB
    canon expression of the same value: the column's own text, except where the two databases
    print a value differently — floats (MariaDB's layout, tideline.mysql_double_text),
    date-times (six fractional digits, UTC) and durations (microseconds)."""
    if pg_type in ("real", "double precision"):
        return "tideline.mysql_double_text({c}::float8)"
    if pg_type.startswith("timestamp"):
        zone = " AT TIME ZONE 'UTC'" if pg_type.endswith("with time zone") else ""
        return "to_char({c}" + zone + ", 'YYYY-MM-DD HH24:MI:SS.US')"
    if pg_type == "interval":
        return "(extract(epoch FROM {c}) * 1000000)::bigint::text"
    return "{c}::text"


def _pg_canon(shape: TableShape, name: str) -> sql.Composed:
    return sql.SQL(target_canon(shape.column(name).type).replace("{c}", "{}")).format(sql.Identifier(name))


def pg_row_hash(shape: TableShape) -> sql.Composed:
    """The PostgreSQL side's fingerprint of a row (the target of a MariaDB pipeline)."""
    parts = [sql.SQL("coalesce({}, {})").format(_pg_canon(shape, c), sql.Literal(NUL)) for c in shape.column_names]
    return sql.SQL("('x' || left(md5(concat_ws({}, {})), 16))::bit(64)::bigint").format(
        sql.Literal(SEP), sql.SQL(", ").join(parts))


def pg_key_text(shape: TableShape):
    """The PostgreSQL side's key text: the canonical text, as MariaDB prints the same key."""
    return lambda name: _pg_canon(shape, name)


def cuttable_key(pg_type: str) -> bool:
    """Whether verify can cut key ranges on a key column of this (target) type across engines:
    numbers by value, text by its UTF-8 bytes, date-times by time, bytes by bytes; each source's
    dialect compares its own keys in that order."""
    return (pg_type in ("smallint", "integer", "bigint", "date", "bytea")
            or pg_type.startswith(("numeric", "character", "text", "timestamp")))


def check_keys(shape: TableShape, label: str) -> None:
    for k in shape.primary_key:
        if not cuttable_key(shape.column(k).type):
            raise SourceError(f"{label}: verify cannot compare key ranges of key column {k} "
                              f"({shape.column(k).type} in the target); verify needs integer, decimal, text, "
                              f"date-time or binary keys. Use action=full_reload to re-copy the table.",
                              table=shape.name)
