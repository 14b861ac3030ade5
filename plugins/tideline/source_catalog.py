"""Reads a source table's shape from the PostgreSQL catalog and checks it can be loaded."""
from __future__ import annotations

from tideline import sqlfiles
from tideline.core import debezium
from tideline.core.errors import SourceError
from tideline.core.table_shape import Column, TableShape, select_columns


def check_logical_decoding(conn, what: str) -> None:
    with conn.cursor() as cur:
        cur.execute("SHOW wal_level")
        level = cur.fetchone()[0]
    if level != "logical":
        raise SourceError(f"{what}: wal_level is {level!r}, change capture needs 'logical'. "
                          f"Set wal_level = logical in postgresql.conf (or ALTER SYSTEM) and restart PostgreSQL.")


def describe(conn, schema: str, table: str, tcfg=None, check_key: bool = True, for_stream: bool = False) -> TableShape:
    """The table as the pipeline syncs it: its columns (the configured selection) and key.
    for_stream: also refuse columns the change stream cannot carry exactly (the doctor and the
    stream ask; a full load copies every type exactly and does not)."""
    label = f"source table {schema}.{table}"
    configured_pk = tcfg.primary_key if (tcfg is not None and check_key) else None
    with conn.cursor() as cur:
        cur.execute(sqlfiles.load("full_load/source_table"), {"schema": schema, "table": table})
        row = cur.fetchone()
        if row is None:
            raise SourceError(f"{label} does not exist. Check the table name in the pipeline config and "
                              f"source.schema ({schema!r}).")
        relid, can_select, relkind = row
        if relkind not in ("r", "p"):
            raise SourceError(f"{label} is not a table (relkind {relkind!r}); only tables can be synced.")
        if not can_select:
            raise SourceError(f"{label}: the source connection's role has no SELECT privilege. "
                              f"Run: GRANT SELECT ON {schema}.{table} TO <the role of the source connection>;")
        cur.execute(sqlfiles.load("full_load/source_columns"), {"relid": relid})
        columns = tuple(Column(name, typ, not_null, default, has_missing, missing, generated)
                        for name, typ, not_null, _schema, _cat, default, has_missing, missing, generated
                        in cur.fetchall())
        cur.execute(sqlfiles.load("full_load/source_primary_key"), {"relid": relid})
        source_pk = tuple(r[0] for r in cur.fetchall())
    if not columns:
        raise SourceError(f"{label} has no columns.")
    if configured_pk is not None:
        if not source_pk:
            raise SourceError(
                f"{label}: the pipeline config says primary_key {configured_pk} but the source table has no "
                f"primary key. Add it at the source (ALTER TABLE {schema}.{table} ADD PRIMARY KEY (...)), or "
                f"remove primary_key from the config to load the table as keyless.")
        if list(source_pk) != list(configured_pk):
            raise SourceError(f"{label}: the pipeline config says primary_key {configured_pk} but the source's "
                              f"primary key is {list(source_pk)}. Make the config match the source.")
    shape = TableShape(schema, table, columns, source_pk)
    if tcfg is not None and (tcfg.columns is not None or tcfg.exclude_columns):
        shape = select_columns(shape, tcfg.columns, tcfg.exclude_columns, label)
    if for_stream and tcfg is not None and tcfg.mode == "cdc":
        lossy = debezium.unstreamable(shape.columns)
        if lossy:
            raise SourceError(debezium.unstreamable_message(label, lossy), table=table)
    return shape


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
