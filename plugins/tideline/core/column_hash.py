"""hash_columns: a column whose values the target must never hold, kept as their salted SHA-256.

A hashed value is the lower-case hex of SHA-256 over the UTF-8 bytes of salt + value (NULL stays
NULL). Every path computes exactly that, so a value hashes alike wherever it is read:
- the full load, batch reads and repair, in the source's own SQL (`source_sql`): the value never
  leaves the source in the clear;
- the change stream, in the target's PostgreSQL where events are decoded (`pg_sql` over the
  event's text; the staging table is a temporary one of the batch's transaction);
- verify, over the source's column on the source side, the stored hash on the target side.

Only text columns can be hashed: their text is the same string in the source, in the event and in
the load, so the three agree byte for byte. A number or a time would print differently on each
path (`1.50` vs `1.5`); hash such a column by syncing a text view of it, or leave it out.

The salt comes from an Airflow connection's password (`hash_salt: {conn_id: …}`), handed to the
Spark jobs like every other connection; it is never written into the pipeline's YAML, the logs or
a shape's repr. Changing it changes every hash: re-snapshot the pipeline's hashed tables after.
"""
from __future__ import annotations

import dataclasses
import hashlib

from psycopg2 import sql

# (core.table_shape's Column and TableShape are duck-typed here: table_shape's reads ask this module)

HASH_TYPE = "text"
# the target types (PostgreSQL's names) of the source columns that can be hashed
HASHABLE = ("text", "character varying", "citext")


def hashable(target_type: str) -> bool:
    base = target_type.split("(")[0].strip()
    return base in HASHABLE


def python_hash(salt: str, value: str | None) -> str | None:
    """The hash as every SQL path computes it (the tests' reference)."""
    return None if value is None else hashlib.sha256((salt + value).encode("utf-8")).hexdigest()


def pg_text(value: str, salt: str) -> str:
    """PostgreSQL (11+: sha256 is built in): the hash of a text expression. The salt goes in as
    the hex of its UTF-8 bytes, concatenated as bytes: no quoting, no server encoding involved."""
    return f"encode(sha256(decode('{salt.encode('utf-8').hex()}', 'hex') || convert_to(({value})::text, 'UTF8')), 'hex')"


def pg_sql(value: sql.Composable, salt: str) -> sql.Composed:
    """pg_text over a composed expression."""
    return sql.SQL(pg_text("{}", salt)).format(value)


def mariadb_sql(value: str, salt_literal: str) -> str:
    """MariaDB: SHA2 hashes its argument's bytes in its character set, so the text is taken as
    utf8mb4 first (a latin1 column hashes as its UTF-8 text, as everywhere else)."""
    return f"SHA2(CONVERT(CONCAT({salt_literal}, {value}) USING utf8mb4), 256)"


def hashed_shape(shape, columns: list[str], salt: str | None, label: str):
    """The shape with `columns` held hashed: their target type is text, each Column carries the salt
    (repr and comparisons leave it out) and every reader asks `Column.hash_salt`. A column that
    is not text, or is part of the key, is refused naming it."""
    from tideline.core.errors import ConfigError, SourceError
    if not columns:
        return shape
    if salt is None:
        raise ConfigError(label, [("hash_salt", "is not set: hash_columns need the pipeline's hash_salt "
                                                "(an Airflow connection whose password is the salt)")])
    names = set(shape.column_names)
    for name in columns:
        if name not in names:
            raise SourceError(f"{label}: hash_columns names {name!r}, which the table does not sync "
                              f"(its columns: {', '.join(shape.column_names)}). Fix hash_columns.", table=shape.name)
        if name in shape.primary_key:
            raise SourceError(f"{label}: hash_columns names {name!r}, a key column: changes are applied and "
                              f"verified by key ranges, which hashes do not keep. Leave the key unhashed.",
                              table=shape.name)
        if not hashable(shape.column(name).type):
            raise SourceError(f"{label}: hash_columns names {name!r} of type {shape.column(name).type}; only text "
                              f"columns (text, varchar, citext) can be hashed alike by the load and the stream. "
                              f"Drop it from hash_columns, or sync a text view of it.", table=shape.name)
    out = tuple(_hashed(c, salt) if c.name in columns else c for c in shape.columns)
    return dataclasses.replace(shape, columns=out)


def _hashed(c, salt: str):
    """A MariaDB column reads through its expressions (Column.read, .canon): the hash wraps its
    read; a hex digest's canonical text is itself. PostgreSQL's readers ask hash_salt."""
    read = None if c.read is None else mariadb_sql(c.read, mariadb_literal(salt))
    return dataclasses.replace(c, type=HASH_TYPE, binary_copy=False, hash_salt=salt, read=read,
                               canon=read if read is not None else c.canon)


def mariadb_literal(salt: str) -> str:
    """The salt as a MariaDB utf8mb4 string, written in hex: no quoting to get wrong."""
    return f"CONVERT(X'{salt.encode('utf-8').hex()}' USING utf8mb4)"


def salt_of(conn_id: str) -> str:
    """The salt: the password of Airflow connection `conn_id` (resolved as every connection is)."""
    from tideline.core.connections import get_connection
    from tideline.core.errors import ConfigError
    salt = get_connection(conn_id).password
    if not salt:
        raise ConfigError(f"connection {conn_id!r}", [("password", "is empty: it is the salt of the hashed "
                                                                    "columns; set a long random one")])
    return salt


def pg_source_value(c, alias: str | None = None) -> sql.Composable:
    """A PostgreSQL source column's value as the target holds it: hashed, or itself."""
    ident = sql.SQL("{}.{}").format(sql.Identifier(alias), sql.Identifier(c.name)) if alias else sql.Identifier(c.name)
    return pg_sql(ident, c.hash_salt) if c.hash_salt is not None else ident


def hashed_columns(shape) -> dict[str, str]:
    """The shape's hashed columns, each with an id of its salt: what a load records beside the
    table, so a stream finds out that hash_columns or the salt changed since (the target then
    holds values hashed otherwise, or not at all) and reloads the table. Never the salt itself."""
    return {c.name: hashlib.sha256(b"tideline salt id " + c.hash_salt.encode("utf-8")).hexdigest()[:12]
            for c in shape.columns if c.hash_salt is not None}


def changed_since_load(shape, loaded: dict[str, str] | None, label: str) -> str | None:
    """Why the table must reload because its hashing changed since its load, or None."""
    now, then = hashed_columns(shape), loaded or {}
    if now == then:
        return None
    added = sorted(set(now) - set(then))
    dropped = sorted(set(then) - set(now))
    resalted = sorted(c for c in set(now) & set(then) if now[c] != then[c])
    what = "; ".join(x for x in (f"hash_columns added {', '.join(added)}" if added else "",
                                 f"hash_columns dropped {', '.join(dropped)}" if dropped else "",
                                 f"the salt of {', '.join(resalted)} changed" if resalted else "") if x)
    return (f"{label}: {what} since the table was loaded, so the target holds those values otherwise: it is "
            f"reloaded by itself")
