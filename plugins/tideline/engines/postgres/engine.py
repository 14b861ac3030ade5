"""PostgreSQL sources: catalog, exported-snapshot full load, pgoutput capture."""
from __future__ import annotations

import psycopg2
from psycopg2 import sql

from tideline import sqlfiles
from tideline.core import debezium, source_shapes
from tideline.core.errors import SourceError
from tideline.core.pg_session import SESSION_OPTIONS
from tideline.core.column_hash import pg_source_value, pg_text
from tideline.core.table_shape import (Column, TableShape, boundaries_query, copy_options,
                                       ctid_predicates, hash_predicates, key_range_predicates, read_query)
from tideline.engines.base import SourceEngine
from tideline.engines.interfaces import (Captures, HoldsPosition, LoadsInChunks, PipesRows, ReadsIntervals,
                                         ReadsSnapshots, Snapshot, VerifiesSource)
from tideline.engines.postgres.capture import PostgresCapture
from tideline.postgres_sql import PgSide, between, collatable_keys, key_ranges_where

# Above this many rows the partition boundaries come from a block sample, not the whole index.
# A partition costs a Spark task and two database sessions (~0.1 s on 2 cores); below this many
# rows per partition a table reads faster in fewer (tests/bench/many_tables.py: 167 small tables).
MIN_ROWS_PER_PARTITION = 50_000
SAMPLE_ABOVE_ROWS = 500_000
SAMPLE_TARGET_ROWS = 100_000
FETCH_SIZE = 10_000


