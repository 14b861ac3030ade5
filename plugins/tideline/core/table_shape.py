"""What a table looks like and how a full load reads it: columns, key, read query, partitions.

SQL is built with psycopg2.sql (identifiers and literals are quoted, never formatted in);
rendering a Composed to text needs a connection, which the caller holds.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from psycopg2 import sql

from tideline.core.copy_text import needs_escaping
from tideline.core.errors import SourceError
from tideline.core.table_extras import CURRENT, LOADED_OP, PREFIX, SOURCE_ORDER, VALID_FROM, ExtraColumn, TableExtras

KEY_ALIAS = "__tl_k{}"
CTID_ALIAS = "__tl_ctid"


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # exact type text, e.g. numeric(12,2), timestamp with time zone, text[]
    not_null: bool
    default: str | None = None   # the source's default expression, if any
    has_missing: bool = False    # PostgreSQL gave existing rows a stored value (no rewrite)...
    missing_value: str | None = None  # ...this one, as text
    generated: str | None = None      # GENERATED ALWAYS AS (this) STORED: computed, never written
    encoding: str = "pgtext"          # how change events carry it (engines.mariadb.types)
    read: str | None = None           # the source's expression for its exact text (MariaDB sources)
    canon: str | None = None          # ...and for its canonical text, which verify fingerprints
    # COPY's binary form of its values reads the same in the target (built-in types: see
    # sql/full_load/source_columns.sql). How a load moves it, not what it is: not compared.
    binary_copy: bool = field(default=False, compare=False)
    # hash_columns: the target holds salted SHA-256 of its text (core.column_hash), not the value
    hash_salt: str | None = field(default=None, repr=False, compare=False)
    # rename: the source's name of a column the target names otherwise (core.target_names)
    source: str | None = field(default=None, compare=False)

    @property
    def source_name(self) -> str:
        """What the source (its catalog, its change events) calls the column."""
        return self.source or self.name

    @property
    def at_source(self) -> "Column":
        """The column under the source's name (itself, unless renamed)."""
        return replace(self, name=self.source, source=None) if self.source else self


@dataclass(frozen=True)
class TableShape:
    schema: str
    name: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]  # empty = keyless table, read by physical location (ctid)
    # a target's shape (core.target_names): the source's shape it names otherwise
    origin: "TableShape | None" = field(default=None, compare=False, repr=False)

    @property
    def at_source(self) -> "TableShape":
        """The shape as the source names it (itself, unless a target's shape of a renamed table)."""
        return self.origin or self

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def written_columns(self) -> list[str]:
        """The columns a load writes: generated ones are computed by the target itself (pgoutput
        does not send them, so the stream could not carry them anyway)."""
        return [c.name for c in self.columns if c.generated is None]

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    def ordered(self, order: str | None) -> "TableShape":
        """The shape a load reads: with `order` (engines.base.Snapshot.order), the snapshot's place
        in the source's log as one more column, SOURCE_ORDER, read as the session's value of it."""
        if order is None:
            return self
        col = Column(SOURCE_ORDER, "bigint", False, read=order)
        return replace(self, columns=self.columns + (col,),
                       origin=self.origin.ordered(order) if self.origin is not None else None)

    @property
    def copy_format(self) -> str:
        """How a COPY pipe moves the rows: 'binary' when every written column's binary form reads
        the same in the target (no values printed and parsed again: ~35% faster on both databases),
        else 'text'."""
        written = [c for c in self.columns if c.generated is None]
        return "binary" if written and all(c.binary_copy for c in written) else "text"

    @property
    def escape_flags(self) -> list[bool]:
        return [needs_escaping(c.type) for c in self.columns if c.generated is None]

    def qualified(self) -> sql.Composed:
        return sql.SQL("{}.{}").format(sql.Identifier(self.schema), sql.Identifier(self.name))


def select_columns(shape: TableShape, include: list[str] | None, exclude: list[str], label: str) -> TableShape:
    """The shape restricted to the configured columns. Key columns are always synced (an include
    list need not name them); excluding one is an error."""
    names = set(shape.column_names)
    unknown = [c for c in (include or []) + list(exclude) if c not in names]
    if unknown:
        raise SourceError(f"{label}: the pipeline config names columns the source table does not have: "
                          f"{', '.join(unknown)} (it has {', '.join(shape.column_names)})")
    dropped = [k for k in shape.primary_key if k in exclude]
    if dropped:
        raise SourceError(f"{label}: primary key column(s) {', '.join(dropped)} cannot be left out of the sync")
    keep = [c for c in shape.columns
            if c.name not in exclude and (include is None or c.name in include or c.name in shape.primary_key)]
    return TableShape(shape.schema, shape.name, tuple(keep), shape.primary_key, shape.origin)


