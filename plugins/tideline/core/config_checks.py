"""Checks of a pipeline config that span a table's options and the pipeline's settings (core.config
runs them while it validates; each raises ValueError, which the config names with its file, line
and field)."""
from __future__ import annotations


def source_fields(cfg) -> None:
    """A slimmed source block (kafka.source_fields) must keep what the tables' options read from it:
    the source position (metadata: source_position) and the microsecond commit time (history)."""
    kept = cfg.kafka.source_fields
    if kept is None:
        return
    wants = {"postgres": ["lsn"], "mariadb": ["gtid", "file", "pos"]}[cfg.source.kind]
    for t in cfg.tables:
        missing = ([f for f in wants if f not in kept] if "source_position" in t.metadata else []) + \
            (["ts_us"] if t.history and "ts_us" not in kept else [])
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