class PostgresEngine(PostgresCapture, SourceEngine, ReadsSnapshots, LoadsInChunks, PipesRows, Captures,
                     HoldsPosition, ReadsIntervals, VerifiesSource):
    kind, label = "postgres", "PostgreSQL"
    errors = (psycopg2.Error,)

    def connect(self, autocommit: bool = False, connect_timeout: int | None = None):
        conn = psycopg2.connect(self.source.postgres_dsn(),
                                **({"connect_timeout": connect_timeout} if connect_timeout else {}))
        conn.autocommit = autocommit
        return conn

    def jdbc_url(self) -> str:
        return self.source.jdbc_url()

    def jdbc_properties(self) -> dict[str, str]:
        return {"user": self.source.login or "", "password": self.source.password or "",
                "driver": "org.postgresql.Driver", "fetchsize": str(FETCH_SIZE)}

    # ---------------------------------------------------------------- catalog

    def check_capture(self, conn, what: str) -> None:
        with conn.cursor() as cur:
            cur.execute("SHOW wal_level")
            level = cur.fetchone()[0]
        if level != "logical":
            raise SourceError(f"{what}: wal_level is {level!r}, change capture needs 'logical'. "
                              f"Set wal_level = logical in postgresql.conf (or ALTER SYSTEM) and restart PostgreSQL.")

    def relation(self, conn, schema: str, table: str) -> source_shapes.Relation | None:
        with conn.cursor() as cur:
            cur.execute(sqlfiles.load("full_load/source_relation"), {"schema": schema, "table": table})
            row = cur.fetchone()
            names = [d[0] for d in cur.description]
        if row is None:
            return None
        facts = dict(zip(names, row))
        facts["identity_index_has_key"] = bool(facts["identity_index_has_key"])
        facts["partition_root_key"] = tuple(facts["partition_root_key"]) if facts["partition_root_key"] else None
        return source_shapes.Relation(schema, table, **facts)

    def partition_tree(self, conn, schema: str, table: str, known: dict | None = None) -> dict[str, dict] | None:
        with conn.cursor() as cur:
            cur.execute("SELECT relkind = 'p' FROM pg_class WHERE oid = %s::regclass",
                        (sql.Identifier(schema, table).as_string(conn),))
            row = cur.fetchone()
            if not row or not row[0]:
                return None
            cur.execute(sqlfiles.load("full_load/partition_tree"), {"relid": sql.Identifier(schema, table).as_string(conn)})
            tree = {}
            for oid, name, created, attach_xmin, attach_cmin in cur.fetchall():
                if created and known is not None and oid not in known:
                    # created and attached by one transaction: rows it wrote before the attach
                    # (same xmin, an earlier command) were never change events of the tree (a
                    # sub-partitioned one is read with its partitions)
                    cur.execute(sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE xmin::text = %s "
                                        "AND cmin::text::bigint < %s)").format(sql.SQL(name)),
                                (attach_xmin, attach_cmin))
                    created = not cur.fetchone()[0]
                tree[oid] = {"name": name, "created_as_partition": created}
            return tree

    def describe(self, conn, schema: str, table: str, tcfg=None, check_key: bool = True,
                 for_stream: bool = False) -> TableShape:
        shape = self.describe_many(conn, [(schema, table, tcfg)], check_key, for_stream)[(schema, table)]
        if isinstance(shape, SourceError):
            raise shape
        return shape

    def describe_many(self, conn, tables, check_key: bool = True, for_stream: bool = False):
        """Three catalog queries for all the tables, not three per table: a stream batch of 100
        tables described them one by one in ~0.2 s of its ~0.5 s commit (tests/bench/many_streams.py)."""
        if not tables:
            return {}
        with conn.cursor() as cur:
            cur.execute(sqlfiles.load("full_load/source_table"),
                        {"schemas": [s for s, _t, _c in tables], "tables": [t for _s, t, _c in tables]})
            found = {(schema, table): rest for schema, table, *rest in cur.fetchall()}
            readable = [relid for relid, can_select, relkind in found.values() if can_select and relkind in ("r", "p")]
            columns: dict[int, list[Column]] = {relid: [] for relid in readable}
            keys: dict[int, list[str]] = {relid: [] for relid in readable}
            if readable:
                cur.execute(sqlfiles.load("full_load/source_columns"), {"relids": readable})
                for relid, name, typ, not_null, _schema, _cat, default, has_missing, missing, generated, binary \
                        in cur.fetchall():
                    columns[relid].append(Column(name, typ, not_null, default, has_missing, missing, generated,
                                                 binary_copy=binary))
                cur.execute(sqlfiles.load("full_load/source_primary_key"), {"relids": readable})
                for relid, name in cur.fetchall():
                    keys[relid].append(name)
        out = {}
        for schema, table, tcfg in tables:
            try:
                out[(schema, table)] = self._shape(schema, table, tcfg, found.get((schema, table)), columns, keys,
                                                   check_key, for_stream)
            except SourceError as exc:
                out[(schema, table)] = exc
        return out

    @staticmethod
    def _shape(schema, table, tcfg, found, columns, keys, check_key, for_stream) -> TableShape:
        label = f"source table {schema}.{table}"
        if found is None:
            raise SourceError(f"{label} does not exist. Check the table name in the pipeline config and "
                              f"source.schema ({schema!r}).", table=table)
        relid, can_select, relkind = found
        if relkind not in ("r", "p"):
            raise SourceError(f"{label} is not a table (relkind {relkind!r}); only tables can be synced.", table=table)
        if not can_select:
            raise SourceError(f"{label}: the source connection's role has no SELECT privilege. "
                              f"Run: GRANT SELECT ON {schema}.{table} TO <the role of the source connection>;",
                              table=table)
        configured_pk = tcfg.primary_key if (tcfg is not None and check_key) else None
        shape = source_shapes.finish_shape(label, TableShape(schema, table, tuple(columns[relid]), tuple(keys[relid])),
                             configured_pk, tcfg)
        if for_stream and tcfg is not None and tcfg.mode == "cdc":
            lossy = debezium.unstreamable(shape.columns)
            if lossy:
                raise SourceError(debezium.unstreamable_message(label, lossy), table=table)
        return shape

    def collatable_keys(self, conn, shape: TableShape) -> frozenset[str]:
        return collatable_keys(conn, shape)

    def verify_side(self, label: str = "source") -> PgSide:
        return PgSide(self.connect(autocommit=True), label)

    # ---------------------------------------------------------------- batch mode

    def cursor_bounds(self, conn, shape: TableShape, col, current, start, end, lag_s: int, time: bool):
        """Computed by the source, in the column's own type."""
        ident, typ = sql.Identifier(col.name), sql.SQL(col.type)
        with conn.cursor() as cur:
            if time:
                # The run's interval, never closer to now than the safety lag, and from the cursor
                # when an earlier run could not read up to its interval's end.
                cur.execute(sql.SQL(
                    "WITH b AS (SELECT least(%(start)s::timestamptz, coalesce(%(cur)s::timestamptz, 'infinity')) AS lo,"
                    " least(%(end)s::timestamptz, now() - make_interval(secs => %(lag)s)) AS hi) "
                    "SELECT lo::{t}::text, hi::{t}::text, hi > lo, "
                    "greatest(coalesce(%(cur)s::timestamptz, '-infinity'), hi)::{t}::text FROM b").format(t=typ),
                    {"start": start, "end": end, "cur": current, "lag": lag_s})
            else:
                # Monotonic ids: everything above the cursor up to the largest id now.
                cur.execute(sql.SQL(
                    "WITH b AS (SELECT %(cur)s::numeric AS lo, max({c})::numeric + 1 AS hi FROM {tbl}) "
                    "SELECT lo::text, hi::text, coalesce(hi > coalesce(lo, hi - 1), false), "
                    "greatest(lo, hi)::text FROM b").format(c=ident, tbl=shape.qualified()), {"cur": current})
            lower, upper, any_range, new_cursor = cur.fetchone()
        if not any_range:
            return lower, upper, None, new_cursor or current
        where = sql.SQL("t.{c} < {u}::{t}").format(c=ident, u=sql.Literal(upper), t=typ)
        if lower is not None:
            where = sql.SQL("t.{c} >= {l}::{t} AND ").format(c=ident, l=sql.Literal(lower), t=typ) + where
        return lower, upper, where.as_string(conn), new_cursor

    def interval_read(self, conn, shape: TableShape, where: str, parts: int):
        return (self.read_query(conn, shape, where),
                [p.as_string(conn) for p in hash_predicates(shape, parts)], None)

    # ---------------------------------------------------------------- repair

    def copy_out(self, conn, shape: TableShape, where: str, out) -> int:
        cols = sql.SQL(", ").join(pg_source_value(shape.column(c)) for c in shape.written_columns)
        head = sql.SQL("COPY (SELECT {} FROM {} WHERE ").format(cols, shape.qualified()).as_string(conn)
        with conn.cursor() as cur:
            cur.copy_expert(f"{head}{where}) TO STDOUT", out)
            rows = cur.rowcount
        conn.rollback()
        return rows

    def key_ranges_where(self, conn, shape: TableShape, ranges: list) -> str:
        return key_ranges_where(conn, shape, ranges)

    def range_where(self, conn, shape: TableShape, column: str, lo: str, hi: str, as_time: bool) -> str:
        return between(shape, column, lo, hi, as_time).as_string(conn)

    # ---------------------------------------------------------------- full load

    def read_query(self, conn, shape: TableShape, where: str | None = None) -> str:
        return read_query(shape, sql.SQL(where) if where else None).as_string(conn)

    row_locator = "ctid"

    def column_value(self, column: Column, alias: str = "t") -> str:
        """A hashed column's value is its hash (core.column_hash)."""
        value = super().column_value(column, alias)
        return value if column.hash_salt is None else pg_text(value, column.hash_salt)

    def jdbc_read_properties(self) -> dict[str, str]:
        return {**self.jdbc_properties(), "options": SESSION_OPTIONS}

    # not pipes_in_threads: psycopg2 hands each row of COPY TO to Python, and two pipes in one
    # process contend for the GIL (tests/bench/full_load.py: 212-238k rows/s per pipe in driver
    # threads, 275-345k in Spark's Python workers)

    def pipe(self, conn, shape: TableShape, where: str | None, predicates: list[str], session_init: str | None):
        """Typed columns: COPY prints each with its type's output function, the same text `::text`
        gives the JDBC path, without a text copy of every value first (30% of the read); in
        binary when every column's binary form means the same in the target (shape.copy_format)."""
        from tideline.pipes.copy_pipe import Pipe, PostgresPipeSource
        query = read_query(shape, sql.SQL(where) if where else None, typed=True).as_string(conn)
        reads = [f"COPY (SELECT {', '.join(map(self.quote, shape.written_columns))} FROM {query} WHERE {p}) "
                 f"TO STDOUT{copy_options(shape.copy_format)}" for p in predicates]
        return Pipe(PostgresPipeSource(self.source.postgres_dsn(), session_init), reads, shape.copy_format)

    reads_csv = True

    def csv_reader(self, session_init: str | None):
        from tideline.pipes.copy_pipe import PostgresPipeSource
        return PostgresPipeSource(self.source.postgres_dsn(), session_init)

    def open_snapshot(self, conn, shape: TableShape, parts: int) -> Snapshot:
        """One exported snapshot, held open on `conn`; every partition's session joins it."""
        conn.set_session(isolation_level="REPEATABLE READ", readonly=True)
        with conn.cursor() as cur:
            cur.execute("SELECT pg_export_snapshot(), now(), pg_current_snapshot()::text")
            snapshot_id, snapshot_at, snapshot_xmin = cur.fetchone()
            cur.execute(sql.SQL("SELECT count(*) FROM {}").format(shape.qualified()))
            rows = cur.fetchone()[0]
            predicates = [p.as_string(conn) for p in self._partition_predicates(cur, shape, rows, parts)]
        # Spark's PostgreSQL dialect turns autocommit off when fetchsize > 0, so these run as the
        # first statements of the read's transaction; the DO block fails the read loudly if that
        # ever stops being true.
        init = ("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY; "
                f"SET TRANSACTION SNAPSHOT {sql.Literal(snapshot_id).as_string(conn)}; "
                "DO $$ BEGIN IF current_setting('transaction_isolation') <> 'repeatable read' THEN "
                "RAISE EXCEPTION 'tideline: partition read is not inside the exported snapshot'; END IF; END $$")
        return Snapshot(snapshot_id, snapshot_at, snapshot_xmin, rows, predicates, init)


    def estimate_rows(self, conn, shape: TableShape) -> int | None:
        """reltuples over the table's leaf partitions (the table itself when not partitioned:
        pg_partition_tree lists nothing for a table outside any partition tree)."""
        table = sql.Identifier(shape.schema, shape.name).as_string(conn)
        with conn.cursor() as cur:
            cur.execute("SELECT sum(c.reltuples)::bigint, bool_or(c.reltuples < 0) FROM pg_class c "
                        "WHERE c.relkind <> 'p' AND c.oid = ANY(ARRAY(SELECT relid FROM pg_partition_tree(%s::regclass) "
                        "WHERE isleaf) || %s::regclass::oid)", (table, table))
            total, never_analyzed = cur.fetchone()
        conn.rollback()
        return None if total is None or never_analyzed else max(0, int(total))

    def plan_chunks(self, conn, shape: TableShape, chunk_rows: int) -> tuple[int | None, list[str]]:
        from tideline.core.chunked_load import chunk_count
        estimate = self.estimate_rows(conn, shape)
        with conn.cursor() as cur:
            if estimate is None:   # never analyzed: one count (the plan's only scan)
                cur.execute(sql.SQL("SELECT count(*) FROM {}").format(shape.qualified()))
                estimate = cur.fetchone()[0]
            parts = chunk_count(estimate, chunk_rows)
            predicates = [p.as_string(conn) for p in self._partition_predicates(cur, shape, estimate, parts,
                                                                               min_rows=1)]
        conn.rollback()
        return estimate, predicates

    def _partition_predicates(self, cur, shape: TableShape, rows: int, parts: int,
                              min_rows: int = MIN_ROWS_PER_PARTITION):
        parts = max(1, min(parts, -(-rows // min_rows)))
        if rows == 0 or parts == 1:
            return key_range_predicates(shape, []) if shape.primary_key else ctid_predicates(0, 1)
        if not shape.primary_key:
            cur.execute("SELECT pg_relation_size(%s::regclass) / current_setting('block_size')::int",
                        (f"{shape.schema}.{shape.name}",))
            return ctid_predicates(cur.fetchone()[0], parts)
        sample = None
        if rows > SAMPLE_ABOVE_ROWS:
            sample = min(100.0, round(100.0 * SAMPLE_TARGET_ROWS / rows, 3))
        cur.execute(boundaries_query(shape, parts, sample))
        return key_range_predicates(shape, [tuple(r) for r in cur.fetchall()])


    def current_values(self, conn, schema: str, table: str, key: list[str], keys: list[str],
                       columns: list[str]) -> dict[int, dict]:
        """The current values (their text form, as the change events carry them) of `columns` of
        the rows whose keys are the change events' `keys` (JSON objects), by position in `keys`;
        a key the table no longer has is absent (stream.source_fill)."""
        from psycopg2 import sql
        t = sql.Identifier(schema, table)
        values = sql.SQL(", ").join(sql.SQL("{}, t.{}::text").format(sql.Literal(c), sql.Identifier(c))
                                    for c in columns)
        on = sql.SQL("({}) = ({})").format(sql.SQL(", ").join(sql.SQL("t.{}").format(sql.Identifier(k)) for k in key),
                                          sql.SQL(", ").join(sql.SQL("r.{}").format(sql.Identifier(k)) for k in key))
        with conn.cursor() as cur:
            cur.execute(sql.SQL("SELECT k.n, jsonb_build_object({}) FROM jsonb_array_elements(%s::jsonb) WITH "
                                "ORDINALITY AS k(key, n) CROSS JOIN LATERAL jsonb_populate_record(NULL::{}, k.key) r "
                                "JOIN {} t ON {}").format(values, t, t, on), ("[" + ",".join(keys) + "]",))
            return {int(n) - 1: image for n, image in cur.fetchall()}
