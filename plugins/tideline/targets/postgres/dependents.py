"""What hangs on a synced target table and must survive a full reload's swap: the privileges
granted on it, its comment, and the views and materialized views built on it (directly or through
other views) with their options, owner, privileges, comments and (materialized) indexes.

A reload swaps in a new table (DROP + RENAME), so a view on the old one would block the DROP and
grants would vanish with it. The swap transaction captures all this, drops the views, swaps, and
recreates everything on the new table — readers see the old table, then the new one with the same
views and access, never a gap.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import psycopg2
from psycopg2 import sql

from tideline import sqlfiles
from tideline.core.errors import TargetError


@dataclass
class Grant:
    privilege: str
    grantee: str          # quoted role name, or PUBLIC
    grantable: bool

    def statement(self, relation: sql.Composable) -> sql.Composed:
        return sql.SQL("GRANT {} ON {} TO {}{}").format(sql.SQL(self.privilege), relation, sql.SQL(self.grantee),
                                                        sql.SQL(" WITH GRANT OPTION" if self.grantable else ""))


@dataclass
class View:
    oid: int
    kind: str             # v view | m materialized view
    schema: str
    name: str
    definition: str
    options: list[str] | None
    owner: str
    comment: str | None
    indexes: list[str]
    grants: list[Grant] = field(default_factory=list)

    @property
    def ident(self) -> sql.Composed:
        return sql.SQL("{}.{}").format(sql.Identifier(self.schema), sql.Identifier(self.name))

    @property
    def keyword(self) -> sql.SQL:
        return sql.SQL("MATERIALIZED VIEW" if self.kind == "m" else "VIEW")


@dataclass
class Dependents:
    grants: list[Grant]
    comment: str | None
    views: list[View]     # in creation order

    def describe(self) -> str:
        return (f"{len(self.grants)} grant(s), {len(self.views)} dependent view(s)"
                + (f": {', '.join(f'{v.schema}.{v.name}' for v in self.views)}" if self.views else ""))


def _grants(cur, relid: int) -> list[Grant]:
    cur.execute(sqlfiles.load("full_load/grants"), {"relid": relid})
    return [Grant(p, g, bool(opt)) for p, g, opt in cur.fetchall()]


def capture(cur, schema: str, table: str) -> Dependents | None:
    """What to restore on the table that replaces schema.table (None: the table does not exist)."""
    cur.execute("SELECT to_regclass(%s)::oid", (f'"{schema}"."{table}"',))
    relid = cur.fetchone()[0]
    if relid is None:
        return None
    cur.execute("SELECT obj_description(%s, 'pg_class')", (relid,))
    comment = cur.fetchone()[0]
    cur.execute(sqlfiles.load("full_load/dependent_views"), {"relid": relid})
    views = [View(oid, kind, s, n, definition, options, owner, vcomment, list(indexes or []))
             for oid, kind, s, n, definition, options, owner, vcomment, indexes, _depth in cur.fetchall()]
    for view in views:
        view.grants = _grants(cur, view.oid)
    return Dependents(_grants(cur, relid), comment, views)


def _cannot(v: View, schema: str, table: str, what: str, exc: Exception) -> TargetError:
    return TargetError(f"{schema}.{table}: the reload cannot {what} {v.keyword.string.lower()} {v.schema}.{v.name} "
                       f"(owner {v.owner}), which is built on it: {str(exc).strip()}. Nothing was swapped; give the "
                       f"target connection's role membership in {v.owner}, or drop the view and recreate it after "
                       f"the reload", table=table)


def drop_views(cur, deps: Dependents, schema: str, table: str) -> None:
    for v in reversed(deps.views):
        try:
            cur.execute(sql.SQL("DROP {} {}").format(v.keyword, v.ident))
        except psycopg2.Error as exc:
            raise _cannot(v, schema, table, "drop and recreate", exc) from None


def restore(cur, deps: Dependents, schema: str, table: str) -> None:
    """Grants and comment on the new table, then every view recreated in dependency order."""
    ident = sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table))
    for g in deps.grants:
        cur.execute(g.statement(ident))
    if deps.comment is not None:
        cur.execute(sql.SQL("COMMENT ON TABLE {} IS {}").format(ident, sql.Literal(deps.comment)))
    for v in deps.views:
        options = sql.SQL(" WITH ({})").format(sql.SQL(", ").join(sql.SQL(o) for o in v.options)) \
            if v.options else sql.SQL("")
        try:
            cur.execute(sql.SQL("CREATE {} {}{} AS {}").format(
                v.keyword, v.ident, options, sql.SQL(v.definition.rstrip().rstrip(";"))))
            cur.execute(sql.SQL("ALTER {} {} OWNER TO {}").format(v.keyword, v.ident, sql.Identifier(v.owner)))
        except psycopg2.Error as exc:
            raise _cannot(v, schema, table, "recreate", exc) from None
        for index in v.indexes:
            cur.execute(index)
        for g in v.grants:
            cur.execute(g.statement(v.ident))
        if v.comment is not None:
            cur.execute(sql.SQL("COMMENT ON {} {} IS {}").format(v.keyword, v.ident, sql.Literal(v.comment)))
