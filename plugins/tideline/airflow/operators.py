"""Tideline's Airflow operators and sensor. Clients are created in execute()/poke(), never at parse time."""
from __future__ import annotations

import os
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.standard.operators.branch import BranchMixIn
from airflow.providers.standard.operators.python import PythonOperator
from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from tideline import HOME, JOBS, LIBRARY_PATH
from tideline.core import errors


# What each exit status of a Spark entrypoint means to the DAG (see spark_jobs/*.py).
_TERMINAL = {
    errors.EXIT_CONFIG: "a config, source or target problem that a person must fix",
    errors.EXIT_VERIFICATION: "the loaded rows did not match the snapshot; nothing was swapped in",
    errors.EXIT_HALTED: "tables halted (a change the target refuses, a schema change or a bad message); a person "
                        "must act",
}


class Follows(BranchMixIn):
    """A task that hands on its result (its XCom, as any task's) and then follows the downstream
    task(s) `follow(result)` names, skipping the others, as a branch does: one task start where a
    task and a branch after it took two (a task start costs ~2 s on the local stack). A class
    using it sets `inherits_from_skipmixin = True` itself (BaseOperator's property comes first):
    it tells the scheduler the task may skip its downstream."""

    def _follow(self, context, result):
        # do_branch ends the task by raising when it skips a task, before a return value is pushed
        context["ti"].xcom_push(key="return_value", value=result)
        self.do_branch(context, self.follow(result))
        return result


class BranchingPythonOperator(PythonOperator, Follows):
    """A PythonOperator whose result also picks the task(s) that follow (see Follows)."""
    inherits_from_skipmixin = True

    def __init__(self, *, follow, **kwargs: Any):
        super().__init__(**kwargs)
        self.follow = follow

    def execute(self, context):
        return self._follow(context, super().execute(context))


class RestartOperator(TriggerDagRunOperator):
    """Starts a new run of a DAG when `when(context)` says so, and is skipped otherwise: a task
    start less than a branch task before it."""

    def __init__(self, *, when, **kwargs: Any):
        super().__init__(**kwargs)
        self.when = when

    def execute(self, context):
        if not self.when(context):
            raise AirflowSkipException("nothing to restart for: the stream ended as planned")
        return super().execute(context)


