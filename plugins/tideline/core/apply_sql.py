"""Set-based SQL that applies one batch of compacted change events from the staging table.

The staging table holds the last event per key: (tbl, op, key jsonb, after jsonb, part, off).
Deletes use the message key; upserts use the row image. A column whose value Debezium did not
have (unchanged TOAST) keeps the target's value; it can never overwrite it. A column absent from
an event (the change happened before the column was added: MariaDB's connector decodes each event
with the schema of its time) gets what the source's existing rows hold for it: the literal default
they were given, else NULL. (PostgreSQL's connector fills such a column with null instead, which
cannot be told from a real NULL: there the event's null is applied.)
"""
from __future__ import annotations

from psycopg2 import sql

from tideline.core.column_hash import pg_sql
from tideline.core.debezium import UNAVAILABLE, may_be_unavailable, unavailable_test, value_expr
from tideline.core.table_extras import CURRENT, DELETED_AT, PREFIX, SOURCE_ORDER, VALID_FROM, VALID_TO, TableExtras
from tideline.core.table_shape import Column

STAGE = "tl_stage"

CREATE_STAGE = sql.SQL(
    "CREATE TEMP TABLE {} (tbl text NOT NULL, op \"char\" NOT NULL, key jsonb, after jsonb, "
    "part int NOT NULL, off bigint NOT NULL, ts bigint, pos text) ON COMMIT DROP").format(sql.Identifier(STAGE))
# A batch of many tables: without it each table's three statements would scan every table's events
# (tests/bench/many_streams.py, 100 tables: 12-15 s to commit a batch of ~100,000 events; indexed, ~1.5 s for
# ~50,000).
INDEX_STAGE = sql.SQL("CREATE INDEX ON {} (tbl)").format(sql.Identifier(STAGE))
# A table's staged events ranked in Kafka order, for narrowing a refused batch down to one event.
RANKED = "tl_ranked"
RANK_STAGE = sql.SQL(
    "CREATE TEMP TABLE {ranked} ON COMMIT DROP AS SELECT row_number() OVER (ORDER BY part, off) AS i, part, off, "
    "op, key::text AS key FROM {stage} WHERE tbl = %(tbl)s").format(ranked=sql.Identifier(RANKED),
                                                                  stage=sql.Identifier(STAGE))
# A change log's events (core.table_extras.CHANGE_LOG): every event of the batch, not only the last per key.
LOG_STAGE = "tl_log"
CREATE_LOG_STAGE = sql.SQL(
    "CREATE TEMP TABLE {} (tbl text NOT NULL, topic text NOT NULL, op \"char\" NOT NULL, key jsonb, before jsonb, "
    "after jsonb, part int NOT NULL, off bigint NOT NULL, ts bigint, pos text) ON COMMIT DROP").format(
    sql.Identifier(LOG_STAGE))
COPY_LOG_STAGE = sql.SQL("COPY {} (tbl, topic, op, key, before, after, part, off, ts, pos) FROM STDIN").format(
    sql.Identifier(LOG_STAGE))
COPY_STAGE = sql.SQL("COPY {} (tbl, op, key, after, part, off, ts, pos) FROM STDIN").format(sql.Identifier(STAGE))


def field(doc: str, col: str) -> sql.Composable:
    """A field of a staged event's image: `col` as the source names it (Column.source_name)."""
    return sql.SQL("s.{}->>{}").format(sql.Identifier(doc), sql.Literal(col))


def row_value(c: Column) -> sql.Composable:
    """The column's value from the event's row image (see the module docstring for an absent one)."""
    new = value_expr(field("after", c.source_name), c.type, c.encoding)
    if c.hash_salt is not None:   # hash_columns: the target holds its hash (core.column_hash)
        new = pg_sql(new, c.hash_salt)
    if not c.has_missing:   # absent: ->> gives NULL, which is what existing rows hold
        return new
    missing = sql.SQL("{}::{}").format(sql.Literal(c.missing_value), sql.SQL(c.type))
    return sql.SQL("CASE WHEN s.after ? {name} THEN {new} ELSE {missing} END").format(
        name=sql.Literal(c.source_name), new=new,
        missing=pg_sql(missing, c.hash_salt) if c.hash_salt is not None else missing)


