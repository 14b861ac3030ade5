"""Repair: fix a table from the source without moving the stream.

A repair re-reads a key range, an update-time range, or exactly the key ranges the last verify
found different, and applies them in one target transaction behind the stream's own fence (the
table's state row locked, its epoch unchanged) — so it never interleaves with a batch and never
outlives a full reload — and it leaves the stream's position alone. Events the stream applies
afterwards are newer than or equal to what was read, so the table converges.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from tideline import engines, state, targets
from tideline.state import ledger
from tideline.core.config import PipelineConfig
from tideline.core.connections import Conn
from tideline.core.errors import TerminalError
from tideline.core.row_filter import RowFilter
from tideline.core.table_extras import TableExtras
from tideline.core.table_shape import TableShape

log = logging.getLogger("tideline.repair")


class RepairError(TerminalError):
    """The repair request cannot be carried out as asked (the message says why); nothing changed."""


@dataclass
class RepairResult:
    table: str
    read: int
    upserted: int
    deleted: int


def _lock_for_repair(cur, pipeline: str, table: str, epoch: int) -> None:
    """The stream's fence (state row locked, epoch unchanged since the repair read its epoch),
    plus: the table must be loaded."""
    state.check_epoch(cur, pipeline, table, epoch)
    phase = ledger.phase(cur, pipeline, table)
    if phase not in ("streaming", "batch"):
        raise RepairError(f"{pipeline}.{table} is {phase}: repair works on a loaded table (run the sync first, "
                          f"or action=full_reload)", table=table)


def _loaded_epoch(tgt, pipeline: str, table: str) -> int:
    st = state.get(tgt, pipeline, table)
    tgt.rollback()
    if st is None or st.phase not in ("streaming", "batch"):
        raise RepairError(f"{pipeline}.{table} is {st.phase if st else 'not loaded yet'}: repair works on a loaded "
                          f"table (run the sync first, or action=full_reload)", table=table)
    return st.epoch


def apply_from_source(cfg: PipelineConfig, engine, shape: TableShape, src, tgt, store, source_where: str,
                      target_where: str, label: str, delete_missing: bool = True) -> RepairResult:
    """Re-reads the rows matching `source_where` from the source (one consistent read) and applies
    them to the target in one transaction behind the stream's fence: upsert what the source has
    and, when the predicate is over the key, delete the target's rows matching `target_where` (the
    same rows, in PostgreSQL) that the source no longer has. The stream's position is not touched.

    Order matters: the fence (the table's state row, which every stream batch locks) is held
    *before* the source is read. A batch committed earlier is then already in the source read;
    a batch committed later applies events whose keys each end with their newest event, so the
    table converges. (Reading first would let a batch commit between read and write, and the
    repair would overwrite it with older rows that no event ever corrects.)"""
    table = shape.name
    epoch = _loaded_epoch(tgt, cfg.name, table)
    if cfg.table(table).row_filter:   # only the rows the table's filter keeps: the others leave the target
        source_where = f"({source_where}) AND ({RowFilter(cfg.table(table).row_filter, cfg.source.kind).source_sql()})"
    with tgt, tgt.cursor() as cur:
        _lock_for_repair(cur, cfg.name, table, epoch)
        read, upserted, deleted = store.repair_from_source(   # the target's shape (core.target_names)
            cur, engine, src, cfg.target_names(table).shape(shape), cfg.target_schema(table), source_where, target_where, delete_missing,
            f"{cfg.name}.{table}", TableExtras.of(cfg.table(table), cfg.source.kind))
        run_id = state.run_start_in(cur, cfg.name, table, "repair", epoch)
        state.run_end(cur, run_id, "succeeded", read,
                      f"{label}: {read} read, {upserted} upserted, {deleted} deleted")
    log.info("%s.%s: repaired %s: %d rows read, %d upserted, %d deleted; the stream kept its position",
             cfg.name, table, label, read, upserted, deleted)
    return RepairResult(table, read, upserted, deleted)


def _connections(cfg: PipelineConfig, source: Conn, target: Conn):
    """The source's engine and connection, the target and a connection to it (with the state: the
    fence is there)."""
    engine = engines.able(engines.for_pipeline(cfg, source), engines.VerifiesSource)
    store = targets.able(targets.for_pipeline(cfg, target), targets.Verifies)
    return engine, engine.connect(), store, store.connect()


def _key_column(cfg: PipelineConfig, shape: TableShape):
    table = shape.name
    if not shape.primary_key:
        raise RepairError(f"{cfg.name}.{table} has no primary key; repair needs one", table=table)
    if len(shape.primary_key) != 1:
        raise RepairError(f"{cfg.name}.{table}: a key-range repair needs a one-column primary key; this one "
                          f"is ({', '.join(shape.primary_key)}). Use an update-time range, or validate "
                          f"then repair what it found.", table=table)
    return shape.column(shape.primary_key[0])


def _check_range(store, tgt, table: str, column: str, typ: str, lo: str, hi: str, params: tuple[str, str]) -> None:
    """Both ends are values of the type (as the target reads it, whatever the source engine) and
    in order; the error names the param."""
    for param, value in zip(params, (lo, hi)):
        problem = store.value_problem(tgt, typ, value)
        if problem:
            raise RepairError(f"param {param}: {value!r} is not a value of {table}.{column} ({typ}): {problem}",
                              table=table)
    if not store.in_order(tgt, typ, lo, hi):
        raise RepairError(f"params {params[0]}/{params[1]}: the range is inverted ({lo!r} is after {hi!r} in "
                          f"{typ} order)", table=table)


def check_key_range(cfg: PipelineConfig, source: Conn, target: Conn, table: str, key_from: str, key_to: str) -> None:
    """Before any work: the key range names values of the key's type, in order."""
    engine, src, store, tgt = _connections(cfg, source, target)
    try:
        col = _key_column(cfg, engine.describe(src, cfg.source_schema(table), table, cfg.table(table)))
        _check_range(store, tgt, table, col.name, col.type, key_from, key_to, ("repair_key_from", "repair_key_to"))
    finally:
        src.close()
        tgt.close()