def read_query(shape: TableShape, where: sql.Composable | None = None, typed: bool = False) -> sql.Composed:
    """A derived table for Spark JDBC: every column as exact text (typed: as it is, for COPY),
    plus the typed key (or ctid) under an alias so partition predicates compare real key values
    and use the index."""
    keys = ([sql.SQL("t.{} AS {}").format(sql.Identifier(k), sql.Identifier(KEY_ALIAS.format(i)))
             for i, k in enumerate(shape.primary_key)]
            or [sql.SQL("t.ctid AS {}").format(sql.Identifier(CTID_ALIAS))])
    cast = sql.SQL("" if typed else "::text")
    cols = [sql.SQL("{} AS {}").format(_hashed_value(shape.column(c)), sql.Identifier(c)) if shape.column(c).hash_salt
            else sql.SQL("t.{}{} AS {}").format(sql.Identifier(c), cast, sql.Identifier(c)) for c in shape.written_columns]
    return sql.SQL("(SELECT {} FROM {} t{}) AS tideline_read").format(
        sql.SQL(", ").join(keys + cols), shape.qualified(),
        sql.SQL(" WHERE {}").format(where) if where is not None else sql.SQL(""))


def _hashed_value(c: Column) -> sql.Composed:
    from tideline.core.column_hash import pg_source_value
    return pg_source_value(c, "t")


def boundaries_query(shape: TableShape, parts: int, sample_percent: float | None) -> sql.Composed:
    """First key (as text) of each of `parts` equal-sized buckets of the key order, from the
    real distribution: the whole key index for small tables, a block sample for large ones."""
    key_ids = [sql.Identifier(k) for k in shape.primary_key]
    key_list = sql.SQL(", ").join(key_ids)
    sample = (sql.SQL(" TABLESAMPLE SYSTEM ({})").format(sql.Literal(sample_percent))
              if sample_percent is not None else sql.SQL(""))
    # ORDER BY must name the typed input columns (b.key): a bare name would bind to the text
    # output column of the same name and order the keys as strings.
    return sql.SQL(
        "SELECT DISTINCT ON (b.bucket) {texts} FROM ("
        " SELECT {keys}, ntile({parts}) OVER (ORDER BY {keys}) AS bucket FROM {table}{sample}) b"
        " WHERE b.bucket > 1 ORDER BY b.bucket, {bkeys}"
    ).format(texts=sql.SQL(", ").join(sql.SQL("b.{}::text AS {}").format(k, sql.Identifier(f"k{i}"))
                                      for i, k in enumerate(key_ids)),
             keys=key_list, parts=sql.Literal(parts), table=shape.qualified(), sample=sample,
             bkeys=sql.SQL(", ").join(sql.SQL("b.{}").format(k) for k in key_ids))


def _key_tuple(shape: TableShape, values: tuple[str, ...]) -> sql.Composed:
    return sql.SQL("({})").format(sql.SQL(", ").join(
        sql.SQL("{}::{}").format(sql.Literal(v), sql.SQL(shape.column(k).type))
        for k, v in zip(shape.primary_key, values)))


def key_range_predicates(shape: TableShape, boundaries: list[tuple[str, ...]]) -> list[sql.Composed]:
    """Half-open key ranges [b_i, b_i+1) covering the whole key space, one per Spark partition."""
    if not boundaries:
        return [sql.SQL("TRUE")]
    keys = sql.SQL("({})").format(sql.SQL(", ").join(
        sql.Identifier(KEY_ALIAS.format(i)) for i in range(len(shape.primary_key))))
    tuples = [_key_tuple(shape, b) for b in boundaries]
    preds = [sql.SQL("{} < {}").format(keys, tuples[0])]
    preds += [sql.SQL("{k} >= {lo} AND {k} < {hi}").format(k=keys, lo=lo, hi=hi)
              for lo, hi in zip(tuples, tuples[1:])]
    preds.append(sql.SQL("{} >= {}").format(keys, tuples[-1]))
    return preds


def hash_predicates(shape: TableShape, parts: int) -> list[sql.Composed]:
    """Hash buckets of the key: balanced partitions for a read that is not one big key range."""
    if parts <= 1 or not shape.primary_key:
        return [sql.SQL("TRUE")]
    key = sql.SQL("ROW({})::text").format(sql.SQL(", ").join(
        sql.Identifier(KEY_ALIAS.format(i)) for i in range(len(shape.primary_key))))
    return [sql.SQL("abs(hashtext({}) % {}) = {}").format(key, sql.Literal(parts), sql.Literal(i))
            for i in range(parts)]