def _key_match(columns: dict[str, Column], pk: list[str], doc: str) -> sql.Composable:
    return sql.SQL(" AND ").join(
        sql.SQL("t.{} = {}").format(sql.Identifier(k), value_expr(field(doc, columns[k].source_name), columns[k].type,
                                                                  columns[k].encoding)) for k in pk)


def _written(columns: list[Column]) -> list[Column]:
    """Generated columns are computed by the target (pgoutput does not send them)."""
    return [c for c in columns if c.generated is None]


def _target(schema: str, table: str) -> sql.Composable:
    return sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table))


def only_rows(first: int, last: int) -> sql.Composable:
    """Restricts an apply statement to the staged events ranked first..last (see RANK_STAGE)."""
    return sql.SQL("(s.part, s.off) IN (SELECT part, off FROM {} WHERE i BETWEEN {} AND {})").format(
        sql.Identifier(RANKED), sql.Literal(first), sql.Literal(last))


def _only(only: sql.Composable | None) -> sql.Composable:
    return sql.SQL(" AND {}").format(only) if only is not None else sql.SQL("")


_SOURCE_TS = sql.SQL("to_timestamp(s.ts / 1000000.0)")   # the stage's time: the source's commit, in µs
_METADATA = {"synced_at": sql.SQL("now()"), "op": sql.SQL("s.op::text"), "source_ts": _SOURCE_TS,
             "source_position": sql.SQL("concat(coalesce(s.pos, '-'), ' kafka ', s.part, ':', s.off)")}


def extra_values(extras: TableExtras, deleting: bool | None) -> list[tuple[str, sql.Composable]]:
    """(column, value) of the table's extra columns for a staged event (core.table_extras): the
    metadata from the event, and the soft-delete time — the source's delete time (now() when the
    event has none) for a delete, NULL for an insert or update (a key inserted again is not deleted);
    `deleting` None: by the event's op (a delete carrying its row's last image, written marked)."""
    deleted = sql.SQL("coalesce({}, now())").format(_SOURCE_TS)
    if deleting is None:
        deleted = sql.SQL("CASE WHEN s.op = 'd' THEN {} END").format(deleted)
    out = [(DELETED_AT, deleted if deleting is not False else sql.SQL("NULL"))] if extras.soft_deletes else []
    return out + [(PREFIX + m, _METADATA[m]) for m in extras.metadata]


def _upserted(extras: TableExtras) -> sql.Composable:
    """The staged events that write a row's values: inserts and updates, and with soft deletes a
    delete carrying its row's last image (core.batch_events.with_last_image), written marked."""
    return sql.SQL("(s.op <> 'd' OR s.after IS NOT NULL)" if extras.soft_deletes else "s.op <> 'd'")


def leave_filter_sql(table: str, columns: list[Column], predicate: str) -> sql.Composed:
    """A table with a row_filter (core.row_filter): its staged inserts and updates whose new row
    the filter does not keep become deletes of their key — a row updated out of the filter leaves
    the target, and one that never was in it is not written. `predicate` is the filter in
    PostgreSQL over the alias v, whose columns are the event's values decoded as the apply
    decodes them (NULL and an unknown result count as not kept, as in a WHERE). Returns a row per
    event turned. A delete's carried row image (core.batch_events.with_last_image) the filter does
    not keep is dropped the same way: a soft-delete table never writes a row the filter leaves out."""
    decoded = sql.SQL(", ").join(sql.SQL("{} AS {}").format(row_value(c), sql.Identifier(c.name))
                                 for c in _written(columns))
    return sql.SQL("UPDATE {stage} AS t SET op = 'd', after = NULL WHERE t.tbl = {tbl} AND t.after IS NOT NULL AND "
                   "(t.part, t.off) IN (SELECT s.part, s.off FROM {stage} AS s, LATERAL (SELECT {decoded}) AS v "
                   "WHERE s.tbl = {tbl} AND s.after IS NOT NULL AND NOT coalesce(({predicate}), false)) "
                   "RETURNING 1").format(
        stage=sql.Identifier(STAGE), tbl=sql.Literal(table), decoded=decoded, predicate=sql.SQL(predicate))


