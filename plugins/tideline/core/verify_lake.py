"""Verify between a PostgreSQL source and an Iceberg table: the `lake` fingerprint.

The two sides share no hash of typed values, and an Iceberg table holds some values in another
form than the source (core.lake_types: dates as days, timestamps as instants, many types as their
exact text). So both sides hash the same canonical text of each column's *Iceberg value*, the
source computing it from its own column, Spark from the stored one:

    integers, decimals, booleans   their plain text (a decimal with its scale, as PostgreSQL prints it)
    floats                         their IEEE bits as a signed integer ('NaN' for every NaN; -0 apart)
    dates                          days since 1970-01-01
    timestamps (with/without zone) microseconds since 1970-01-01 00:00 UTC
    bytes                          lower-case hex
    text, and types kept as text   the text itself
    lists                          '[' + '='-prefixed elements joined by U+001D (NULL as U+001E) + ']'

joined with U+001F, NULL as U+001E. A row's fingerprint is the first 64 bits of the MD5 of that
UTF-8 text as a signed integer (PostgreSQL: bit(64)::bigint; Spark: conv(..., 16, -10)); a range's
is (count, XOR), as everywhere in verify (core.verify_plan).

Keys are compared in both engines' order, which agrees for integer, decimal (38 digits at most),
text and varchar (UTF-8 bytes: the "C" collation in PostgreSQL, Spark's binary strings) and uuid
(bytes = its lower-case text) keys; a key of another type is refused, naming the column.
"""
from __future__ import annotations

from psycopg2 import sql

from tideline.core import lake_types
from tideline.core.errors import SourceError
from tideline.core.lake_types import spark_ident, spark_literal
from tideline.core.table_shape import Column, TableShape
from tideline.core.verify_plan import TextKeyRanges

SEP, NUL, ITEM = 31, 30, 29   # code points: between columns, a NULL, between list elements

_PG_ELEMENT = {
    "float": "CASE WHEN {c} = 'NaN' THEN 'NaN' ELSE ('x' || encode(float4send({c}), 'hex'))::bit(32)::int::text END",
    "double": "CASE WHEN {c} = 'NaN' THEN 'NaN' ELSE ('x' || encode(float8send({c}), 'hex'))::bit(64)::bigint::text END",
}
_SPARK_ELEMENT = {
    "float": "CASE WHEN {v} IS NULL THEN NULL WHEN isnan({v}) THEN 'NaN' ELSE java_method('java.lang.Float', 'floatToRawIntBits', {v}) END",
    "double": "CASE WHEN {v} IS NULL THEN NULL WHEN isnan({v}) THEN 'NaN' ELSE java_method('java.lang.Double', 'doubleToRawLongBits', {v}) END",
}
KEY_TYPES = ("smallint", "integer", "bigint", "text", "character varying", "uuid")


def pg_canon(col: Column) -> str:
    """PostgreSQL expression ({c} = the quoted source column) of the column's canonical text."""
    lake = lake_types.lake_column(col)
    t = lake.iceberg
    if t.startswith("list<"):
        element = _PG_ELEMENT.get(t[5:-1], "{c}::text").replace("{c}", "u.e")
        return (f"CASE WHEN {{c}} IS NULL THEN NULL ELSE '[' || coalesce((SELECT string_agg(coalesce('=' || "
                f"{element}, chr({NUL})), chr({ITEM}) ORDER BY u.o) FROM unnest({{c}}) WITH ORDINALITY AS u(e, o)), "
                f"'') || ']' END")
    if t in _PG_ELEMENT:
        return _PG_ELEMENT[t]
    if t == "binary":
        return "encode({c}, 'hex')"
    # an infinite date or time (which no Iceberg column holds: the load and the stream refuse it) is
    # its own text: a difference verify reports, where the arithmetic would fail the whole verify
    if t == "date":
        return "CASE WHEN isfinite({c}) THEN ({c} - DATE '1970-01-01')::text ELSE {c}::text END"
    if t in ("timestamp", "timestamptz"):
        return "CASE WHEN isfinite({c}) THEN ((extract(epoch FROM {c}) * 1000000)::bigint)::text ELSE {c}::text END"
    if t == "string":
        return lake.read
    return "{c}::text"


def spark_canon(col: Column) -> str:
    """Spark SQL expression ({v} = the Iceberg column) of the same canonical text."""
    t = lake_types.lake_column(col).iceberg
    if t.startswith("list<"):
        element = _SPARK_ELEMENT.get(t[5:-1], "cast({v} as string)").replace("{v}", "x__")
        return (f"CASE WHEN {{v}} IS NULL THEN NULL ELSE concat('[', array_join(transform({{v}}, x__ -> "
                f"coalesce(concat('=', {element}), char({NUL}))), char({ITEM})), ']') END")
    if t in _SPARK_ELEMENT:
        return _SPARK_ELEMENT[t]
    if t == "binary":
        return "lower(hex({v}))"
    if t == "date":
        return "cast(unix_date({v}) as string)"
    if t == "timestamptz":
        return "cast(unix_micros({v}) as string)"
    if t == "timestamp":   # the session's time zone is UTC (spark_session), so the wall time is UTC
        return "cast(unix_micros(cast({v} as timestamp)) as string)"
    if t == "string":
        return "{v}"
    return "cast({v} as string)"


