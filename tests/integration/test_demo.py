"""`make demo`'s own path, on the real stack: it starts the supervised workload, triggers the demo
pipelines (PostgreSQL and MariaDB into PostgreSQL, PostgreSQL into Iceberg) through Airflow and returns 0 once its readiness rule sees every table caught up — so
the README's first command cannot break again unnoticed."""
from __future__ import annotations

import time

import pytest

import stackctl
from helpers import seed_demo

pytestmark = pytest.mark.integration


def _stop_runs(dag_id: str) -> None:
    for run in stackctl.airflow_api("GET", f"dags/{dag_id}/dagRuns?state=running&state=queued")["dag_runs"]:
        stackctl.airflow_api("PATCH", f"dags/{dag_id}/dagRuns/{run['dag_run_id']}", {"state": "failed"})


def test_make_demo_catches_up_with_both_sources_and_the_lake_and_its_workload_is_supervised(stack, source_db):
    import demo
    seed_demo(source_db)   # small: the demo itself seeds 10,000 orders on a fresh stack
    for dag_id in demo.DAGS:
        _stop_runs(dag_id)   # the demo starts its own
    try:
        assert demo.main() == 0
        assert stack.supervised_state("workload") == "RUNNING"
        before = stack.supervised_pid("workload")
        stack.supervisorctl("signal", "KILL", "workload")   # dies like a connection lost in a restart
        deadline = time.time() + 60
        while stack.supervised_pid("workload") in (None, before):
            assert time.time() < deadline, "the supervisor did not start the workload again"
            time.sleep(1)
    finally:
        stack.supervisorctl("stop", "workload")
        for dag_id in demo.DAGS:
            _stop_runs(dag_id)