def delete_sql(schema: str, table: str, columns: list[Column], pk: list[str],
               only: sql.Composable | None = None, extras: TableExtras = TableExtras()) -> sql.Composed:
    by_name = {c.name: c for c in columns}
    if extras.soft_deletes:   # the row stays with its last values, marked deleted
        sets = sql.SQL(", ").join(sql.SQL("{} = {}").format(sql.Identifier(name), value)
                                  for name, value in extra_values(extras, deleting=True))
        return sql.SQL("UPDATE {t} AS t SET {sets} FROM {stage} AS s WHERE s.tbl = {tbl} AND s.op = 'd' "
                       "AND s.after IS NULL{only} AND {match} RETURNING 1").format(
            t=_target(schema, table), sets=sets, stage=sql.Identifier(STAGE), tbl=sql.Literal(table),
            only=_only(only), match=_key_match(by_name, pk, "key"))
    return sql.SQL("DELETE FROM {t} AS t USING {stage} AS s WHERE s.tbl = {tbl} AND s.op = 'd'{only} AND {match} "
                   "RETURNING 1").format(
        t=_target(schema, table), stage=sql.Identifier(STAGE), tbl=sql.Literal(table), only=_only(only),
        match=_key_match(by_name, pk, "key"))


def update_sql(schema: str, table: str, columns: list[Column], pk: list[str],
               only: sql.Composable | None = None, extras: TableExtras = TableExtras()) -> sql.Composed:
    by_name = {c.name: c for c in columns}
    sets = []
    for c in _written(columns):
        if c.name in pk:
            continue
        raw = field("after", c.source_name)
        new = row_value(c)
        if may_be_unavailable(c.type, c.encoding):
            new = sql.SQL("CASE WHEN {test} THEN t.{col} ELSE {new} END").format(
                test=unavailable_test(raw, c.type), col=sql.Identifier(c.name), new=new)
        sets.append(sql.SQL("{} = {}").format(sql.Identifier(c.name), new))
    sets += [sql.SQL("{} = {}").format(sql.Identifier(name), value) for name, value in extra_values(extras, None)]
    if not sets:  # a table that is all key: nothing to update
        return sql.SQL("SELECT 1 WHERE false")
    return sql.SQL("UPDATE {t} AS t SET {sets} FROM {stage} AS s WHERE s.tbl = {tbl} AND {upserted}{only} "
                   "AND {match} RETURNING 1").format(
        t=_target(schema, table), sets=sql.SQL(", ").join(sets), stage=sql.Identifier(STAGE), upserted=_upserted(extras),
        tbl=sql.Literal(table), only=_only(only), match=_key_match(by_name, pk, "after"))


def _missing(schema: str, table: str, columns: list[Column], pk: list[str]) -> sql.Composable:
    by_name = {c.name: c for c in columns}
    return sql.SQL("NOT EXISTS (SELECT 1 FROM {t} AS t WHERE {match})").format(
        t=_target(schema, table), match=_key_match(by_name, pk, "after"))


def insert_sql(schema: str, table: str, columns: list[Column], pk: list[str],
               only: sql.Composable | None = None, extras: TableExtras = TableExtras()) -> sql.Composed:
    columns = _written(columns)
    extra = extra_values(extras, deleting=None)
    values = [row_value(c) for c in columns] + [value for _name, value in extra]
    return sql.SQL("INSERT INTO {t} ({cols}) SELECT {vals} FROM {stage} AS s "
                   "WHERE s.tbl = {tbl} AND {upserted}{only} AND {missing} RETURNING 1").format(
        t=_target(schema, table), upserted=_upserted(extras),
        cols=sql.SQL(", ").join([sql.Identifier(c.name) for c in columns] + [sql.Identifier(n) for n, _ in extra]),
        vals=sql.SQL(", ").join(values), stage=sql.Identifier(STAGE), tbl=sql.Literal(table), only=_only(only),
        missing=_missing(schema, table, columns, pk))


def unavailable_on_insert_sql(schema: str, table: str, columns: list[Column], pk: list[str],
                              extras: TableExtras = TableExtras()) -> sql.Composed:
    """Rows about to be inserted that carry a TOAST placeholder: the target lacks a row the source
    has, so the value cannot be known. Returns (part, off, key) of the first few."""
    tests = [unavailable_test(field("after", c.source_name), c.type) for c in _written(columns)
             if may_be_unavailable(c.type, c.encoding)]
    if not tests:
        return sql.SQL("SELECT NULL::int, NULL::bigint, NULL::text WHERE false")
    return sql.SQL("SELECT s.part, s.off, s.key::text FROM {stage} AS s WHERE s.tbl = {tbl} AND {upserted} "
                   "AND ({tests}) AND {missing} LIMIT 5").format(
        upserted=_upserted(extras), stage=sql.Identifier(STAGE), tbl=sql.Literal(table), tests=sql.SQL(" OR ").join(tests),
        missing=_missing(schema, table, columns, pk))


