"""PostgreSQL's SQL that a PostgreSQL source and a PostgreSQL target share (the same database
software on both ends): a database as one side of a verify, and the range predicates a repair and
a verify's findings are read with. The source engine (engines.postgres) and the target
(targets.postgres) both import it; neither imports the other.
"""
from __future__ import annotations

import dataclasses

import psycopg2
from psycopg2 import sql

from tideline import sqlfiles
from tideline.core import verify_canonical, verify_lake
from tideline.core.table_shape import TableShape
from tideline.core.verify_plan import PROBE_HASH_SQL, PgDialect, row_hash
from tideline.core.verify_side import VerifySide

SESSION_SETTINGS = ("SET TimeZone TO 'UTC'; SET DateStyle TO 'ISO, YMD'; SET IntervalStyle TO 'postgres'; "
                    "SET extra_float_digits TO 1; SET bytea_output TO 'hex'")


def collatable_keys(conn, shape: TableShape) -> frozenset[str]:
    """Key columns of a collatable type (text-like): key ranges compare them in the "C" collation
    so both databases order keys the same whatever their default collations."""
    out = set()
    with conn.cursor() as cur:
        for k in shape.primary_key:
            cur.execute("SELECT typcollation <> 0 FROM pg_type WHERE oid = %s::regtype", (shape.column(k).type,))
            if cur.fetchone()[0]:
                out.add(k)
    return frozenset(out)


class PgSide(VerifySide):
    fingerprints = ("typed", "canonical", "lake")
    samples = True
    fine_buckets = True   # width_bucket: a binary search over the boundaries, ~0.04 s for 1,000 over 62,500 rows

    def __init__(self, conn, label: str):
        super().__init__(conn, label, (psycopg2.Error,))
        with conn.cursor() as cur:
            cur.execute(SESSION_SETTINGS)

    def grouped(self, query) -> list[tuple]:
        """The planner cannot know there are few buckets and would sort every row of the range;
        a hash aggregate is 2-3× faster."""
        with self.conn.cursor() as cur:
            cur.execute("SET enable_sort TO off")
            try:
                cur.execute(query)
                return cur.fetchall()
            finally:
                cur.execute("RESET enable_sort")

    def column_types(self, schema: str, table: str) -> dict[str, str]:
        return {r[0]: r[1] for r in self.all(sqlfiles.load("full_load/target_columns"),
                                              {"relid": f'"{schema}"."{table}"'})}

    def canonical_dialect(self, shape: TableShape, schema: str) -> PgDialect:
        """Canonical text of the columns as stored here (a widened column hashes as it is stored)."""
        types = self.column_types(schema, shape.name)
        stored = TableShape(shape.schema, shape.name,
                            tuple(dataclasses.replace(c, type=types.get(c.name, c.type)) for c in shape.columns),
                            shape.primary_key)
        return PgDialect(stored, schema, verify_canonical.pg_row_hash(stored),
                         frozenset(k for k in shape.primary_key if stored.column(k).type.startswith(("character", "text"))),
                         verify_canonical.pg_key_text(stored))

    def lake_dialect(self, shape: TableShape, schema: str) -> PgDialect:
        """The canonical text of each column's Iceberg value (core.verify_lake), from the source's columns."""
        return PgDialect(shape, schema, verify_lake.pg_row_hash(shape), collatable_keys(self.conn, shape))

    def _text_columns(self, shape: TableShape) -> frozenset[str]:
        """Columns whose type has no hash function (or whose hash ignores a difference, like the
        scale of an unconstrained numeric): they are fingerprinted by their text."""
        out = set()
        for c in shape.columns:
            if c.type in ("numeric", "numeric[]"):
                out.add(c.name)
                continue
            try:
                self.all(sql.SQL("SELECT hash_record_extended(ROW(NULL::{}), 0)").format(sql.SQL(c.type)))
            except psycopg2.Error:
                out.add(c.name)
        return frozenset(out)

    def binary_hash_probe(self) -> int:
        return self.all(PROBE_HASH_SQL)[0][0]

    def pair_dialects(self, fingerprint: str, shape: TableShape, schema: str, peer: VerifySide, peer_schema: str,
                      peer_shape: TableShape):
        """Typed hashes are computed with the peer: row text where the two servers hash values
        differently (byte order, version). `peer_shape`: the table as the peer names it (a
        target's shape, core.target_names)."""
        if fingerprint != "typed":
            return super().pair_dialects(fingerprint, shape, schema, peer, peer_schema, peer_shape)
        binary = self.binary_hash_probe() == peer.binary_hash_probe()
        collatable = collatable_keys(self.conn, shape)
        text_columns = self._text_columns(shape)
        named = {c.source_name: c.name for c in peer_shape.columns}.get
        peer_text, peer_collatable = (frozenset(named(c, c) for c in names) for names in (text_columns, collatable))
        note = None if binary else ("source and target hash values differently (byte order or version); "
                                    "fingerprinting row text instead (slower)")
        return (PgDialect(shape, schema, row_hash(shape, text_columns, binary, source=True), collatable),
                PgDialect(peer_shape, peer_schema, row_hash(peer_shape, peer_text, binary), peer_collatable), note)

def between(shape: TableShape, column: str, lo: str, hi: str, as_time: bool) -> sql.Composed:
    """`column BETWEEN lo AND hi` in PostgreSQL: values of the column's type, or UTC times."""
    if as_time:
        return sql.SQL("{c} BETWEEN ({lo}::timestamp AT TIME ZONE 'UTC') AND ({hi}::timestamp AT TIME ZONE 'UTC')").format(
            c=sql.Identifier(column), lo=sql.Literal(lo), hi=sql.Literal(hi))
    return sql.SQL("{c} BETWEEN {lo}::{t} AND {hi}::{t}").format(
        c=sql.Identifier(column), lo=sql.Literal(lo), hi=sql.Literal(hi), t=sql.SQL(shape.column(column).type))


def key_ranges_where(conn, shape: TableShape, ranges: list) -> str:
    """Rows inside any of the key ranges (key text compared in the "C" collation, as verify cuts them)."""
    from tideline.core.verify_plan import range_predicate
    collatable = collatable_keys(conn, shape)
    return " OR ".join(f"({range_predicate(shape, r, collatable).as_string(conn)})" for r in ranges)
