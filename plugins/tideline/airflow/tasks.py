"""The Python tasks of the sync DAG. Each resolves its clients when it runs."""
from __future__ import annotations

import logging

import psycopg2
from airflow.sdk.exceptions import AirflowFailException

from tideline import state
from tideline.airflow import connections
from tideline.airflow.pipelines import get_pipeline
from tideline.core.params import ParamError, check_sync_params, plan_tables

log = logging.getLogger("tideline.dag")


def check_params(pipeline: str, params: dict) -> dict:
    """Rejects bad trigger params before any work, naming the param and what is allowed."""
    cfg = get_pipeline(pipeline)
    try:
        return check_sync_params(cfg, params)
    except ParamError as exc:
        raise AirflowFailException(str(exc)) from None


def ensure_capture(pipeline: str) -> None:
    from tideline.connector import ensure_capture as ensure
    cfg = get_pipeline(pipeline)
    ensure(cfg, connections.get(cfg.kafka.conn_id), connections.get(cfg.connect.conn_id),
           connections.get(cfg.source.conn_id))


def decide(pipeline: str, checked: dict) -> dict:
    """Per table: full load (never loaded, needs re-snapshot, or asked for) or straight to streaming."""
    cfg = get_pipeline(pipeline)
    conn = psycopg2.connect(connections.get(cfg.target.conn_id).postgres_dsn())
    try:
        state.migrate(conn)
        phases = {}
        for t in cfg.tables:
            st = state.get(conn, cfg.name, t.name)
            phases[t.name] = (st.phase, st.last_error) if st else ("new", None)
    finally:
        conn.close()
    plan = plan_tables(cfg, checked["action"], checked["tables"], phases)
    for table, why in plan["reasons"].items():
        log.info("%s.%s: %s", cfg.name, table, why)
    for table in plan["halted"]:
        log.error("%s.%s is HALTED and will not be loaded or streamed until fixed: %s", cfg.name, table,
                  phases[table][1])
    if not plan["full_load"] and not plan["stream"]:
        raise AirflowFailException(f"pipeline {cfg.name}: nothing can run; halted tables: "
                                   + "; ".join(f"{t}: {phases[t][1]}" for t in plan["halted"]))
    return plan


def branch_after_decide(plan: dict) -> str:
    return "full_load" if plan["full_load"] else "coverage"


def branch_after_coverage(result: dict) -> str:
    return "resnapshot" if result and result.get("resnapshot") else "incremental"


def branch_after_stream(result: dict | None) -> list[str]:
    from tideline.core.errors import EXIT_RESNAPSHOT
    return ["restart"] if result and result.get("exit") == EXIT_RESNAPSHOT else []


def branch_on_action(checked: dict) -> str:
    return {"repair": "repair", "validate": "validate"}.get(checked["action"], "ensure_connector")


def repair(pipeline: str, checked: dict) -> dict:
    from tideline import repair as repair_mod
    cfg = get_pipeline(pipeline)
    r = dict(checked["repair"])
    table = r.pop("table")
    try:
        result = repair_mod.repair(cfg, connections.get(cfg.source.conn_id), connections.get(cfg.target.conn_id),
                                   table, **r)
    except repair_mod.RepairError as exc:
        raise AirflowFailException(str(exc)) from None
    return {"table": result.table, "read": result.read, "upserted": result.upserted, "deleted": result.deleted}


def validate(pipeline: str, checked: dict) -> list[dict]:
    from tideline import repair as repair_mod
    cfg = get_pipeline(pipeline)
    results = repair_mod.validate(cfg, connections.get(cfg.source.conn_id), connections.get(cfg.target.conn_id),
                                  checked["tables"])
    different = [r.table for r in results if not r.equal]
    if different:
        raise AirflowFailException(f"pipeline {cfg.name}: source and target differ for {', '.join(different)} "
                                   f"(see the counts above); run action=repair for a range or full_reload")
    return [r.__dict__ for r in results]
