"""A MariaDB table's key cut into ranges of about equal rows: the full load's partitions and a
chunked load's chunks (engines.mariadb)."""
from __future__ import annotations

import re

from tideline.engines.mariadb import types as mt
from tideline.core.table_shape import KEY_ALIAS, TableShape
from tideline.core.verify_plan import INTEGER_KEY_TYPES, integer_cuts

q = mt.quote


def integer_type(pg_type: str) -> bool:
    """A key whose values are whole numbers (MariaDB's unsigned BIGINT and DECIMAL(p,0) too)."""
    return pg_type in INTEGER_KEY_TYPES or re.fullmatch(r"numeric\(\d+,0\)", pg_type) is not None


def key_ranges(conn, cur, shape: TableShape, parts: int) -> list[str]:
    """Key ranges of about equal rows: an integer key is cut by value between its smallest and
    largest (two index lookups), unless InnoDB's estimates of the ranges' rows say its keys lie
    very unevenly (`uneven`); any other key, and such a one, by ranking every key (NTILE: a sort
    of the table, ~1.4 s per million rows here)."""
    if not shape.primary_key or parts <= 1:
        return ["1=1"]
    keys = ", ".join(q(k) for k in shape.primary_key)
    table = f"{q(shape.schema)}.{q(shape.name)}"
    integer = len(shape.primary_key) == 1 and integer_type(shape.column(shape.primary_key[0]).type)
    bounds = _value_cuts(cur, table, keys, parts) if integer else None
    if bounds is None:   # ranked: any other key, or integer keys that lie very unevenly
        cur.execute(
            f"SELECT {keys} FROM (SELECT {keys}, b, ROW_NUMBER() OVER (PARTITION BY b ORDER BY {keys}) AS rn "
            f"FROM (SELECT {keys}, NTILE({int(parts)}) OVER (ORDER BY {keys}) AS b FROM {table}) x) y "
            f"WHERE rn = 1 AND b > 1 ORDER BY b")
        bounds = [tuple(conn.escape(v) for v in r) for r in cur.fetchall()]
    if not bounds:
        return ["1=1"]
    k = "(" + ", ".join(q(KEY_ALIAS.format(i)) for i in range(len(shape.primary_key))) + ")"
    tup = ["(" + ", ".join(b) + ")" for b in bounds]
    preds = [f"{k} < {tup[0]}"]
    preds += [f"{k} >= {lo} AND {k} < {hi}" for lo, hi in zip(tup, tup[1:])]
    preds.append(f"{k} >= {tup[-1]}")
    return preds


def _value_cuts(cur, table: str, key: str, parts: int) -> list[tuple[str]] | None:
    """Cuts of an integer key by value between its smallest and largest, or None when InnoDB's
    estimates of the ranges' rows say they would be very uneven (`uneven`)."""
    cur.execute(f"SELECT MIN({key}), MAX({key}) FROM {table}")
    lo, hi = cur.fetchone()
    if lo is None:
        return []
    cuts = [c for (c,) in integer_cuts(int(lo), int(hi), parts, 1, parts)]
    ranges = [" AND ".join([f"{key} >= {a}"] * (a is not None) + [f"{key} < {b}"] * (b is not None))
              for a, b in zip([None] + cuts, cuts + [None])]
    estimates = [_explained_rows(cur, f"EXPLAIN SELECT 1 FROM {table} FORCE INDEX (PRIMARY) WHERE {r}")
                 for r in ranges] if len(ranges) > 1 else []
    return None if uneven(estimates) else [(c,) for c in cuts]


def uneven(estimates: list[int]) -> bool:
    """Value ranges that hold very different numbers of rows, by InnoDB's estimates (rough: up to
    2x off, capped at half the table): one with under a quarter of its share. Cutting by value is
    free and exact for keys that lie evenly; a few keys far from the rest (markers at 10^12 above
    ids 1..70,000) put every row in one range — the chaos soak's MariaDB reload read 70,168 rows in
    one partition and 21 in the other, for minutes in which each fault on the way failed it again."""
    rows = sum(estimates)
    return rows >= 1_000 and len(estimates) > 1 and min(estimates) < rows / len(estimates) / 4


def _explained_rows(cur, explain: str) -> int:
    cur.execute(explain)
    row = cur.fetchone()
    names = [d[0].lower() for d in cur.description]
    return int(row[names.index("rows")] or 0) if row else 0
