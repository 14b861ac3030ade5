"""MariaDB/MySQL → PostgreSQL: one rule per source type, used by the full load, the stream and
schema drift alike, so a value lands the same whichever way it arrives.

Each rule gives
- the target column type (exact: nothing is narrowed, rounded or re-zoned);
- how the full load reads it: a MariaDB expression whose text is what PostgreSQL's input
  function of the target type reads back to the same value (COPY text, as for PostgreSQL sources);
- how the stream carries it: Debezium's representation in the change event (`Encoding`), which
  `core.debezium.value_expr` turns into the same target value (core.wire_encodings).

The rules, in words (README "MariaDB sources" repeats them):
- integers: signed keep their width; unsigned take the next wider type (bigint unsigned →
  numeric(20,0), it does not fit bigint). tinyint(1)/BOOLEAN is a number in MariaDB (it holds 2 or
  -5 as well): it becomes smallint, not boolean, so no value is lost.
- decimal(p,s) → numeric(p,s); float → real; double → double precision (same IEEE values).
- bit(n) → bit(n).
- char(n) → character(n), varchar(n) → character varying(n), *text → text (utf8mb4: emoji kept).
- binary/varbinary/*blob → bytea.
- date → date; datetime(p) → timestamp(p) without time zone; timestamp(p) → timestamp(p) with
  time zone (MariaDB stores it in UTC; read in UTC).
- time(p) → interval: MariaDB's time is a duration (-838:59:59 … 838:59:59), PostgreSQL's time
  cannot hold negative or > 24 h values; interval holds them all exactly.
- year → smallint (0000 → 0); enum and set → text (the label / the comma-separated labels); json → json
  (MariaDB keeps JSON as text; json keeps it byte for byte).
- zero dates (0000-00-00 …): NULL; in a NOT NULL column, which cannot hold NULL, the column's
  default when that is a real date, else 1970-01-01 (00:00:00) — what Debezium's binlog reader
  emits for them, so both paths agree. Years 0-99 stay years 0-99 (the connector's two-digit-year
  adjuster is off).
- anything else (geometry, …) is refused with the column named.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_CAST = "CAST({c} AS CHAR)"   # text in the connection's utf8mb4, whatever the column's character set
_DATETIME_CANON = "DATE_FORMAT({v}, '%Y-%m-%d %H:%i:%s.%f')"

from tideline.core.wire_encodings import (BITS_LE_HEX, BOOL_BIT, EPOCH_DAYS, EPOCH_MICROS, EPOCH_MILLIS, HEX,
                                         MICRO_DURATION, TEXT, YEAR, ZONED)


@dataclass(frozen=True)
class Mapping:
    pg_type: str
    encoding: str
    read: str          # MariaDB expression, {c} = the quoted column
    canon: str = _CAST  # MariaDB expression of the value's canonical text (verify; see target_canon)


class UnsupportedType(ValueError):
    """A source type with no exact PostgreSQL counterpart."""


_INT = {"tinyint": ("smallint", "smallint"), "smallint": ("smallint", "integer"),
        "mediumint": ("integer", "integer"), "int": ("integer", "bigint"), "integer": ("integer", "bigint"),
        "bigint": ("bigint", "numeric(20,0)")}
_HEX_READ = "CONCAT('\\\\x', HEX({c}))"


def _zero_date_read(not_null: bool, default: str | None, epoch: str, zone: str = "") -> str:
    """The column's text, `zone` appended (TIMESTAMP is read in UTC); a zero date reads as NULL,
    or in a NOT NULL column as its literal default (if a real date), else the epoch — Debezium's
    fallback for a value its column cannot be null for."""
    literal = re.fullmatch(r"'(\d{4}-\d{2}-\d{2}[^']*)'", (default or "").strip())
    if not not_null:
        zero = "NULL"
    elif literal and not literal.group(1).startswith("0000"):
        zero = f"'{literal.group(1)}{zone}'"
    else:
        zero = f"'{epoch}{zone}'"
    value = f"CONCAT(CAST({{c}} AS CHAR), '{zone}')" if zone else "CAST({c} AS CHAR)"
    return f"CASE WHEN {{c}} IS NULL THEN NULL WHEN CAST({{c}} AS CHAR) LIKE '0000-00-00%' THEN {zero} ELSE {value} END"


def map_column(column_type: str, not_null: bool, default: str | None = None) -> Mapping:
    """The rule for one column, from information_schema.COLUMNS (COLUMN_TYPE e.g. `int(10) unsigned`,
    `datetime(3)`, `enum('a','b')`; COLUMN_DEFAULT as MariaDB quotes it, e.g. `'2000-01-01'`)."""
    ct = column_type.strip().lower()
    m = re.match(r"([a-z]+)\s*(?:\(([^)]*)\))?\s*(.*)$", ct)
    if not m:
        raise UnsupportedType(column_type)
    base, args, rest = m.group(1), m.group(2), m.group(3)
    unsigned = "unsigned" in rest
    if base in _INT:
        return Mapping(_INT[base][1 if unsigned else 0], TEXT, _CAST)
    if base in ("decimal", "numeric", "dec", "fixed"):
        p, _, s = (args or "10,0").partition(",")
        return Mapping(f"numeric({int(p)},{int(s or 0)})", TEXT, _CAST)
    if base == "float":
        return Mapping("real", TEXT, "CAST(CAST({c} AS DOUBLE) AS CHAR)", "CAST(CAST({c} AS DOUBLE) AS CHAR)")
    if base in ("double", "real"):
        return Mapping("double precision", TEXT, "CAST({c} AS CHAR)")
    if base == "bit":
        n = int(args or 1)
        return Mapping(f"bit({n})", BOOL_BIT if n == 1 else BITS_LE_HEX, f"LPAD(BIN({{c}}), {n}, '0')",
                       f"LPAD(BIN({{c}}), {n}, '0')")
    if base == "char":   # read as VARCHAR: Spark pads a CHAR(n) result to n itself (readSideCharPadding)
        return Mapping(f"character({int(args or 1)})", TEXT, _CAST)
    if base == "varchar":
        return Mapping(f"character varying({int(args)})", TEXT, "{c}")
    if base in ("tinytext", "text", "mediumtext", "longtext"):
        return Mapping("text", TEXT, "{c}")
    if base in ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"):
        return Mapping("bytea", HEX, _HEX_READ, "CONCAT('\\\\x', LOWER(HEX({c})))")
    if base == "date":
        zero_read = _zero_date_read(not_null, default, "1970-01-01")
        return Mapping("date", EPOCH_DAYS, zero_read, zero_read)
    if base == "datetime":
        p = int(args or 0)
        zero_read = _zero_date_read(not_null, default, "1970-01-01 00:00:00")
        return Mapping(f"timestamp({p}) without time zone", EPOCH_MILLIS if p <= 3 else EPOCH_MICROS,
                       zero_read, _DATETIME_CANON.replace("{v}", zero_read))
    if base == "timestamp":
        p = int(args or 0)
        return Mapping(f"timestamp({p}) with time zone", ZONED,
                       _zero_date_read(not_null, default, "1970-01-01 00:00:00", zone="+00"),
                       _DATETIME_CANON.replace("{v}", _zero_date_read(not_null, default, "1970-01-01 00:00:00")))
    if base == "time":
        return Mapping("interval", MICRO_DURATION, _CAST, "CAST(CAST(TIME_TO_SEC({c}) * 1000000 AS SIGNED) AS CHAR)")
    if base == "year":
        return Mapping("smallint", YEAR, _CAST, "CAST({c} + 0 AS CHAR)")
    if base in ("enum", "set"):   # reported as CHAR(longest label): read as VARCHAR, unpadded
        return Mapping("text", TEXT, _CAST)
    if base == "json":
        return Mapping("json", TEXT, "{c}")
    raise UnsupportedType(column_type)


def quote(name: str) -> str:
    """A MariaDB identifier, quoted."""
    return "`" + name.replace("`", "``") + "`"


def read_expr(mapping: Mapping, quoted_column: str) -> str:
    return mapping.read.format(c=quoted_column)


def canon_expr(mapping: Mapping, quoted_column: str) -> str:
    return mapping.canon.format(c=quoted_column)


def key_sql(pg_type: str) -> tuple[str, str] | None:
    """How verify compares a key column in MariaDB, in the order PostgreSQL's target uses for it
    (numbers by value, text by its UTF-8 bytes as in the "C" collation, date-times by time, bytes
    by bytes): (the key expression, {c} = the quoted column; a literal of its canonical text,
    {lit} = the quoted text). None: verify cannot cut ranges on a key of this type."""
    if pg_type in ("smallint", "integer", "bigint") or pg_type.startswith("numeric"):
        return "{c}", "CAST({lit} AS DECIMAL(65,30))"
    if pg_type.startswith(("character", "text")):
        return "CAST(CONVERT({c} USING utf8mb4) AS BINARY)", "CAST({lit} AS BINARY)"
    if pg_type == "date" or pg_type.startswith("timestamp"):
        return "{c}", "{lit}"
    if pg_type == "bytea":
        return "{c}", "UNHEX(SUBSTRING({lit}, 3))"
    return None


def existing_rows_value(default: str | None, mapping: Mapping) -> tuple[str | None, bool, str | None]:
    """(default, has_missing, missing_value) of a column, as schema drift needs them: a column
    added with a literal default holds that value in every existing row (MariaDB writes no change
    events for them), which the target's rows get too; an expression default (CURRENT_TIMESTAMP,
    …) cannot be known, and adding such a column needs a reload."""
    if default is None or default.upper() == "NULL":
        return None, False, None
    text = re.fullmatch(r"'((?:[^']|'')*)'", default)
    number = re.fullmatch(r"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?", default, re.I)
    if text and not text.group(1).startswith("0000-00-00"):
        value = text.group(1).replace("''", "'")
    elif number:
        value = default
    else:
        return default, False, None
    if mapping.encoding == ZONED:
        value += "+00"   # TIMESTAMP literals are UTC here (the stack and the reads run in UTC)
    return default, True, value
