"""Source↔target verification, the pure part: key ranges, the SQL that fingerprints them inside
each database, and how two fingerprints of rows become a report of missing, extra and different
rows. The I/O (running the queries on both sides at once, bisecting, re-checking) is
tideline.verify.compare.

Fingerprint of a row: hash_record_extended over its synced columns (each value hashed by its
type's own hash function, no text rendering — 3× faster than md5 of the row text); columns of a
type without a hash function (json, point, xml, money, unconstrained numeric whose scale hashing
would ignore) enter as their text. A range's fingerprint is (count, XOR of the row hashes): order-
independent, so both databases compute it with a plain aggregate, and unlike a sum it needs no
numeric accumulator (3× faster grouped). The primary key rules out a row cancelling itself; a
table without one may hold the same row twice, and two equal hashes XOR to nothing (a table that
differs only in duplicated rows would look equal), so keyless tables are summed instead.

Key order: every comparison and sort uses the key columns' values, collatable ones in the "C"
collation: a source and a target of different default collations cut the key space alike.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from psycopg2 import sql

from tideline.core.column_hash import pg_source_value
from tideline.core.table_shape import TableShape

# Hash of one fixed record, compared between the two databases before trusting binary hashes
# (a different byte order or hash implementation would make every row look different).
PROBE_HASH_SQL = ("SELECT hash_record_extended(ROW(1::bigint, 'tideline'::text, 1.5::numeric(4,2), "
                  "'2026-01-01 00:00:00+00'::timestamptz, true, 2.5::float8, '7 days'::interval), 0)")
KINDS = ("missing", "extra", "different")


@dataclass(frozen=True)
class KeyRange:
    """Half-open range of primary-key tuples [lo, hi); None = unbounded. Values are the keys'
    text forms, cast back to the key column types in SQL."""
    lo: tuple[str, ...] | None = None
    hi: tuple[str, ...] | None = None

    def describe(self) -> str:
        def fmt(k):
            return "(" + ", ".join(k) + ")" if k is not None else None
        lo, hi = fmt(self.lo), fmt(self.hi)
        if lo is None and hi is None:
            return "the whole table"
        if lo is None:
            return f"keys < {hi}"
        if hi is None:
            return f"keys ≥ {lo}"
        return f"keys {lo} ≤ k < {hi}"

    def split(self, boundaries: list[tuple[str, ...]]) -> list["KeyRange"]:
        """Sub-ranges cut at the boundaries (each the first key of a sub-range), covering self."""
        edges = [self.lo] + list(boundaries) + [self.hi]
        return [KeyRange(a, b) for a, b in zip(edges, edges[1:])]

    def part(self, boundaries, i: int) -> "KeyRange":
        """split(boundaries)[i], without making the others (a cut may have tens of thousands)."""
        return KeyRange(self.lo if i == 0 else boundaries[i - 1], self.hi if i == len(boundaries) else boundaries[i])


@dataclass(frozen=True)
class Finding:
    kind: str               # missing (in source, not target) | extra (in target only) | different
    key: tuple[str, ...]


@dataclass
class Candidate:
    """A row that differed on the first look; re-checked before it is reported."""
    kind: str
    key: tuple[str, ...]
    source_hash: int | None
    target_hash: int | None
    range: KeyRange


def diff_hashes(source: dict[tuple, int], target: dict[tuple, int]) -> list[Finding]:
    """Row fingerprints of one key range on each side → the rows that differ, in key-text order."""
    out = []
    for key in sorted(source.keys() | target.keys()):
        s, t = source.get(key), target.get(key)
        if s == t:
            continue
        out.append(Finding("missing" if t is None else "extra" if s is None else "different", key))
    return out


INTEGER_KEY_TYPES = ("smallint", "integer", "bigint")


@dataclass(frozen=True)
class IntegerCuts:
    """Cut points lo+w, lo+2w, … of an integer key (count of them), as a sequence of key tuples
    like any boundaries; a row's sub-range is then (key - lo) / w, arithmetic in place of a search."""
    lo: int
    width: int
    count: int

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> tuple[str]:
        if not -self.count <= i < self.count:
            raise IndexError(i)
        return (str(self.lo + (i % self.count + 1) * self.width),)

    def __iter__(self):
        return ((str(self.lo + i * self.width),) for i in range(1, self.count + 1))


