"""One side of a verify: a database that fingerprints key ranges of a table.

A source engine and a target each open their side (`verify_side`). A side declares which
fingerprints it computes (`typed`: PostgreSQL's hash of typed values, exact and fast between two
PostgreSQL databases; `canonical`: the MD5 of each column's canonical text, comparable across
engines, core.verify_canonical) and builds the table's dialect for the one both share; the
comparison (verify.compare) asks the sides, never their kind.
"""
from __future__ import annotations

from tideline.core.table_shape import TableShape
from tideline.core import verify_canonical, verify_lake
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

    def dialect_of(self, fingerprint: str, shape: TableShape, schema: str):
        """This side's fingerprint SQL of the table for one of its `fingerprints` (its
        `<fingerprint>_dialect` method: canonical_dialect, lake_dialect)."""
        return getattr(self, f"{fingerprint}_dialect")(shape, schema)

    def pair_dialects(self, fingerprint: str, shape: TableShape, schema: str, peer: "VerifySide", peer_schema: str,
                      peer_shape: TableShape) -> tuple[object, object, str | None]:
        """Both sides' dialects for a fingerprint both compute, and a note when the pair had to
        settle for a slower form: each side its own, unless a side computes it with its peer (typed)."""
        return self.dialect_of(fingerprint, shape, schema), peer.dialect_of(fingerprint, peer_shape, peer_schema), None

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


# a fingerprint and the check that refuses a key it cannot cut into ranges (typed: any key PostgreSQL orders)
KEY_CHECKS = {"canonical": verify_canonical.check_keys, "lake": verify_lake.check_keys}


def shared_fingerprint(source: VerifySide, target: VerifySide) -> str | None:
    """The first fingerprint, in the source's preference, that both sides compute (None: none)."""
    return next((m for m in source.fingerprints if m in target.fingerprints), None)