def repair(cfg: PipelineConfig, source: Conn, target: Conn, table: str, *, key_from: str | None = None,
           key_to: str | None = None, time_column: str | None = None, time_from: str | None = None,
           time_to: str | None = None) -> RepairResult:
    """Repair of a range a person names: a key range (one-column keys) or an update-time range."""
    tcfg = cfg.table(table)
    engine, src, store, tgt = _connections(cfg, source, target)
    try:
        shape = engine.describe(src, cfg.source_schema(table), table, tcfg)
        if not shape.primary_key:
            raise RepairError(f"{cfg.name}.{table} has no primary key; repair needs one", table=table)
        if key_from is not None:
            col = _key_column(cfg, shape)
            lo, hi, as_time = key_from, key_to, False
            _check_range(store, tgt, table, col.name, col.type, lo, hi, ("repair_key_from", "repair_key_to"))
        else:
            if time_column not in shape.column_names:
                raise RepairError(f"{cfg.name}.{table} has no column {time_column!r} for a time-range repair",
                                  table=table)
            col, as_time = shape.column(time_column), True
            _check_range(store, tgt, table, col.name, "timestamptz", time_from, time_to, ("repair_from", "repair_to"))
            lo, hi = store.utc_text(tgt, time_from), store.utc_text(tgt, time_to)
        label = f"{'key' if key_from is not None else time_column} range {lo}..{hi}"
        landing, names = cfg.target_names(table).shape(shape), cfg.target_names(table)
        # A time range says nothing about rows deleted at the source: only a key range deletes.
        return apply_from_source(cfg, engine, shape, src, tgt, store,
                                 engine.range_where(src, shape, col.name, lo, hi, as_time),
                                 store.range_where(tgt, landing, names.column(col.name), lo, hi, as_time), label,
                                 delete_missing=not as_time)
    finally:
        src.close()
        tgt.close()


def repair_verified(cfg: PipelineConfig, source: Conn, target: Conn, table: str,
                    ranges_per_transaction: int = 200) -> RepairResult:
    """Re-reads exactly the key ranges the table's last verify found different."""
    from tideline.state.ledger import last_differences
    engine, src, store, tgt = _connections(cfg, source, target)
    try:
        run_id, ranges = last_differences(tgt, cfg.name, table)
        tgt.rollback()
        if run_id is None:
            raise RepairError(f"{cfg.name}.{table} has never been verified: run action=validate first (it finds "
                              f"the differing ranges a repair re-reads), or give a key or time range", table=table)
        total = RepairResult(table, 0, 0, 0)
        if not ranges:
            log.info("%s.%s: its last verify (run %d) found no differences; nothing to repair", cfg.name, table,
                     run_id)
            return total
        shape = engine.describe(src, cfg.source_schema(table), table, cfg.table(table))
        for i in range(0, len(ranges), ranges_per_transaction):
            chunk = ranges[i:i + ranges_per_transaction]
            target_where = store.key_ranges_where(tgt, cfg.target_names(table).shape(shape), chunk)
            tgt.rollback()
            r = apply_from_source(cfg, engine, shape, src, tgt, store, engine.key_ranges_where(src, shape, chunk),
                                  target_where, f"{len(chunk)} key range(s) verify run {run_id} found different")
            total = RepairResult(table, total.read + r.read, total.upserted + r.upserted, total.deleted + r.deleted)
        return total
    finally:
        src.close()
        tgt.close()
