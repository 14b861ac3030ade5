"""A throwaway source, never shipped: a SQLite database file.

It is here to show what a third source costs, and that the source contract runs against it
unchanged: this one module (its engine, its pipe and its verify side) plus its lines in the
support tables, which the contract registers for its own run (`register`) — nothing in
plugins/tideline knows it. It declares batch mode, verify and a piped load, and implements those
interfaces only (engines.interfaces): no change capture, no chunked load.

What it carries, and how:
- columns: integers (bigint), text (char/varchar/text: SQLite never pads), decimals of up to 15
  digits (numeric(p,s): SQLite keeps them as doubles, exact to 15 digits, printed with their
  scale), and blobs (bytea). Anything else is refused, naming the column.
- a consistent snapshot: `BEGIN IMMEDIATE` takes the database's write lock, so no writer commits
  while the load reads, whichever connection reads (writers wait: SQLite has no exported snapshot).
- verify: the canonical fingerprint (core.verify_canonical): each column's canonical text, MD5
  and XOR as Python functions registered on the connection; keys of integers or text (SQLite's
  BINARY collation orders text by its UTF-8 bytes, as PostgreSQL's "C" does).
"""
from __future__ import annotations

import hashlib
import re
import sqlite3
from datetime import datetime, timezone

from tideline import engines
from tideline.core import doctor_checks as dc
from tideline.core import source_shapes, support
from tideline.core.errors import SourceError
from tideline.core.table_shape import Column, TableShape
from tideline.core.verify_canonical import NUL, SEP
from tideline.core.verify_plan import TextKeyRanges
from tideline.core.verify_side import VerifySide
from tideline.engines import (PipesRows, ReadsIntervals, ReadsSnapshots, Snapshot, SourceCapabilities, SourceEngine,
                              SourceSpec, VerifiesSource)
from tideline.pipes.copy_pipe import Pipe, PipeResult

SPEC = SourceSpec(kind="sqlite", conn_types=("sqlite",), implementation=f"{__name__}:SqliteEngine",
                  description="a SQLite database file (a throwaway source of the contract suite)",
                  capabilities=SourceCapabilities(batch=True, verifies=True, pipes=True))
# its lines in the support tables: the core's facts of it, and what works into which target
FACTS = support.SourceFacts((), (), "sqlite", False)
SUPPORT = {("sqlite", "postgres"): frozenset({"batch", "verify"})}


def register(monkeypatch, spark=None) -> None:
    """Its package's declaration and its support lines, for one test: monkeypatch undoes the
    lines, and the caller unregisters the kind (engines.unregister("sqlite")). Given a Spark
    session, this module is shipped to its executors (a pipe's source travels to them pickled)."""
    if spark is not None:
        spark.sparkContext.addPyFile(__file__)
    engines.kinds()
    monkeypatch.setitem(support.SOURCES, "sqlite", FACTS)
    for pair, modes in SUPPORT.items():
        monkeypatch.setitem(support.SUPPORT, pair, modes)
    engines.register(SPEC)
    engines.check_support()


