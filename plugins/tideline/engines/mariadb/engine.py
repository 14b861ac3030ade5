"""MariaDB (and MySQL) sources: information_schema catalog, per-partition consistent snapshots,
binlog capture by Debezium's MariaDB connector. Types follow engines.mariadb.types.

The full-load handover without a shared snapshot
------------------------------------------------
MariaDB cannot export a snapshot to other connections, so each Spark partition opens its own
`START TRANSACTION WITH CONSISTENT SNAPSHOT`, at its own moment. The result is exact anyway:

1. Before the load, the connector is streaming, and its position is proven to be at or before a
   marker row written then (`wait_capture_ready`): every change committed after the marker
   reaches the topic.
2. The full load records the topic's end offsets *before* any partition opens its snapshot
   (FullLoad.load_table does this for every engine). Every change committed after a partition's
   snapshot T_p was committed after the offsets were recorded, so its event sits at or above
   them: the stream replays it.
3. Every key lives in exactly one key-range partition, and all events of a key are in one Kafka
   partition, in commit order. Each event carries the full row (binlog_row_image=FULL) or the key
   of a delete. Replaying a key's events from the recorded offsets therefore ends in the state of
   its last event — or, if it had none after T_p, in the row as partition p read it. Events older
   than T_p that are replayed as well are overwritten by the later ones (or by the snapshot's
   row when the last of them is older: its effect is then exactly what the snapshot holds).

So each key converges to the source, whatever the partitions' snapshot moments. The GTID set at
the start is recorded in the state beside the offsets (source_position) for a person to correlate.
"""
from __future__ import annotations

import re

from tideline import sqlfiles
from tideline.engines.mariadb import types as mt
from tideline.core import source_shapes
from tideline.core.errors import SourceError, TransientError
from tideline.core.table_shape import CSV_QUOTE, KEY_ALIAS, Column, TableShape
from tideline.engines.base import SourceEngine
from tideline.engines.interfaces import (Captures, HoldsPosition, LoadsInChunks, PipesRows, ReadsIntervals,
                                         ReadsSnapshots, Snapshot, VerifiesSource)
from tideline.engines.mariadb.capture import MariaDbCapture, capture_problems
from tideline.engines.mariadb.tls import mariadb_tls
from tideline.engines.mariadb.keys import integer_type, key_ranges

FETCH_SIZE = 10_000
_TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f"


q = mt.quote

# Every session reads in UTC, and string literals with backslash escapes whatever the server's
# sql_mode (the read expressions' '\\x' and the pipe's COPY escapes are written so).
SESSION_INIT = "SET time_zone = '+00:00', sql_mode = REPLACE(@@sql_mode, 'NO_BACKSLASH_ESCAPES', '')"

# Storage engines whose rows live in another server (their changes never reach this binlog).
FOREIGN_ENGINES = frozenset({"CONNECT", "FEDERATED", "FEDERATEDX", "SPIDER"})


