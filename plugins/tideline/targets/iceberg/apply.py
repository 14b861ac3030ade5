"""One table's share of a stream batch into an Iceberg table: one MERGE commit whose snapshot
summary carries the offsets it applied and the run's fencing epoch.

The batch is staged in the catalog's PostgreSQL database (tideline.state.staging)
and decoded there by the same SQL that applies it to a PostgreSQL target (core.apply_sql,
core.debezium), so both targets read every change event alike; each value then travels to Spark
as core.lake_types says (the full load's way), and Spark merges the rows by key. A value the
Iceberg column cannot hold, or one that does not decode, is found down to its event before
anything is written: the table halts on it, or it goes to the dead letters.

The commit runs while the caller's transaction holds the table's state row (the fence), after
checking that the table's current snapshot is the one whose offsets this batch was cut against
and that no newer epoch wrote it; after the commit, its parent must be that snapshot.
"""
from __future__ import annotations

import functools
import io
import json
import logging
import time
import uuid
from dataclasses import dataclass, field

import psycopg2
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
from psycopg2 import sql

from tideline.core import apply_sql, lake_types
from tideline.core.apply_failure import FailedEvent, describe, is_deterministic, truncate
from tideline.core.debezium import may_be_unavailable, unavailable_test, value_expr
from tideline.core.errors import FencedError, ResnapshotRequired, SourceError, TargetError
from tideline.core.lake_types import spark_ident
from tideline.core.table_extras import TableExtras, spark_event
from tideline.core.table_shape import Column
from tideline.targets.interfaces import ApplyRefused, CommitStamp
from tideline.targets.iceberg.snapshots import (SUMMARY_EPOCH, SUMMARY_OFFSETS, SUMMARY_PIPELINE, stamped_since,
                                                summary_of)
from tideline.state.staging import record_dead_letter

log = logging.getLogger("tideline.apply")

# the session the decoding runs in: the text forms the full load reads (copy_pipe.SESSION_OPTIONS)
SESSION = ("SET LOCAL TimeZone = 'UTC'", "SET LOCAL IntervalStyle = 'postgres'", "SET LOCAL DateStyle = 'ISO, MDY'",
           "SET LOCAL extra_float_digits = 3", "SET LOCAL bytea_output = 'hex'")
_ARROW = {"int": pa.int32(), "long": pa.int64(), "float": pa.float32(), "double": pa.float64(),
          "boolean": pa.bool_(), "string": pa.string(), "binary": pa.binary(), "date": pa.int32(),
          "timestamp": pa.int64(), "timestamptz": pa.int64()}
OP, PART, OFF, KEY, TS, POS, SEQ = "__tl_op", "__tl_part", "__tl_off", "__tl_key", "__tl_ts", "__tl_pos", "__tl_seq"
IMG = "__tl_img"   # a soft-delete table's delete carrying its row's last image (core.batch_events.with_last_image)


def arrow_type(lake: lake_types.LakeColumn) -> pa.DataType:
    """The Arrow type of a value as the decoding query reads it (days, microseconds, ...)."""
    t = lake.iceberg
    if t.startswith("list<"):
        return pa.list_(_ARROW[t[5:-1]])
    if t.startswith("decimal"):
        p, s = t[8:-1].split(",")
        return pa.decimal128(int(p), int(s))
    return _ARROW[t]


class _Call:
    """A java.util.concurrent.Callable running a Python function (the commit's body); its
    failure is kept and raised again on the Python side, not lost in py4j."""

    def __init__(self, fn):
        self.fn, self.failure = fn, None

    def call(self):
        try:
            self.fn()
        except BaseException as exc:   # noqa: BLE001 — raised again by the caller
            self.failure = exc
        return None

    class Java:
        implements = ["java.util.concurrent.Callable"]


