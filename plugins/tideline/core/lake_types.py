"""Source types -> Apache Iceberg types, exactly or as their exact text (README: "Iceberg types").

Every column of a source shape (PostgreSQL type names; a MariaDB source's shape carries them too)
gets the Iceberg type that holds each of its values exactly, or its source's exact text where no
Iceberg type does — numbers beyond 38 digits or without a declared scale, time of day, intervals,
uuid (Spark writes no uuid), json, enums, network and geometric types, multi-range types. Nothing
is rounded: a value the chosen type cannot hold (a date or timestamp at ±infinity, a NaN in a
numeric(p,s)) stops the load before its commit, naming the table, column and key.

How a value travels is fixed here too, so a load and the stream agree: dates as days and
timestamps as microseconds since the epoch (exact for BC dates, which a java.sql.Date would move
across calendars), everything textual as the source's text.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from tideline.core.table_shape import Column, TableShape

# Spark SQL type of each Iceberg primitive Tideline writes (Spark is the writer)
_SPARK = {"int": "int", "long": "bigint", "float": "float", "double": "double", "boolean": "boolean",
          "string": "string", "binary": "binary", "date": "date", "timestamp": "timestamp_ntz",
          "timestamptz": "timestamp"}

_SCALARS = {
    "smallint": "int", "integer": "int", "bigint": "long",
    "real": "float", "double precision": "double", "boolean": "boolean",
    "text": "string", "character varying": "string", "character": "string", "citext": "string", "name": "string",
    "bytea": "binary", "date": "date",
    "timestamp without time zone": "timestamp", "timestamp with time zone": "timestamptz",
}
_ARRAY_ELEMENTS = {"smallint": "int", "integer": "int", "bigint": "long", "real": "float",
                   "double precision": "double", "boolean": "boolean", "text": "string",
                   "character varying": "string"}
_NUMERIC = re.compile(r"^numeric\((\d+)(?:,(\d+))?\)$")
MAX_DECIMAL_DIGITS = 38   # Iceberg's decimal(P,S): P <= 38
# the last time 64-bit microseconds since 1970 hold (PostgreSQL's timestamps go on to 294276 AD:
# a later one failed the whole load with "bigint out of range" before it was refused), less one:
# PostgreSQL's extract(epoch) of the last one itself takes a numeric division that rounds it
# (...775807 comes out ...775800)
LAST_MICROSECOND = "294247-01-10 04:00:54.775806"


@dataclass(frozen=True)
class LakeColumn:
    """One column's Iceberg type and how its values travel.

    `read` is the source expression (`{c}` is the quoted column) whose value Spark receives;
    `spark` turns it (`{v}`) into the column's Spark value; `refuse` is a source predicate true
    for a value the type cannot hold, and `why` says what it is."""
    name: str
    iceberg: str           # Iceberg type: int, long, decimal(10,2), string, list<int>, timestamptz, ...
    spark: str             # Spark SQL expression of the value
    read: str              # source SQL expression
    as_text: bool = False  # stored as the source's exact text
    refuse: str | None = None
    why: str | None = None
    read_nulls_refused: bool = False   # `read` is NULL where `refuse` holds (no CASE needed around it)

    @property
    def spark_type(self) -> str:
        if self.iceberg.startswith("list<"):
            return f"array<{_SPARK[self.iceberg[5:-1]]}>"
        if self.iceberg.startswith("decimal"):
            return self.iceberg
        return _SPARK[self.iceberg]


def base_type(pg_type: str) -> str:
    """The type without its modifiers: character varying(20) -> character varying,
    timestamp(3) with time zone -> timestamp with time zone."""
    return re.sub(r"\(\d+(?:,\d+)?\)", "", pg_type).strip()


def lake_column(col: Column) -> LakeColumn:
    """Spark receives each value in the type it writes (a cast that changes nothing is never
    asked for: Spark 4.0's optimizer breaks on a no-op cast of a JDBC varchar)."""
    t = col.type
    if t.endswith("[]"):
        element = base_type(t[:-2])
        if element in _ARRAY_ELEMENTS:
            inner = _ARRAY_ELEMENTS[element]
            textual = inner == "string"
            return LakeColumn(col.name, f"list<{inner}>",
                              "cast({v} as array<int>)" if element == "smallint" else "{v}",
                              "{c}::text[]" if textual else "{c}",
                              refuse="array_ndims({c}) > 1 OR array_lower({c}, 1) <> 1",
                              why="an array with more than one dimension or a lower bound other than 1 (an "
                                  "Iceberg list holds neither)")
        return _text(col)
    m = _NUMERIC.match(t)
    if m:
        precision, scale = int(m.group(1)), int(m.group(2) or 0)
        if precision > MAX_DECIMAL_DIGITS:
            return _text(col)
        dec = f"decimal({precision},{scale})"
        # NULLIF keeps the declared precision, which JDBC reports to Spark (a CASE loses it, and
        # a cast back to it costs a rounding of every value: 5% of the read of tests/bench/iceberg.py)
        return LakeColumn(col.name, dec, "{v}", "NULLIF({c}, 'NaN')", refuse="{c} = 'NaN'",
                          why="NaN (an Iceberg decimal cannot hold it)", read_nulls_refused=True)
    base = base_type(t)
    iceberg = _SCALARS.get(base)
    if iceberg is None:
        return _text(col)
    if iceberg == "date":
        return LakeColumn(col.name, "date", "date_add(DATE'1970-01-01', {v})",
                          "({c} - DATE '1970-01-01')",
                          refuse="NOT isfinite({c})", why="infinity (an Iceberg date cannot hold it)")
    if iceberg in ("timestamp", "timestamptz"):
        value = "timestamp_micros({v})" if iceberg == "timestamptz" else "cast(timestamp_micros({v}) as timestamp_ntz)"
        last = f"{LAST_MICROSECOND}{'+00' if iceberg == 'timestamptz' else ''}"
        return LakeColumn(col.name, iceberg, value, "(extract(epoch FROM {c}) * 1000000)::bigint",
                          refuse=f"NOT isfinite({{c}}) OR {{c}} > '{last}'",
                          why=f"infinity or a time after {LAST_MICROSECOND} (an Iceberg {iceberg} cannot hold it: "
                              f"64-bit microseconds since 1970)")
    if iceberg == "string":
        return _text(col)
    if base == "smallint":
        return LakeColumn(col.name, "int", "cast({v} as int)", "{c}")
    return LakeColumn(col.name, iceberg, "{v}", "{c}")


# types whose cast to text is their output function (PostgreSQL has no cast of them to text, so it
# converts through their text): the cast is the cheapest way to their exact text
_OUTPUT_TEXT_CAST = ("uuid", "json", "jsonb")


def _text(col: Column) -> LakeColumn:
    """The type's output text (a cast to text is not always that: inet drops nothing through its
    output function but prints its netmask through text(); char(n) keeps its padding). concat()
    prints a value by its type's output function, like format('%s'), without parsing a format
    string for every value (format cost 15% of the read of tests/bench/iceberg.py)."""
    base = base_type(col.type)
    textual = base in ("text", "character varying", "citext", "name")
    read = ("{c}::text" if textual or base in _OUTPUT_TEXT_CAST else
            "CASE WHEN {c} IS NULL THEN NULL ELSE concat({c}) END")
    return LakeColumn(col.name, "string", "{v}", read, as_text=not textual)


def lake_columns(shape: TableShape) -> list[LakeColumn]:
    """The written columns (generated ones included: their values are data to a lake reader)."""
    return [lake_column(c) for c in shape.columns]


def refused_value_message(label: str, col: LakeColumn, key_text: str) -> str:
    return (f"{label}: column {col.name} holds {col.why} at key {key_text}; nothing was committed. Change the "
            f"value at the source, or exclude the column (exclude_columns) and reload")


BAD_FLAG = "__tl_bad_{}"


def spark_literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def spark_ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def spark_projection(label: str, shape: TableShape, columns: list[LakeColumn]) -> list[str]:
    """Spark SQL expressions turning the read columns (lake_read_query) into the table's values;
    a value the column's type cannot hold raises, naming the table, column and key, so the
    write fails before its commit."""
    keys = list(shape.primary_key)
    key_text = ("concat_ws(', ', " + ", ".join(f"concat({spark_literal(k + '=')}, cast({spark_ident(k)} as string))"
                                               for k in keys) + ")") if keys else "'(no key)'"
    out = []
    for i, col in enumerate(columns):
        value = col.spark.replace("{v}", spark_ident(col.name))
        if col.refuse:
            message = refused_value_message(label, col, "\x00").split("\x00")
            value = (f"CASE WHEN {BAD_FLAG.format(i)} THEN raise_error(concat({spark_literal(message[0])}, {key_text}, "
                     f"{spark_literal(message[1])})) ELSE {value} END")
        out.append(f"{value} AS {spark_ident(col.name)}")
    return out


def lake_column_from_text(col: Column) -> LakeColumn:
    """The same Iceberg type, for a source that reads every value as the exact text PostgreSQL's
    input function of the column's type reads (a MariaDB source: engines.mariadb.types): Spark parses
    that text (numbers, dates and times exactly; bytes from their \\x-hex). `read` is the source's
    own text expression, which the engine supplies."""
    lake = lake_column(col)
    if lake.iceberg == "string" or lake.iceberg.startswith("list<"):
        return LakeColumn(col.name, "string", "{v}", "{c}", as_text=lake.as_text or lake.iceberg != "string")
    value = {"binary": "unhex(substr({v}, 3))"}.get(lake.iceberg, f"cast({{v}} as {lake.spark_type})")
    return LakeColumn(col.name, lake.iceberg, value, "{c}")


PROMOTIONS = {("int", "long"), ("float", "double")}   # Iceberg's type promotions (and a decimal's precision)


def _decimal(iceberg: str) -> tuple[int, int] | None:
    m = re.match(r"^decimal\((\d+),(\d+)\)$", iceberg)
    return (int(m.group(1)), int(m.group(2))) if m else None


def iceberg_widening(old: str, new: str) -> str | None:
    """How an Iceberg column follows a source column widened from `old` to `new` (PostgreSQL type
    names; core.schema_drift decided it is a widening): "same" (the Iceberg type does not change),
    the Iceberg type to promote it to, or None when Iceberg cannot (a decimal's scale, int to
    decimal, decimal to text): only a reload can."""
    was, now = lake_column(Column("c", old, False)).iceberg, lake_column(Column("c", new, False)).iceberg
    if was == now:
        return "same"
    if (was, now) in PROMOTIONS:
        return now
    a, b = _decimal(was), _decimal(now)
    if a and b and a[1] == b[1] and b[0] >= a[0]:
        return now
    return None