class _Cursor(sqlite3.Cursor):
    """A DB-API cursor the callers' `with conn.cursor() as cur` and `execute(query, None)` suit."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def execute(self, sql, parameters=None):
        return super().execute(sql) if parameters is None else super().execute(sql, parameters)


class _Connection(sqlite3.Connection):
    def cursor(self, factory=_Cursor):
        return super().cursor(factory)


class _Xor:
    def __init__(self):
        self.value = 0

    def step(self, v):
        if v is not None:
            self.value ^= v

    def finalize(self):
        return self.value


def _md5_64(text: str) -> int:
    """The first 64 bits of the text's MD5, as SQLite's signed integer (PostgreSQL's side reads
    the same bits as a signed bigint; both are compared modulo 2^64)."""
    v = int(hashlib.md5(text.encode()).hexdigest()[:16], 16)
    return v - (1 << 64) if v >= 1 << 63 else v


def connect_file(path: str, autocommit: bool = True) -> sqlite3.Connection:
    conn = sqlite3.connect(path, factory=_Connection, isolation_level=None if autocommit else "DEFERRED",
                           check_same_thread=False, timeout=30)
    conn.create_function("tl_md5_64", 1, _md5_64, deterministic=True)
    conn.create_aggregate("tl_bit_xor", 1, _Xor)
    return conn


def q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _column(name: str, declared: str, not_null: bool, table: str) -> Column:
    """A SQLite column by its declared type: the target's type, its COPY text and its canonical text."""
    d, c = declared.strip().lower(), q(name)
    if "int" in d:
        return Column(name, "bigint", not_null, read=f"CAST({c} AS TEXT)", canon=f"CAST({c} AS TEXT)")
    size = re.search(r"\((\d+)(?:\s*,\s*(\d+))?\)", d)
    if re.match(r"(var)?char|character|text|clob|nvarchar|varying", d) or d == "":
        typ = f"character varying({size.group(1)})" if size and "char" in d else "text"
        return Column(name, typ, not_null, read=f"CAST({c} AS TEXT)", canon=f"CAST({c} AS TEXT)")
    if d.startswith(("decimal", "numeric")) and size and int(size.group(1)) <= 15:
        p, s = int(size.group(1)), int(size.group(2) or 0)
        text = f"CASE WHEN {c} IS NULL THEN NULL ELSE printf('%.{s}f', {c}) END"
        return Column(name, f"numeric({p},{s})", not_null, read=text, canon=text)
    if d == "blob":
        text = f"'\\x' || lower(hex({c}))"
        return Column(name, "bytea", not_null, read=text, canon=text)
    raise SourceError(f"{table}.{name}: the SQLite source carries integer, text, decimal(p,s) with p <= 15 and "
                      f"blob columns; {name} is {declared or 'untyped'}. Drop the column from the table, or "
                      f"carry the table from another source", table=table)


def _copy_text(value) -> str:
    if value is None:
        return "\\N"
    return str(value).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


class _Lines:
    """File-like reader over a query's rows as COPY text, for psycopg2's copy_expert."""

    def __init__(self, rows):
        self._rows, self.rows, self.bytes = rows, 0, 0

    def read(self, size: int = -1) -> bytes:  # noqa: ARG002 — psycopg2 takes chunks of any length
        batch = self._rows.fetchmany(5000)
        data = "".join("\t".join(_copy_text(v) for v in row) + "\n" for row in batch).encode()
        self.rows += len(batch)
        self.bytes += len(data)
        return data

    readline = read


class SqlitePipeSource:
    """A read's rows, as COPY text, into the target's COPY (a load's partition, a batch interval)."""

    def __init__(self, path: str):
        self.path = path

    def pipe_into(self, read_sql: str, target_cur, copy_in_sql: str, conn=None) -> PipeResult:
        own = conn is None
        conn = connect_file(self.path) if own else conn
        try:
            lines = _Lines(conn.execute(read_sql))
            target_cur.copy_expert(copy_in_sql, lines)
            return PipeResult(lines.rows, target_cur.rowcount, lines.bytes)
        finally:
            if own:
                conn.close()


