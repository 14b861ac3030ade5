"""PostgreSQL as a target: shadow table + rename for a snapshot, one transaction per batch that
also holds Tideline's state (the fencing epoch and the offsets), COPY from the load's tasks."""
from __future__ import annotations

import logging
import time

import psycopg2
from psycopg2 import sql

from tideline import sqlfiles
from tideline.core import apply_sql, schema_drift
from tideline.core.errors import ResnapshotRequired, SourceError, TargetError
from tideline.core.table_extras import DELETED_AT, LOADED_OP, PREFIX, VALID_FROM, TableExtras, changes_table
from tideline.core.table_shape import Column, TableShape, copy_into, create_table, extra_column_sql
from tideline.targets.postgres import dependents
from tideline.targets.base import Published, SnapshotLoad, Target
from tideline.targets.interfaces import (CommitStamp, KeepsChangeLog, MergesBatches, StagedTable, StreamsChanges,
                                         RepairsByCopy, TakesCopy)
from tideline.targets.postgres.apply import TableApply
from tideline import postgres_sql   # the same database's SQL as a PostgreSQL source's
from tideline.postgres_sql import PgSide

log = logging.getLogger("tideline.targets.postgres")

# Autovacuum is off on a shadow table while the load fills it: chunks and partitions commit as
# they go, so with it on, autovacuum vacuumed and analyzed the half-filled shadow (10M+ rows of a
# chunked load, a resumed load's earlier chunks) beside the copy, on the same cores — and again
# once it was swapped in. Back on before the swap; the rows the load inserted still count, so
# autovacuum takes the new table within autovacuum_naptime (its statistics: see _seal).
LOADING_AUTOVACUUM = ("autovacuum_enabled", "toast.autovacuum_enabled")


def shadow_name(table: str) -> str:
    """The table a snapshot fills out of readers' sight before it is swapped in."""
    return f"{table[:46]}__tl_shadow"


