"""A MariaDB table's key cut into ranges of about equal rows: the full load's partitions and a
chunked load's chunks (engines.mariadb)."""
from __future__ import annotations

import re

from tideline.core import mariadb_types as mt
from tideline.core.key_cuts import even_cuts
from tideline.core.table_shape import KEY_ALIAS, TableShape
from tideline.core.verify_plan import INTEGER_KEY_TYPES

q = mt.quote


def integer_type(pg_type: str) -> bool:
    """A key whose values are whole numbers (MariaDB's unsigned BIGINT and DECIMAL(p,0) too)."""
    return pg_type in INTEGER_KEY_TYPES or re.fullmatch(r"numeric\(\d+,0\)", pg_type) is not None


def key_ranges(conn, cur, shape: TableShape, parts: int) -> list[str]:
    """Key ranges of about equal rows: an integer key is cut where InnoDB's own estimates of the
    rows below a value say (core.key_cuts: index dives, however unevenly the keys lie), any other
    key by ranking every key (NTILE: a sort of the table, ~1.4 s per million rows here)."""
    if not shape.primary_key or parts <= 1:
        return ["1=1"]
    keys = ", ".join(q(k) for k in shape.primary_key)
    table = f"{q(shape.schema)}.{q(shape.name)}"
    if len(shape.primary_key) == 1 and integer_type(shape.column(shape.primary_key[0]).type):
        cur.execute(f"SELECT MIN({keys}), MAX({keys}) FROM {table}")
        lo, hi = cur.fetchone()
        bounds = [] if lo is None else [(str(c),) for c in even_cuts(int(lo), int(hi), parts,
                                                                     lambda v: _rows_below(cur, table, keys, v))]
    else:
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


def _rows_below(cur, table: str, key: str, value: int) -> int:
    """InnoDB's estimate of the rows whose key is below `value` (EXPLAIN's rows: index dives)."""
    cur.execute(f"EXPLAIN SELECT 1 FROM {table} WHERE {key} < {int(value)}")
    row = cur.fetchone()
    names = [d[0].lower() for d in cur.description]
    return int(row[names.index("rows")] or 0) if row else 0