class MariaDbEngine(MariaDbCapture, SourceEngine, ReadsSnapshots, LoadsInChunks, PipesRows, Captures,
                     HoldsPosition, ReadsIntervals, VerifiesSource):
    kind, label = "mariadb", "MariaDB"
    quote = staticmethod(q)

    def __init__(self, source):
        super().__init__(source)
        self.tls = mariadb_tls(source)

    @property
    def errors(self):
        import pymysql
        return (pymysql.err.Error,)

    def verify_side(self, label: str = "source"):
        from tideline.engines.mariadb.verify import MariaDbSide
        return MariaDbSide(self.connect(autocommit=True), label, self.errors)

    def connect_args(self, connect_timeout: int | None = None) -> dict:
        """pymysql's arguments for a session of this source (TLS aside: an SSL context)."""
        s = self.source
        return {"host": s.host or "localhost", "port": s.port or 3306, "user": s.login or "",
                "password": s.password or "", "database": s.schema, "charset": "utf8mb4",
                "connect_timeout": connect_timeout or 10, "init_command": SESSION_INIT}

    def connect(self, autocommit: bool = False, connect_timeout: int | None = None):
        import pymysql
        s = self.source
        try:
            return pymysql.connect(**self.connect_args(connect_timeout), autocommit=autocommit,
                                   **({"ssl": self.tls.ssl_context()} if self.tls else {}))
        except pymysql.err.OperationalError as exc:
            raise TransientError(f"MariaDB source {s.conn_id!r} at {s.host}:{s.port}: {exc.args[-1]}") from None

    def jdbc_url(self) -> str:
        # jdbc:mysql (with permitMysqlScheme) so Spark picks its MySQL dialect: backtick quoting
        s = self.source
        return (f"jdbc:mysql://{s.host or 'localhost'}:{s.port or 3306}/{s.schema or ''}"
                f"?permitMysqlScheme&allowMultiQueries=true" + (f"&{self.tls.jdbc_query()}" if self.tls else ""))

    def jdbc_properties(self) -> dict[str, str]:
        return {"user": self.source.login or "", "password": self.source.password or "",
                "driver": "org.mariadb.jdbc.Driver", "fetchsize": str(FETCH_SIZE)}

    # ---------------------------------------------------------------- catalog

    def capture_settings(self, conn) -> dict:
        with conn.cursor() as cur:
            cur.execute(sqlfiles.load("mariadb/capture_settings"))
            log_bin, fmt, image, expire, gtid, server_id = cur.fetchone()
        return {"log_bin": bool(log_bin), "binlog_format": fmt, "binlog_row_image": image,
                "binlog_expire_logs_seconds": int(expire or 0), "gtid_binlog_pos": gtid, "server_id": server_id}

    def check_capture(self, conn, what: str) -> None:
        problems = capture_problems(self.capture_settings(conn))
        if problems:
            raise SourceError(f"{what}: MariaDB cannot be captured as configured: " + "; ".join(problems))

    def relation(self, conn, schema: str, table: str) -> source_shapes.Relation | None:
        """MariaDB's binlog carries every base table (partitioned ones under their own name) with
        full row images (checked server-wide): what varies per table is its kind and its key."""
        conn.ping(reconnect=True)
        with conn.cursor() as cur:
            cur.execute(sqlfiles.load("mariadb/source_relation"), {"schema": schema, "table": table})
            row = cur.fetchone()
        if row is None:
            return None
        table_type, engine, has_key = row
        kind = {"BASE TABLE": "r", "SYSTEM VERSIONED": "r", "VIEW": "v", "SEQUENCE": "S",
                "TEMPORARY": "r"}.get(table_type, "?")
        if kind == "r" and (engine or "").upper() in FOREIGN_ENGINES:
            kind = "f"
        return source_shapes.Relation(schema, table, relkind=kind, persistence="t" if table_type == "TEMPORARY"
                                      else "p", has_primary_key=bool(has_key))

    def describe(self, conn, schema: str, table: str, tcfg=None, check_key: bool = True,
                 for_stream: bool = False) -> TableShape:
        label = f"source table {schema}.{table}"
        params = {"schema": schema, "table": table}
        conn.ping(reconnect=True)   # a stream's idle connection outlives the server's wait_timeout
        with conn.cursor() as cur:
            cur.execute(sqlfiles.load("mariadb/source_table"), params)
            row = cur.fetchone()
            if row is None:
                raise SourceError(f"{label} does not exist, or the source connection's user may not read it. "
                                  f"Check the table name and source.schema (the database, {schema!r}); "
                                  f"GRANT SELECT ON {schema}.* TO <the source user>;")
            if row[0] != "BASE TABLE":
                raise SourceError(f"{label} is not a table ({row[0]}); only tables can be synced.")
            cur.execute(sqlfiles.load("mariadb/source_columns"), params)
            raw_columns = cur.fetchall()
            cur.execute(sqlfiles.load("mariadb/source_primary_key"), params)
            pk = tuple(r[0] for r in cur.fetchall())
        excluded = set(tcfg.exclude_columns) if tcfg is not None else set()
        columns, refused = [], []
        for name, column_type, not_null, default, extra, generation in raw_columns:
            if name in excluded:   # never read: kept only so the column selection can name it
                columns.append(Column(name, "text", False))
                continue
            if "GENERATED" in (extra or "").upper():
                refused.append(f"{name} ({column_type}, generated as {generation}): generated columns are not "
                               f"synced from MariaDB; leave it out with exclude_columns")
                continue
            try:
                m = mt.map_column(column_type, bool(not_null), default)
            except mt.UnsupportedType:
                refused.append(f"{name} ({column_type}): no exact PostgreSQL type; leave it out with "
                               f"exclude_columns, or convert it at the source")
                continue
            default, has_missing, missing = mt.existing_rows_value(default, m)
            columns.append(Column(name, m.pg_type, bool(not_null), default, has_missing, missing,
                                  encoding=m.encoding, read=mt.read_expr(m, q(name)),
                                  canon=mt.canon_expr(m, q(name))))
        if refused:
            raise SourceError(f"{label}: column(s) cannot be synced: " + "; ".join(refused), table=table)
        configured_pk = tcfg.primary_key if (tcfg is not None and check_key) else None
        return source_shapes.finish_shape(label, TableShape(schema, table, tuple(columns), pk), configured_pk, tcfg)

    # ---------------------------------------------------------------- full load

    def read_query(self, conn, shape: TableShape, where: str | None = None) -> str:
        keys = [f"t.{q(k)} AS {q(KEY_ALIAS.format(i))}" for i, k in enumerate(shape.primary_key)]
        cols = [f"{c.read.replace(q(c.name), 't.' + q(c.name))} AS {q(c.name)}" for c in shape.columns
                if c.generated is None]
        filtered = f" WHERE {where}" if where else ""
        return f"(SELECT {', '.join(keys + cols)} FROM {q(shape.schema)}.{q(shape.name)} t{filtered}) AS tideline_read"

    # a slice of ~4 MB is one GROUP_CONCAT value: a handful of Python calls per slice
    # (tests/bench/full_load_mariadb.py: 1M rows 6.8 -> 5.2-5.8 s, tool CPU 4.5 -> 2.5 s)
    pipes_in_threads = True

    def pipe(self, conn, shape: TableShape, where: str | None, predicates: list[str], session_init: str | None):
        """MariaDB prints each row as a line of COPY's CSV (`copy_line`) over the full load's read;
        a full load with a one-column integer key reads its partitions in key slices
        (pipes.mariadb_pipe says why), anything else streams row by row."""
        from tideline.pipes.copy_pipe import Pipe
        from tideline.engines.mariadb.pipe import MariaDbPipeSource
        key_type = shape.column(shape.primary_key[0]).type if where is None and len(shape.primary_key) == 1 else ""
        slicing = "value" if key_type and integer_type(key_type) else "keyset" if _keyset_type(key_type) else None
        key = q(KEY_ALIAS.format(0))
        line = f"{copy_line(shape)} AS tideline_line{f', {key}' if slicing else ''}"
        query = self.read_query(conn, shape, where)
        tls = (self.tls.mode, self.tls.ca) if self.tls else None
        source = MariaDbPipeSource(self.connect_args(), tls, session_init, key if slicing else None, slicing)
        return Pipe(source, [f"SELECT {line} FROM {query} WHERE {p}" for p in predicates], "csv")

    values_as_text = True   # every value is read as its exact text (engines.mariadb.types)

    def column_value(self, column: Column, alias: str = "t") -> str:
        """The column's exact text (the full load's read), generated columns included."""
        return column.read.replace(q(column.name), f"{alias}.{q(column.name)}")

    def open_snapshot(self, conn, shape: TableShape, parts: int) -> Snapshot:
        """No shared snapshot: each partition opens its own after the offsets were recorded (see
        the module docstring); this records the GTID set and plans the key ranges."""
        with conn.cursor() as cur:
            cur.execute("SELECT @@gtid_binlog_pos, UTC_TIMESTAMP(6)")
            gtid, at = cur.fetchone()
            predicates = key_ranges(conn, cur, shape, parts)
        conn.rollback()
        init = (f"{SESSION_INIT}; SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ; "
                "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
        return Snapshot(f"gtid {gtid or '(empty)'}", at, gtid or "", None, predicates, init)

    def order_snapshot(self, snap: Snapshot, label: str) -> None:
        """Each partition's session, once its snapshot is open, sets @tl_snapshot_seq to the GTID
        sequence number of the last transaction the snapshot holds: BINLOG_GTID_POS of the binlog
        position MariaDB gives for the snapshot (Binlog_snapshot_file/_position)."""
        _one_domain(snap.position, label)
        status = "(SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = '{}')"
        snap.session_init = (f"{snap.session_init}; SET @tl_snapshot_seq = CAST(SUBSTRING_INDEX(BINLOG_GTID_POS("
                             f"{status.format('BINLOG_SNAPSHOT_FILE')}, {status.format('BINLOG_SNAPSHOT_POSITION')}), "
                             f"'-', -1) AS UNSIGNED)")
        snap.order = "CAST(@tl_snapshot_seq AS CHAR)"   # typed: JDBC would call a bare variable BINARY

    def order_now(self, conn, label: str) -> int:
        """The GTID sequence number of the last transaction committed now (a repair reads after it:
        what it reads holds at least that)."""
        with conn.cursor() as cur:
            cur.execute("SELECT @@gtid_binlog_pos")
            gtid = cur.fetchone()[0] or ""
        conn.rollback()
        _one_domain(gtid, label)
        return int(gtid.rsplit("-", 1)[-1]) if gtid else 0

    # each chunk: the exact-text session, its own consistent snapshot for the seconds it reads
    chunk_session_init = (f"{SESSION_INIT}; SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ; "
                          "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")

    def estimate_rows(self, conn, shape: TableShape) -> int | None:
        """InnoDB's estimate (information_schema.TABLES.TABLE_ROWS), no scan."""
        with conn.cursor() as cur:
            cur.execute("SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND "
                        "TABLE_NAME = %s", (shape.schema, shape.name))
            row = cur.fetchone()
        conn.rollback()
        return int(row[0]) if row and row[0] is not None else None

    def plan_chunks(self, conn, shape: TableShape, chunk_rows: int) -> tuple[int | None, list[str]]:
        from tideline.core.chunked_load import chunk_count
        estimate = self.estimate_rows(conn, shape)
        with conn.cursor() as cur:
            predicates = key_ranges(conn, cur, shape, chunk_count(estimate, chunk_rows))
        conn.rollback()
        return estimate, predicates

    # ---------------------------------------------------------------- batch mode

    def cursor_bounds(self, conn, shape: TableShape, col, current, start, end, lag_s: int, time: bool):
        """The source's clock (UTC) and largest cursor value; the arithmetic in batch_bounds."""
        with conn.cursor() as cur:
            if time:
                cur.execute("SELECT UTC_TIMESTAMP(6)")
            else:
                cur.execute(f"SELECT MAX({q(col.name)}) FROM {q(shape.schema)}.{q(shape.name)}")
            now_or_max = cur.fetchone()[0]
        lower, upper, new_cursor = batch_bounds(current, start, end, lag_s, now_or_max, time)
        if upper is None or (lower is not None and not _after(upper, lower, time)):
            return lower, upper, None, new_cursor
        c = f"t.{q(col.name)}"
        where = f"{c} < {conn.escape(upper)}"
        if lower is not None:
            where = f"{c} >= {conn.escape(lower)} AND {where}"
        return lower, upper, where, new_cursor

    def interval_read(self, conn, shape: TableShape, where: str, parts: int):
        query = self.read_query(conn, shape, where)
        if parts <= 1 or not shape.primary_key:
            preds = ["1=1"]
        else:
            key = ", ".join(q(KEY_ALIAS.format(i)) for i in range(len(shape.primary_key)))
            preds = [f"MOD(CRC32(CONCAT_WS(0x1f, {key})), {int(parts)}) = {i}" for i in range(parts)]
        return query, preds, SESSION_INIT

    # ---------------------------------------------------------------- repair

    def copy_out(self, conn, shape: TableShape, where: str, out) -> int:
        """The rows' read expressions (the full load's exact text), as COPY text."""
        import pyarrow as pa
        from tideline.core.copy_text import batch_to_copy_text
        cols = [c for c in shape.columns if c.generated is None]
        names = [c.name for c in cols]
        rows = 0
        with conn.cursor() as cur:
            cur.execute(f"SELECT {', '.join(c.read for c in cols)} FROM {q(shape.schema)}.{q(shape.name)} "
                        f"WHERE {where}")
            while True:
                chunk = cur.fetchmany(FETCH_SIZE)
                if not chunk:
                    break
                batch = pa.RecordBatch.from_arrays(
                    [pa.array([_text(r[i]) for r in chunk], pa.string()) for i in range(len(cols))], names)
                out.write(batch_to_copy_text(batch, shape.escape_flags).to_pybytes())
                rows += len(chunk)
        conn.rollback()
        return rows

    def key_ranges_where(self, conn, shape: TableShape, ranges: list) -> str:
        from tideline.engines.mariadb.verify import MariaDbDialect
        dialect = MariaDbDialect(shape, shape.schema, conn.escape)
        return " OR ".join(f"({dialect.range_predicate(r)})" for r in ranges)

    def range_where(self, conn, shape: TableShape, column: str, lo: str, hi: str, as_time: bool) -> str:
        if as_time:   # lo/hi are UTC; the session's time zone is UTC
            return f"{q(column)} BETWEEN {conn.escape(lo)} AND {conn.escape(hi)}"
        key = mt.key_sql(shape.column(column).type)
        if key is None:
            raise SourceError(f"{shape.name}.{column} ({shape.column(column).type} in the target) cannot be compared "
                              f"as a key range; repair a time range or what verify found instead", table=shape.name)
        expr, lit = key
        return (f"{expr.format(c=q(column))} BETWEEN {lit.format(lit=conn.escape(lo))} "
                f"AND {lit.format(lit=conn.escape(hi))}")


def copy_line(shape: TableShape) -> str:
    """A MariaDB expression of one row of `read_query` as a line of PostgreSQL COPY's CSV in the
    dialect of table_shape.CSV_QUOTE: the written columns' read text joined by tabs; a column whose
    text can hold a tab, newline or the quote quoted, the quote doubled inside; NULL unquoted and
    empty. (Not COPY's text format: its four escapes cost MariaDB four REPLACEs, each copying the
    rest of the value per match — quadratic in a long text's newlines.)"""
    from tideline.core.copy_text import needs_escaping
    quote = f"_utf8mb4 X'{ord(CSV_QUOTE):02x}'"
    pieces = []
    for c in shape.columns:
        if c.generated is not None:
            continue
        v = q(c.name)
        if needs_escaping(c.type):
            v = f"CONCAT({quote}, REPLACE({v}, {quote}, CONCAT({quote}, {quote})), {quote})"
        pieces.append(f"IFNULL({v}, '')")
    return f"CONCAT_WS(_utf8mb4 X'09', {', '.join(pieces)})"


def _one_domain(gtid: str | None, label: str) -> None:
    """GTID sequence numbers order the transactions of one domain only: a history table's versions
    (TableExtras.source_order) cannot follow a binlog that holds several."""
    if "," in (gtid or ""):
        raise SourceError(f"{label}: history from MariaDB orders versions by GTID sequence number, and this "
                          f"source's binlog holds several GTID domains ({gtid}), whose numbers do not order each "
                          f"other's transactions; set history: false for the table, or sync it from a server with "
                          f"one domain")


def _keyset_type(pg_type: str) -> bool:
    """A key read in slices by its own order (pipes.mariadb_pipe): one whose MAX(), ORDER BY and `>`
    against a session variable agree — strings under their collation (varchar, char), bytes,
    fractional decimals, dates and date-times. Not enum or set (MAX compares their labels, ORDER BY
    their numbers), text and blob keys (a prefix index cannot give their order)."""
    return (pg_type.startswith(("character varying(", "character(", "timestamp(")) or pg_type in ("bytea", "date")
            or re.fullmatch(r"numeric\(\d+,[1-9]\d*\)", pg_type) is not None)


def batch_bounds(current: str | None, start, end, lag_s: int, now_or_max, time: bool):
    """(lower, upper, cursor after the run) as text, from the source's UTC clock (time cursors)
    or its largest value (integer cursors) — the rule of SourceEngine.cursor_bounds."""
    from datetime import datetime, timedelta, timezone
    from decimal import Decimal
    if time:
        def naive(d):
            return d.astimezone(timezone.utc).replace(tzinfo=None) if d.tzinfo else d
        cur = datetime.fromisoformat(current) if current else None
        lo = min(naive(start), cur) if cur else naive(start)
        hi = min(naive(end), now_or_max - timedelta(seconds=lag_s))
        new = max(cur, hi) if cur else hi
        return lo.strftime(_TIME_FORMAT), hi.strftime(_TIME_FORMAT), new.strftime(_TIME_FORMAT)
    if now_or_max is None:   # an empty table: nothing to read, the cursor stays
        return current, None, current
    hi = Decimal(now_or_max) + 1
    lo = Decimal(current) if current is not None else None
    return (str(lo) if lo is not None else None), str(hi), str(max(lo, hi) if lo is not None else hi)


def _after(upper: str, lower: str, time: bool) -> bool:
    from decimal import Decimal
    return upper > lower if time else Decimal(upper) > Decimal(lower)


def _text(value) -> str | None:
    """A read expression's value as text (the driver hands back bytes for binary-collated text)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8")
    return str(value)
