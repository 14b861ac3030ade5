"""A history table (SCD type 2, core.table_extras) in a PostgreSQL target beyond the stream's
apply (core.apply_sql.history_statement): a re-snapshot that keeps every version, and a repair
that closes what differs and opens what the source holds now. Both run in the caller's
transaction, behind the table's fence."""
from __future__ import annotations

import logging

from psycopg2 import sql

from tideline.core.table_extras import CURRENT, SOURCE_ORDER, VALID_FROM, VALID_TO
from tideline.core.table_shape import TableShape

log = logging.getLogger("tideline.full_load")


def _same_row(shape: TableShape, a: str, b: str) -> sql.Composable:
    """Rows a and b hold the same values in every source column (as text: any type compares)."""
    return sql.SQL(" AND ").join(
        sql.SQL("{a}.{c}::text IS NOT DISTINCT FROM {b}.{c}::text").format(a=sql.Identifier(a), b=sql.Identifier(b),
                                                                          c=sql.Identifier(c))
        for c in shape.written_columns)


def _same_key(shape: TableShape, a: str, b: str) -> sql.Composable:
    return sql.SQL(" AND ").join(sql.SQL("{a}.{k} = {b}.{k}").format(a=sql.Identifier(a), b=sql.Identifier(b),
                                                                     k=sql.Identifier(k)) for k in shape.primary_key)


def keep_history(target, cur, shape: TableShape, schema: str, shadow: str, seeded_at, label: str) -> None:
    """A re-snapshot of a history table: the shadow holds the snapshot's rows as versions starting
    at `seeded_at`; the live table's versions join them. Closed versions stay as they were; a
    current version the snapshot holds unchanged stays current (the snapshot's copy of it is
    dropped: no version twice); one it holds changed, or lacks, is closed at the snapshot's time."""
    cur.execute("SELECT to_regclass(%s)", (f'"{schema}"."{shape.name}"',))
    if cur.fetchone()[0] is None:
        return
    live_cols = {r[0] for r in target.columns(cur, schema, shape.name)}
    if VALID_FROM not in live_cols:   # loaded without history: its rows are not versions
        return
    shadow_cols = [r[0] for r in target.columns(cur, schema, shadow)]
    cols = [c for c in shadow_cols if c in live_cols and c not in {x.name for x in shape.columns if x.generated}]
    ident = lambda name: sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(name))   # noqa: E731
    names = sql.SQL(", ").join(map(sql.Identifier, cols))
    live, new = ident(shape.name), ident(shadow)
    keys = sql.SQL(", ").join(sql.SQL("l.{}").format(sql.Identifier(k)) for k in shape.primary_key)
    # the current versions the snapshot holds unchanged: the live one stays, the snapshot's goes
    cur.execute(sql.SQL("CREATE TEMP TABLE tl_unchanged ON COMMIT DROP AS SELECT {keys} FROM {live} AS l JOIN {new} "
                        "AS n ON {key} WHERE l.{cur} AND {same}").format(
        keys=keys, live=live, new=new, key=_same_key(shape, "l", "n"), cur=sql.Identifier(CURRENT),
        same=_same_row(shape, "l", "n")))
    unchanged = cur.rowcount
    cur.execute(sql.SQL("DELETE FROM {new} AS n USING tl_unchanged AS u WHERE {key}").format(
        new=new, key=_same_key(shape, "n", "u")))
    # the closed versions, and the unchanged current ones, as they were
    cur.execute(sql.SQL("INSERT INTO {new} ({names}) SELECT {cols} FROM {live} AS l WHERE NOT l.{cur} OR EXISTS "
                        "(SELECT FROM tl_unchanged AS u WHERE {key})").format(
        new=new, names=names, live=live, cur=sql.Identifier(CURRENT), key=_same_key(shape, "l", "u"),
        cols=sql.SQL(", ").join(sql.SQL("l.{}").format(sql.Identifier(c)) for c in cols)))
    kept = cur.rowcount
    # the other current versions — changed, or gone from the source — end at the snapshot
    closing = [sql.SQL("{}::timestamptz").format(sql.Literal(seeded_at)) if c == VALID_TO else
               sql.SQL("false") if c == CURRENT else sql.SQL("l.{}").format(sql.Identifier(c)) for c in cols]
    cur.execute(sql.SQL("INSERT INTO {new} ({names}) SELECT {closing} FROM {live} AS l WHERE l.{cur} AND NOT EXISTS "
                        "(SELECT FROM tl_unchanged AS u WHERE {key})").format(
        new=new, names=names, closing=sql.SQL(", ").join(closing), live=live, cur=sql.Identifier(CURRENT),
        key=_same_key(shape, "l", "u")))
    closed = cur.rowcount
    cur.execute("DROP TABLE tl_unchanged")
    log.info("%s: history kept across the re-snapshot: %s versions carried as they were (%s current ones the "
             "snapshot holds unchanged), %s closed at the snapshot", label, f"{kept:,}", f"{unchanged:,}", f"{closed:,}")


def repair_history(cur, shape: TableShape, schema: str, where: str, delete_missing: bool,
                   order: int | None = None) -> tuple[int, int]:
    """A repair of a history table, its source rows already in tl_repair: each current version in
    the range that differs from the source's row (or whose row the source no longer has, for a
    key range) is closed now, and the source's row opens the key's current version, at `order`
    in the source's log order (SOURCE_ORDER) when its versions follow it. Returns (versions
    opened, versions closed for rows gone)."""
    table = sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(shape.name))
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in shape.written_columns)
    gone = sql.SQL(" OR NOT EXISTS (SELECT FROM tl_repair AS r WHERE {})").format(_same_key(shape, "r", "t")) \
        if delete_missing else sql.SQL("")
    cur.execute(sql.SQL("UPDATE {t} AS t SET {vt} = now(), {cur} = false WHERE t.{cur} AND ({w}) AND (EXISTS "
                        "(SELECT FROM tl_repair AS r WHERE {key} AND NOT ({same})){gone}) "
                        "RETURNING EXISTS (SELECT FROM tl_repair AS r WHERE {key})").format(
        t=table, vt=sql.Identifier(VALID_TO), cur=sql.Identifier(CURRENT), w=sql.SQL(where),
        key=_same_key(shape, "r", "t"), same=_same_row(shape, "r", "t"), gone=gone))
    deleted = sum(1 for (present,) in cur.fetchall() if not present)
    ordered = (sql.SQL(", {}").format(sql.Identifier(SOURCE_ORDER)), sql.SQL(", {}").format(sql.Literal(order))) \
        if order is not None else (sql.SQL(""), sql.SQL(""))
    cur.execute(sql.SQL("INSERT INTO {t} ({cols}, {vf}, {cur}{so}) SELECT {cols}, now(), true{at} FROM tl_repair AS r "
                        "WHERE NOT EXISTS (SELECT FROM {t} AS t WHERE t.{cur} AND {key})").format(
        t=table, cols=cols, vf=sql.Identifier(VALID_FROM), cur=sql.Identifier(CURRENT), key=_same_key(shape, "r", "t"),
        so=ordered[0], at=ordered[1]))
    return cur.rowcount, deleted
