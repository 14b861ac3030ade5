"""The Python tasks of the sync DAG. Each resolves its clients when it runs."""
from __future__ import annotations

import logging
from datetime import datetime, timezone

from airflow.sdk.exceptions import AirflowFailException

from tideline import state
from tideline.state import ledger

from tideline import alerts
from tideline.airflow import connections
from tideline.airflow.operators import alert_sender
from tideline.airflow.pipelines import get_pipeline
from tideline.core import watchdog
from tideline.core.connections import look_up_elsewhere
from tideline.core.params import ParamError, TablePhase, check_sync_params, hands_back, plan_tables, resumed_phase

log = logging.getLogger("tideline.dag")
# a connection the library looks up by id itself (the salt of hashed columns, core.column_hash) is
# found where the task's own are: Airflow's secrets backends and metadata database, then the env
look_up_elsewhere(connections.get)


def check_params(pipeline: str, params: dict) -> dict:
    """Rejects bad trigger params before any work, naming the param and what is allowed."""
    from tideline.verify import repair as repair_mod
    cfg = get_pipeline(pipeline)
    try:
        checked = check_sync_params(cfg, params)
        key_range = checked.get("repair", {})
        if "key_from" in key_range:   # typed by PostgreSQL, before any work
            repair_mod.check_key_range(cfg, connections.get(cfg.source.conn_id),
                                       connections.get(cfg.target.conn_id), key_range["table"],
                                       key_range["key_from"], key_range["key_to"])
        return checked
    except (ParamError, repair_mod.RepairError) as exc:
        raise AirflowFailException(str(exc)) from None


def ensure_capture(cfg) -> list[str]:
    """Refuses the tables that cannot be carried (their state says why), then topics, publication,
    connector and slot in place for the others; returns the tables marked for a reload (a lost slot).
    Migrates the state schema first."""
    from tideline.capture.connector import ensure_capture as ensure
    from tideline.core.errors import SourceError
    target = connections.get(cfg.target.conn_id)
    conn = state.of_pipeline(cfg, connections.get)
    try:
        state.migrate(conn)
        return ensure(cfg, connections.get(cfg.kafka.conn_id), connections.get(cfg.connect.conn_id),
                      connections.get(cfg.source.conn_id), target, alerts.once_per(conn, cfg, alert_sender(cfg)))
    except SourceError as exc:   # every table refused, or the source cannot serve capture: a person acts
        raise AirflowFailException(str(exc)) from None
    finally:
        conn.close()


def doctor(cfg) -> None:
    """Every check of the pipeline's parts; fails the run when one fails, naming what to do."""
    from tideline.ops import doctor as doctor_mod
    checks = doctor_mod.run(cfg, connections.get)
    for line in doctor_mod.format_checks(checks):
        log.info("%s", line)
    refused = [c for c in checks if c.status == "fail" and c.table is not None]
    for c in refused:   # ensure_capture recorded them in their state; the other tables go on
        log.warning("table %s is refused and left out of this run: %s", c.table, c.describe())
    failed = [c for c in checks if c.status == "fail" and c.table is None]
    if failed:
        raise AirflowFailException(f"pipeline {cfg.name}: the doctor found {len(failed)} problem(s): "
                                   + "; ".join(c.describe() for c in failed))