def pg_row_hash(shape: TableShape) -> sql.Composed:
    """The source side's fingerprint of a row (a hashed column's hash: core.column_hash)."""
    parts = [f"coalesce({pg_canon(shape.column(c)).replace('{c}', _pg_value(shape.column(c)))}, chr({NUL}))"
             for c in shape.column_names]
    return sql.SQL(f"('x' || left(md5(concat_ws(chr({SEP}), {', '.join(parts)})), 16))::bit(64)::bigint")


def _pg_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _pg_value(c: Column) -> str:
    if c.hash_salt is None:
        return _pg_ident(c.name)
    from tideline.core.column_hash import pg_text
    return pg_text(_pg_ident(c.name), c.hash_salt)


def spark_row_hash(shape: TableShape) -> str:
    parts = [f"coalesce({spark_canon(shape.column(c)).replace('{v}', spark_ident(c))}, char({NUL}))"
             for c in shape.column_names]
    return f"cast(conv(left(md5(concat_ws(char({SEP}), {', '.join(parts)})), 16), 16, -10) as bigint)"


def key_problem(col: Column) -> str | None:
    """Why verify cannot cut key ranges on this key column between PostgreSQL and Iceberg."""
    base = lake_types.base_type(col.type)
    if base in KEY_TYPES or lake_types.lake_column(col).iceberg.startswith("decimal"):
        return None
    return (f"key column {col.name} is {col.type}, whose order in the Iceberg table is not the source's; verify "
            f"into Iceberg needs integer, numeric(p,s) with p <= 38, text, varchar or uuid keys")


def check_keys(shape: TableShape, label: str) -> None:
    for k in shape.primary_key:
        problem = key_problem(shape.column(k))
        if problem:
            raise SourceError(f"{label}: {problem}. Use action=full_reload to re-copy the table.", table=shape.name)


class SparkLakeDialect(TextKeyRanges):
    """The fingerprint SQL of one Iceberg table in Spark SQL (the target side of a `lake` verify)."""

    def __init__(self, shape: TableShape, table_id: str):
        self.shape, self.table_id = shape, table_id
        self.hash = spark_row_hash(shape)
        self.keys = list(shape.primary_key)
        self.types = {k: lake_types.lake_column(shape.column(k)).spark_type for k in self.keys}

    def _key_row(self) -> str:
        cols = [spark_ident(k) for k in self.keys]
        return cols[0] if len(cols) == 1 else f"struct({', '.join(cols)})"

    def literal(self, key: str, text: str) -> str:
        """A key column's value in Spark SQL, from its text (a repair's range ends too)."""
        t = self.types[key]
        return spark_literal(text) if t == "string" else f"CAST({spark_literal(text)} AS {t})"

    def _literal_row(self, values: tuple[str, ...]) -> str:
        lits = [self.literal(k, v) for k, v in zip(self.keys, values)]
        return lits[0] if len(lits) == 1 else f"struct({', '.join(lits)})"

    def _combine(self) -> str:
        if self.keys:
            return "coalesce(bit_xor(h), 0)"
        return "coalesce(sum(cast(h as decimal(38,0))), 0)"

    def fingerprint_query(self, pred: str, boundaries: list[tuple[str, ...]] | None = None) -> str:
        """(bucket, count, combined hashes); the hashes are computed below the aggregate (Spark
        refuses a reflective call, which the float bits are, inside one)."""
        if boundaries is None:
            return f"SELECT 0, count(*), {self._combine()} FROM (SELECT {self.hash} AS h FROM {self.table_id} WHERE {pred})"
        return (f"SELECT bucket, count(*), {self._combine()} FROM (SELECT {self.bucket_case(boundaries)} "
                f"AS bucket, {self.hash} AS h FROM {self.table_id} WHERE {pred}) GROUP BY bucket")

    def _key_texts(self) -> str:
        return ", ".join(f"cast({spark_ident(k)} as string)" for k in self.keys)

    def rows_query(self, pred: str) -> str:
        return f"SELECT {self._key_texts()}, {self.hash} FROM {self.table_id} WHERE {pred}"

    def boundaries_query(self, pred: str, parts: int, sample_percent: float | None = None) -> str:
        """First key of each of `parts` equal buckets of the range, in key order."""
        keys = ", ".join(spark_ident(k) for k in self.keys)
        outs = ", ".join(f"k{i}" for i in range(len(self.keys)))
        texts = ", ".join(f"cast({spark_ident(k)} as string) AS k{i}" for i, k in enumerate(self.keys))
        return (f"SELECT {outs} FROM (SELECT {texts}, b, row_number() OVER (PARTITION BY b ORDER BY {keys}) AS rn "
                f"FROM (SELECT {keys}, ntile({int(parts)}) OVER (ORDER BY {keys}) AS b FROM {self.table_id} "
                f"WHERE {pred}) x) y WHERE rn = 1 AND b > 1 ORDER BY b")
