"""Builds each pipeline's DAGs from its validated config. No database or network at parse time.

sync_<pipeline>:  check_params ─┬→ repair | validate
                                └→ prepare ─┬→ full_load ─┐
                                            └─────────────┴→ coverage ─┬→ incremental → restart
                                                                       └→ resnapshot ──┘
`check_params`, `prepare` and `coverage` each pick the task(s) after them themselves (operators.Follows),
and `restart` skips itself when there is nothing to restart for: a task start less each than a
branch task. `prepare` puts capture in place
(topics, publication, connector, slot; it recovers a lost replication slot, marking its tables
for a re-snapshot), runs the doctor (the run fails on a broken part, naming the fix) and plans
each table. `coverage` records lost offsets and hands the tables to `resnapshot`; `incremental`
ending with the re-snapshot status makes `restart` start a new run of this DAG without
waiting for it (no self-trigger with wait_for_completion, which would deadlock under
max_active_runs). So does an available_now run that took tables over from a continuous stream
(`prepare` notes it): the new run streams them continuously again. Every task's final failure,
each automatic re-snapshot (start and finish) and low retention headroom raise alerts.

verify_<pipeline> (on the config's verify.schedule, nightly by default): verify source against
target by key-range bisection; differences alert, and are repaired when verify.repair is set.
"""
from __future__ import annotations

import pendulum
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, CronDataIntervalTimetable, Param
from airflow.sdk.exceptions import AirflowSkipException

from tideline.airflow import tasks
from tideline.airflow.operators import (BranchingPythonOperator, CoverageSensor, RestartOperator,
                                       TidelineSparkSubmitOperator)
from tideline.core.config import PipelineConfig
from tideline.core.params import STREAM_MODES, actions

START = pendulum.datetime(2026, 1, 1, tz="UTC")
NONE_FAILED = "none_failed_min_one_success"
STREAM_TASK_RETRIES = 100_000   # the stream task's own process dying, e.g. with its host: for good


def spark_submission(cfg: PipelineConfig, kind: str) -> dict:
    """How the DAG submits a Spark job of one kind (load | stream | batch): the pipeline's Spark
    connection and Airflow connections, the kind's Spark settings and memory environment. The
    integration tests submit their jobs with it too, so they run the JVM the DAG runs."""
    from tideline import targets
    target = targets.spec(cfg.target.kind)   # read without importing the target's client
    jars, packages = target.spark_jars_and_packages()   # jar files a host names, else Maven coordinates
    return dict(conn_id=cfg.spark.conn_id, pipeline_conn_ids=cfg.job_conn_ids,
                conf=cfg.job_conf(kind, writes_in_jvm=target.capabilities.writes_in_jvm),
                env_vars=cfg.spark.job_env(kind), jars=jars, packages=packages or None)


def _submit_full_load(cfg: PipelineConfig) -> dict:
    """A full load's submission: a load's, and where its rows go (its driver JVM is sized by that).
    Kept alive as the stream is (core.keep_alive): a re-snapshot whose driver is killed, or whose
    source or target restarts, two or three times in a row, must not end the pipeline's stream for
    good — a fixed count of retries did, under faults that overlap (the chaos soak's third run)."""
    return dict(spark_submission(cfg, "load"), full_load_of=(cfg.source.conn_id, cfg.target.kind), **_kept_alive(cfg))


def _kept_alive(cfg: PipelineConfig) -> dict:
    """The task outlives any outage and a killed driver itself (core.keep_alive): it fails only for
    what a person must fix. Airflow's retries are for the task's own process dying (its scheduler
    or host killed): soon and evenly, as often as that happens."""
    return dict(keep_alive_for=cfg.name, retries=STREAM_TASK_RETRIES, retry_delay=pendulum.duration(seconds=5),
                retry_exponential_backoff=False)


def _default_args() -> dict:
    return {"retries": 2, "retry_delay": pendulum.duration(seconds=30), "retry_exponential_backoff": True,
            "on_failure_callback": tasks.on_task_failure}