def decide(cfg, checked: dict) -> dict:
    """Per table: full load (never loaded, needs re-snapshot, or asked for) or straight to streaming.
    The state schema is in place (ensure_capture, before it)."""
    conn = state.of_pipeline(cfg, connections.get)
    try:
        phases = {}
        for t in cfg.tables:
            st = state.get(conn, cfg.name, t.name)
            phases[t.name] = TablePhase(st.phase, st.last_error, st.raw.get("phase_before")) if st else TablePhase("new")
        held = {t for t, run in state.latest_streams(conn, cfg.name).items() if run.holds and run.mode == "continuous"}
    finally:
        conn.close()
    plan = plan_tables(cfg, checked["action"], checked["tables"], phases, checked.get("resume_halted", False))
    plan["hand_back"] = hands_back(checked.get("stream_mode", "continuous"), plan["full_load"] + plan["stream"], held)
    if plan["hand_back"]:
        log.warning("%s: a continuous stream holds %s; this available_now run takes them over and, when it has "
                    "applied what Kafka holds, starts a continuous stream again", cfg.name, ", ".join(plan["hand_back"]))
    _pause_and_resume(cfg, plan, checked)
    if plan["resumed"]:
        conn = state.of_pipeline(cfg, connections.get)
        try:
            for table in plan["resumed"]:
                log.warning("%s.%s was HALTED (%s); %s", cfg.name, table, phases[table][1], plan["reasons"][table])
                state.set_phase(conn, cfg.name, table, resumed_phase(plan, table), None)
        finally:
            conn.close()
    for table, why in plan["reasons"].items():
        log.info("%s.%s: %s", cfg.name, table, why)
    notify = alert_sender(cfg)
    for table in plan["resnapshot"]:
        notify(alerts.RESNAPSHOT_STARTED, f"{table}: re-snapshot started automatically — {phases[table][1]}")
    for table in plan["halted"]:
        log.error("%s.%s is HALTED and will not be loaded or streamed until fixed: %s", cfg.name, table,
                  phases[table][1])
    for table in plan["refused"]:
        log.error("%s.%s is REFUSED and will not be loaded or streamed until fixed: %s", cfg.name, table,
                  phases[table][1])
    if not plan["full_load"] and not plan["stream"] and plan["paused"]:
        log.warning("%s: every table that could stream is paused (%s): nothing streams until one is resumed "
                    "(action=resume)", cfg.name, ", ".join(plan["paused"]))
        return plan
    if not plan["full_load"] and not plan["stream"]:
        raise AirflowFailException(f"pipeline {cfg.name}: nothing can run; "
                                   + "; ".join(f"{t} ({phases[t][0]}): {phases[t][1]}"
                                               for t in plan["halted"] + plan["refused"]))
    return plan


def _pause_and_resume(cfg, plan: dict, checked: dict) -> None:
    """Pauses the tables the plan pauses — a new epoch fences the stream that holds them, which
    stops; this run's stream takes the others over — and resumes those it resumes, from their
    own position (the coverage sensor checks Kafka still holds it)."""
    if not plan["pause"] and not plan["unpause"]:
        return
    conn = state.of_pipeline(cfg, connections.get)
    try:
        for table in list(plan["pause"]):
            if not state.park(conn, cfg.name, table, "paused", f"paused by {checked.get('run', 'a person')}",
                              "paused by a person (action=pause): its position is kept; resume it with "
                              "action=resume before Kafka's retention passes it (the watch DAG warns)"):
                log.warning("%s.%s was never loaded: there is nothing to pause (an auto run loads it)", cfg.name,
                            table)
                plan["paused"].remove(table)
                plan["pause"].remove(table)
            else:
                log.warning("%s.%s PAUSED: the stream that held it stops; the other tables stream on", cfg.name,
                            table)
        for table in plan["unpause"]:
            state.set_phase(conn, cfg.name, table, resumed_phase(plan, table), None)
            log.warning("%s.%s %s", cfg.name, table, plan["reasons"][table])
    finally:
        conn.close()


def prepare(pipeline: str, checked: dict) -> dict:
    """The sync run's preparation, in one task: capture in place (ensure_capture), every part
    checked (doctor), then the plan per table (decide). The config is read once for the three."""
    from tideline.ops import lifecycle
    cfg = get_pipeline(pipeline)
    ensure_capture(cfg)   # capture follows the YAML's tables: a table removed from it is no longer captured
    lifecycle.remove_tables(cfg, connections.get, delete_topics=checked["action"] == "remove",
                            drop_target=checked.get("drop_target", False))
    doctor(cfg)
    return decide(cfg, checked)


def branch_after_prepare(plan: dict) -> str | list[str]:
    """full_load, or straight to coverage — or nothing more when every table is paused."""
    if not plan["full_load"] and not plan.get("stream", True):
        return []
    return "full_load" if plan["full_load"] else "coverage"


def branch_after_coverage(result: dict) -> str:
    return "resnapshot" if result and result.get("resnapshot") else "incremental"


def restarts_after_stream(result: dict | None, plan: dict | None = None) -> bool:
    """Run the pipeline again: after a stream that found tables to re-snapshot, or after an
    available_now stream that took tables over from a continuous one (plan["hand_back"])."""
    from tideline.core.errors import EXIT_RESNAPSHOT
    if not result:
        return False
    return result.get("exit") == EXIT_RESNAPSHOT or (result.get("exit") == 0 and bool((plan or {}).get("hand_back")))


def branch_on_action(checked: dict) -> str:
    return {"repair": "repair", "validate": "validate", "decommission": "decommission"}.get(checked["action"],
                                                                                          "prepare")


def decommission(pipeline: str) -> list[str]:
    """The decommission action (ops.lifecycle): what it removed, in words."""
    from tideline.airflow.pipelines import pipelines_dir
    from tideline.ops import lifecycle
    cfg = get_pipeline(pipeline)
    return lifecycle.decommission(cfg, connections.get, config_path=pipelines_dir() / f"{pipeline}.yaml")


