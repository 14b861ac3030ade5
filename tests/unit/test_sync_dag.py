"""The sync DAG's shape, from a pipeline config: no database or network at parse time, and the
tasks that pick what follows them are followed by exactly the tasks they can pick."""
from pathlib import Path

import pytest

from tideline.core.config import load_pipeline

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dag():
    from tideline.airflow.dag_factory import build_sync_dag
    return build_sync_dag(load_pipeline(ROOT / "pipelines" / "demo.yaml"))


def downstream(dag, task_id: str) -> set[str]:
    return set(dag.get_task(task_id).downstream_task_ids)


def test_the_run_goes_params_prepare_load_coverage_stream(dag):
    assert set(dag.task_ids) == {"check_params", "repair", "validate", "decommission", "prepare", "full_load",
                                 "coverage", "resnapshot", "incremental", "restart"}
    assert downstream(dag, "check_params") == {"prepare", "repair", "validate", "decommission"}
    assert downstream(dag, "prepare") == {"full_load", "coverage"}
    assert downstream(dag, "full_load") == {"coverage"}
    assert downstream(dag, "coverage") == {"incremental", "resnapshot"}
    assert downstream(dag, "resnapshot") == {"incremental"}
    assert downstream(dag, "incremental") == {"restart"}


def test_each_choosing_task_names_only_tasks_right_after_it(dag):
    from tideline.airflow import tasks
    from tideline.core.errors import EXIT_RESNAPSHOT
    choices = {
        "check_params": [tasks.branch_on_action({"action": a})
                         for a in ("auto", "full_reload", "repair", "validate", "pause", "resume", "remove", "decommission")],
        "prepare": [tasks.branch_after_prepare({"full_load": f}) for f in ([], ["orders"])],
        "coverage": [tasks.branch_after_coverage(r) for r in ({"resnapshot": []}, {"resnapshot": ["orders"]}, None)],
    }
    for task_id, picked in choices.items():
        assert set(picked) == downstream(dag, task_id), task_id
        assert dag.get_task(task_id).inherits_from_skipmixin, task_id   # the scheduler is told it skips
    # a restart only after a re-snapshot's exit, or a run that hands tables back to a continuous stream
    assert tasks.restarts_after_stream({"exit": EXIT_RESNAPSHOT})
    assert not tasks.restarts_after_stream({"exit": 0}) and not tasks.restarts_after_stream(None)
    assert tasks.restarts_after_stream({"exit": 0}, {"hand_back": ["orders"]})


def test_the_plan_reaches_the_load_and_the_sensor(dag):
    assert "task_ids='prepare'" in " ".join(dag.get_task("full_load").application_args)
    assert dag.get_task("coverage").plan_task_id == "prepare"
    assert dag.get_task("prepare").retries == 2 and dag.get_task("check_params").retries == 0