def build_sync_dag(cfg: PipelineConfig) -> DAG:
    table_names = [t.name for t in cfg.tables]
    with DAG(
        dag_id=f"sync_{cfg.name}",
        description=f"Tideline: keep {cfg.target.schema_} in sync with {cfg.source.schema_} "
                    f"({', '.join(table_names)}) — full load, then change stream",
        doc_md=__doc__,
        schedule=None,
        start_date=START,
        catchup=False,
        # A second run may start (a full reload, or the restart after a re-snapshot): it claims
        # newer fencing epochs, and the older stream stops itself at its next batch.
        max_active_runs=2,
        tags=["tideline", cfg.name],
        default_args=_default_args(),
        params={
            "action": Param("auto", enum=list(actions(cfg)), title="Action",
                            description="auto: load what needs loading, then stream. full_reload: reload the "
                                        "chosen tables from a new snapshot, then stream. repair: re-read from the "
                                        "source what the last validate found different (or the key / update-time "
                                        "range given below, one table); the stream keeps its position. validate: "
                                        "compare source and target by key ranges, down to the differing rows. pause: stop "
                                        "applying the chosen tables (they keep their position; the others stream "
                                        "on). resume: stream paused tables again from their position. remove: "
                                        "delete the topics of tables removed from the YAML at once (any run stops "
                                        "their capture; drop_target drops their target tables). "
                                        "decommission: remove the pipeline for good (connector, slot, topics, "
                                        "state, DAGs; the target tables stay): type its name in confirm."),
            "tables": Param(table_names, type="array", items={"type": "string", "enum": table_names},
                            title="Tables", description="Tables the action applies to (default: all)"),
            "stream_mode": Param("continuous", enum=list(STREAM_MODES), title="Stream mode",
                                 description="continuous: keep streaming. available_now: apply what Kafka "
                                             "holds, then finish the run."),
            "resume_halted": Param(True, type="boolean", title="Resume halted tables",
                                   description="Halted tables (see make status) are taken up again once what "
                                               "their error names is fixed: streamed from their own offsets, or "
                                               "loaded again if they halted during their load."),
            "drop_target": Param(False, type="boolean", title="Remove: drop target tables",
                                 description="with action=remove: drop the target tables of the tables removed "
                                             "from the YAML too (by default they stay)"),
            "confirm": Param(None, type=["null", "string"], title="Decommission: confirm",
                             description=f"action=decommission removes this pipeline for good: type its name "
                                         f"({cfg.name}) here to confirm"),
            "repair_key_from": Param(None, type=["null", "string"], title="Repair: key from",
                                     description="first primary-key value of the range (one-column keys)"),
            "repair_key_to": Param(None, type=["null", "string"], title="Repair: key to",
                                   description="last primary-key value of the range (inclusive)"),
            "repair_time_column": Param(None, type=["null", "string"], title="Repair: time column",
                                        description="update-time column, for a time-range repair"),
            "repair_time_from": Param(None, type=["null", "string"], title="Repair: from (ISO 8601)"),
            "repair_time_to": Param(None, type=["null", "string"], title="Repair: to (ISO 8601)"),
        },
    ) as dag:
        checked = BranchingPythonOperator(task_id="check_params", python_callable=_check_params_from_context,
                                          op_kwargs={"pipeline": cfg.name}, follow=tasks.branch_on_action, retries=0)
        if cfg.supports("verify"):   # repair and validate: only where the pair's verify is built (core.support)
            repair = PythonOperator(task_id="repair", python_callable=_repair_from_xcom, op_kwargs={"pipeline": cfg.name},
                                    retries=0)
            validate = PythonOperator(task_id="validate", python_callable=_validate_from_xcom,
                                      op_kwargs={"pipeline": cfg.name}, retries=0)
        decommission = PythonOperator(task_id="decommission", python_callable=tasks.decommission,
                                      op_kwargs={"pipeline": cfg.name}, retries=1)
        # retried when a part is briefly away (Connect restarting); a broken part fails it at once
        prepare = BranchingPythonOperator(task_id="prepare", python_callable=_prepare_from_xcom,
                                          op_kwargs={"pipeline": cfg.name}, follow=tasks.branch_after_prepare)
        full_load = TidelineSparkSubmitOperator(
            task_id="full_load", job="full_load.py", name=f"tideline-full-load-{cfg.name}",
            application_args=["--pipeline", cfg.name, "--tables",
                              "{{ ti.xcom_pull(task_ids='prepare')['full_load'] | join(',') }}"],
            on_success_callback=tasks.on_reload_success, **_submit_full_load(cfg))
        coverage = CoverageSensor(task_id="coverage", pipeline=cfg.name, plan_task_id="prepare",
                                  follow=tasks.branch_after_coverage, trigger_rule=NONE_FAILED)
        resnapshot = TidelineSparkSubmitOperator(
            task_id="resnapshot", job="full_load.py", name=f"tideline-resnapshot-{cfg.name}",
            application_args=["--pipeline", cfg.name, "--tables",
                              "{{ ti.xcom_pull(task_ids='coverage')['resnapshot'] | join(',') }}"],
            on_success_callback=tasks.on_reload_success, **_submit_full_load(cfg))
        incremental = TidelineSparkSubmitOperator(
            task_id="incremental", job="incremental.py", name=f"tideline-incremental-{cfg.name}",
            application_args=["--pipeline", cfg.name, "--mode", "{{ params.stream_mode }}"],
            trigger_rule=NONE_FAILED, **_kept_alive(cfg), **spark_submission(cfg, "stream"))
        # a re-snapshot's run in this run's mode; after an available_now run that took tables over
        # from a continuous stream, a continuous one again (tasks.restarts_after_stream)
        restart = RestartOperator(
            task_id="restart", trigger_dag_id=f"sync_{cfg.name}", when=_restarts_after_stream,
            conf={"action": "auto", "resume_halted": False,
                  "stream_mode": "{{ 'continuous' if (ti.xcom_pull(task_ids='prepare') or {}).get('hand_back') "
                                 "else params.stream_mode }}"},
            wait_for_completion=False)
        checked >> ([prepare, repair, validate, decommission] if cfg.supports("verify") else [prepare, decommission])
        prepare >> [full_load, coverage]
        full_load >> coverage >> [incremental, resnapshot]
        resnapshot >> incremental >> restart
    return dag