def integer_cuts(lo: int, hi: int, rows: int, per_cut: int, most: int) -> IntegerCuts:
    """Cut points of an integer key whose values in a range run from lo to hi: every w-th value,
    w chosen so that evenly spread keys put about `per_cut` rows between cuts (at most `most`
    cuts). Free to compute, where ranking the keys costs a sort; uneven keys only make some
    sub-ranges bigger, and the verify narrows those further."""
    parts = min(most, max(1, -(-rows // per_cut)))
    width = max(1, -(-(hi - lo + 1) // parts))
    return IntegerCuts(lo, width, (hi - lo) // width)


def classify(source_hash: int | None, target_hash: int | None) -> str | None:
    if source_hash == target_hash:
        return None
    return "missing" if target_hash is None else "extra" if source_hash is None else "different"


@dataclass
class VerifyReport:
    """What a verify found for one table: totals, a bounded sample of rows by key, and the key
    ranges that hold every confirmed difference (what a repair re-reads)."""
    table: str
    source_rows: int = 0
    target_rows: int = 0
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    samples: list[Finding] = field(default_factory=list)
    ranges: list[KeyRange] = field(default_factory=list)
    settled: int = 0        # differed at first look, equal on re-check: changes that were in flight
    unsettled: int = 0      # still changing at the source (or the stream was behind) after every re-check
    truncated: bool = False  # stopped narrowing down: too many differences to list them all
    keyless: bool = False
    seconds: float = 0.0
    note: str = ""
    no_table: bool = False   # the target lacks the table: every source row missing, whatever the phase said

    differences = property(lambda self: sum(self.counts.values()))

    @property
    def equal(self) -> bool:
        return self.differences == 0 and not self.truncated and not (self.keyless and self.note) and not self.no_table

    def add(self, finding: Finding, sample_limit: int) -> None:
        self.counts[finding.kind] += 1
        if len(self.samples) < sample_limit:
            self.samples.append(finding)

    def summary(self) -> str:
        head = f"{self.table}: source {self.source_rows:,} rows, target {self.target_rows:,} rows"
        if (self.keyless or self.no_table) and self.note:
            return f"{head}; DIFFERENT: {self.note}" if self.no_table else f"{head}; {self.note}"
        if self.equal:
            text = f"{head}; equal"
        else:
            parts = ", ".join(f"{self.counts[k]:,} {k}" for k in KINDS if self.counts[k])
            more = " (at least: too many to narrow down; run action=full_reload)" if self.truncated else ""
            text = f"{head}; DIFFERENT: {parts or 'rows differ'}{more} in {len(self.ranges):,} key range(s)"
        if self.settled:
            text += f"; {self.settled:,} in-flight change(s) settled on re-check"
        if self.unsettled:
            text += f"; {self.unsettled:,} row(s) still changing (not counted)"
        return text + (f"; {self.note}" if self.note and not self.keyless else "")

    def sample_lines(self) -> list[str]:
        return [f"  {f.kind:<9} key ({', '.join(f.key)})" for f in self.samples]


# ---------------------------------------------------------------------------- SQL builders

def _key_ident(shape: TableShape, name: str, collatable: frozenset[str]) -> sql.Composable:
    col = sql.Identifier(name)
    return sql.SQL('{} COLLATE "C"').format(col) if name in collatable else col


def _key_row(shape: TableShape, collatable: frozenset[str]) -> sql.Composed:
    return sql.SQL("({})").format(sql.SQL(", ").join(_key_ident(shape, k, collatable) for k in shape.primary_key))


def _literal_row(shape: TableShape, values: tuple[str, ...]) -> sql.Composed:
    return sql.SQL("({})").format(sql.SQL(", ").join(
        sql.SQL("{}::{}").format(sql.Literal(v), sql.SQL(shape.column(k).type))
        for k, v in zip(shape.primary_key, values)))


def range_predicate(shape: TableShape, rng: KeyRange, collatable: frozenset[str] = frozenset()) -> sql.Composable:
    """WHERE clause over the bare key columns (usable in SELECT and DELETE on either side)."""
    keys = _key_row(shape, collatable)
    parts = []
    if rng.lo is not None:
        parts.append(sql.SQL("{} >= {}").format(keys, _literal_row(shape, rng.lo)))
    if rng.hi is not None:
        parts.append(sql.SQL("{} < {}").format(keys, _literal_row(shape, rng.hi)))
    return sql.SQL(" AND ").join(parts) if parts else sql.SQL("TRUE")


def keys_predicate(shape: TableShape, keys: list[tuple[str, ...]]) -> sql.Composable:
    """WHERE (k1, k2) IN ((…), …) for exact keys."""
    cols = sql.SQL("({})").format(sql.SQL(", ").join(sql.Identifier(k) for k in shape.primary_key))
    return sql.SQL("{} IN ({})").format(cols, sql.SQL(", ").join(_literal_row(shape, k) for k in keys))


def row_hash(shape: TableShape, text_columns: frozenset[str], binary: bool = True,
             source: bool = False) -> sql.Composed:
    """A row's fingerprint (module docstring); source: hashed columns as stored (core.column_hash)."""
    value = (lambda c: pg_source_value(shape.column(c))) if source else sql.Identifier
    if binary:
        cols = [sql.SQL("{}::text").format(value(c)) if c in text_columns else value(c) for c in shape.column_names]
        return sql.SQL("hash_record_extended(ROW({}), 0)").format(sql.SQL(", ").join(cols))
    cols = sql.SQL(", ").join(value(c) for c in shape.column_names)
    return sql.SQL("('x' || substr(md5(ROW({})::text), 1, 16))::bit(64)::bigint").format(cols)


def combine(shape: TableShape, hash_expr: sql.Composable) -> sql.Composed:
    """The aggregate of row hashes: XOR with a key (fast; rows are distinct), an exact sum without
    one (duplicates must count: h XOR h = 0, but h + h = 2h)."""
    if shape.primary_key:
        return sql.SQL("coalesce(bit_xor({}), 0)").format(hash_expr)
    return sql.SQL("coalesce(sum(({})::numeric), 0)").format(hash_expr)


def fingerprint_query(shape: TableShape, schema: str, pred: sql.Composable, hash_expr: sql.Composable,
                      bucket: sql.Composable | None = None) -> sql.Composed:
    """(bucket, count, combined row hashes) of the rows in `pred`, grouped by `bucket` (or one row)."""
    table = sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(shape.name))
    if bucket is None:
        return sql.SQL("SELECT 0, count(*), {c} FROM {t} WHERE {p}").format(
            c=combine(shape, hash_expr), t=table, p=pred)
    return sql.SQL("SELECT {b} AS bucket, count(*), {c} FROM {t} WHERE {p} GROUP BY 1").format(
        b=bucket, c=combine(shape, hash_expr), t=table, p=pred)


def bucket_expr(shape: TableShape, boundaries: list[tuple[str, ...]],
                collatable: frozenset[str] = frozenset()) -> sql.Composed:
    """Index of the sub-range a row falls in (0 = before the first boundary): arithmetic for
    IntegerCuts, a binary search (width_bucket) for other one-column keys, a CASE over row
    comparisons for composite keys."""
    if isinstance(boundaries, IntegerCuts):   # every row of the range has key >= lo
        return sql.SQL("(({}::bigint - {}) / {})").format(
            sql.Identifier(shape.primary_key[0]), sql.Literal(boundaries.lo), sql.Literal(boundaries.width))
    if len(shape.primary_key) == 1:
        key = shape.primary_key[0]
        arr = sql.SQL("ARRAY[{}]::{}[]").format(
            sql.SQL(", ").join(sql.Literal(b[0]) for b in boundaries), sql.SQL(shape.column(key).type))
        if key in collatable:
            arr = sql.SQL('{} COLLATE "C"').format(arr)
        return sql.SQL("width_bucket({}, {})").format(_key_ident(shape, key, collatable), arr)
    keys = _key_row(shape, collatable)
    whens = [sql.SQL("WHEN {} < {} THEN {}").format(keys, _literal_row(shape, b), sql.Literal(i))
             for i, b in enumerate(boundaries)]
    return sql.SQL("CASE {} ELSE {} END").format(sql.SQL(" ").join(whens), sql.Literal(len(boundaries)))


def key_text_cast(name: str) -> sql.Composable:
    """A key column's text, as the verify reports and compares keys (PostgreSQL on both sides)."""
    return sql.SQL("{}::text").format(sql.Identifier(name))


def rows_query(shape: TableShape, schema: str, pred: sql.Composable, hash_expr: sql.Composable,
               key_text=key_text_cast) -> sql.Composed:
    """Each row's key columns (as text) and fingerprint, for a range small enough to compare row
    by row."""
    keys = sql.SQL(", ").join(key_text(k) for k in shape.primary_key)
    return sql.SQL("SELECT {k}, {h} FROM {s}.{t} WHERE {p}").format(
        k=keys, h=hash_expr, s=sql.Identifier(schema), t=sql.Identifier(shape.name), p=pred)


def boundaries_in_range(shape: TableShape, schema: str, pred: sql.Composable, parts: int,
                        collatable: frozenset[str] = frozenset(), sample_percent: float | None = None,
                        key_text=key_text_cast) -> sql.Composed:
    """First key (as text) of each of `parts` equal buckets of the keys inside a range, in the
    key order the verify uses everywhere (collatable key columns in "C"); from a block sample
    for big ranges (cuts need not be even, only inside the range)."""
    sample = (sql.SQL(" TABLESAMPLE SYSTEM ({})").format(sql.Literal(sample_percent))
              if sample_percent is not None else sql.SQL(""))
    key_ids = [sql.Identifier(k) for k in shape.primary_key]
    order = sql.SQL(", ").join(_key_ident(shape, k, collatable) for k in shape.primary_key)
    border = sql.SQL(", ").join(
        sql.SQL('b.{} COLLATE "C"').format(sql.Identifier(k)) if k in collatable else
        sql.SQL("b.{}").format(sql.Identifier(k)) for k in shape.primary_key)
    return sql.SQL(
        "SELECT DISTINCT ON (b.bucket) {texts} FROM ("
        " SELECT {keys}, ntile({parts}) OVER (ORDER BY {order}) AS bucket FROM {s}.{t}{sample} WHERE {p}) b"
        " WHERE b.bucket > 1 ORDER BY b.bucket, {border}"
    ).format(texts=sql.SQL(", ").join(key_text(k) for k in shape.primary_key),
             keys=sql.SQL(", ").join(key_ids), parts=sql.Literal(parts), order=order,
             s=sql.Identifier(schema), t=sql.Identifier(shape.name), p=pred, border=border, sample=sample)


class TextKeyRanges:
    """Key ranges as SQL text for a dialect that renders its key row (`_key_row`) and a row of key
    literals (`_literal_row`): MariaDB's (core.verify_canonical) and Spark's (core.verify_lake)."""

    only: str | None = None   # rows this side compares at all (only_where_null)

    def only_where_null(self, column: str) -> None:
        """From here on, every predicate it builds holds only rows whose `column` is NULL."""
        self.only = "`" + column.replace("`", "``") + "` IS NULL"   # MariaDB's and Spark's quoting

    def only_rows(self, predicate: str) -> None:
        """From here on, every predicate it builds holds only rows `predicate` (this database's SQL) keeps."""
        self.only = f"({predicate})"

    def _of(self, pred: str) -> str:
        return pred if self.only is None else f"({pred}) AND ({self.only})"

    def range_predicate(self, rng: KeyRange) -> str:
        parts = []
        if rng.lo is not None:
            parts.append(f"{self._key_row()} >= {self._literal_row(rng.lo)}")
        if rng.hi is not None:
            parts.append(f"{self._key_row()} < {self._literal_row(rng.hi)}")
        return self._of(" AND ".join(parts) or "TRUE")

    def keys_predicate(self, keys: list[tuple[str, ...]]) -> str:
        return self._of(f"{self._key_row()} IN ({', '.join(self._literal_row(k) for k in keys)})")

    def bucket_case(self, boundaries: list[tuple[str, ...]]) -> str:
        """Index of the sub-range a row falls in (0 = before the first boundary), as bucket_expr."""
        whens = " ".join(f"WHEN {self._key_row()} < {self._literal_row(b)} THEN {i}" for i, b in enumerate(boundaries))
        return f"CASE {whens} ELSE {len(boundaries)} END"


class PgDialect:
    """The fingerprint SQL of one table in a PostgreSQL database (either side of a verify), with
    its row hash and key text expressions fixed."""

    def __init__(self, shape: TableShape, schema: str, hash_expr: sql.Composable,
                 collatable: frozenset[str] = frozenset(), key_text=key_text_cast):
        self.shape, self.schema, self.hash, self.collatable, self.key_text = (shape, schema, hash_expr, collatable,
                                                                             key_text)
        self.only: sql.Composable | None = None   # rows this side compares at all (a soft-deleted row is not)

    def only_where_null(self, column: str) -> None:
        """From here on, every predicate it builds holds only rows whose `column` is NULL."""
        self.only = sql.SQL("{} IS NULL").format(sql.Identifier(column))

    def only_rows(self, predicate: str) -> None:
        """From here on, every predicate it builds holds only rows `predicate` (this database's SQL) keeps."""
        self.only = sql.SQL("({})").format(sql.SQL(predicate))

    def _of(self, pred: sql.Composable) -> sql.Composable:
        return pred if self.only is None else sql.SQL("({}) AND ({})").format(pred, self.only)

    def range_predicate(self, rng: KeyRange) -> sql.Composable:
        return self._of(range_predicate(self.shape, rng, self.collatable))

    def keys_predicate(self, keys: list[tuple[str, ...]]) -> sql.Composable:
        return self._of(keys_predicate(self.shape, keys))

    def any_range_predicate(self, ranges: list[KeyRange], integer: bool = False) -> sql.Composable:
        """Rows in any of the ranges (an index scan each, where a bucket number is computed per row);
        `integer`: the bounds are integers (IntegerCuts), written as plain numbers."""
        if integer:
            key = '"' + self.shape.primary_key[0].replace('"', '""') + '"'   # quoted as sql.Identifier does

            def between(r: KeyRange) -> str:
                parts = ([f"{key} >= {int(r.lo[0])}"] if r.lo is not None else []) + \
                        ([f"{key} < {int(r.hi[0])}"] if r.hi is not None else [])
                return "(" + (" AND ".join(parts) or "TRUE") + ")"
            return self._of(sql.SQL("(" + " OR ".join(between(r) for r in ranges) + ")"))
        return self._of(sql.SQL("({})").format(sql.SQL(" OR ").join(
            sql.SQL("({})").format(range_predicate(self.shape, r, self.collatable)) for r in ranges)))

    def bounds_query(self, pred: sql.Composable) -> sql.Composed:
        """The lowest and highest key (as text) in a range of a one-column key."""
        key = sql.Identifier(self.shape.primary_key[0])
        return sql.SQL("SELECT min({k})::text, max({k})::text FROM {s}.{t} WHERE {p}").format(
            k=key, s=sql.Identifier(self.schema), t=sql.Identifier(self.shape.name), p=pred)

    def fingerprint_query(self, pred: sql.Composable, boundaries: list[tuple[str, ...]] | None = None):
        bucket = bucket_expr(self.shape, boundaries, self.collatable) if boundaries is not None else None
        return fingerprint_query(self.shape, self.schema, pred, self.hash, bucket)

    def rows_query(self, pred: sql.Composable) -> sql.Composed:
        return rows_query(self.shape, self.schema, pred, self.hash, self.key_text)

    def bucket_rows_query(self, pred: sql.Composable, boundaries: list[tuple[str, ...]], buckets: list[int]):
        """Each row of the given sub-ranges (by index, as bucket_expr numbers them): its sub-range,
        key texts and fingerprint, in one query."""
        bucket = bucket_expr(self.shape, boundaries, self.collatable)
        keys = sql.SQL(", ").join(self.key_text(k) for k in self.shape.primary_key)
        return sql.SQL("SELECT {b}, {k}, {h} FROM {s}.{t} WHERE {p} AND {b} = ANY({l})").format(
            b=bucket, k=keys, h=self.hash, s=sql.Identifier(self.schema), t=sql.Identifier(self.shape.name),
            p=pred,
            l=sql.Literal(buckets))

    def boundaries_query(self, pred: sql.Composable, parts: int, sample_percent: float | None = None):
        return boundaries_in_range(self.shape, self.schema, pred, parts, self.collatable, sample_percent,
                                   self.key_text)
