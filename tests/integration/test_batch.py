"""Batch mode against the real stack: intervals, idempotent re-runs, the safety lag, and Airflow's
backfill through the running scheduler."""
from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pendulum
import pytest

import stackctl
from helpers import table_digest
from tideline import state
from tideline.load.batch import BatchSync

pytestmark = pytest.mark.integration
ROOT = stackctl.ROOT
DAY = timedelta(days=1)


def make_events(source_db, table: str, day0: datetime):
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{table} (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, "
                    f"v text, amount numeric(10,2))")
        # 100 rows per day over three days, one every 14.4 minutes
        cur.execute(f"INSERT INTO public.{table} SELECT g, %s::timestamptz + (g - 1) * interval '864 seconds', "
                    f"'v' || g, g / 4.0 FROM generate_series(1, 300) g", (day0,))


def target_ids(target_db, schema, table) -> list[int]:
    with target_db.cursor() as cur:
        cur.execute(f'SELECT id FROM "{schema}".{table} ORDER BY id')
        return [r[0] for r in cur.fetchall()]


def test_intervals_rerun_and_safety_lag(spark, source_db, target_db, pipelines, unique_name):
    t = f"{unique_name}_ev"
    day0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
    make_events(source_db, t, day0)
    try:
        cfg = pipelines.make([{"name": t, "mode": "batch", "cursor_column": "updated_at", "safety_lag_s": 5}],
                             create_topics=False)
        sync = BatchSync(cfg, spark)
        [r1] = sync.run(day0, day0 + DAY)
        assert r1.rows == 100 and target_ids(target_db, cfg.name, t) == list(range(1, 101))
        [r2] = sync.run(day0 + DAY, day0 + 2 * DAY)
        assert r2.rows == 100 and target_ids(target_db, cfg.name, t) == list(range(1, 201))
        # re-running an interval changes nothing
        before = table_digest(target_db, cfg.name, t, "id")
        sync.run(day0, day0 + DAY)
        assert table_digest(target_db, cfg.name, t, "id") == before
        # an update inside an old interval is picked up by the run of the interval it now falls in
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE {t} SET v = 'changed', updated_at = %s WHERE id = 5", (day0 + 2 * DAY + timedelta(hours=1),))
        sync.run(day0 + 2 * DAY, day0 + 3 * DAY)
        assert table_digest(target_db, cfg.name, t, "id") == table_digest(source_db, "public", t, "id")
        # near "now": a row newer than the safety lag is not read yet, and not missed later
        now = datetime.now(timezone.utc)
        with source_db.cursor() as cur:
            cur.execute(f"INSERT INTO {t} VALUES (1000, now(), 'just now', 1)")
        [r] = sync.run(now - timedelta(minutes=1), now + timedelta(minutes=1))
        assert 1000 not in target_ids(target_db, cfg.name, t)
        assert state.get(target_db, cfg.name, t).raw["cursor_value"] < str(now)
        time.sleep(6)
        later = datetime.now(timezone.utc)
        sync.run(later + timedelta(minutes=1), later + timedelta(minutes=2))  # the next interval
        assert 1000 in target_ids(target_db, cfg.name, t)
        assert table_digest(target_db, cfg.name, t, "id") == table_digest(source_db, "public", t, "id")
        st = state.get(target_db, cfg.name, t)
        assert st.phase == "batch"
        with target_db.cursor() as cur:
            cur.execute("SELECT count(*), bool_and(outcome = 'succeeded') FROM tideline.runs "
                        "WHERE pipeline = %s AND kind = 'batch'", (cfg.name,))
            assert cur.fetchone() == (6, True)
    finally:
        with source_db.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS public.{t}")