def build_batch_dag(cfg: PipelineConfig) -> DAG:
    """batch_<pipeline>: each scheduled interval lands the batch-mode tables' rows whose cursor falls
    in it. Idempotent per interval, so Airflow's backfill over a date range just works."""
    batch_tables = [t.name for t in cfg.tables if t.mode == "batch"]
    with DAG(
        dag_id=f"batch_{cfg.name}",
        description=f"Tideline batch sync of {', '.join(batch_tables)} (cursor columns, per data interval)",
        # Data intervals (not trigger times): each run owns [start, end) of the cursor.
        schedule=CronDataIntervalTimetable(cfg.batch_schedule, timezone="UTC"),
        start_date=START,
        catchup=False,
        max_active_runs=1,   # intervals advance one cursor: one at a time
        tags=["tideline", cfg.name, "batch"],
        default_args=_default_args(),
    ) as dag:
        TidelineSparkSubmitOperator(
            task_id="batch_sync", job="batch_sync.py", name=f"tideline-batch-{cfg.name}",
            application_args=["--pipeline", cfg.name, "--start", "{{ data_interval_start.isoformat() }}",
                              "--end", "{{ data_interval_end.isoformat() }}"],
            **spark_submission(cfg, "batch"))
    return dag


def build_maintenance_dag(cfg: PipelineConfig) -> DAG:
    """maintain_<pipeline> (a target whose commits add files, e.g. Iceberg; on maintenance.schedule,
    nightly by default, and triggerable): compaction, snapshot expiry, orphan files, per table."""
    table_names = [t.name for t in cfg.tables]
    with DAG(dag_id=f"maintain_{cfg.name}",
             description=f"Tideline: compact {', '.join(table_names)} and expire old snapshots and files",
             doc_md=__doc__, schedule=cfg.maintenance.schedule, start_date=START, catchup=False, max_active_runs=1,
             tags=["tideline", cfg.name, "maintenance"], default_args={**_default_args(), "retries": 1},
             params={"tables": Param(table_names, type="array", items={"type": "string", "enum": table_names},
                                     title="Tables", description="Tables to maintain (default: all)")}) as dag:
        TidelineSparkSubmitOperator(
            task_id="maintain", job="maintain.py", name=f"tideline-maintain-{cfg.name}",
            application_args=["--pipeline", cfg.name, "--tables", "{{ params.tables | join(',') }}"],
            **spark_submission(cfg, "load"))
    return dag


