"""Batch mode, for tables without a change log: each scheduled run copies the rows whose cursor
column (update time, or a monotonic id) falls in the run's data interval — never closer to now
than the safety lag — into a staging table, then upserts them and advances the cursor in one
target transaction. Re-running an interval changes nothing; a row not yet safe to read in one
run is read by the next, because a run always starts at the cursor when it lags the interval.
Deletes at the source are not seen in batch mode (use cdc for that)."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime

from tideline import engines, state, targets
from tideline.core.config import PipelineConfig
from tideline.core.connections import get_connection
from tideline.core.errors import LoadVerificationError, SourceError
from tideline.load.full_load import copy_source_rows, run_owner

log = logging.getLogger("tideline.batch")

_TIME_TYPES = ("timestamp", "date")
_INT_TYPES = ("smallint", "integer", "bigint", "numeric")


@dataclass
class BatchResult:
    table: str
    lower: str | None
    upper: str | None
    rows: int
    seconds: float


class BatchSync:
    def __init__(self, cfg: PipelineConfig, spark, environ=None):
        self.cfg, self.spark = cfg, spark
        self.source = get_connection(cfg.source.conn_id, environ)
        self.engine = engines.able(engines.for_pipeline(cfg, self.source), engines.ReadsIntervals)
        self.target = get_connection(cfg.target.conn_id, environ)
        self.store = targets.able(targets.for_pipeline(cfg, self.target), targets.MergesBatches)

    def run(self, start: datetime, end: datetime, tables: list[str] | None = None) -> list[BatchResult]:
        names = tables or [t.name for t in self.cfg.tables if t.mode == "batch"]
        for name in names:
            if self.cfg.table(name).mode != "batch":
                raise SourceError(f"{self.cfg.name}.{name} is a cdc table; batch_sync only runs batch tables")
        conn = self.store.connect()
        try:
            state.migrate(conn)
        finally:
            conn.close()
        return [self.sync_table(name, start, end) for name in names]

    def sync_table(self, table: str, start: datetime, end: datetime) -> BatchResult:
        cfg, tcfg = self.cfg, self.cfg.table(table)
        label, started = f"{cfg.name}.{table}", time.monotonic()
        src = self.engine.connect(autocommit=True)
        tgt = self.store.connect()
        stage = f"{table[:46]}__tl_batch"
        schema = cfg.target_schema(table)
        run_id = None
        try:
            shape = self.engine.describe(src, cfg.source_schema(table), table, tcfg)
            if not shape.primary_key:
                raise SourceError(f"{label}: batch mode upserts by primary key; the source table has none. "
                                  f"Add one at the source.")
            cursor_col = next((c for c in shape.columns if c.name == tcfg.cursor_column), None)
            if cursor_col is None:
                raise SourceError(f"{label}: cursor_column {tcfg.cursor_column!r} is not a column of the source "
                                  f"table (it has {', '.join(shape.column_names)}).")
            self.store.prepare_schema(tgt, schema, label)
            epoch = state.claim_epoch(tgt, cfg.name, table, run_owner("batch"), "")
            run_id = state.run_start(tgt, cfg.name, table, "batch", epoch, f"interval {start} .. {end}")
            current = (state.get(tgt, cfg.name, table).raw or {}).get("cursor_value")
            tgt.rollback()
            if not cursor_col.type.startswith(_TIME_TYPES + _INT_TYPES):
                raise SourceError(f"{cfg.name}.{table}: cursor_column {cursor_col.name} is {cursor_col.type}; "
                                  f"use an update-time (timestamp, timestamptz, date) or integer column.")
            lower, upper, where, new_cursor = self.engine.cursor_bounds(
                src, shape, cursor_col, current, start, end, tcfg.safety_lag_s,
                time=cursor_col.type.startswith(_TIME_TYPES))
            landing = cfg.target_names(table).shape(shape)   # the target's names for it (core.target_names)
            self.store.begin_interval(tgt, landing, schema, stage)
            rows = 0
            if where is not None:
                query, preds, init = self.engine.interval_read(src, shape, where, cfg.spark.parallelism)
                figures = copy_source_rows(self.spark, self.engine, self.store, tgt, landing, query,
                                           preds, schema, stage, label, session_init=init, started=started,
                                           where=where, run_id=run_id)
                rows = sum(f["copied"] for f in figures)
                if rows != sum(f["rows"] for f in figures):
                    raise LoadVerificationError(f"{label}: rows read and rows staged differ; nothing was applied")
            with tgt, tgt.cursor() as cur:
                state.check_epoch(cur, cfg.name, table, epoch)
                self.store.ensure_table(cur, landing, schema, label)
                if rows:
                    self.store.merge_interval(cur, landing, schema, stage)
                self.store.drop_staging(cur, schema, stage)
                state.finish_batch(cur, pipeline=cfg.name, table=table, epoch=epoch, cursor=new_cursor)
                secs = time.monotonic() - started
                state.run_end(cur, run_id, "succeeded", rows, f"cursor {tcfg.cursor_column} in [{lower}, {upper}), "
                                                              f"{rows} rows, {secs:.1f}s")
            log.info("%s: %s rows with %s in [%s, %s) landed in %.1fs; cursor now %s", label, f"{rows:,}",
                     tcfg.cursor_column, lower, upper, secs, new_cursor)
            return BatchResult(table, lower, upper, rows, secs)
        except BaseException as exc:
            log.error("%s: batch run failed: %s", label, exc)
            try:
                tgt.rollback()
                with tgt, tgt.cursor() as cur:
                    self.store.drop_staging(cur, schema, stage)
                    if run_id is not None:
                        state.run_end(cur, run_id, "failed", None, str(exc)[:2000])
            except Exception as cleanup:
                log.error("%s: cleanup after the failure also failed: %s", label, cleanup)
            raise
        finally:
            src.close()
            tgt.close()
