"""Schema drift between source and target: what can be applied by itself and what must stop.

Rules (documented in README): a column added at the source is added to the target (nullable);
a column dropped at the source stays in the target and is NULL in rows changed afterwards; a
widening type change is applied; any other change stops the pipeline with an error that names
table, column, old and new type.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from psycopg2 import sql

from tideline.core.errors import ResnapshotRequired, SchemaChangeError
from tideline.core.table_shape import Column

_INT_RANK = {"smallint": 1, "integer": 2, "bigint": 3}
_NUMERIC = re.compile(r"^numeric(?:\((\d+)(?:,(\d+))?\))?$")
_VARCHAR = re.compile(r"^character varying(?:\((\d+)\))?$")
# A default that is a literal, possibly cast: the same value in every row, whenever evaluated.
CONSTANT = re.compile(r"^\(?('(?:[^']|'')*'|-?[0-9]+(?:\.[0-9]+)?|true|false)\)?"
                      r"(::[a-z ]+(?:\(\d+(?:,\d+)?\))?(?:\[\])?)*$")


@dataclass(frozen=True)
class DriftPlan:
    add: tuple[Column, ...]             # columns to add to the target
    widen: tuple[tuple[str, str, str], ...]  # (column, old type, new type)
    dropped: tuple[str, ...]            # in the target, gone at the source (kept, NULL from now on)

    @property
    def changes_target(self) -> bool:
        return bool(self.add or self.widen)


def _numeric(t: str):
    m = _NUMERIC.match(t)
    if not m:
        return None
    if m.group(1) is None:
        return (None, None)  # unconstrained
    return (int(m.group(1)), int(m.group(2) or 0))


def is_widening(old: str, new: str) -> bool:
    """True when every value of type `old` is represented exactly, unchanged, in `new`."""
    if old == new:
        return True
    if old.endswith("[]") and new.endswith("[]"):
        return is_widening(old[:-2], new[:-2])
    if old in _INT_RANK and new in _INT_RANK:
        return _INT_RANK[new] >= _INT_RANK[old]
    if old in _INT_RANK and _numeric(new):
        p, s = _numeric(new)
        return p is None or p - s >= {"smallint": 5, "integer": 10, "bigint": 19}[old]
    if old == "real" and new == "double precision":
        return True
    if _numeric(old) and _numeric(new):
        (p1, s1), (p2, s2) = _numeric(old), _numeric(new)
        if p2 is None:
            return True
        if p1 is None:
            return False
        return s2 >= s1 and (p2 - s2) >= (p1 - s1)
    vo, vn = _VARCHAR.match(old), (_VARCHAR.match(new) if new != "text" else None)
    if vo and new == "text":
        return True
    if vo and vn:
        return vn.group(1) is None or (vo.group(1) is not None and int(vn.group(1)) >= int(vo.group(1)))
    if old.startswith("character(") and new == "text":
        return False  # char(n) pads with blanks: values would change
    return False


def plan(table: str, source: list[Column], target: list[Column]) -> DriftPlan:
    """Compares the source's columns with the target's; raises SchemaChangeError for the unsafe."""
    target_by_name = {c.name: c for c in target}
    source_names = {c.name for c in source}
    add, widen = [], []
    for col in source:
        have = target_by_name.get(col.name)
        if have is None:
            if col.default is not None and not col.has_missing and not CONSTANT.match(col.default):
                raise ResnapshotRequired(
                    f"table {table}, column {col.name}: added at the source with the default {col.default}, "
                    f"which the source wrote into the existing rows without change events. Only a full load can "
                    f"copy those values; the table needs a re-snapshot.")
            add.append(col)
        elif have.type != col.type:
            if not is_widening(have.type, col.type):
                raise SchemaChangeError(
                    f"table {table}, column {col.name}: type changed at the source from {have.type} to {col.type}, "
                    f"which cannot be applied without changing or losing values. The pipeline stopped at its last "
                    f"committed batch. To continue: change the target column yourself (ALTER TABLE ... ALTER COLUMN "
                    f"{col.name} TYPE ...) and restart the stream, or run the sync DAG with action=full_reload for "
                    f"this table.")
            widen.append((col.name, have.type, col.type))
    dropped = tuple(c.name for c in target if c.name not in source_names)
    return DriftPlan(tuple(add), tuple(widen), dropped)


def ddl(schema: str, table: str, drift: DriftPlan) -> list[sql.Composed]:
    ident = sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table))
    out = []
    for c in drift.add:
        col = sql.Identifier(c.name)
        if c.default is not None:
            # Existing source rows hold a value without change events: the stored one PostgreSQL
            # kept for them, or the constant default. Give existing target rows the same, then
            # drop the default so streamed rows only ever get the values their events carry.
            value = (sql.SQL("{}::{}").format(sql.Literal(c.missing_value), sql.SQL(c.type))
                     if c.has_missing else sql.SQL(c.default))
            out.append(sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} {} DEFAULT {}").format(
                ident, col, sql.SQL(c.type), value))
            out.append(sql.SQL("ALTER TABLE {} ALTER COLUMN {} DROP DEFAULT").format(ident, col))
        else:
            out.append(sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} {}").format(ident, col, sql.SQL(c.type)))
    out += [sql.SQL("ALTER TABLE {} ALTER COLUMN {} TYPE {}").format(ident, sql.Identifier(name), sql.SQL(new))
            for name, _old, new in drift.widen]
    return out
