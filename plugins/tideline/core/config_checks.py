"""Checks of a pipeline config that span a table's options and the pipeline's settings (core.config
runs them while it validates; each raises ValueError, which the config names with its file, line
and field)."""
from __future__ import annotations

from tideline.core.support import source_facts


def source_fields(cfg) -> None:
    """A slimmed source block (kafka.source_fields) must keep what the tables' options read from it:
    the source position (metadata: source_position), the microsecond commit time (history) and,
    from MariaDB, the GTID that orders a history table's versions."""
    kept = cfg.kafka.source_fields
    if kept is None:
        return
    facts = source_facts(cfg.source.kind)
    for t in cfg.tables:
        missing = ([f for f in facts.position_fields if f not in kept] if "source_position" in t.metadata else []) + \
            (["ts_us"] if t.history and "ts_us" not in kept else []) + \
            ([f for f in facts.order_fields if f not in kept] if t.history else [])
        if missing:
            raise ValueError(f"table {t.name!r} reads {', '.join(missing)} from the change events' source block "
                             f"(metadata: source_position / history), which kafka.source_fields leaves out: add "
                             f"{', '.join(missing)} to it, or set it to null")


def row_filter(t, source_kind: str) -> None:
    """A table's row_filter parses in its source's SQL and names only columns the table syncs."""
    from tideline.core import row_filter as filters
    if t.mode != "cdc":
        raise ValueError(f"table {t.name!r}: row_filter goes with mode: cdc (a batch table copies rows by cursor_column)")
    f = filters.parse(t.row_filter, source_kind)
    unknown = (f.unknown(t.columns + list(t.primary_key or [])) if t.columns is not None
               else [c for c in f.columns if c in t.exclude_columns])
    if unknown:
        raise ValueError(f"table {t.name!r}: row_filter names {', '.join(unknown)}, which the table does not sync "
                         f"(columns / exclude_columns)")


def hash_columns(t, hash_salt, source_kind: str) -> None:
    """hash_columns name synced, non-key columns the rows are not chosen or ordered by, once each,
    and the pipeline says where the salt is (core.column_hash)."""
    if not t.hash_columns:
        return
    if t.mode != "cdc":
        raise ValueError(f"table {t.name!r}: hash_columns go with mode: cdc (a batch table's rows copied before a "
                         f"change of hashing would keep the old digests, with no stream to find it out)")
    if len(set(t.hash_columns)) != len(t.hash_columns):
        raise ValueError(f"table {t.name!r}: hash_columns lists a column twice: {t.hash_columns}")
    if hash_salt is None:
        raise ValueError(f"table {t.name!r} has hash_columns but the pipeline has no hash_salt: add "
                         f"`hash_salt: {{conn_id: <an Airflow connection whose password is the salt>}}`")
    why = {k: "a key column (changes are applied and verified by key)" for k in t.primary_key or []}
    if t.row_filter:
        from tideline.core import row_filter as filters
        why.update({c: "named in row_filter (the stream filters on the values the target holds)"
                    for c in filters.parse(t.row_filter, source_kind).columns})
    for c in t.hash_columns:
        if c in why:
            raise ValueError(f"table {t.name!r}: hash_columns names {c!r}, {why[c]}: leave it unhashed")
        if c in t.exclude_columns or (t.columns is not None and c not in t.columns):
            raise ValueError(f"table {t.name!r}: hash_columns names {c!r}, which the table does not sync "
                             f"(columns / exclude_columns)")
