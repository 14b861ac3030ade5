"""Table maintenance of a pipeline whose target needs it (capabilities().maintenance: Iceberg):
each table in turn, its files rewritten behind the stream's fence, recorded as a run so status,
the view and the history show the last one and what it changed."""
from __future__ import annotations

import contextlib
import logging

from tideline import state, targets
from tideline.core.config import PipelineConfig
from tideline.core.connections import get_connection
from tideline.core.errors import ConfigError, TidelineError

log = logging.getLogger("tideline.maintenance")


def maintain(cfg: PipelineConfig, spark, tables: list[str] | None = None, environ=None) -> dict[str, dict | None]:
    """Maintains the tables (default: all of the pipeline's); returns each one's figures (None: no
    table yet). A table that fails is recorded and the others still run; the first failure is
    raised at the end."""
    store = targets.for_pipeline(cfg, get_connection(cfg.target.conn_id, environ))
    store = targets.able(store, targets.Maintains)
    if not store.capabilities().maintenance:
        raise ConfigError(f"pipeline {cfg.name}", [("target", f"a {store.kind} target needs no table maintenance "
                                                              f"(its commits add no files)")])
    store.use(spark)
    conn = store.connect()
    state.migrate(conn)
    out, failed = {}, None
    try:
        for name in tables or [t.name for t in cfg.tables]:
            if store.table_facts(cfg.target_schema(name), cfg.target_table(name)) is None:   # not loaded yet: nothing to record
                log.info("%s.%s: no table yet; nothing to maintain", cfg.name, name)
                out[name] = None
                continue
            run_id = state.run_start(conn, cfg.name, name, "maintenance", None, "compaction, snapshot expiry, orphans")

            @contextlib.contextmanager
            def fence(table=name):
                with conn, conn.cursor() as cur:   # the stream's next commit of the table waits for this
                    state.lock(cur, cfg.name, table)
                    yield

            try:
                figures = out[name] = store.maintain(spark, cfg.target_schema(name), cfg.target_table(name),
                                                     cfg.maintenance, fence)
            except Exception as exc:   # recorded per table; raised once the others ran
                conn.rollback()
                message = str(exc) if isinstance(exc, TidelineError) else f"{type(exc).__name__}: {exc}"
                log.error("%s.%s: maintenance failed: %s", cfg.name, name, message)
                with conn, conn.cursor() as cur:
                    state.run_end(cur, run_id, "failed", None, message[:2000])
                failed = failed or exc
                continue
            detail = "the table was dropped meanwhile" if figures is None else (
                      f"data files {figures['data_files'][0]} -> {figures['data_files'][1]}, delete files "
                      f"{figures['delete_files'][0]} -> {figures['delete_files'][1]}, snapshots "
                      f"{figures['snapshots'][0]} -> {figures['snapshots'][1]}, "
                      f"{figures['orphan_files_removed']} orphan files removed, {figures['seconds']:.1f}s")
            with conn, conn.cursor() as cur:
                state.run_end(cur, run_id, "succeeded", None, detail, counts=figures)
    finally:
        conn.close()
    if failed is not None:
        raise failed
    return out
