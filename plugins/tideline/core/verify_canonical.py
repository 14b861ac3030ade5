"""Verify across engines: a MariaDB source and its PostgreSQL target fingerprint rows alike.

The two databases share no hash function over typed values, so both hash the same text: each
synced column's *canonical text* (core.mariadb_types: Mapping.canon in MariaDB, target_canon in
PostgreSQL — the value's plain text where both print it alike; MariaDB's layout of floats, six
fractional digits of date-times in UTC, microseconds of durations, \\x-hex of bytes where they
differ), NULL as U+001E, joined with U+001F. A row's fingerprint is the first 64 bits of the MD5
of that UTF-8 text; a range's is (count, XOR of the rows'), as between two PostgreSQL databases
(core.verify_plan). MariaDB's BIT_XOR is unsigned and PostgreSQL's bigint signed: both are read
modulo 2^64 (MASK).

Key order is the target's: numbers by value, date-times by time, bytes by bytes, text by its
UTF-8 bytes ("C" collation there, a binary cast here — which cannot use the key's index, so
ranges over text keys scan the table). Keys travel as their canonical text, which PostgreSQL's
input functions read back and MariaDB casts (mariadb_types.key_sql). A key of another type
(float, time, bit, json) cannot be cut into ranges: verify refuses the table, naming the column.
"""
from __future__ import annotations

from psycopg2 import sql

from tideline.core import mariadb_types as mt
from tideline.core.errors import SourceError
from tideline.core.table_shape import TableShape
from tideline.core.verify_plan import TextKeyRanges

SEP, NUL = "\x1f", "\x1e"
MASK = (1 << 64) - 1


def _pg_canon(shape: TableShape, name: str) -> sql.Composed:
    return sql.SQL(mt.target_canon(shape.column(name).type).replace("{c}", "{}")).format(sql.Identifier(name))


def pg_row_hash(shape: TableShape) -> sql.Composed:
    """The PostgreSQL side's fingerprint of a row (the target of a MariaDB pipeline)."""
    parts = [sql.SQL("coalesce({}, {})").format(_pg_canon(shape, c), sql.Literal(NUL)) for c in shape.column_names]
    return sql.SQL("('x' || left(md5(concat_ws({}, {})), 16))::bit(64)::bigint").format(
        sql.Literal(SEP), sql.SQL(", ").join(parts))


def pg_key_text(shape: TableShape):
    """The PostgreSQL side's key text: the canonical text, as MariaDB prints the same key."""
    return lambda name: _pg_canon(shape, name)


def check_keys(shape: TableShape, label: str) -> None:
    for k in shape.primary_key:
        if mt.key_sql(shape.column(k).type) is None:
            raise SourceError(f"{label}: verify cannot compare key ranges of key column {k} "
                              f"({shape.column(k).type} in the target); verify needs integer, decimal, text, "
                              f"date-time or binary keys. Use action=full_reload to re-copy the table.",
                              table=shape.name)


class MariaDbDialect(TextKeyRanges):
    """The fingerprint SQL of one table in MariaDB (the source side), as text; `quote` renders a
    string literal (the connection's escape)."""

    def __init__(self, shape: TableShape, schema: str, quote):
        self.shape, self.schema, self.quote = shape, schema, quote
        self.keys = [(k, *mt.key_sql(shape.column(k).type)) for k in shape.primary_key]
        canon = [f"IFNULL({shape.column(c).canon}, '{NUL}')" for c in shape.column_names]
        self.hash = f"CAST(CONV(LEFT(MD5(CONCAT_WS('{SEP}', {', '.join(canon)})), 16), 16, 10) AS UNSIGNED)"

    def _table(self) -> str:
        return f"{mt.quote(self.schema)}.{mt.quote(self.shape.name)}"

    def _key_row(self) -> str:
        return "(" + ", ".join(expr.format(c=mt.quote(k)) for k, expr, _lit in self.keys) + ")"

    def _literal_row(self, values: tuple[str, ...]) -> str:
        return "(" + ", ".join(lit.format(lit=self.quote(v)) for (_k, _e, lit), v in zip(self.keys, values)) + ")"

    def fingerprint_query(self, pred: str, boundaries: list[tuple[str, ...]] | None = None) -> str:
        if boundaries is None:
            return f"SELECT 0, COUNT(*), BIT_XOR({self.hash}) FROM {self._table()} WHERE {pred}"
        return (f"SELECT {self.bucket_case(boundaries)} AS bucket, COUNT(*), BIT_XOR({self.hash}) "
                f"FROM {self._table()} WHERE {pred} GROUP BY bucket")

    def _key_texts(self) -> str:
        return ", ".join(self.shape.column(k).canon for k in self.shape.primary_key)

    def rows_query(self, pred: str) -> str:
        return f"SELECT {self._key_texts()}, {self.hash} FROM {self._table()} WHERE {pred}"

    def boundaries_query(self, pred: str, parts: int, sample_percent: float | None = None) -> str:
        """First key of each of `parts` equal buckets of the range, in the target's key order
        (MariaDB has no block sample: the whole range is ranked)."""
        n = len(self.keys)
        texts = ", ".join(f"{self.shape.column(k).canon} AS k{i}" for i, k in enumerate(self.shape.primary_key))
        outs = ", ".join(f"k{i}" for i in range(n))
        order = ", ".join(expr.format(c=mt.quote(k)) for k, expr, _lit in self.keys)
        return (f"SELECT {outs} FROM (SELECT {outs}, b, ROW_NUMBER() OVER (PARTITION BY b ORDER BY o) AS rn FROM "
                f"(SELECT {texts}, ROW_NUMBER() OVER (ORDER BY {order}) AS o, "
                f"NTILE({int(parts)}) OVER (ORDER BY {order}) AS b FROM {self._table()} WHERE {pred}) x) y "
                f"WHERE rn = 1 AND b > 1 ORDER BY b")