def apply_statement(schema: str, table: str, columns: list[Column], pk: list[str],
                    only: sql.Composable | None = None, extras: TableExtras = TableExtras()) -> sql.Composed:
    """One table's staged events in one statement: its deletes, updates and inserts as
    data-modifying CTEs, and the first row (part, off, key) unavailable_on_insert_sql finds. A
    stream of 100 tables made four round trips a table of them. All parts see one snapshot, which
    is the same as running them one after another here: the stage holds one event per key, so no
    key is both deleted and upserted, and the insert finds exactly the keys the update did not.
    Returns one row: (deleted, updated, inserted, part, off, key); part is NULL when no row is
    unavailable — else the caller undoes the statement."""
    return sql.SQL("WITH broken AS ({broken}), deleted AS ({delete}), updated AS ({update}), inserted AS ({insert}) "
                   "SELECT (SELECT count(*) FROM deleted), (SELECT count(*) FROM updated), "
                   "(SELECT count(*) FROM inserted), b.* FROM (SELECT 1) AS one "
                   "LEFT JOIN (SELECT * FROM broken LIMIT 1) AS b ON true").format(
        broken=unavailable_on_insert_sql(schema, table, columns, pk, extras),
        delete=delete_sql(schema, table, columns, pk, only, extras), update=update_sql(schema, table, columns, pk, only,
                                                                                      extras),
        insert=insert_sql(schema, table, columns, pk, only, extras))


_EVENT_TS = sql.SQL("coalesce(s.ts, (extract(epoch FROM now()) * 1000000)::bigint)")   # µs; now without one


def history_order(extras: TableExtras) -> sql.Composable:
    """What orders the staged events (`s`) of one key of a history table: the GTID's sequence
    number from MariaDB (TableExtras.source_order), else the commit time in µs. Events of one
    source transaction share it."""
    return sql.SQL("split_part(s.pos, '-', 3)::bigint") if extras.source_order else _EVENT_TS


