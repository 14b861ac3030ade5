"""The view's pure parts: windows, links into Airflow, load rates, the metrics text, the run's
Airflow task from its environment."""
from datetime import datetime, timezone

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tideline.state import airflow_task
from tideline.ops.status import TableStatus
from tideline.view import history, metrics
from tideline.view.overview import PipelineOverview


def test_windows_are_the_three_offered_and_anything_else_is_refused_by_name():
    assert history.window("1h") == (3600, 60)
    assert history.window("7d")[0] == 7 * 86400
    with pytest.raises(ValueError, match="'2h' is not one of 1h, 24h, 7d"):
        history.window("2h")


def test_links_point_at_the_dag_run_and_the_task_log_of_the_try_with_ids_escaped():
    links = history.airflow_links({"dag_id": "sync_demo", "dag_run_id": "manual__2026-11-23T10:00:00+00:00",
                                   "task_id": "full_load", "try_number": "2"})
    assert links == {"dag_run": "dags/sync_demo/runs/manual__2026-11-23T10%3A00%3A00%2B00%3A00",
                     "task_log": "dags/sync_demo/runs/manual__2026-11-23T10%3A00%3A00%2B00%3A00/tasks/full_load"
                                 "?try_number=2"}
    assert history.airflow_links(None) is None
    assert history.airflow_links({"dag_id": "x"}) is None


def test_a_run_knows_its_airflow_task_only_inside_one():
    env = {"AIRFLOW_CTX_DAG_ID": "sync_demo", "AIRFLOW_CTX_DAG_RUN_ID": "r1", "AIRFLOW_CTX_TASK_ID": "incremental",
           "AIRFLOW_CTX_TRY_NUMBER": "3"}
    assert airflow_task(env) == {"dag_id": "sync_demo", "dag_run_id": "r1", "task_id": "incremental", "try_number": "3"}
    assert airflow_task({}) is None
    assert airflow_task({"AIRFLOW_CTX_DAG_ID": "sync_demo"}) is None


def test_load_rates_are_per_run_between_consecutive_samples():
    s = [{"run_id": 1, "at": "2026-11-23T10:00:00+00:00", "rows": 0},
         {"run_id": 1, "at": "2026-11-23T10:00:05+00:00", "rows": 500_000},
         {"run_id": 2, "at": "2026-11-23T10:00:06+00:00", "rows": 10},
         {"run_id": 2, "at": "2026-11-23T10:00:06+00:00", "rows": 20}]
    assert [r["rows_per_s"] for r in history.load_rates(s)] == [None, 100_000.0, None, None]


def _table(**kw):
    base = dict(table="orders", phase="streaming", epoch=4, target_rows=1200, source_rows=1201, last_batch="#9 3s ago",
                lag={0: 3, 1: 0}, headroom="6.9 days", error=None, last_batch_age_s=3.0, headroom_s=600000.0,
                lag_s=2.5, last_batch_s=1.25, events_applied=5000, verify_outcome="failed",
                verify_counts={"missing": 2, "extra": 0, "different": 1})
    return TableStatus(**{**base, **kw})


def test_metrics_text_parses_and_carries_each_documented_metric_with_its_labels():
    ok = PipelineOverview("demo", "ok", headroom_alert_s=43200, tables=[
        _table(), _table(table="halted_one", phase="halted", lag={}, headroom_s=None, lag_s=None, verify_outcome=None,
                         covered=True, last_batch_s=None, error="demo.halted_one: refused", events_applied=0),
        _table(table="loading_one", phase="loading", load_rows=4200, load_rows_per_s=840.0)])
    down = PipelineOverview("other", "timeout", error="no answer")
    text = metrics.render([ok, down]).decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert set(fams) == set(metrics.METRICS)
    val = lambda name, **labels: [s.value for s in fams[name].samples   # noqa: E731
                                  if all(s.labels.get(k) == v for k, v in labels.items())
                                  and not s.name.endswith("_created")]
    assert val("tideline_pipeline_up", pipeline="demo") == [1.0]
    assert val("tideline_pipeline_up", pipeline="other") == [0.0]
    assert val("tideline_table_phase", table="halted_one", phase="halted") == [1.0]
    assert sum(val("tideline_table_phase", table="halted_one")) == 1.0
    assert val("tideline_lag_events", table="orders", partition="0") == [3.0]
    assert val("tideline_retention_headroom_seconds", table="orders") == [600000.0]
    assert val("tideline_retention_headroom_seconds", table="halted_one") == []
    assert val("tideline_events_applied", table="orders") == [5000.0]
    assert val("tideline_verify_differences", table="orders", kind="missing") == [2.0]
    assert val("tideline_verify_equal", table="orders") == [0.0]
    assert val("tideline_last_batch_duration_seconds", table="orders") == [1.25]
    assert val("tideline_load_rows", table="orders") == [0.0]
    assert val("tideline_load_rows", table="loading_one") == [4200.0]
    assert fams["tideline_events_applied"].type == "counter"


def test_overview_json_has_partition_keys_as_text_and_the_total():
    p = PipelineOverview("demo", "ok", tables=[_table(error_at=datetime(2026, 11, 23, tzinfo=timezone.utc))])
    t = p.as_json()["tables"][0]
    assert t["lag"] == {"0": 3, "1": 0} and t["lag_total"] == 3 and t["error_at"] == "2026-11-23T00:00:00+00:00"
