"""Trigger params of the sync DAG: validation and the per-table plan (pure, unit-tested)."""
from __future__ import annotations

from tideline.core.config import PipelineConfig
from tideline.core.names import name_problem
from tideline.core.errors import TerminalError
from tideline.core.phases import TablePhase, holds_load

ACTIONS = ("auto", "full_reload", "repair", "validate", "pause", "resume", "remove", "decommission")
LIFECYCLE_ACTIONS = ("pause", "resume")   # per table; the stream of the others goes on
VERIFY_ACTIONS = ("repair", "validate")   # built only for a pair that supports verify (core.support)


def actions(cfg: PipelineConfig) -> tuple[str, ...]:
    """The sync DAG's actions for this pipeline: repair and validate where its pair supports verify."""
    return ACTIONS if cfg.supports("verify") else tuple(a for a in ACTIONS if a not in VERIFY_ACTIONS)
REPAIR_FIELDS = ("repair_key_from", "repair_key_to", "repair_time_column", "repair_time_from", "repair_time_to")
STREAM_MODES = ("continuous", "available_now")


class ParamError(TerminalError):
    """A trigger param is invalid; nothing has run."""


def check_sync_params(cfg: PipelineConfig, params: dict) -> dict:
    action = params.get("action", "auto")
    if action not in actions(cfg):
        why = (f" ({action} needs verify, which is not supported from {cfg.source.kind} into {cfg.target.kind})"
               if action in VERIFY_ACTIONS else "")
        raise ParamError(f"param action={action!r} is not one of {', '.join(actions(cfg))}{why}")
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
        if t not in known:
            raise ParamError(f"param tables: pipeline {cfg.name} has no table {t!r}; it has {', '.join(known)}")
    resume = params.get("resume_halted", True)
    if not isinstance(resume, bool):
        raise ParamError(f"param resume_halted must be true or false, got {resume!r}")
    if action in LIFECYCLE_ACTIONS:
        batch = [t for t in tables if cfg.table(t).mode != "cdc"]
        if batch:
            raise ParamError(f"action={action} applies to change-stream tables; {', '.join(batch)} "
                             f"{'is a batch-mode table' if len(batch) == 1 else 'are batch-mode tables'} (pause "
                             f"the batch_{cfg.name} DAG in Airflow instead)")
    if action == "decommission" and (params.get("confirm") or "").strip() != cfg.name:
        raise ParamError(f"action=decommission removes pipeline {cfg.name}'s connector, replication slot, "
                         f"publication, topics, state and DAGs for good: type the pipeline's name ({cfg.name}) in "
                         f"param confirm; got {params.get('confirm')!r}")
    drop_target = params.get("drop_target", False)
    if not isinstance(drop_target, bool):
        raise ParamError(f"param drop_target must be true or false, got {drop_target!r}")
    if drop_target and action != "remove":
        raise ParamError("param drop_target drops the target tables of tables removed from the YAML: it goes with "
                         "action=remove only")
    checked = {"action": action, "tables": tables, "stream_mode": mode, "resume_halted": resume}
    if action == "remove":
        checked["drop_target"] = drop_target
    if action == "repair":
        checked["repair"] = _check_repair(cfg, tables, params)
    return checked


def _check_repair(cfg: PipelineConfig, tables: list[str], params: dict) -> dict:
    from datetime import datetime
    given = {f: params.get(f) for f in REPAIR_FIELDS if params.get(f) not in (None, "")}
    if not given:  # no range named: re-read what each table's last verify found different
        # batch-mode tables are not verified (they lag by design): nothing found to re-read
        verified = [t for t in tables if cfg.table(t).mode == "cdc"]
        if not verified:
            raise ParamError(f"action=repair without a range re-reads what the last validate found, and "
                             f"validate does not compare batch-mode tables ({', '.join(tables)}): give a key "
                             f"range (repair_key_from/to) or a time range (repair_time_column/from/to)")
        out = {"from_verify": True, "tables": verified}
        if len(verified) < len(tables):
            out["not_verified"] = [t for t in tables if t not in verified]
        return out
    if len(tables) != 1:
        raise ParamError(f"a repair of a key or time range works on one table; param tables has {len(tables)}: "
                         f"{', '.join(tables)} (without a range, repair re-reads what the last validate found)")
    by_key = {"repair_key_from", "repair_key_to"} & set(given)
    by_time = {"repair_time_column", "repair_time_from", "repair_time_to"} & set(given)
    if by_key and by_time:
        raise ParamError("action=repair takes a key range (repair_key_from/to) or a time range "
                         "(repair_time_column/from/to), not both")
    if by_key:
        if len(by_key) != 2:
            raise ParamError("a key-range repair needs both repair_key_from and repair_key_to")
        return {"table": tables[0], "key_from": str(given["repair_key_from"]), "key_to": str(given["repair_key_to"])}
    if len(by_time) != 3:
        raise ParamError("a time-range repair needs all of repair_time_column, repair_time_from and "
                         "repair_time_to")
    column = given["repair_time_column"]
    if name_problem(column):
        raise ParamError(f"param repair_time_column: {column!r} {name_problem(column)}")
    try:
        lo, hi = (datetime.fromisoformat(str(given[f])) for f in ("repair_time_from", "repair_time_to"))
    except ValueError as exc:
        raise ParamError(f"repair_time_from/to must be ISO 8601 timestamps ({exc})") from None
    if (lo.tzinfo is None) != (hi.tzinfo is None):
        raise ParamError("repair_time_from and repair_time_to must both carry a time zone, or neither")
    if lo > hi:
        raise ParamError(f"repair time range is inverted: {given['repair_time_from']} is after "
                         f"{given['repair_time_to']}")
    return {"table": tables[0], "time_column": column, "time_from": str(given["repair_time_from"]),
            "time_to": str(given["repair_time_to"])}