def history_statement(schema: str, table: str, columns: list[Column], pk: list[str],
                      only: sql.Composable | None = None, extras: TableExtras = TableExtras()) -> sql.Composed:
    """A history table's (SCD type 2, core.table_extras) staged events in one statement. The stage
    holds every event of the batch for it, not only the last per key. Per key, in source order
    (history_order): the events of one source transaction count as its last; events the key's
    current version already holds add nothing (a batch applied again, the full load's overlap):
    those at or before its start by time, or, where the version records its SOURCE_ORDER (a
    MariaDB source), at or before that. Each new event's version starts at its commit time,
    never before the version it follows (MariaDB's binlog times are whole seconds, the times of
    statements, and may run back); events whose versions would start at one time fold into the
    last of them. (Commit times order PostgreSQL's events and differ between its transactions:
    there both steps would change nothing, and are left out: ~6% of history's events/s.) The
    current version is closed at the first new version's start, or, when that start is its own,
    becomes that version (a delete there removes it: within one time tick the row had no other
    state). Each insert or update opens a version that the key's next
    one closes, and a delete only closes. A value Debezium did not send (unchanged TOAST) is the
    current version's. Returns (deletes, 0, versions opened, part, off, key) — part NULL unless
    an event lacks a value nobody has (see unavailable_on_insert_sql), and then nothing may be
    committed. (Counted as a plain table's apply counts: deletes, 0, versions opened.)"""
    by_name = {c.name: c for c in columns}
    keys = [sql.Identifier(k) for k in pk]
    key_exprs = [sql.SQL("{} AS {}").format(value_expr(field("key", by_name[k].source_name), by_name[k].type,
                                                       by_name[k].encoding),
                                            sql.Identifier(k)) for k in pk]
    key_list = sql.SQL(", ").join(keys)
    on = lambda a, b: sql.SQL(" AND ").join(sql.SQL("{a}.{k} = {b}.{k}").format(a=sql.Identifier(a), b=sql.Identifier(b), k=k)
                                             for k in keys)
    of = lambda alias: sql.SQL(", ").join(sql.SQL("{}.{}").format(sql.Identifier(alias), k) for k in keys)   # noqa: E731
    target = _target(schema, table)
    written = [c for c in _written(columns)]
    values = []
    for c in written:
        value = row_value(c)
        if c.name not in pk and may_be_unavailable(c.type, c.encoding):
            value = sql.SQL("CASE WHEN {test} THEN (SELECT t.{col} FROM {t} AS t WHERE t.{cur} AND {match}) "
                            "ELSE {value} END").format(
                test=unavailable_test(field("after", c.source_name), c.type), col=sql.Identifier(c.name), t=target,
                cur=sql.Identifier(CURRENT), match=on("t", "s"), value=value)
        values.append(value)
    meta = [(n, v) for n, v in extra_values(TableExtras(metadata=extras.metadata), deleting=False)]
    ordered = [(SOURCE_ORDER, sql.SQL("s.o"))] if extras.source_order else []
    tests = [unavailable_test(field("after", c.source_name), c.type) for c in written
             if c.name not in pk and may_be_unavailable(c.type, c.encoding)]
    broken = (sql.SQL("SELECT s.part, s.off, s.key::text FROM seq AS s WHERE s.op <> 'd' AND s.cvf IS NULL AND "
                      "({tests}) LIMIT 1").format(tests=sql.SQL(" OR ").join(tests))
              if tests else sql.SQL("SELECT NULL::int, NULL::bigint, NULL::text WHERE false"))
    version = ([(c.name, v) for c, v in zip(written, values)]
               + [(VALID_FROM, sql.SQL("s.eff")), (VALID_TO, sql.SQL("s.next_eff")),
                  (CURRENT, sql.SQL("s.next_eff IS NULL"))] + ordered + meta)
    return sql.SQL(
        "WITH ev AS (SELECT DISTINCT ON ({key_list}, o) {key_exprs}, s.op, s.key, s.after, s.part, s.off, {ts} AS ts, "
        "{order} AS o, s.pos FROM {stage} AS s WHERE s.tbl = {tbl}{only} ORDER BY {key_list}, o, s.part DESC, "
        "s.off DESC), "
        "cur AS (SELECT {t_keys}, t.{vf} AS vf, {co} AS co FROM {target} AS t WHERE t.{cur} AND ({t_keys}) IN "
        "(SELECT {key_list} FROM ev)), "
        "fresh AS (SELECT ev.*, cur.vf AS cvf FROM ev LEFT JOIN cur ON {ev_cur} WHERE cur.vf IS NULL OR "
        "CASE WHEN cur.co IS NULL THEN to_timestamp(ev.ts / 1000000.0) > cur.vf ELSE ev.o > cur.co END), "
        "{timed_folded}"
        "seq AS (SELECT folded.*, lead(folded.eff) OVER (PARTITION BY {folded_keys} ORDER BY folded.eff) AS next_eff "
        "FROM folded), "
        "broken AS ({broken}), "
        "closed AS (UPDATE {target} AS t SET {vt} = f.first, {cur} = false FROM (SELECT {key_list}, min(eff) AS "
        "first FROM seq GROUP BY {key_list}) AS f WHERE t.{cur} AND {t_f} AND t.{vf} < f.first RETURNING 1), "
        "emptied AS (DELETE FROM {target} AS t USING seq AS s WHERE t.{cur} AND {t_s} AND s.eff = t.{vf} "
        "AND s.op = 'd' RETURNING 1), "
        "became AS (UPDATE {target} AS t SET {sets} FROM seq AS s WHERE t.{cur} AND {t_s} AND s.eff = t.{vf} "
        "AND s.op <> 'd' RETURNING 1), "
        "opened AS (INSERT INTO {target} ({cols}) SELECT {vals} FROM seq AS s WHERE s.op <> 'd' AND s.eff IS DISTINCT "
        "FROM s.cvf RETURNING 1) "
        "SELECT (SELECT count(*) FROM seq WHERE op = 'd'), 0::bigint, "   # (closed runs unreferenced, as every
        "(SELECT count(*) FROM opened) + (SELECT count(*) FROM became), b.* FROM (SELECT 1) AS one "
        "LEFT JOIN (SELECT * FROM broken LIMIT 1) AS b ON true").format(
        key_list=key_list, key_exprs=sql.SQL(", ").join(key_exprs), ts=_EVENT_TS, order=history_order(extras),
        stage=sql.Identifier(STAGE), tbl=sql.Literal(table), only=_only(only), target=target,
        cur=sql.Identifier(CURRENT), vf=sql.Identifier(VALID_FROM), vt=sql.Identifier(VALID_TO),
        co=sql.SQL("t.{}").format(sql.Identifier(SOURCE_ORDER)) if extras.source_order else sql.SQL("NULL::bigint"),
        t_keys=of("t"), ev_cur=on("ev", "cur"), folded_keys=of("folded"),
        broken=broken, t_f=on("t", "f"), t_s=on("t", "s"), timed_folded=(sql.SQL(
            "timed AS (SELECT fresh.*, greatest(max(to_timestamp(fresh.ts / 1000000.0)) OVER (PARTITION BY {fresh_keys} "
            "ORDER BY fresh.o ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW), fresh.cvf) AS eff FROM fresh), "
            "folded AS (SELECT DISTINCT ON ({key_list}, eff) * FROM timed ORDER BY {key_list}, eff, o DESC), ").format(
            fresh_keys=of("fresh"), key_list=key_list) if extras.source_order else   # commit times: already so
            sql.SQL("folded AS (SELECT fresh.*, to_timestamp(fresh.ts / 1000000.0) AS eff FROM fresh), ")),
        sets=sql.SQL(", ").join(sql.SQL("{} = {}").format(sql.Identifier(n), v) for n, v in version
                           if n != VALID_FROM and n not in pk),
        cols=sql.SQL(", ").join(sql.Identifier(n) for n, _ in version),
        vals=sql.SQL(", ").join(v for _, v in version))