class SqliteDialect(TextKeyRanges):
    """The canonical fingerprint SQL of one table in SQLite (verify's source side)."""

    def __init__(self, shape: TableShape, schema: str):
        self.shape, self.schema = shape, schema
        for k in shape.primary_key:
            if shape.column(k).type not in ("bigint", "text") and not shape.column(k).type.startswith("character"):
                raise SourceError(f"{shape.name}: verify of a SQLite table cuts key ranges on integer or text keys; "
                                  f"key column {k} is {shape.column(k).type}", table=shape.name)
        canon = [f"IFNULL({shape.column(c).canon}, char({ord(NUL)}))" for c in shape.column_names]
        self.hash = f"tl_md5_64({f' || char({ord(SEP)}) || '.join(canon)})"

    def _table(self) -> str:
        return f"{q(self.schema)}.{q(self.shape.name)}"

    def _key_row(self) -> str:
        return "(" + ", ".join(q(k) for k in self.shape.primary_key) + ")"

    def _literal(self, key: str, value: str) -> str:
        text = "'" + value.replace("'", "''") + "'"
        return f"CAST({text} AS INTEGER)" if self.shape.column(key).type == "bigint" else text

    def _literal_row(self, values: tuple[str, ...]) -> str:
        return "(" + ", ".join(self._literal(k, v) for k, v in zip(self.shape.primary_key, values)) + ")"

    def fingerprint_query(self, pred: str, boundaries: list[tuple[str, ...]] | None = None) -> str:
        if boundaries is None:
            return f"SELECT 0, COUNT(*), tl_bit_xor({self.hash}) FROM {self._table()} WHERE {pred}"
        return (f"SELECT {self.bucket_case(boundaries)} AS bucket, COUNT(*), tl_bit_xor({self.hash}) "
                f"FROM {self._table()} WHERE {pred} GROUP BY bucket")

    def _key_texts(self) -> str:
        return ", ".join(self.shape.column(k).canon for k in self.shape.primary_key)

    def rows_query(self, pred: str) -> str:
        return f"SELECT {self._key_texts()}, {self.hash} FROM {self._table()} WHERE {pred}"

    def boundaries_query(self, pred: str, parts: int, sample_percent: float | None = None) -> str:
        keys = self.shape.primary_key
        texts = ", ".join(f"{self.shape.column(k).canon} AS k{i}" for i, k in enumerate(keys))
        outs, order = ", ".join(f"k{i}" for i in range(len(keys))), ", ".join(q(k) for k in keys)
        return (f"SELECT {outs} FROM (SELECT {outs}, b, ROW_NUMBER() OVER (PARTITION BY b ORDER BY o) AS rn FROM "
                f"(SELECT {texts}, ROW_NUMBER() OVER (ORDER BY {order}) AS o, "
                f"NTILE({int(parts)}) OVER (ORDER BY {order}) AS b FROM {self._table()} WHERE {pred}) x) y "
                f"WHERE rn = 1 AND b > 1 ORDER BY b")


class SqliteSide(VerifySide):
    fingerprints = ("canonical",)

    def canonical_dialect(self, shape: TableShape, schema: str) -> SqliteDialect:
        return SqliteDialect(shape, schema)