def ctid_predicates(blocks: int, parts: int) -> list[sql.Composed]:
    """Physical block ranges for a table without a key (TID range scans); the last is open-ended."""
    parts = max(1, min(parts, blocks))
    if parts == 1:
        return [sql.SQL("TRUE")]
    step = -(-blocks // parts)
    edges = [sql.Literal(f"({i * step},0)") for i in range(1, parts)]
    col = sql.Identifier(CTID_ALIAS)
    preds = [sql.SQL("{} < {}::tid").format(col, edges[0])]
    preds += [sql.SQL("{c} >= {lo}::tid AND {c} < {hi}::tid").format(c=col, lo=lo, hi=hi)
              for lo, hi in zip(edges, edges[1:])]
    preds.append(sql.SQL("{} >= {}::tid").format(col, edges[-1]))
    return preds


def create_table(shape: TableShape, schema: str, name: str, unlogged: bool = False,
                 extras: TableExtras = TableExtras(), seeded_at=None) -> sql.Composed:
    """CREATE TABLE for the target, faithful to the source's column types, NOT NULLs and generated columns.
    The primary key is added after the load (faster, and it rejects duplicates). `extras` (soft
    deletes, history, metadata: core.table_extras) come last, filled by their defaults as the load
    copies; a loaded row's version starts at `seeded_at` (the snapshot's time)."""
    cols = [sql.SQL("{} {}{}{}").format(sql.Identifier(c.name), sql.SQL(c.type), generated_clause(c),
                                        sql.SQL(" NOT NULL") if c.not_null else sql.SQL(""))
            for c in shape.columns]
    cols += [extra_column_sql(c, seeded_at) for c in extras.columns]
    return sql.SQL("CREATE {}TABLE {}.{} ({})").format(sql.SQL("UNLOGGED " if unlogged else ""),
                                                      sql.Identifier(schema), sql.Identifier(name),
                                                      sql.SQL(", ").join(cols))


def extra_column_sql(c: ExtraColumn, seeded_at=None) -> sql.Composable:
    """An extra column's definition: what a row a load (or a repair) writes holds in it — the time it
    was written and op `r` (core.table_extras.LOADED_OP); a current version starting at `seeded_at`
    (now() without one); the rest NULL."""
    start = sql.SQL("now()") if seeded_at is None else sql.SQL("{}::timestamptz").format(sql.Literal(seeded_at))
    default = {PREFIX + "synced_at": sql.SQL(" DEFAULT now()"),
               PREFIX + "op": sql.SQL(" DEFAULT {}").format(sql.Literal(LOADED_OP)),
               VALID_FROM: sql.SQL(" NOT NULL DEFAULT {}").format(start),
               CURRENT: sql.SQL(" NOT NULL DEFAULT true")}.get(c.name, sql.SQL(""))
    return sql.SQL("{} {}{}").format(sql.Identifier(c.name), sql.SQL(c.pg_type), default)


def generated_clause(c: Column) -> sql.Composable:
    """A generated source column is generated in the target too, from the same expression."""
    return sql.SQL(" GENERATED ALWAYS AS ({}) STORED").format(sql.SQL(c.generated)) if c.generated else sql.SQL("")


# The CSV dialect MariaDB's load lines are printed in (engines.mariadb.copy_line): tab-separated,
# fields that may hold anything quoted with U+0001 (which text almost never holds, so doubling it
# costs nothing: MariaDB's REPLACE costs a copy of the rest of the value per match), NULL unquoted
# and empty.
CSV_QUOTE = "\x01"
_OPTIONS = {"text": "", "binary": " (FORMAT binary)",
            "csv": f" (FORMAT csv, DELIMITER E'\\t', QUOTE E'\\x{ord(CSV_QUOTE):02x}')"}


def copy_options(copy_format: str = "text") -> str:
    """The WITH clause of a COPY in `copy_format` (text is COPY's default; csv is CSV_QUOTE's dialect)."""
    return _OPTIONS[copy_format]


def copy_into(schema: str, name: str, columns: list[str], copy_format: str = "text") -> sql.Composed:
    return sql.SQL("COPY {}.{} ({}) FROM STDIN{}").format(
        sql.Identifier(schema), sql.Identifier(name), sql.SQL(", ").join(map(sql.Identifier, columns)),
        sql.SQL(copy_options(copy_format)))