def create_change_log_sql(schema: str, table: str) -> sql.Composed:
    """A table's change log (core.table_extras.CHANGE_LOG), keyed by where each event was in Kafka."""
    from tideline.core.table_extras import CHANGE_LOG
    types = {"text": "text", "timestamptz": "timestamp with time zone", "int": "integer", "bigint": "bigint",
             "json": "jsonb"}
    return sql.SQL("CREATE TABLE IF NOT EXISTS {t} ({cols}, PRIMARY KEY (_tideline_topic, _tideline_partition, "
                   "_tideline_offset))").format(
        t=_target(schema, table), cols=sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(types[k]))
                                                          for n, k in CHANGE_LOG))


def append_change_log_sql(schema: str, log_table: str, table: str) -> sql.Composed:
    """The staged events of `table` appended to its change log; an event already there (the same
    topic, partition and offset: Kafka's overlap after a reload) is not appended again."""
    return sql.SQL("INSERT INTO {t} (_tideline_op, _tideline_source_ts, _tideline_source_position, _tideline_synced_at, "
                   "_tideline_topic, _tideline_partition, _tideline_offset, key, before, after) "
                   "SELECT s.op::text, to_timestamp(s.ts / 1000000.0), concat(coalesce(s.pos, '-'), ' kafka ', s.part, "
                   "':', s.off), now(), s.topic, s.part, s.off, s.key, s.before, s.after FROM {stage} AS s "
                   "WHERE s.tbl = {tbl} ORDER BY s.part, s.off ON CONFLICT DO NOTHING").format(
        t=_target(schema, log_table), stage=sql.Identifier(LOG_STAGE), tbl=sql.Literal(table))


def hash_log_images_sql(table: str, columns: list[Column]) -> sql.Composed | None:
    """A change log's before and after images hold a hashed column's hash too (hash_columns:
    core.column_hash), its placeholder for an unsent value as it is; None when none is hashed."""
    hashed = [c for c in columns if c.hash_salt is not None]
    if not hashed:
        return None

    def image(doc: str) -> sql.Composable:
        out: sql.Composable = sql.Identifier(doc)
        for c in hashed:
            value = sql.SQL("({})->>{}").format(out, sql.Literal(c.source_name))   # the event's own names
            out = sql.SQL("CASE WHEN {v} IS NULL OR {v} = {u} THEN {img} ELSE jsonb_set({img}, {path}, "
                          "to_jsonb({h})) END").format(v=value, u=sql.Literal(UNAVAILABLE), img=out,
                                                      path=sql.Literal("{" + c.source_name + "}"), h=pg_sql(value, c.hash_salt))
        return out
    return sql.SQL("UPDATE {stage} SET before = {b}, after = {a} WHERE tbl = {tbl}").format(
        stage=sql.Identifier(LOG_STAGE), b=image("before"), a=image("after"), tbl=sql.Literal(table))