class SqliteEngine(SourceEngine, ReadsSnapshots, PipesRows, ReadsIntervals, VerifiesSource):
    kind, label = "sqlite", "SQLite"
    errors = (sqlite3.Error,)
    pipes_in_threads = True   # a read is one statement: the driver pipes it, no Spark session needed

    @property
    def path(self) -> str:
        return self.source.host

    # ---------------------------------------------------------------- SourceEngine
    def connect(self, autocommit: bool = False, connect_timeout: int | None = None):
        return connect_file(self.path)   # transactions are begun explicitly (open_snapshot)

    def jdbc_url(self) -> str:
        return f"jdbc:sqlite:{self.path}"

    def jdbc_properties(self) -> dict[str, str]:
        return {"driver": "org.sqlite.JDBC"}

    def relation(self, conn, schema: str, table: str) -> source_shapes.Relation | None:
        row = conn.execute(f"SELECT type FROM {q(schema)}.sqlite_master WHERE name = ? AND type IN ('table', 'view')",
                           (table,)).fetchone()
        if row is None:
            return None
        keyed = any(r[5] for r in conn.execute(f"PRAGMA {q(schema)}.table_info({q(table)})"))
        return source_shapes.Relation(schema, table, relkind="r" if row[0] == "table" else "v",
                                      replica_identity="f", has_primary_key=keyed)

    def describe(self, conn, schema: str, table: str, tcfg=None, check_key: bool = True,
                 for_stream: bool = False) -> TableShape:
        info = list(conn.execute(f"PRAGMA {q(schema)}.table_info({q(table)})"))
        if not info:
            raise SourceError(f"{schema}.{table}: no such table in the SQLite database {self.path}", table=table)
        columns = tuple(_column(name, declared, bool(notnull), table) for _cid, name, declared, notnull, _d, _pk in info)
        key = [r[1] for r in sorted((r for r in info if r[5]), key=lambda r: r[5])]
        configured = getattr(tcfg, "primary_key", None) if check_key else None
        return source_shapes.finish_shape(f"{schema}.{table}", TableShape(schema, table, columns, tuple(key)),
                                          configured, tcfg)

    def doctor_checks(self, cfg, streaming: int) -> list:
        try:
            conn = connect_file(f"file:{self.path}?mode=ro")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            conn.close()
            return [dc.Check("source", "database file", dc.PASS, f"{self.path} reads")]
        except sqlite3.Error as exc:
            return [dc.Check("source", "database file", dc.FAIL, f"{self.path}: {exc}",
                             "give the connection's host the path of a SQLite database file this user can read")]

    # ---------------------------------------------------------------- ReadsSnapshots
    def _select(self, shape: TableShape, where: str | None) -> str:
        cols = ", ".join(shape.column(c).read for c in shape.written_columns)
        return f"SELECT {cols} FROM {q(shape.schema)}.{q(shape.name)} t" + (f" WHERE {where}" if where else "")

    def read_query(self, conn, shape: TableShape, where: str | None = None) -> str:
        return f"({self._select(shape, where)}) AS tideline_read"

    def open_snapshot(self, conn, shape: TableShape, parts: int) -> Snapshot:
        """The write lock, held until close_snapshot: one partition reads the whole table (a file
        read by one reader; more would wait on the same disk)."""
        conn.execute("BEGIN IMMEDIATE")
        rows = conn.execute(f"SELECT count(*) FROM {q(shape.schema)}.{q(shape.name)}").fetchone()[0]
        at = datetime.now(timezone.utc)
        return Snapshot(f"sqlite write lock {at.isoformat()}", at, None, rows, ["1=1"])

    # ---------------------------------------------------------------- PipesRows
    def pipe(self, conn, shape: TableShape, where: str | None, predicates: list[str], session_init: str | None):
        reads = [self._select(shape, f"({where}) AND ({p})" if where else p) for p in predicates]
        return Pipe(SqlitePipeSource(self.path), reads, "text")

    # ---------------------------------------------------------------- ReadsIntervals
    def cursor_bounds(self, conn, shape: TableShape, col, current, start, end, lag_s: int, time: bool):
        """Integer cursors only: everything above the cursor, up to the largest value now ([lo, hi))."""
        if time:
            raise SourceError(f"{shape.name}: the SQLite source's batch mode takes an integer cursor_column; "
                              f"{col.name} is {col.type}", table=shape.name)
        top = conn.execute(f"SELECT max({q(col.name)}) FROM {q(shape.schema)}.{q(shape.name)}").fetchone()[0]
        if top is None or (current is not None and int(top) + 1 <= int(current)):
            return current, current, None, current
        lower, upper = current, str(int(top) + 1)
        where = f"t.{q(col.name)} < {upper}" + (f" AND t.{q(col.name)} >= {int(lower)}" if lower is not None else "")
        return lower, upper, where, upper

    def interval_read(self, conn, shape: TableShape, where: str, parts: int):
        return self.read_query(conn, shape, where), ["1=1"], None

    # ---------------------------------------------------------------- VerifiesSource
    def verify_side(self, label: str = "source") -> SqliteSide:
        return SqliteSide(connect_file(self.path), label, self.errors)

    def copy_out(self, conn, shape: TableShape, where: str, out) -> int:
        lines = _Lines(conn.execute(self._select(shape, where)))
        while chunk := lines.read():
            out.write(chunk)
        return lines.rows

    def key_ranges_where(self, conn, shape: TableShape, ranges: list) -> str:
        d = SqliteDialect(shape, shape.schema)
        return " OR ".join(f"({d.range_predicate(r)})" for r in ranges)

    def range_where(self, conn, shape: TableShape, column: str, lo: str, hi: str, as_time: bool) -> str:
        if as_time:
            raise SourceError(f"{shape.name}: the SQLite source keeps no time type to repair a time range by",
                              table=shape.name)
        d = SqliteDialect(shape, shape.schema)
        return f"{q(column)} BETWEEN {d._literal(column, lo)} AND {d._literal(column, hi)}"


def ddl_connection(path: str):
    """A superuser-like connection for the contract's DDL and rows: `%s` placeholders, as psycopg2's."""

    class Admin:
        def __init__(self):
            self.conn = connect_file(path)

        def cursor(self):
            conn = self.conn

            class Cur:
                def __enter__(self):
                    return self

                def __exit__(self, *exc):
                    pass

                def execute(self, sql, params=None):
                    conn.execute(sql.replace("%s", "?"), params or ())
            return Cur()

        def close(self):
            self.conn.close()
    return Admin()

