"""One side of a verify: a database that fingerprints key ranges of a table.

A source engine and a target each open their side (`verify_side`). A side declares which
fingerprints it computes (`typed`: PostgreSQL's hash of typed values, exact and fast between two
PostgreSQL databases; `canonical`: the MD5 of each column's canonical text, comparable across
engines, core.verify_canonical) and builds the table's dialect for the one both share; the
comparison (verify.compare) asks the sides, never their kind.
"""
from __future__ import annotations

from tideline.core.table_shape import TableShape
from tideline.core.verify_canonical import MASK
from tideline.core.verify_plan import IntegerCuts, KeyRange


class VerifySide:
    """A DB-API connection, the driver's error classes, and the dialect of the table compared now."""
    fingerprints: tuple[str, ...] = ("canonical",)   # preferred first
    samples = False   # can cut a big range at a block sample of the table instead of ranking every key
    fine_buckets = False   # fingerprints a range in a thousand sub-ranges at once (one-column keys)

    def __init__(self, conn, label: str, errors: tuple[type[BaseException], ...]):
        self.conn, self.label, self.errors = conn, label, errors
        self.dialect = None

    def all(self, query, params=None) -> list[tuple]:
        with self.conn.cursor() as cur:
            cur.execute(query, params)
            return list(cur.fetchall())

    def grouped(self, query) -> list[tuple]:
        """A GROUP BY over few buckets (a side may hint its planner)."""
        return self.all(query)

    def close(self) -> None:
        self.conn.close()

    # ---------------------------------------------------------------- per engine
    def column_types(self, schema: str, table: str) -> dict[str, str]:
        """The stored table's column types (raises one of `errors` when it cannot be read)."""
        raise NotImplementedError

    def canonical_dialect(self, shape: TableShape, schema: str):
        raise NotImplementedError

    def typed_dialects(self, shape: TableShape, schema: str, peer: "VerifySide", peer_schema: str):
        """Both sides' dialects for `typed` (this side and the peer compute it alike)."""
        raise NotImplementedError

    # ---------------------------------------------------------------- fingerprints
    def fingerprint(self, rng: KeyRange) -> tuple[int, int]:
        d = self.dialect
        _b, count, total = self.all(d.fingerprint_query(d.range_predicate(rng)))[0]
        return count, int(total or 0) & MASK

    def buckets(self, rng: KeyRange, boundaries) -> dict[int, tuple[int, int]]:
        d = self.dialect
        return {int(b): (c, int(s or 0) & MASK)
                for b, c, s in self.grouped(d.fingerprint_query(d.range_predicate(rng), boundaries))}

    def rows(self, keys: list[tuple] | KeyRange) -> dict[tuple, int]:
        d = self.dialect
        pred = d.range_predicate(keys) if isinstance(keys, KeyRange) else d.keys_predicate(keys)
        return {tuple(r[:-1]): int(r[-1]) & MASK for r in self.all(d.rows_query(pred))}

    def bucket_rows(self, rng: KeyRange, boundaries, buckets: list[int]) -> dict[int, dict[tuple, int]]:
        """The rows of some sub-ranges of rng (by index), in one query: {sub-range: {key: hash}};
        only those sub-ranges are read."""
        d, out = self.dialect, {}
        pred = d.any_range_predicate([rng.part(boundaries, i) for i in buckets], isinstance(boundaries, IntegerCuts))
        for b, *rest in self.all(d.bucket_rows_query(pred, boundaries, buckets)):
            out.setdefault(int(b), {})[tuple(rest[:-1])] = int(rest[-1]) & MASK
        return out

    def key_bounds(self, rng: KeyRange) -> tuple[str | None, str | None]:
        """The lowest and highest key in rng (one-column keys)."""
        d = self.dialect
        return self.all(d.bounds_query(d.range_predicate(rng)))[0]

    def boundaries(self, rng: KeyRange, parts: int, sample_percent: float | None = None) -> list[tuple]:
        """Cut points inside rng; from a block sample when `sample_percent` is given and the side
        samples (an empty answer falls back to ranking the range's keys)."""
        d = self.dialect
        pred = d.range_predicate(rng)
        if sample_percent is not None and self.samples:
            cuts = self.all(d.boundaries_query(pred, parts, sample_percent))
            if cuts:
                return [tuple(r) for r in cuts]
        return [tuple(r) for r in self.all(d.boundaries_query(pred, parts))]
