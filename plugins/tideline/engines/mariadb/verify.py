"""A MariaDB source as one side of a verify: canonical text only (core.verify_canonical), its
fingerprint SQL in MariaDB's dialect."""
from __future__ import annotations

from tideline.core.table_shape import TableShape
from tideline.core.verify_canonical import NUL, SEP
from tideline.core.verify_plan import TextKeyRanges
from tideline.core.verify_side import VerifySide
from tideline.engines.mariadb import types as mt


class MariaDbDialect(TextKeyRanges):
    """The fingerprint SQL of one table in MariaDB (the source side), as text; `quote` renders a
    string literal (the connection's escape)."""

    def __init__(self, shape: TableShape, schema: str, quote):
        self.shape, self.schema, self.quote = shape, schema, quote
        self.keys = [(k, *mt.key_sql(shape.column(k).type)) for k in shape.primary_key]
        canon = [f"IFNULL({shape.column(c).canon}, '{NUL}')" for c in shape.column_names]
        self.hash = f"CAST(CONV(LEFT(MD5(CONCAT_WS('{SEP}', {', '.join(canon)})), 16), 16, 10) AS UNSIGNED)"

    def _table(self) -> str:
        return f"{mt.quote(self.schema)}.{mt.quote(self.shape.name)}"

    def _key_row(self) -> str:
        return "(" + ", ".join(expr.format(c=mt.quote(k)) for k, expr, _lit in self.keys) + ")"

    def _literal_row(self, values: tuple[str, ...]) -> str:
        return "(" + ", ".join(lit.format(lit=self.quote(v)) for (_k, _e, lit), v in zip(self.keys, values)) + ")"

    def fingerprint_query(self, pred: str, boundaries: list[tuple[str, ...]] | None = None) -> str:
        if boundaries is None:
            return f"SELECT 0, COUNT(*), BIT_XOR({self.hash}) FROM {self._table()} WHERE {pred}"
        return (f"SELECT {self.bucket_case(boundaries)} AS bucket, COUNT(*), BIT_XOR({self.hash}) "
                f"FROM {self._table()} WHERE {pred} GROUP BY bucket")

    def _key_texts(self) -> str:
        return ", ".join(self.shape.column(k).canon for k in self.shape.primary_key)

    def rows_query(self, pred: str) -> str:
        return f"SELECT {self._key_texts()}, {self.hash} FROM {self._table()} WHERE {pred}"

    def boundaries_query(self, pred: str, parts: int, sample_percent: float | None = None) -> str:
        """First key of each of `parts` equal buckets of the range, in the target's key order
        (MariaDB has no block sample: the whole range is ranked)."""
        n = len(self.keys)
        texts = ", ".join(f"{self.shape.column(k).canon} AS k{i}" for i, k in enumerate(self.shape.primary_key))
        outs = ", ".join(f"k{i}" for i in range(n))
        order = ", ".join(expr.format(c=mt.quote(k)) for k, expr, _lit in self.keys)
        return (f"SELECT {outs} FROM (SELECT {outs}, b, ROW_NUMBER() OVER (PARTITION BY b ORDER BY o) AS rn FROM "
                f"(SELECT {texts}, ROW_NUMBER() OVER (ORDER BY {order}) AS o, "
                f"NTILE({int(parts)}) OVER (ORDER BY {order}) AS b FROM {self._table()} WHERE {pred}) x) y "
                f"WHERE rn = 1 AND b > 1 ORDER BY b")


class MariaDbSide(VerifySide):
    fingerprints = ("canonical",)

    def canonical_dialect(self, shape: TableShape, schema: str) -> MariaDbDialect:
        return MariaDbDialect(shape, schema, self.conn.escape)