def test_scheduled_intervals_through_the_dag(stack, monkeypatch, spark, source_db, target_db, pipelines, unique_name):
    monkeypatch.setenv("TIDELINE_PIPELINES", str(pipelines.dir))
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION", "True")
    t = f"{unique_name}_sched"
    day0 = datetime(2026, 10, 1, tzinfo=timezone.utc)
    make_events(source_db, t, day0)
    try:
        cfg = pipelines.make([{"name": t, "mode": "batch", "cursor_column": "updated_at"}], create_topics=False)
        from airflow.dag_processing.dagbag import DagBag
        bag = DagBag(dag_folder=str(ROOT / "dags"))
        assert f"sync_{cfg.name}" not in bag.dags   # no cdc table: no sync DAG
        dag = bag.dags[f"batch_{cfg.name}"]
        covered = []
        for day in (1, 2):  # two consecutive scheduled intervals
            run = dag.test(logical_date=pendulum.instance(day0 + day * DAY))
            assert run.state == "success"
            assert run.data_interval_end - run.data_interval_start == DAY
            covered.append((run.data_interval_start, run.data_interval_end))
        assert covered[0][1] == covered[1][0]
        with source_db.cursor() as cur:
            cur.execute(f"SELECT id FROM {t} WHERE updated_at >= %s AND updated_at < %s ORDER BY id",
                        (covered[0][0], covered[1][1]))
            expected = [r[0] for r in cur.fetchall()]
        assert len(expected) == 200 and target_ids(target_db, cfg.name, t) == expected
    finally:
        with source_db.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS public.{t}")


def test_backfill_of_the_demo_batch_dag_through_the_scheduler(stack, source_db, target_db):
    """`airflow backfill create` (here its REST twin) over two days of batch_demo: each interval
    lands its audit rows; the running scheduler and LocalExecutor do the work."""
    import sys
    sys.path.insert(0, str(ROOT / "stack"))
    import workload
    workload.main([])  # the demo schema, audit_log included
    day0 = datetime(2026, 9, 1, tzinfo=timezone.utc)
    with source_db.cursor() as cur:
        cur.execute("DELETE FROM audit_log WHERE updated_at >= %s AND updated_at < %s", (day0, day0 + 2 * DAY))
        cur.execute("INSERT INTO audit_log (happened_at, updated_at, actor, action, payload) "
                    "SELECT t, t, 'backfill-test', 'seed', jsonb_build_object('n', g) FROM generate_series(1, 48) g, "
                    "LATERAL (SELECT %s::timestamptz + (g - 1) * interval '1 hour' AS t) x", (day0,))
    with target_db.cursor() as cur:   # rows an earlier run on this stack landed (batch mode never deletes)
        cur.execute("SELECT to_regclass('demo.audit_log') IS NOT NULL")
        if cur.fetchone()[0]:
            cur.execute("DELETE FROM demo.audit_log WHERE updated_at >= %s AND updated_at < %s", (day0, day0 + 2 * DAY))
    stack.airflow_api("PATCH", "dags/batch_demo", {"is_paused": False})
    backfill = stack.airflow_api("POST", "backfills", {
        "dag_id": "batch_demo", "from_date": day0.isoformat(), "to_date": (day0 + 2 * DAY).isoformat(),
        "reprocess_behavior": "completed", "max_active_runs": 1})
    deadline = time.time() + 600
    while time.time() < deadline:
        runs = stack.airflow_api("GET", "dags/batch_demo/dagRuns?run_type=backfill&limit=100")["dag_runs"]
        mine = [r for r in runs if r.get("backfill_id") == backfill["id"]] or runs
        if len(mine) >= 2 and all(r["state"] in ("success", "failed") for r in mine):
            break
        time.sleep(1)
    assert len(mine) >= 2 and all(r["state"] == "success" for r in mine), mine
    with source_db.cursor() as s, target_db.cursor() as t:
        q = ("SELECT count(*), md5(string_agg(id::text || actor || action, ',' ORDER BY id)) FROM {} "
             "WHERE updated_at >= %s AND updated_at < %s")
        s.execute(q.format("public.audit_log"), (day0, day0 + 2 * DAY))
        t.execute(q.format("demo.audit_log"), (day0, day0 + 2 * DAY))
        assert s.fetchone() == t.fetchone()