class TidelineSparkSubmitOperator(SparkSubmitOperator):
    """SparkSubmitOperator for Tideline's jobs: hands the pipeline's Airflow connections to the job,
    and turns the job's documented exit statuses into Airflow outcomes. Returns {"exit": status}
    (0, or EXIT_RESNAPSHOT, which the DAG answers by reloading).

    With `keep_alive_for` (a pipeline's name: its stream task) a failure that is not a person's to
    fix never ends the task: it waits for the parts that do not answer and submits again, for as
    long as it takes (core.keep_alive), and says so in the state (status, the view, the metrics)."""

    def __init__(self, *, pipeline_conn_ids: list[str], job: str, full_load_of: tuple[str, str] | None = None,
                 keep_alive_for: str | None = None, **kwargs: Any):
        kwargs.setdefault("application", str(JOBS / job))
        kwargs.setdefault("jars", os.environ.get("TIDELINE_SPARK_JARS", ""))
        # env_vars: the job kind's memory settings (SparkSettings.job_env), given by the DAG
        env = {"PYTHONPATH": os.pathsep.join([str(LIBRARY_PATH), str(HOME)]),
               **(kwargs.pop("env_vars", None) or {})}
        super().__init__(env_vars=env, **kwargs)
        self.pipeline_conn_ids = pipeline_conn_ids
        self.full_load_of = full_load_of   # a full load's (source conn_id, target kind)
        self.keep_alive_for = keep_alive_for

    def execute(self, context) -> dict:
        return self._keep_alive(context) if self.keep_alive_for else self._submit(context)

    def _keep_alive(self, context) -> dict:
        """Submits the job until it ends as planned or for a reason a person must fix (core.keep_alive)."""
        import time
        from dataclasses import replace
        from datetime import datetime, timezone

        from tideline.airflow import connections
        from tideline.airflow.pipelines import get_pipeline
        from tideline.core import keep_alive
        from tideline.ops.doctor import unanswered
        episode = None
        while True:
            started = time.monotonic()
            try:
                return self._submit(context)
            except (AirflowSkipException, AirflowFailException):
                raise
            except AirflowException as exc:
                error = str(exc)
            cfg = get_pipeline(self.keep_alive_for)
            verdict = keep_alive.after_failure(episode, time.monotonic() - started, datetime.now(timezone.utc),
                                               unanswered(cfg, connections.get), error)
            episode = verdict.episode
            if verdict.action == "give_up":
                raise AirflowFailException(f"{self.task_id}: {verdict.reason}")
            self.log.warning("%s: %s — %s", cfg.name, verdict.reason, episode.describe())
            self._record_wait(cfg, episode)
            if verdict.action == "retry":
                time.sleep(verdict.delay_s)
                continue
            while episode.waiting_for:   # look again until every part answers, then submit at once
                time.sleep(verdict.delay_s)
                parts = unanswered(cfg, connections.get)
                if parts != list(episode.waiting_for):
                    episode = replace(episode, waiting_for=tuple(parts))
                    self.log.warning("%s: %s", cfg.name, episode.describe() if parts else
                                     "every part answers again: submitting the job again")
                self._record_wait(cfg, episode)

    def _record_wait(self, cfg, episode) -> None:
        """The wait in the state, for status, the view and the metrics; while the state database is
        itself away, only in this task's log (status then says the target does not answer)."""
        from tideline import state
        from tideline.airflow import connections
        try:
            conn = state.of_pipeline(cfg, connections.get, connect_timeout=10)
        except state.ERRORS as exc:
            self.log.warning("the wait is not recorded in the state (its database does not answer: %s)",
                             str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
            return
        try:
            state.record_wait(conn, cfg.name, episode.what, episode.since, episode.tries, episode.last_error,
                              f"{self.dag_id}.{self.task_id}")
        except state.ERRORS as exc:
            self.log.warning("the wait is not recorded in the state: %s", exc)
        finally:
            conn.close()

    def _submit(self, context) -> dict:
        import tempfile

        from tideline.airflow.connections import spark_env
        from tideline.airflow.pipelines import pipelines_dir
        from tideline.entrypoints import ERROR_FILE_ENV, error_file_dir
        from tideline.packaging import library_zip
        from tideline.spark_session import driver_address, driver_conf
        with tempfile.NamedTemporaryFile(prefix="error-", suffix=".txt", dir=error_file_dir()) as error_file:
            self.env_vars = {**(self.env_vars or {}), **spark_env(self.pipeline_conn_ids),
                             # the driver imports Tideline from the shipped zip, so it is told where
                             # this host keeps the pipeline configs
                             "TIDELINE_PIPELINES": str(pipelines_dir()), ERROR_FILE_ENV: error_file.name}
            # executors import Tideline from the shipped library, never from this host's checkout
            self.py_files = str(library_zip())
            if self.full_load_of is not None:   # its driver JVM, by where the rows go
                from tideline.core.connections import get_connection
                from tideline.load.full_load import piped_load_conf
                source_conn_id, target_kind = self.full_load_of
                self.conf = {**piped_load_conf(get_connection(source_conn_id, self.env_vars), target_kind),
                             **(self.conf or {})}
            # what the host that starts the driver adds (its class archive, its driver jar)
            self.conf = driver_conf({**driver_address(), **(self.conf or {})})
            if self._hook is not None:
                self._hook._env_vars, self._hook._py_files, self._hook._conf = self.env_vars, self.py_files, self.conf
            try:
                super().execute(context)
                return {"exit": 0}
            except AirflowException as exc:
                why = open(error_file.name).read().strip()
                return self._outcome(exc, why)

    def _outcome(self, exc: AirflowException, why: str) -> dict:
        """The job's exit status as an Airflow outcome, carrying the job's own error message."""
        code = getattr(getattr(self._hook, "_submit_sp", None), "returncode", None)
        if code == errors.EXIT_RESNAPSHOT:
            self.log.warning("the job reports tables that need a re-snapshot (exit %d); the DAG reloads them", code)
            return {"exit": code}
        if code == errors.EXIT_FENCED:
            # The designed handover (a full reload or a newer run took the tables): not a failure.
            raise AirflowSkipException(f"{self.task_id}: a newer run took over these tables (fenced); this "
                                       f"run committed nothing after that and stopped") from exc
        if code in _TERMINAL:
            raise AirflowFailException(f"{self.task_id}: exit status {code}: {_TERMINAL[code]}: "
                                       f"{why or 'the task log above has the details'}") from exc
        if code is not None and code < 0:
            why = why or f"the job was killed (signal {-code})"
        raise AirflowException(f"{self.task_id}: exit status {code}: "
                               f"{why or 'the job ended without saying why (the task log above has its output)'}") from exc


def alert_sender(cfg):
    """notify(event, message) for this pipeline, resolving its webhook through Airflow."""
    from tideline import alerts
    from tideline.airflow import connections
    return lambda event, message, subject="": alerts.notify(cfg, event, message, resolve=connections.get)


class CoverageSensor(BaseSensorOperator, Follows):
    """Passes once it knows, for every streaming table, whether Kafka still holds every offset the
    stream must resume from. Covered tables: logs pending events and retention headroom. Not
    covered: records why in the state (phase needs_resnapshot) and returns the tables, which the
    DAG reloads by itself (`follow` picks the task after it from that). Keeps poking while Kafka
    cannot be asked."""
    inherits_from_skipmixin = True

    def __init__(self, *, pipeline: str, plan_task_id: str, follow, **kwargs: Any):
        kwargs.setdefault("poke_interval", 10)
        kwargs.setdefault("timeout", 600)
        kwargs.setdefault("mode", "reschedule")  # frees its worker slot between pokes
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.plan_task_id = plan_task_id
        self.follow = follow

    def execute(self, context):
        return self._follow(context, super().execute(context))

    def poke(self, context):
        from airflow.sdk import PokeReturnValue

        from tideline import state
        from tideline.capture import coverage
        from tideline.airflow import connections
        from tideline.airflow.pipelines import get_pipeline
        cfg = get_pipeline(self.pipeline)
        plan = context["ti"].xcom_pull(task_ids=self.plan_task_id) or {}
        tables = (plan.get("stream", []) + plan.get("full_load", [])) or [t.name for t in cfg.tables
                                                                           if t.mode == "cdc"]
        tables += [t for t in plan.get("paused", []) if t not in tables]   # warned when retention nears them
        try:
            kafka = connections.get(cfg.kafka.conn_id).kafka_access
            conn = state.of_pipeline(cfg, connections.get)
        except errors.TransientError as exc:
            self.log.warning("cannot check coverage yet: %s", exc)
            return False
        try:
            try:
                lost = coverage.review(cfg, conn, kafka, tables, alert_sender(cfg))
            except errors.TransientError as exc:
                self.log.warning("cannot check coverage yet: %s", exc)
                return False
        finally:
            conn.close()
        return PokeReturnValue(is_done=True, xcom_value={"resnapshot": lost})

