"""Per-table refusals: a table whose shape cannot be carried exactly is refused before any work —
its state says `refused` with the reason and the fix, an alert says the same — and left out of
capture, load and stream, while the pipeline's other tables go on. Checked when capture is set
up (the sync DAG's first task), by the doctor, and again at each load and stream start.
"""
from __future__ import annotations

import logging
from typing import Callable

from tideline import engines, state
from tideline.core.config import PipelineConfig
from tideline.core.connections import Conn
from tideline.core.errors import SourceError
from tideline.core.source_shapes import Refusal

log = logging.getLogger("tideline.refusals")


def find(cfg: PipelineConfig, source: Conn, tables: list[str] | None = None) -> dict[str, Refusal]:
    """The pipeline's tables (or `tables`) that cannot be carried, by name."""
    engine = engines.for_pipeline(cfg, source)
    conn = engine.connect()
    try:
        return engine.refusals(conn, cfg, tables if tables is not None else [t.name for t in cfg.tables])
    finally:
        conn.close()


def message(cfg: PipelineConfig, refusal: Refusal) -> str:
    return f"{cfg.name}.{refusal.table} {refusal.message()}"


def record(cfg: PipelineConfig, target_conn, refused: dict[str, Refusal],
           notify: Callable[..., None] | None = None, checked: list[str] | None = None) -> list[str]:
    """Writes each refused table's state (and alerts); a table refused before whose cause is gone
    (of those `checked`, default all) goes back to 'new', so the run loads it afresh. Returns the
    tables no longer refused."""
    state.migrate(target_conn)
    checked = [t.name for t in cfg.tables] if checked is None else checked
    for name, refusal in refused.items():
        text = message(cfg, refusal)
        log.error("%s", text)
        state.refuse(target_conn, cfg.name, name, text)
        if notify is not None:
            from tideline import alerts
            notify(alerts.TABLE_REFUSED, text, subject=name)
    back = [name for name in checked if name not in refused and state.unrefuse(target_conn, cfg.name, name)]
    for name in back:
        log.warning("%s.%s is no longer refused (its cause was fixed): it is loaded afresh", cfg.name, name)
    return back


def carried(cfg: PipelineConfig, refused: dict[str, Refusal] | list[str]) -> PipelineConfig:
    """The pipeline without its refused tables: what capture is set up for. Refuses the whole
    pipeline only when no table is left."""
    left = [t for t in cfg.tables if t.name not in refused]
    if not left:
        reasons = "; ".join(message(cfg, r) for r in refused.values()) if isinstance(refused, dict) else ""
        raise SourceError(f"pipeline {cfg.name}: every table is refused, nothing can be synced. {reasons}")
    return cfg.model_copy(update={"tables": left})


def check_and_record(cfg: PipelineConfig, source: Conn, target: Conn | None,
                     notify: Callable[..., None] | None = None) -> dict[str, Refusal]:
    """find + record (when the target is given): what capture, load and stream start do first."""
    refused = find(cfg, source)
    if target is not None:
        conn = state.of_pipeline(cfg, state.given(source, target))
        try:
            record(cfg, conn, refused, notify)
        finally:
            conn.close()
    else:
        for refusal in refused.values():
            log.error("%s", message(cfg, refusal))
    return refused