def _one_task_dag(cfg: PipelineConfig, kind: str, description: str, schedule, task_id: str, python_callable,
                  retries: int) -> DAG:
    """<kind>_<pipeline>: one scheduled Python task, one run at a time, no catch-up."""
    with DAG(dag_id=f"{kind}_{cfg.name}", description=description, doc_md=__doc__, schedule=schedule,
             start_date=START, catchup=False, max_active_runs=1, tags=["tideline", cfg.name, kind],
             default_args={**_default_args(), "retries": retries}) as dag:
        PythonOperator(task_id=task_id, python_callable=python_callable, op_kwargs={"pipeline": cfg.name})
    return dag


def build_verify_dag(cfg: PipelineConfig) -> DAG:
    """verify_<pipeline>: the scheduled source↔target verify (the sync DAG's validate, on a clock)."""
    tables = cfg.verify.tables or [t.name for t in cfg.tables if t.mode == "cdc"]
    return _one_task_dag(cfg, "verify", f"Tideline: verify {', '.join(tables)} against the source"
                         + (" and repair what differs" if cfg.verify.repair else ""),
                         cfg.verify.schedule, "verify", tasks.scheduled_verify, retries=0)


def build_watch_dag(cfg: PipelineConfig) -> DAG:
    """watch_<pipeline>: every alerts.check_every_minutes, for every cdc table — stream running or
    not — retention headroom (alert below the threshold or gone), halted tables, and streams
    that committed nothing for alerts.stalled_after_minutes while events wait (the watchdog)."""
    return _one_task_dag(cfg, "watch", f"Tideline: headroom, halted and stalled streams of {cfg.name} (alerts only)",
                         pendulum.duration(minutes=cfg.alerts.check_every_minutes), "headroom", tasks.watch,
                         retries=1)


def _check_params_from_context(pipeline: str, **context) -> dict:
    return tasks.check_params(pipeline, dict(context["params"]))


def _repair_from_xcom(pipeline: str, **context) -> list[dict]:
    return tasks.repair(pipeline, context["ti"].xcom_pull(task_ids="check_params"))


def _validate_from_xcom(pipeline: str, **context) -> list[dict]:
    return tasks.validate(pipeline, context["ti"].xcom_pull(task_ids="check_params"))


def _prepare_from_xcom(pipeline: str, **context) -> dict:
    ti = context["ti"]
    # A run started before this DAG had a prepare task (Tideline upgraded under it) is given one by
    # the scheduler once its tasks are past it: it must not plan (resume, alert) a second time.
    later = ti.get_task_states(dag_id=ti.dag_id, task_ids=["coverage"], run_ids=[ti.run_id]).get(ti.run_id, {})
    if later.get("coverage") not in (None, "none", "removed"):
        raise AirflowSkipException(f"this run is past its preparation (coverage: {later['coverage']}), so it is not "
                                   f"prepared again; to redo it, clear coverage and the tasks after it too, or "
                                   f"trigger a new run")
    return tasks.prepare(pipeline, ti.xcom_pull(task_ids="check_params"))


def _restarts_after_stream(context) -> bool:
    return tasks.restarts_after_stream(context["ti"].xcom_pull(task_ids="incremental"),
                                     context["ti"].xcom_pull(task_ids="prepare"))