def plan_tables(cfg: PipelineConfig, action: str, tables: list[str],
                phases: dict[str, tuple], resume_halted: bool = False) -> dict:
    """Which tables get a full load and which go straight to streaming, with the reason for each.
    `phases`: table -> TablePhase (or a tuple of its fields). A halted table is taken up again when
    a person triggers the run (resume_halted: they fixed what its error named): streamed from its
    own offsets if it halted while streaming (if the cause is not fixed, it halts again on the same
    event and says so), loaded again if it halted during its load — nothing of it is in the target.
    Every table not named as loaded (holds_load) gets a full load: never a stream onto no rows."""
    full_load, stream, halted, refused, resnapshot, resumed, reasons = [], [], [], [], [], [], {}
    paused, pause, unpause = [], [], []
    for t in cfg.tables:
        if t.mode != "cdc":
            continue
        phase, _error, before = TablePhase(*phases.get(t.name, ("new",)))
        loaded = holds_load(phase, before)
        if phase == "refused":   # its shape cannot be carried: nothing is done until the cause is fixed
            refused.append(t.name)
        elif action == "pause" and t.name in tables:
            paused.append(t.name)
            if phase != "paused":
                pause.append(t.name)
            reasons[t.name] = "paused by this run: it keeps its position; resume it with action=resume"
        elif phase == "paused" and not (action == "resume" and t.name in tables):
            paused.append(t.name)
            reasons[t.name] = "paused: not streamed until resumed (action=resume)"
        elif phase == "paused":
            unpause.append(t.name)
            if loaded:
                stream.append(t.name)
                reasons[t.name] = "paused, resumed by this run from its own position"
            else:
                full_load.append(t.name)
                reasons[t.name] = (f"paused before any load of it committed ({before or 'new'}), resumed by this "
                                   f"run: full load")
        elif action == "full_reload" and t.name in tables:
            full_load.append(t.name)
            reasons[t.name] = "full reload requested"
        elif phase == "halted" and resume_halted and t.name in tables:
            resumed.append(t.name)
            if loaded:
                stream.append(t.name)
                reasons[t.name] = "halted, resumed by this run from its own offsets"
            else:
                full_load.append(t.name)
                reasons[t.name] = ("halted during its load (nothing of it committed), resumed by this run: "
                                   "full load from a new snapshot")
        elif phase == "halted":
            halted.append(t.name)
        elif phase == "needs_resnapshot":
            full_load.append(t.name)
            resnapshot.append(t.name)
            reasons[t.name] = "needs a re-snapshot (see its last error): full load"
        elif loaded:
            stream.append(t.name)
            reasons[t.name] = "loaded: straight to streaming"
        else:
            full_load.append(t.name)
            reasons[t.name] = {"new": "never loaded: full load", "loading": "never loaded: full load",
                               "removed": "back in the YAML after it was removed (its capture stopped meanwhile): "
                                          "full load",
                               "batch": "was a batch-mode table, now a change stream: full load"}.get(
                phase, f"phase {phase}: not a loaded table, full load")
    return {"full_load": full_load, "stream": stream, "halted": halted, "refused": refused, "resnapshot": resnapshot,
            "resumed": resumed, "reasons": reasons, "paused": paused, "pause": pause, "unpause": unpause}


def resumed_phase(plan: dict, table: str) -> str:
    """The phase a halted or paused table takes when a run resumes it: 'streaming' where the plan
    streams it, 'new' where it loads it (the load makes it 'streaming' when it commits; if the load
    fails, the next run loads it again rather than streaming a table with no rows)."""
    return "streaming" if table in plan["stream"] else "new"


def hands_back(stream_mode: str, tables: list[str], held_continuously: set[str]) -> list[str]:
    """The tables a run must give back to a continuous stream when it ends. A run takes its tables
    over from any stream holding them (the older one is fenced and stops), and an available_now run
    ends once it has applied what Kafka holds: without this, a reload asked for as available_now
    while a continuous stream ran would leave every table it took streamed by nobody."""
    if stream_mode != "available_now":
        return []
    return [t for t in tables if t in held_continuously]