@dataclass
class LakeApply:
    target: object           # the IcebergTarget
    pipeline: str
    schema: str
    table: str
    topic: str
    columns: list[Column]
    primary_key: list[str]
    dead_letter: bool = False
    dead_lettered: list[FailedEvent] = field(default_factory=list)
    extras: TableExtras = TableExtras()   # soft deletes and metadata columns (core.table_extras)
    EVENT_COLUMNS = (OP, PART, OFF, KEY, TS, POS, SEQ)   # the change view's own columns, before the values

    def __post_init__(self):
        self.lake = [lake_types.lake_column(c) for c in self.columns]
        self.label = f"{self.pipeline}.{self.table}"

    # ------------------------------------------------------------------ decode

    def _imaged(self) -> str:
        """The events whose row image is written: every one but a delete, and with soft deletes a
        delete carrying its row's last image too (written marked deleted)."""
        return "(s.op <> 'd' OR s.after IS NOT NULL)" if self.extras.soft_deletes else "s.op <> 'd'"

    def _decoded(self, c: Column) -> sql.Composable:
        """The column's value of the event, in its source type (NULL where Debezium did not send
        an unchanged large value; a delete carries only the key, or with soft deletes its row's
        last image)."""
        if c.name in self.primary_key:
            return sql.SQL("CASE WHEN s.op = 'd' THEN {} ELSE {} END").format(
                value_expr(apply_sql.field("key", c.source_name), c.type, c.encoding), apply_sql.row_value(c))
        value = apply_sql.row_value(c)
        if may_be_unavailable(c.type, c.encoding):
            value = sql.SQL("CASE WHEN {} THEN NULL ELSE {} END").format(
                unavailable_test(apply_sql.field("after", c.source_name), c.type), value)
        return sql.SQL("CASE WHEN {} THEN {} END").format(sql.SQL(self._imaged()), value)

    def _query(self, cur, where: sql.Composable | None = None, columns: list[int] | None = None) -> str:
        idx = range(len(self.columns)) if columns is None else columns
        decoded = sql.SQL(", ").join(sql.SQL("{} AS {}").format(self._decoded(self.columns[i]), sql.Identifier(f"c{i}"))
                                     for i in idx)
        out = ["s.op", "s.part", "s.off", "s.key::text", "s.ts", "s.pos", "s.seq",
               "s.op = 'd' AND s.after IS NOT NULL" if self.extras.soft_deletes else "false"]
        for i in idx:
            lake, value = self.lake[i], f'v."c{i}"'
            refused = f"coalesce(({lake.refuse.replace('{c}', value)}), false)" if lake.refuse else None
            read = lake.read.replace("{c}", value)
            read = f"CASE WHEN {refused} THEN NULL ELSE {read} END" if refused else read
            out.append(f"to_json({read})::text" if lake.iceberg.startswith("list<") else read)
            out.append(refused or "false")
            c = self.columns[i]
            unsent = unavailable_test(apply_sql.field("after", c.source_name), c.type)
            out.append(sql.SQL("{} AND {}").format(sql.SQL(self._imaged()), unsent).as_string(cur)
                       if may_be_unavailable(c.type, c.encoding) and c.name not in self.primary_key else "false")
        return sql.SQL("SELECT {out} FROM {stage} s, LATERAL (SELECT {decoded}) v WHERE s.tbl = {tbl}{where} "
                       "ORDER BY s.part, s.off").format(
            out=sql.SQL(", ".join(out)), stage=self._events(), decoded=decoded,
            tbl=sql.Literal(self.table), where=sql.SQL(" AND {}").format(where) if where is not None else sql.SQL("")
        ).as_string(cur)

    def _events(self) -> sql.Composable:
        """The table's staged events; a history table's one per key and source transaction (its
        last), every event of the batch staged for it (core.batch_events), each with its place in
        the key's order (`seq`: apply_sql.history_order), which the MERGE orders versions by
        (targets.iceberg.history)."""
        stage = sql.Identifier(apply_sql.STAGE)
        if not self.extras.history:
            return sql.SQL("(SELECT *, NULL::bigint AS seq FROM {})").format(stage)
        return sql.SQL("(SELECT DISTINCT ON (s.key, seq) s.*, {order} AS seq FROM {stage} s WHERE s.tbl = {tbl} "
                       "ORDER BY s.key, seq, s.part DESC, s.off DESC)").format(
            stage=stage, tbl=sql.Literal(self.table), order=apply_sql.history_order(self.extras))

    def _read(self, cur) -> pa.Table:
        """The table's staged events decoded, in Kafka order (columns OP, PART, OFF, KEY, TS, POS, then c, r
        and u of each column: its value, refused, not sent); a value that does not decode is found
        down to its event (ApplyRefused, or a dead letter and the rest read again)."""
        for stmt in SESSION:
            cur.execute(stmt)
        while True:
            cur.execute("SAVEPOINT tl_decode")
            try:
                out = io.BytesIO()
                cur.copy_expert(f"COPY ({self._query(cur)}) TO STDOUT WITH (FORMAT csv)", out)
                cur.execute("RELEASE SAVEPOINT tl_decode")
                return self._parse(out.getvalue())
            except psycopg2.Error as exc:
                cur.execute("ROLLBACK TO SAVEPOINT tl_decode")
                if not is_deterministic(exc.pgcode):
                    raise
                event = self._undecodable(cur, exc)
            self._refuse(cur, event)
            cur.execute(sql.SQL("DELETE FROM {} WHERE tbl = %s AND part = %s AND off = %s").format(
                sql.Identifier(apply_sql.STAGE)), (self.table, event.partition, event.offset))

    def _parse(self, data: bytes) -> pa.Table:
        """COPY's CSV of the decoding query as Arrow, parsed by pyarrow rather than row by row in
        Python (a 258,000-change batch: 2.4 -> ~1 s). NULL is an unquoted empty field, an empty
        string a quoted one; booleans are t/f. Bytes (bytea's hex) and lists (as JSON) are the
        Python-converted exceptions."""
        names = [OP, PART, OFF, KEY, TS, POS, SEQ, IMG] + [f"{x}{i}" for i in range(len(self.lake)) for x in "cru"]
        typed = {f"c{i}": arrow_type(lake) for i, lake in enumerate(self.lake)}
        as_text = [n for n, t in typed.items() if pa.types.is_binary(t) or pa.types.is_list(t)]
        types = {OP: pa.string(), PART: pa.int32(), OFF: pa.int64(), KEY: pa.string(), TS: pa.int64(),
                 POS: pa.string(), SEQ: pa.int64(), IMG: pa.bool_()}   # as the CSV is read
        for i in range(len(self.lake)):
            c = f"c{i}"
            types.update({c: pa.string() if c in as_text else typed[c], f"r{i}": pa.bool_(), f"u{i}": pa.bool_()})
        if not data:
            return pa.table({n: pa.array([], typed.get(n, types[n])) for n in names})
        table = pacsv.read_csv(
            pa.py_buffer(data),
            read_options=pacsv.ReadOptions(column_names=names, block_size=len(data) + 1),   # rows of any size
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(column_types=types, null_values=[""], strings_can_be_null=True,
                                                 quoted_strings_can_be_null=False, true_values=["t"],
                                                 false_values=["f"]))
        for n in as_text:
            typ, texts = typed[n], table.column(n).to_pylist()
            if pa.types.is_binary(typ):
                values = [None if v is None else bytes.fromhex(v[2:]) for v in texts]
            elif pa.types.is_floating(typ.value_type):
                # every element through float() of its text: -0 keeps its sign, NaN and the
                # infinities come as JSON strings
                values = [None if v is None else [None if x is None else float(x)
                                                  for x in json.loads(v, parse_int=str, parse_float=str)]
                          for v in texts]
            else:
                values = [None if v is None else json.loads(v) for v in texts]
            table = table.set_column(names.index(n), n, pa.array(values, typ))
        return table

    def _undecodable(self, cur, exc) -> FailedEvent:
        """The first event (Kafka order) with a value that does not decode, and its column."""
        cur.execute(sql.SQL("SELECT part, off, op, key::text FROM {} WHERE tbl = %s ORDER BY part, off").format(
            sql.Identifier(apply_sql.STAGE)), (self.table,))
        for part, off, op, key in cur.fetchall():
            for i, c in enumerate(self.columns):
                cur.execute("SAVEPOINT tl_decode")
                try:
                    cur.execute(self._query(cur, sql.SQL("s.part = {} AND s.off = {}").format(
                        sql.Literal(part), sql.Literal(off)), [i]))
                    cur.execute("RELEASE SAVEPOINT tl_decode")
                except psycopg2.Error as one:
                    cur.execute("ROLLBACK TO SAVEPOINT tl_decode")
                    return self._event(cur, part, off, op, key, c.name, (one.diag.message_primary or str(one)).strip(),
                                       one.pgcode)
        raise exc   # no single value fails alone: the error is not the data's

    def _event(self, cur, part, off, op, key, column, error, sqlstate, hint=None) -> FailedEvent:
        cur.execute(sql.SQL("SELECT s.{}->>%s FROM {} s WHERE s.tbl = %s AND s.part = %s AND s.off = %s").format(
            sql.Identifier("key" if op == "d" else "after"), sql.Identifier(apply_sql.STAGE)),
            (column, self.table, part, off))
        row = cur.fetchone()
        return FailedEvent(table=self.table, topic=self.topic, partition=part, offset=off, key=truncate(key), op=op,
                           column=column, value=truncate(row[0]) if row else None, sqlstate=sqlstate, error=error,
                           hint=hint)

    def _refuse(self, cur, event: FailedEvent) -> None:
        if not self.dead_letter:
            raise ApplyRefused(describe(self.pipeline, event), event)
        record_dead_letter(cur, self.pipeline, event)
        self.dead_lettered.append(event)

    # ------------------------------------------------------------------ apply

    def run(self, cur, stamp: CommitStamp) -> tuple[int, int]:
        generated = [c.name for c in self.columns if c.generated is not None]
        if generated:
            raise SourceError(
                f"{self.label}: column(s) {', '.join(generated)} are generated at the source, and change events do "
                f"not carry generated values, so the Iceberg table cannot follow them. The table is HALTED before "
                f"this batch. Leave them out (exclude_columns) and run action=full_reload, or put the table in "
                f"batch mode.", table=self.table)
        started = time.monotonic()
        rows = self._read(cur)
        decoded = time.monotonic()
        refused = [f"r{i}" for i in range(len(self.columns))]
        bad = functools.reduce(pc.or_, [pc.fill_null(rows.column(r), False) for r in refused])
        if pc.any(bad).as_py():   # values the Iceberg column cannot hold: halt on the first, or dead-letter each
            for row in rows.filter(bad).select([OP, PART, OFF, KEY] + refused).to_pylist():
                lake = self.lake[next(i for i, r in enumerate(refused) if row[r])]
                self._refuse(cur, self._event(
                    cur, row[PART], row[OFF], row[OP], row[KEY], lake.name, f"the Iceberg column ({lake.iceberg}) "
                    f"cannot hold {lake.why.split(' (')[0]}", None,
                    hint=f"change the value at the source, or leave column {lake.name} out of the sync "
                         f"(exclude_columns) and run action=full_reload"))
            rows = rows.filter(pc.invert(bad))
        if not rows.num_rows:
            return 0, 0
        changes = rows.drop_columns(refused)
        deletes = pc.sum(pc.equal(changes.column(OP), "d")).as_py() or 0
        self.commit(changes, stamp)
        log.info("%s: %s changes decoded as Arrow in %.2fs, merged in one Iceberg commit in %.2fs",
                 self.label, f"{rows.num_rows:,}", decoded - started, time.monotonic() - decoded)
        return rows.num_rows - deletes, deletes

    # ------------------------------------------------------------------ the MERGE

    def _extras(self, deleting: bool | None) -> list[tuple[str, str]]:
        return [(spark_ident(n), v) for n, v in spark_event(self.extras, deleting, f"s.{OP}", f"s.{TS}", f"s.{POS}",
                                                            f"s.{PART}", f"s.{OFF}")]

    def merge_sql(self, table_id: str, view: str) -> str:
        """Deletes (with soft deletes: marks), updates (a value Debezium did not send keeps the
        table's) and inserts by key, each writing the table's extra columns from its event. With
        soft deletes, a delete carrying its row's last image (IMG) writes those values marked: onto
        the row, or as a new row when the table never had it (a key inserted and deleted within
        one batch), as the PostgreSQL target's apply does (core.apply_sql)."""
        on = " AND ".join(f"t.{spark_ident(k)} <=> s.{spark_ident(k)}" for k in self.primary_key)
        names = [spark_ident(c.name) for c in self.columns]
        by_op = None if self.extras.soft_deletes else False   # deleted_at by the event's op
        sets = [f"t.{n} = CASE WHEN s.`u{i}` THEN t.{n} ELSE s.{n} END" for i, n in enumerate(names)
                if self.columns[i].name not in self.primary_key] + [f"t.{n} = {v}" for n, v in self._extras(by_op)]
        update = f" WHEN MATCHED THEN UPDATE SET {', '.join(sets)}" if sets else ""
        delete = ("UPDATE SET " + ", ".join(f"t.{n} = {v}" for n, v in self._extras(True))
                  if self.extras.soft_deletes else "DELETE")
        added = self._extras(by_op)
        marks_only = f" AND NOT s.{IMG}" if self.extras.soft_deletes else ""
        return (f"MERGE INTO {table_id} t USING {view} s ON {on} WHEN MATCHED AND s.{OP} = 'd'{marks_only} THEN "
                f"{delete}{update} WHEN NOT MATCHED AND (s.{OP} <> 'd' OR s.{IMG}) THEN INSERT "
                f"({', '.join(names + [n for n, _ in added])}) "
                f"VALUES ({', '.join(['s.' + n for n in names] + [v for _, v in added])})")

    def projection(self) -> list[str]:
        """Spark values from the read ones (lake_types), plus the op and the unsent-value flags."""
        out = [OP, PART, OFF, KEY, TS, POS, SEQ, IMG]
        for i, lake in enumerate(self.lake):
            out.append(f"{lake.spark.replace('{v}', f'c{i}')} AS {spark_ident(lake.name)}")
            out.append(f"u{i}")
        return out

    def unsent_on_insert_sql(self, table_id: str, view: str) -> str:
        """Rows about to be inserted that lack a value Debezium did not send (see apply_sql)."""
        on = " AND ".join(f"t.{spark_ident(k)} <=> s.{spark_ident(k)}" for k in self.primary_key)
        flags = " OR ".join(f"s.`u{i}`" for i in range(len(self.columns)))
        return (f"SELECT s.{PART}, s.{OFF}, s.{KEY} FROM {view} s LEFT ANTI JOIN {table_id} t ON {on} "
                f"WHERE (s.{OP} <> 'd' OR s.{IMG}) AND ({flags}) LIMIT 1")

    def view_name(self) -> str:
        return f"tl_changes_{uuid.uuid4().hex[:12]}"

    def commit(self, changes: pa.Table, stamp: CommitStamp) -> None:
        """Merges the changes by key in one Iceberg commit whose summary carries the stamp; refuses
        when a Tideline commit landed since the snapshot this batch was cut against."""
        target, key = self.target, (self.schema, self.table)
        spark, seen = target.spark, target.seen.get(key)
        if spark is None:
            raise TargetError("the Iceberg target was not given a Spark session (Target.use)")
        t = target.iceberg_table(*key)
        landed = stamped_since(t, t.current_snapshot(), seen)
        if landed:
            raise FencedError(f"{self.label}: the Iceberg table received commit(s) of epoch "
                              f"{', '.join(s.get(SUMMARY_EPOCH, '?') for s in landed)} since snapshot {seen}, which "
                              f"this batch (epoch {stamp.epoch}) was cut against. This run commits nothing and stops.",
                              table=self.table)
        table_id, view = target.table_id(*key), self.view_name()
        spark.createDataFrame(changes).selectExpr(*self.projection()).createOrReplaceTempView(view)
        if self.extras.history:   # versions, not rows (targets.iceberg.history)
            from tideline.targets.iceberg.history import history_merge_sql
            unsent, merge = history_merge_sql(self, table_id, view)
        else:
            unsent, merge = self.unsent_on_insert_sql(table_id, view), self.merge_sql(table_id, view)
        try:
            if any(pc.any(changes.column(f"u{i}")).as_py() for i in range(len(self.columns))):
                for part, off, k in spark.sql(unsent).collect():
                    raise ResnapshotRequired(
                        f"{self.label}: the change at partition {part} offset {off} (key {k}) updates a row the "
                        f"Iceberg table does not have, and Debezium did not send its unchanged large values; the "
                        f"table has diverged from the source and is reloaded.", table=self.table)
            commit_with(spark, {SUMMARY_OFFSETS: json.dumps({str(p): o for p, o in sorted(stamp.offsets.items())}),
                                SUMMARY_EPOCH: str(stamp.epoch), SUMMARY_PIPELINE: stamp.pipeline},
                        lambda: spark.sql(merge))
        finally:
            spark.catalog.dropTempView(view)
        t = target.iceberg_table(*key)
        mine = t.current_snapshot()
        between = stamped_since(t, t.snapshot_by_id(mine.parent_snapshot_id) if mine.parent_snapshot_id else None,
                                seen)
        if between or SUMMARY_OFFSETS not in summary_of(mine):
            raise ResnapshotRequired(f"{self.label}: another Tideline commit landed between snapshot {seen} and "
                                     f"this batch's commit; the table's changes may be out of order, so it is "
                                     f"reloaded by itself.", table=self.table)
        target.seen[key] = mine.snapshot_id


def commit_with(spark, properties: dict[str, str], body) -> None:
    """Runs `body` (a Spark SQL write) so that its commit's summary carries `properties`."""
    from pyspark.java_gateway import ensure_callback_server_started
    ensure_callback_server_started(spark.sparkContext._gateway)
    jvm = spark.sparkContext._jvm
    props = jvm.java.util.HashMap()
    for k, v in properties.items():
        props.put(k, v)
    call = _Call(body)
    jvm.org.apache.iceberg.spark.CommitMetadata.withCommitProperties(
        props, call, jvm.java.lang.RuntimeException._java_lang_class)
    if call.failure is not None:
        raise call.failure