def repair(pipeline: str, checked: dict) -> list[dict]:
    from tideline.verify import repair as repair_mod
    cfg = get_pipeline(pipeline)
    source, target = connections.get(cfg.source.conn_id), connections.get(cfg.target.conn_id)
    r = dict(checked["repair"])
    try:
        if r.pop("from_verify", False):
            for table in r.get("not_verified", []):
                log.warning("%s.%s is a batch-mode table: validate does not compare it, so there is nothing "
                            "found to repair (give a key or time range to repair it)", cfg.name, table)
            results = [repair_mod.repair_verified(cfg, source, target, table) for table in r["tables"]]
        else:
            table = r.pop("table")
            results = [repair_mod.repair(cfg, source, target, table, **r)]
    except repair_mod.RepairError as exc:
        raise AirflowFailException(str(exc)) from None
    return [res.__dict__ for res in results]


def verify(pipeline: str, tables: list[str], repair_found: bool = False) -> list[dict]:
    """Source↔target verify of the tables (the validate action; the verify_<pipeline> DAG with
    repair_found from the config). Differences alert and fail the task, unless repaired away."""
    from tideline.verify import compare as verify_mod
    cfg = get_pipeline(pipeline)
    reports = verify_mod.verify_and_repair(
        cfg, connections.get(cfg.source.conn_id), connections.get(cfg.target.conn_id), tables,
        connections.get(cfg.kafka.conn_id).kafka_access, alert_sender(cfg), repair_found)
    different = [r for r in reports if not r.equal]
    if different:
        raise AirflowFailException(f"pipeline {cfg.name}: source and target differ: "
                                   + "; ".join(r.summary() for r in different)
                                   + ". Run the sync DAG with action=repair (re-reads exactly these ranges) or "
                                     "full_reload")
    return [{"table": r.table, "source_rows": r.source_rows, "target_rows": r.target_rows, "equal": r.equal,
             "settled": r.settled, "seconds": round(r.seconds, 1)} for r in reports]


def validate(pipeline: str, checked: dict) -> list[dict]:
    return verify(pipeline, checked["tables"])


def scheduled_verify(pipeline: str) -> list[dict]:
    """The verify_<pipeline> DAG's run: the tables a full load has finished for (one still waiting
    for its first load has nothing to compare yet, which is no failure; none loaded: skipped)."""
    from airflow.sdk.exceptions import AirflowSkipException
    cfg = get_pipeline(pipeline)
    tables = cfg.verify.tables or [t.name for t in cfg.tables if t.mode == "cdc"]
    loaded = loaded_tables(cfg, tables)
    waiting = [t for t in tables if t not in loaded]
    if waiting:
        log.info("%s: %s not loaded yet (no full load has finished): nothing to verify there until the sync DAG "
                 "loads it", cfg.name, ", ".join(waiting))
    if not loaded:
        raise AirflowSkipException(f"pipeline {cfg.name}: no table is loaded yet; run sync_{cfg.name} first")
    return verify(pipeline, loaded, repair_found=cfg.verify.repair)


def loaded_tables(cfg, tables: list[str]) -> list[str]:
    """The tables a full load has finished for and that are not waiting for a reload."""
    conn = state.of_pipeline(cfg, connections.get)
    try:   # paused ones too: verify finds what differs whatever the phase (a halted load: a table the target lacks)
        done = set(ledger.tables_in_phases(conn, cfg.name, tables, ("streaming", "halted", "paused")))
        return [t for t in tables if t in done]
    finally:
        conn.close()


