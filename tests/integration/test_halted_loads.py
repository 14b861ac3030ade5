"""A table with no committed load is never streamed, and one whose state claims a load the target
lacks is said everywhere and reloaded — on the PostgreSQL target, through the sync DAG.

Found from outside (Iceberg; the same branch on both targets): a table halted at its load, fixed
at the source and triggered with `auto` (resume_halted by default), was put in phase 'streaming'
with no rows in the target; status, the view and the alerts said nothing. The Iceberg run of that
exact scenario is test_iceberg's refused-value test; on PostgreSQL a load refuses no value, so
here the halted load is the one an earlier Tideline recorded (what an upgrade meets), and the
safety net — a 'streaming' table whose target table is gone — is driven for real."""
from __future__ import annotations

import pytest

from helpers import drop_source, table_digest
from test_dags import airflow_env, dag_pipeline, make_table, run_dag  # noqa: F401 — airflow_env: fixture
from tideline import state
from tideline.core.errors import ResnapshotRequired
from tideline.stream.run import IncrementalRun

pytestmark = pytest.mark.integration


def _equal(source_db, target_db, schema: str, table: str) -> bool:
    return table_digest(source_db, "public", table, "id") == table_digest(target_db, schema, table, "id")


def test_a_load_halted_by_an_earlier_version_is_loaded_again_by_auto_after_the_upgrade(
        airflow_env, source_db, target_db, pipelines, unique_name):
    t = f"{unique_name}_hl"
    make_table(source_db, t, 3000)
    try:
        cfg, dag_id = dag_pipeline(pipelines, t)
        assert run_dag(dag_id, stream_mode="available_now")["__run__"] == "success"
        # what 9fea6d6 left after a load refused a value: halted, no snapshot, no target table, and
        # no phase_before (the column is new): the upgrade's migration works out 'loading'
        with target_db.cursor() as cur:
            cur.execute(f"DROP TABLE {cfg.target_schema(t)}.{t}")
            cur.execute("UPDATE tideline.table_state SET phase = 'halted', phase_before = NULL, snapshot_id = NULL, "
                        "last_error = 'full load: column note holds a value the target refused' "
                        "WHERE pipeline = %s AND table_name = %s", (cfg.name, t))
            cur.execute("DELETE FROM tideline.schema_version WHERE version = 23")
        state.migrate(target_db)
        assert state.get(target_db, cfg.name, t).raw["phase_before"] == "loading"
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE public.{t} SET note = 'fixed' WHERE id <= 10")
        states = run_dag(dag_id, stream_mode="available_now")   # action=auto, resume_halted by default
        assert states["__run__"] == "success" and states["full_load"] == "success", states
        assert state.get(target_db, cfg.name, t).phase == "streaming"
        assert _equal(source_db, target_db, cfg.target_schema(t), t)
    finally:
        drop_source(source_db, t)


def test_a_streaming_table_the_target_lacks_is_said_by_status_watch_and_verify_and_reloaded(
        airflow_env, spark, source_db, target_db, pipelines, unique_name):
    from tideline.airflow import tasks
    from tideline.ops.status import not_caught_up, pipeline_status
    from tideline.core.connections import get_connection
    from tideline.verify.compare import verify
    t = f"{unique_name}_gone"
    make_table(source_db, t, 2000)
    try:
        cfg, dag_id = dag_pipeline(pipelines, t)
        assert run_dag(dag_id, stream_mode="available_now")["__run__"] == "success"
        schema = cfg.target_schema(t)
        with target_db.cursor() as cur:   # emptied by hand: the state still says streaming
            cur.execute(f"TRUNCATE {schema}.{t}")
            cur.execute(f"ANALYZE {schema}.{t}")
        assert tasks.watch(cfg.name)["target_missing"] == [t]
        with target_db.cursor() as cur:
            cur.execute(f"DROP TABLE {schema}.{t}")   # by hand, or a hole not found yet: the state says streaming
        [row] = pipeline_status(cfg)
        assert row.phase == "streaming" and row.target_missing, row
        assert not_caught_up(cfg, [row]), "streaming onto no table counted as caught up"
        assert f"{cfg.name}.{t}: NOT IN THE TARGET" in row.error and f"tables=[{t}]" in row.error
        watched = tasks.watch(cfg.name)
        assert watched["target_missing"] == [t], watched
        [report] = verify(cfg, get_connection(cfg.source.conn_id), get_connection(cfg.target.conn_id), [t])
        assert not report.equal and report.counts["missing"] == 2000 and "does not exist" in report.summary()
        with pytest.raises(ResnapshotRequired, match="NOT IN THE TARGET"):   # the stream: marked, the DAG reloads
            IncrementalRun(cfg, spark, "available_now").run()
        assert state.get(target_db, cfg.name, t).phase == "needs_resnapshot"
        states = run_dag(dag_id, stream_mode="available_now")
        assert states["__run__"] == "success" and states["full_load"] == "success", states
        assert _equal(source_db, target_db, schema, t)
        [row] = pipeline_status(cfg)
        assert row.phase == "streaming" and not row.target_missing and row.auto_reloads == 1
    finally:
        drop_source(source_db, t)