class PostgresTarget(Target, TakesCopy, StreamsChanges, KeepsChangeLog, MergesBatches, RepairsByCopy):
    """Its state is in the same database (state_db is the target): rows and state commit together."""
    kind = "postgres"

    # ---------------------------------------------------------------- tables

    def prepare_schema(self, conn, schema: str, label: str) -> None:
        try:
            with conn, conn.cursor() as cur:
                # loads side by side (or two pipelines) into one new schema: CREATE SCHEMA IF NOT
                # EXISTS is not safe against a concurrent one, so they take turns
                cur.execute("SELECT pg_advisory_xact_lock(hashtext('tideline.create_schema'), hashtext(%s))", (schema,))
                cur.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
                cur.execute("SELECT has_schema_privilege(%s, 'CREATE')", (schema,))
                if not cur.fetchone()[0]:
                    raise TargetError(f"{label}: the target role cannot create tables in schema {schema!r}. "
                                      f"Run: GRANT CREATE ON SCHEMA {schema} TO <the target connection's role>;")
        except psycopg2.errors.InsufficientPrivilege as exc:
            raise TargetError(f"{label}: the target role cannot create schema {schema!r} ({exc.pgerror.strip()}). "
                              f"Create it, or grant CREATE on the database.") from None

    def can_create(self, conn, schema: str) -> bool:
        with conn.cursor() as cur:
            cur.execute("SELECT CASE WHEN to_regnamespace(quote_ident(%s)) IS NULL THEN has_database_privilege("
                        "current_database(), 'CREATE') ELSE has_schema_privilege(%s::text, 'CREATE') END",
                        (schema, schema))
            return cur.fetchone()[0]

    def columns(self, cur, schema: str, table: str) -> list[tuple]:
        cur.execute(sqlfiles.load("full_load/target_columns"), {"relid": f'"{schema}"."{table}"'})
        return list(cur.fetchall())

    def table_exists(self, conn, schema: str, table: str) -> bool:
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT to_regclass(%s) IS NOT NULL", (f'"{schema}"."{table}"',))
                return cur.fetchone()[0]
        finally:
            conn.rollback()

    def drop_table(self, schema: str, table: str) -> bool:
        conn = self.connect()
        try:
            with conn, conn.cursor() as cur:
                cur.execute("SELECT to_regclass(%s) IS NOT NULL", (f'"{schema}"."{table}"',))
                there = cur.fetchone()[0]
                cur.execute(sql.SQL("DROP TABLE IF EXISTS {}.{}").format(sql.Identifier(schema), sql.Identifier(table)))
            return there
        finally:
            conn.close()

    def row_count(self, conn, schema: str, table: str, exact: bool = True) -> int | None:
        try:
            with conn.cursor() as cur:
                if exact:
                    cur.execute(sql.SQL("SELECT count(*) FROM {}.{}").format(sql.Identifier(schema),
                                                                          sql.Identifier(table)))
                else:   # live rows as the statistics count them
                    cur.execute("SELECT n_live_tup FROM pg_stat_user_tables WHERE schemaname = %s AND relname = %s",
                                (schema, table))
                row = cur.fetchone()
            return row[0] if row else None
        except psycopg2.Error:   # the doctor says why
            return None
        finally:
            conn.rollback()

    # ---------------------------------------------------------------- full load

    def publish_snapshot(self, load: SnapshotLoad) -> Published:
        """A shadow table filled by the load's COPY pipes (load.fill), its rows checked against
        the snapshot, keyed (rejecting duplicates), then swapped in with the state in one
        transaction: readers see the old table or the new one."""
        tgt, shape, schema = load.tgt, load.shape, load.schema
        clash = load.extras.collisions(shape.column_names)
        if clash:
            raise SourceError(f"{load.label}: the source table has a column named {', '.join(clash)}, which Tideline "
                              f"adds for deletes: soft / metadata: drop that option for the table, or rename the "
                              f"source column", table=shape.name)
        shadow = shadow_name(shape.name)
        if not load.resumed:   # (a resumed chunked load's shadow holds its earlier chunks)
            with tgt, tgt.cursor() as cur:
                cur.execute(sql.SQL("DROP TABLE IF EXISTS {}.{}").format(sql.Identifier(schema),
                                                                       sql.Identifier(shadow)))
                cur.execute(create_table(shape, schema, shadow, extras=load.extras, seeded_at=load.snap.snapshot_at))
                cur.execute(sql.SQL("ALTER TABLE {}.{} SET ({})").format(
                    sql.Identifier(schema), sql.Identifier(shadow), sql.SQL(", ").join(
                        sql.SQL("{} = false").format(sql.SQL(o)) for o in LOADING_AUTOVACUUM)))
        started = time.monotonic()
        figures = load.fill(shadow)   # closes the source's snapshot: every partition has read
        copy_secs = time.monotonic() - started
        read, stored = sum(f["rows"] for f in figures), sum(f["copied"] for f in figures)
        rows = load.verified(read, stored, f"{read:,} were read and {stored:,} stored by COPY; nothing was swapped in")
        self._seal(tgt, shape, schema, shadow, load.epoch, load.extras.key_columns)
        tgt.commit()
        published = Published(rows, figures[0]["how"], "swapped", copy_secs)
        with tgt, tgt.cursor() as cur:
            load.fence(cur)
            if load.extras.soft_deletes:
                self._keep_deleted(cur, shape, schema, shadow, load.label)
            if load.extras.history:
                from tideline.targets.postgres.history import keep_history
                keep_history(self, cur, shape, schema, shadow, load.snap.snapshot_at, load.label)
            self._swap(cur, shape, schema, shadow, load.label)
            load.record(cur, published)
        return published

    def load_leftover(self, table: str) -> str | None:
        return shadow_name(table)

    def discard_snapshot(self, cur, shape: TableShape, schema: str) -> None:
        self.drop_staging(cur, schema, shadow_name(shape.name))

    def copy_statement(self, conn, schema: str, table: str, columns: list[str], copy_format: str) -> str:
        return copy_into(schema, table, columns, copy_format).as_string(conn)

    def stored_so_far(self, state_conn, schema: str, table: str) -> tuple[int, int] | None:
        rel = sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table)).as_string(state_conn)
        with state_conn.cursor() as cur:
            cur.execute(sqlfiles.load("full_load/stored_so_far"), {"rel": rel})
            return cur.fetchone()

    def _seal(self, conn, shape: TableShape, schema: str, shadow: str, epoch: int, key_extra: list[str] = ()) -> None:
        """Autovacuum back on; key (rejecting duplicates; a history table's: the source's and the
        version's start); statistics where nothing else gathers them."""
        with conn.cursor() as cur:
            cur.execute("SET LOCAL maintenance_work_mem = '512MB'")
            cur.execute(sql.SQL("ALTER TABLE {}.{} RESET ({})").format(
                sql.Identifier(schema), sql.Identifier(shadow), sql.SQL(", ").join(map(sql.SQL, LOADING_AUTOVACUUM))))
            cur.execute("SELECT NOT EXISTS (SELECT FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'p')",
                        (sql.Identifier(schema, shadow).as_string(conn),))
            if shape.primary_key and cur.fetchone()[0]:   # (a resumed load's earlier run may have keyed it)
                cur.execute(sql.SQL("ALTER TABLE {}.{} ADD CONSTRAINT {} PRIMARY KEY ({})").format(
                    sql.Identifier(schema), sql.Identifier(shadow),
                    sql.Identifier(f"{shadow[:40]}_pk{epoch}"),
                    sql.SQL(", ").join(map(sql.Identifier, [*shape.primary_key, *key_extra]))))
            # Statistics: autovacuum analyzes the new table within autovacuum_naptime of the swap
            # (every row it holds counts as a change since it was never analyzed); ANALYZE here put
            # ~9.5 s of CPU on the critical path of tests/bench/many_tables.py's 200-table load (a
            # 50,000-row table: 0.18 s, about what its copy takes). Only a server where autovacuum
            # does not run gets them from the load.
            cur.execute("SELECT current_setting('autovacuum')::bool AND current_setting('track_counts')::bool")
            if not cur.fetchone()[0]:
                cur.execute(sql.SQL("ANALYZE {}.{}").format(sql.Identifier(schema), sql.Identifier(shadow)))

    def _keep_deleted(self, cur, shape: TableShape, schema: str, shadow: str, label: str) -> None:
        """Soft deletes across a re-snapshot: the live table's rows whose key the new snapshot lacks
        stay, marked deleted (when they were not already, at the time of the swap: the source
        deleted them since the last change the stream applied). A row is never lost to a reload."""
        cur.execute("SELECT to_regclass(%s)", (f'"{schema}"."{shape.name}"',))
        if cur.fetchone()[0] is None:
            return
        live_cols = {r[0] for r in self.columns(cur, schema, shape.name)}
        shadow_cols = [r[0] for r in self.columns(cur, schema, shadow)]
        carried = [c for c in shadow_cols if c in live_cols and c != DELETED_AT
                   and c not in {col.name for col in shape.columns if col.generated}]
        deleted_at = sql.SQL("coalesce(l.{}, now())").format(sql.Identifier(DELETED_AT)) \
            if DELETED_AT in live_cols else sql.SQL("now()")
        match = sql.SQL(" AND ").join(sql.SQL("n.{k} = l.{k}").format(k=sql.Identifier(k)) for k in shape.primary_key)
        cur.execute(sql.SQL("INSERT INTO {s}.{shadow} ({cols}, {d}) SELECT {lcols}, {deleted_at} FROM {s}.{live} l "
                            "WHERE NOT EXISTS (SELECT FROM {s}.{shadow} n WHERE {match})").format(
            s=sql.Identifier(schema), shadow=sql.Identifier(shadow), live=sql.Identifier(shape.name),
            cols=sql.SQL(", ").join(map(sql.Identifier, carried)), d=sql.Identifier(DELETED_AT),
            lcols=sql.SQL(", ").join(sql.SQL("'d'") if c == PREFIX + "op" else sql.SQL("l.{}").format(sql.Identifier(c))
                                     for c in carried),
            deleted_at=deleted_at, match=match))
        if cur.rowcount:
            log.info("%s: %s rows the new snapshot lacks kept, marked deleted (deletes: soft)", label,
                     f"{cur.rowcount:,}")

    def _swap(self, cur, shape: TableShape, schema: str, shadow: str, label: str) -> None:
        """The shadow replaces the live table, keeping its grants, comment and the views built on it."""
        live = shape.name
        ident = sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(live))
        cur.execute("SELECT to_regclass(%s)", (f'"{schema}"."{live}"',))
        kept = None
        if cur.fetchone()[0] is not None:
            cur.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(ident))
            kept = dependents.capture(cur, schema, live)   # grants, comment, views built on it
            dependents.drop_views(cur, kept, schema, live)
            cur.execute(sql.SQL("DROP TABLE {}").format(ident))
        cur.execute(sql.SQL("ALTER TABLE {}.{} RENAME TO {}").format(
            sql.Identifier(schema), sql.Identifier(shadow), sql.Identifier(live)))
        if kept is not None:
            dependents.restore(cur, kept, schema, live)
            if kept.grants or kept.views:
                log.info("%s: kept across the swap: %s", label, kept.describe())
        if shape.primary_key:
            cur.execute("SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'p'",
                        (f'"{schema}"."{live}"',))
            cur.execute(sql.SQL("ALTER TABLE {} RENAME CONSTRAINT {} TO {}").format(
                ident, sql.Identifier(cur.fetchone()[0]), sql.Identifier(f"{live[:55]}_pkey")))

    def drop_staging(self, cur, schema: str, name: str) -> None:
        cur.execute(sql.SQL("DROP TABLE IF EXISTS {}.{}").format(sql.Identifier(schema), sql.Identifier(name)))

    # ---------------------------------------------------------------- repair

    def apply_repair(self, cur, shape: TableShape, schema: str, rows, where, delete_missing: bool,
                     extras: TableExtras = TableExtras(), order: int | None = None) -> tuple[int, int, int]:
        """Repaired rows are as a load writes them (extras: written now, op r); with soft deletes,
        the rows the source no longer has are marked deleted, not deleted."""
        cols = sql.SQL(", ").join(sql.Identifier(c) for c in shape.written_columns)
        table = sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(shape.name))
        repaired = {c.name: sql.SQL("NULL") for c in extras.columns} | {
            PREFIX + "synced_at": sql.SQL("now()"), PREFIX + "op": sql.Literal(LOADED_OP)}
        cur.execute(sql.SQL("CREATE TEMP TABLE tl_repair ON COMMIT DROP AS SELECT {} FROM {} WITH NO DATA").format(
            cols, table))
        cur.copy_expert(sql.SQL("COPY tl_repair ({}) FROM STDIN").format(cols).as_string(cur.connection), rows)
        read = cur.rowcount
        if extras.history:   # versions: what differs is closed and opened again, nothing deleted
            from tideline.targets.postgres.history import repair_history
            opened, deleted = repair_history(cur, shape, schema, where, delete_missing, order)
            return read, opened, deleted
        deleted = 0
        pk = sql.SQL(", ").join(sql.Identifier(k) for k in shape.primary_key)
        if delete_missing and extras.soft_deletes:   # rows gone at the source stay, marked deleted
            marks = [sql.SQL("{} = now()").format(sql.Identifier(DELETED_AT))] + [
                sql.SQL("{} = {}").format(sql.Identifier(c.name), repaired[c.name] if c.name != PREFIX + "op"
                                          else sql.Literal("d")) for c in extras.columns if c.name != DELETED_AT]
            cur.execute(sql.SQL("UPDATE {t} SET {m} WHERE ({w}) AND {d} IS NULL AND ({pk}) NOT IN "
                                "(SELECT {pk} FROM tl_repair)").format(t=table, m=sql.SQL(", ").join(marks),
                                                                      w=sql.SQL(where), d=sql.Identifier(DELETED_AT),
                                                                      pk=pk))
            deleted = cur.rowcount
        elif delete_missing:  # rows gone at the source go from the target too
            cur.execute(sql.SQL("DELETE FROM {t} WHERE ({w}) AND ({pk}) NOT IN (SELECT {pk} FROM tl_repair)").format(
                t=table, w=sql.SQL(where), pk=pk))
            deleted = cur.rowcount
        updates = sql.SQL(", ").join([sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(c), sql.Identifier(c))
                                      for c in shape.written_columns if c not in shape.primary_key]
                                     + [sql.SQL("{} = {}").format(sql.Identifier(c.name), repaired[c.name])
                                        for c in extras.columns])
        cur.execute(sql.SQL("INSERT INTO {t} ({cols}) SELECT {cols} FROM tl_repair ON CONFLICT ({pk}) DO {u}").format(
            t=table, cols=cols, pk=pk,
            u=sql.SQL("UPDATE SET {}").format(updates) if updates.seq else sql.SQL("NOTHING")))
        return read, cur.rowcount, deleted

    def range_where(self, conn, shape: TableShape, column: str, lo: str, hi: str, as_time: bool) -> str:
        return postgres_sql.between(shape, column, lo, hi, as_time).as_string(conn)

    def key_ranges_where(self, conn, shape: TableShape, ranges: list) -> str:
        return postgres_sql.key_ranges_where(conn, shape, ranges)

    def verify_side(self, label: str = "target") -> PgSide:
        return PgSide(self.connect(autocommit=True), label)

    # ---------------------------------------------------------------- batch mode

    def begin_interval(self, conn, shape: TableShape, schema: str, stage: str) -> None:
        with conn, conn.cursor() as cur:
            self.drop_staging(cur, schema, stage)
            cur.execute(create_table(shape, schema, stage, unlogged=True))

    def ensure_table(self, cur, shape: TableShape, schema: str, label: str) -> None:
        table = shape.name
        cur.execute("SELECT to_regclass(%s)", (f'"{schema}"."{table}"',))
        if cur.fetchone()[0] is None:
            cur.execute(create_table(shape, schema, table))
            cur.execute(sql.SQL("ALTER TABLE {}.{} ADD PRIMARY KEY ({})").format(
                sql.Identifier(schema), sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, shape.primary_key))))
            return
        target_cols = [Column(n, t, nn, generated=g) for n, t, nn, g in self.columns(cur, schema, table)]
        self.evolve(cur, schema, table, schema_drift.plan(label, list(shape.columns), target_cols))

    def merge_interval(self, cur, shape: TableShape, schema: str, stage: str) -> None:
        cols = [sql.Identifier(c) for c in shape.written_columns]
        updates = [sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(c), sql.Identifier(c))
                   for c in shape.written_columns if c not in shape.primary_key]
        cur.execute(sql.SQL(
            "INSERT INTO {s}.{t} ({cols}) SELECT {cols} FROM {s}.{stage} ON CONFLICT ({pk}) DO {action}").format(
            s=sql.Identifier(schema), t=sql.Identifier(shape.name), stage=sql.Identifier(stage),
            cols=sql.SQL(", ").join(cols), pk=sql.SQL(", ").join(map(sql.Identifier, shape.primary_key)),
            action=sql.SQL("UPDATE SET {}").format(sql.SQL(", ").join(updates)) if updates else sql.SQL("NOTHING")))

    # ---------------------------------------------------------------- stream

    def ensure_extras(self, conn, schema: str, table: str, extras: TableExtras) -> list[str]:
        """Rows written before the option was set hold NULL in the columns it adds. History set
        or dropped after the load changes the table's key: the table reloads."""
        with conn, conn.cursor() as cur:
            have = {r[0] for r in self.columns(cur, schema, table)}
            if have and extras.history != (VALID_FROM in have):
                raise ResnapshotRequired(f"{schema}.{table}: history was {'set' if extras.history else 'dropped'} "
                                         f"after the table was loaded; it is reloaded by itself "
                                         f"({'one version per row' if extras.history else 'one row per key'})",
                                         table=table)
            if extras.changelog:   # the table's change log, beside it
                cur.execute(apply_sql.create_change_log_sql(schema, changes_table(table)))
            added = [c for c in extras.columns if c.name not in have]
            for c in added:
                cur.execute(sql.SQL("ALTER TABLE {}.{} ADD COLUMN {}").format(
                    sql.Identifier(schema), sql.Identifier(table), extra_column_sql(c)))
        return [c.name for c in added]

    def apply_changes(self, cur, staged: StagedTable, stamp: CommitStamp) -> tuple[tuple[int, int], int]:
        """The stamp's offsets and epoch commit in the caller's transaction, with the state."""
        apply = TableApply(stamp.pipeline, staged.schema, staged.table, staged.topic, staged.columns,
                           staged.primary_key, dead_letter=staged.dead_letter, extras=staged.extras)
        counts = apply.run(cur)
        return counts, len(apply.dead_lettered)

    def log_position(self, cur, schema: str, table: str, topic: str) -> dict[int, int] | None:
        cur.execute("SELECT to_regclass(%s)", (f'"{schema}"."{changes_table(table)}"',))
        if cur.fetchone()[0] is None:
            return None
        cur.execute(sql.SQL("SELECT _tideline_partition, max(_tideline_offset) + 1 FROM {}.{} WHERE _tideline_topic = %s "
                            "GROUP BY 1").format(sql.Identifier(schema), sql.Identifier(changes_table(table))), (topic,))
        return {p: o for p, o in cur.fetchall()}

    def append_changes(self, cur, pipeline: str, schema: str, table: str, stamp: CommitStamp) -> int:
        """In the batch's transaction, with its offsets: exactly once (ON CONFLICT: a reload's overlap)."""
        cur.execute(apply_sql.append_change_log_sql(schema, changes_table(table), table))
        return cur.rowcount

    def evolve(self, cur, schema: str, table: str, drift) -> None:
        for stmt in schema_drift.ddl(schema, table, drift):
            cur.execute(stmt)