def watch(pipeline: str) -> dict:
    """The watch_<pipeline> DAG's check, running whether the stream runs or not (outside the task
    that can die): alerts when retention headroom is low or already lost, when a table is halted,
    when a stream has committed nothing for alerts.stalled_after_minutes while Kafka holds
    events for it — dead, stuck in retries, failed or never started, it is said — and when the
    pipeline's connector failed (no table receives a change; it would look like a quiet source)."""
    from tideline.ops import in_target
    from tideline.capture import coverage
    cfg = get_pipeline(pipeline)
    conn = state.of_pipeline(cfg, connections.get)
    try:
        state.migrate(conn)
        tables = [t.name for t in cfg.tables if t.mode == "cdc"]
        send = alerts.once_per(conn, cfg, alert_sender(cfg))
        kafka = connections.get(cfg.kafka.conn_id).kafka_access
        checked = coverage.check(cfg, conn, kafka, tables)
        lost = coverage.review(cfg, conn, kafka, tables, send, mark=False, checked=checked)
        pending = {r.table: r.pending for r in checked}
        halted, stalled = [], []
        now = datetime.now(timezone.utc)
        for table in tables:
            st = state.get(conn, cfg.name, table)
            conn.rollback()
            if st is not None and st.phase == "halted":   # waits for a person: said until they act
                halted.append(table)
                send(alerts.TABLE_HALTED, f"{table} is HALTED: {st.last_error}", subject=table)
            elif st is not None and st.phase == "streaming" and table in pending:   # (a paused one waits)
                progress = max((t for t in (st.raw.get("last_batch_at"), st.raw.get("snapshot_at")) if t),
                               default=None)
                idle = watchdog.stalled_for(pending[table], progress, now, cfg.alerts.stalled_after_minutes * 60)
                if idle is not None:
                    stalled.append(table)
                    send(alerts.STREAM_STALLED, watchdog.describe(cfg.name, table, pending[table], idle,
                                                                  st.last_error, st.raw.get("last_error_at")),
                         subject=table)
        missing = in_target.watch(cfg, conn, tables, send, connections.get)
        held = watch_source_hold(cfg, conn, send)
        from tideline.capture.connector import capture_failure
        capture = capture_failure(cfg, connections.get(cfg.connect.conn_id))
        if capture is not None and any(getattr(state.get(conn, cfg.name, t), "phase", None) == "streaming"
                                       for t in tables):
            send(alerts.CAPTURE_FAILED, capture, subject="connector")
        else:
            capture = None
        conn.rollback()
    finally:
        conn.close()
    return {"not_covered": lost, "halted": halted, "stalled": stalled, "capture_failed": capture,
            "source_hold": held, "target_missing": missing}


def watch_source_hold(cfg, conn, send) -> str | None:
    """The watch's look at what capture holds on the source (capture.hold): alerts when it retains
    more than alerts.max_retained_wal_mb, has had no reader for alerts.slot_inactive_minutes, or
    was invalidated. Returns its line (None: no capture, or the source does not answer — the
    stalled-stream alert then says what the stream meets)."""
    from tideline import engines
    from tideline.capture import hold
    from tideline.core import capture_hold
    if not any(t.mode == "cdc" for t in cfg.tables):
        return None
    engine = engines.for_pipeline(cfg, connections.get(cfg.source.conn_id))
    try:
        source = engine.connect(autocommit=True, connect_timeout=10)
    except engine.errors as exc:
        log.warning("%s: what capture holds on the source is not checked: the source does not answer: %s",
                    cfg.name, exc)
        return None
    try:
        found = hold.look(cfg, engine, source, conn, connections.get(cfg.connect.conn_id))
    finally:
        source.close()
    now = datetime.now(timezone.utc)
    for event, message in capture_hold.judge(cfg.name, found, now, cfg.alerts.max_retained_wal_mb,
                                             cfg.alerts.slot_inactive_minutes):
        send(event, message, subject="source")
    return found.line(now)


def _pipeline_of(dag_id: str) -> str:
    """sync_<p>, batch_<p>, verify_<p>, watch_<p> → <p>."""
    return dag_id.split("_", 1)[1]


def on_task_failure(context) -> None:
    """Task failure callback (after the last retry): the pipeline stopped with an error."""
    ti, dag_id = context["ti"], context["dag"].dag_id
    try:
        cfg = get_pipeline(_pipeline_of(dag_id))
    except Exception as exc:  # the config itself is broken: the DAG file's import errors say how
        log.error("ALERT [%s] task %s of %s failed, and its pipeline config cannot be read: %s",
                  alerts.PIPELINE_FAILED, ti.task_id, dag_id, exc)
        return
    error = context.get("exception")
    alert_sender(cfg)(alerts.PIPELINE_FAILED, f"{dag_id} stopped: task {ti.task_id} failed"
                                              + (f": {str(error)[:1500]}" if error else ""))


def on_reload_success(context) -> None:
    """full_load / resnapshot success callback: the automatic re-snapshots it did are finished."""
    ti, dag_id = context["ti"], context["dag"].dag_id
    cfg = get_pipeline(_pipeline_of(dag_id))
    if ti.task_id == "resnapshot":
        tables = (ti.xcom_pull(task_ids="coverage") or {}).get("resnapshot", [])
    else:
        tables = (ti.xcom_pull(task_ids="prepare") or {}).get("resnapshot", [])
    for table in tables:
        alert_sender(cfg)(alerts.RESNAPSHOT_FINISHED, f"{table}: automatic re-snapshot finished; streaming resumes")
