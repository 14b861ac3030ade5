"""Trigger params of the sync DAG: validation and the per-table plan (pure, unit-tested)."""
from __future__ import annotations

from tideline.core.config import IDENT, PipelineConfig
from tideline.core.errors import TerminalError

ACTIONS = ("auto", "full_reload")
STREAM_MODES = ("continuous", "available_now")


class ParamError(TerminalError):
    """A trigger param is invalid; nothing has run."""


def check_sync_params(cfg: PipelineConfig, params: dict) -> dict:
    action = params.get("action", "auto")
    if action not in ACTIONS:
        raise ParamError(f"param action={action!r} is not one of {', '.join(ACTIONS)}")
    mode = params.get("stream_mode", "continuous")
    if mode not in STREAM_MODES:
        raise ParamError(f"param stream_mode={mode!r} is not one of {', '.join(STREAM_MODES)}")
    known = [t.name for t in cfg.tables]
    tables = params.get("tables") or known
    if isinstance(tables, str):
        tables = [t.strip() for t in tables.split(",") if t.strip()]
    if not isinstance(tables, list) or not all(isinstance(t, str) for t in tables):
        raise ParamError(f"param tables must be a list of table names, got {tables!r}")
    for t in tables:
        if not IDENT.match(t):
            raise ParamError(f"param tables: {t!r} is not a table name (plain identifiers only)")
        if t not in known:
            raise ParamError(f"param tables: pipeline {cfg.name} has no table {t!r}; it has {', '.join(known)}")
    return {"action": action, "tables": tables, "stream_mode": mode}


def plan_tables(cfg: PipelineConfig, action: str, tables: list[str],
                phases: dict[str, tuple[str, str | None]]) -> dict:
    """Which tables get a full load and which go straight to streaming, with the reason for each."""
    full_load, stream, halted, reasons = [], [], [], {}
    for t in cfg.tables:
        if t.mode != "cdc":
            continue
        phase, _error = phases.get(t.name, ("new", None))
        if action == "full_reload" and t.name in tables:
            full_load.append(t.name)
            reasons[t.name] = "full reload requested"
        elif phase == "halted":
            halted.append(t.name)
        elif phase in ("new", "loading"):
            full_load.append(t.name)
            reasons[t.name] = "never loaded: full load"
        elif phase == "needs_resnapshot":
            full_load.append(t.name)
            reasons[t.name] = "needs a re-snapshot (see its last error): full load"
        else:
            stream.append(t.name)
            reasons[t.name] = "loaded: straight to streaming"
    return {"full_load": full_load, "stream": stream, "halted": halted, "reasons": reasons}
