"""The sync DAG run by Airflow against the real stack: happy path, the retention boundary (the seed
case), a running stream meeting lost offsets, params, a REST-API trigger, and DAG-folder import."""
from __future__ import annotations

import threading
import time
import urllib.error

import psycopg2
import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

import stackctl
from helpers import drop_source, full_loads, lake_settings, let_retention_delete, run_demo_dag, seed_demo, table_digest
from tideline import state

pytestmark = pytest.mark.integration
ROOT = stackctl.ROOT


@pytest.fixture
def airflow_env(stack, monkeypatch, pipelines):
    """dag.test() in this process, with the test's pipelines; new DAGs start paused so the
    running scheduler never picks up a run meant for the test (e.g. the DAG's own restart)."""
    monkeypatch.setenv("TIDELINE_PIPELINES", str(pipelines.dir))
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION", "True")
    yield


def load_dag(dag_id: str):
    from airflow.dag_processing.dagbag import DagBag
    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert not bag.import_errors, bag.import_errors
    return bag.dags[dag_id]


def run_dag(dag_id: str, **conf) -> dict[str, str]:
    dag = load_dag(dag_id)
    run = dag.test(run_conf=conf)
    return {ti.task_id: ti.state for ti in run.get_task_instances()} | {"__run__": run.state}


def make_table(source_db, table: str, rows: int):
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{table} (id bigint PRIMARY KEY, qty int NOT NULL, note text)")
        cur.execute(f"INSERT INTO public.{table} SELECT g, g % 10, 'n' || g FROM generate_series(1, {rows}) g")


def dag_pipeline(pipelines, table: str, **make) -> tuple:
    """A pipeline over one test table whose DAG creates topics and connector (cleaned up after)."""
    cfg = pipelines.adopt(pipelines.make([{"name": table}], create_topics=False, **make))
    return cfg, f"sync_{cfg.name}"


def converge(dag_id, source_db, target_db, schema, table, timeout=120):
    deadline = time.time() + timeout
    while True:
        states = run_dag(dag_id, stream_mode="available_now")
        assert states["__run__"] == "success", states
        if table_digest(source_db, "public", table, "id") == table_digest(target_db, schema, table, "id"):
            return states
        assert time.time() < deadline, "target did not converge"
        time.sleep(2)


def test_first_run_loads_then_streams_second_goes_straight_to_streaming(
        airflow_env, source_db, target_db, pipelines, unique_name):
    t = f"{unique_name}_dag"
    make_table(source_db, t, 5000)
    try:
        cfg, dag_id = dag_pipeline(pipelines, t)
        states = run_dag(dag_id, stream_mode="available_now")
        assert states["__run__"] == "success", states
        assert states["full_load"] == "success" and states["incremental"] == "success"
        assert states["resnapshot"] == "skipped" and states["restart"] == "skipped"
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE {t} SET qty = qty + 1 WHERE id <= 100")
            cur.execute(f"DELETE FROM {t} WHERE id > 4900")
        states = converge(dag_id, source_db, target_db, cfg.name, t)
        assert states["full_load"] == "skipped" and states["incremental"] == "success"
        with target_db.cursor() as cur:
            cur.execute("SELECT kind, count(*) FROM tideline.runs WHERE pipeline = %s GROUP BY kind", (cfg.name,))
            runs = dict(cur.fetchall())   # one load; each run's stream in the history
            assert runs["full_load"] == 1 and runs["incremental"] >= 2 and set(runs) == {"full_load", "incremental"}
    finally:
        drop_source(source_db, t)


def test_a_refused_table_is_left_out_of_the_dag_run_and_the_others_load_and_stream(
        airflow_env, source_db, target_db, pipelines, unique_name):
    """Through the sync DAG, as a user runs it: an UNLOGGED table and one with REPLICA IDENTITY
    NOTHING beside a good one. The refused tables say why in their state; the doctor does not miss
    the topics capture never made for them; the good table loads and streams."""
    good, unlogged, nothing = f"{unique_name}_ok", f"{unique_name}_unlog", f"{unique_name}_nothing"
    make_table(source_db, good, 1000)
    with source_db.cursor() as cur:
        cur.execute(f"CREATE UNLOGGED TABLE public.{unlogged} (id int PRIMARY KEY, v text)")
        cur.execute(f"CREATE TABLE public.{nothing} (id int PRIMARY KEY, v text)")
        cur.execute(f"ALTER TABLE public.{nothing} REPLICA IDENTITY NOTHING")
    try:
        cfg = pipelines.adopt(pipelines.make([{"name": good}, {"name": unlogged}, {"name": nothing}],
                                             create_topics=False))
        dag_id = f"sync_{cfg.name}"
        states = run_dag(dag_id, stream_mode="available_now")
        assert states["__run__"] == "success" and states["prepare"] == "success", states
        for table, fix in ((unlogged, f"ALTER TABLE public.{unlogged} SET LOGGED"),
                           (nothing, f"ALTER TABLE public.{nothing} REPLICA IDENTITY DEFAULT")):
            st = state.get(target_db, cfg.name, table)
            assert st.phase == "refused" and fix in st.last_error, st.last_error
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE {good} SET qty = qty + 1 WHERE id <= 100")
        converge(dag_id, source_db, target_db, cfg.name, good)
        assert state.get(target_db, cfg.name, good).phase == "streaming"
    finally:
        drop_source(source_db, good, unlogged, nothing)


def test_retention_boundary_reloads_by_itself(airflow_env, stack, source_db, target_db, pipelines, unique_name):
    """The seed case: the stream is stopped, changes go on (an added column too), retention deletes
    offsets it still needs; the next run notices, reloads by itself, streams on, and nothing is lost."""
    t = f"{unique_name}_tide"
    make_table(source_db, t, 2000)
    try:
        cfg, dag_id = dag_pipeline(pipelines, t, partitions=1)
        assert run_dag(dag_id, stream_mode="available_now")["__run__"] == "success"
        resume = state.get(target_db, cfg.name, t).resume_offsets
        # the stream is stopped; the source keeps changing, its schema too
        with source_db.cursor() as cur:
            cur.execute(f"ALTER TABLE {t} ADD COLUMN added_later text")
            cur.execute(f"UPDATE {t} SET added_later = 'x' || id, qty = qty + 1 WHERE id <= 500")
            cur.execute(f"INSERT INTO {t} (id, qty, note, added_later) SELECT g, 1, 'new', 'y' "
                        f"FROM generate_series(3001, 3500) g")
        let_retention_delete(stack.kafka_bootstrap(), cfg.topic(t), resume[0],
                             lambda: source_db.cursor().execute(f"UPDATE {t} SET qty = qty + 1 WHERE id = 1"))
        states = run_dag(dag_id, stream_mode="available_now")
        assert states["__run__"] == "success", states
        assert states["full_load"] == "skipped"          # prepare saw a streaming table...
        assert states["resnapshot"] == "success"         # ...the sensor found the gap and reloaded it
        st = state.get(target_db, cfg.name, t)
        assert st.phase == "streaming" and st.last_error is None
        assert full_loads(target_db, cfg.name) == 2
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE {t} SET added_later = 'after' WHERE id = 2")
        converge(dag_id, source_db, target_db, cfg.name, t)
    finally:
        drop_source(source_db, t)


@pytest.fixture
def dag_processor_paused(stack):
    """The stack's dag-processor parses dags/ with the stack's pipelines, not a test's: every 30 s
    it deactivates the DAGs that dag.test() synced from the test's pipelines, so a TriggerDagRunOperator
    (the restart task) that runs after such a parse finds no DAG to trigger. Paused while a test needs
    its own DAG triggered; dag.test() needs no dag-processor."""
    stack.supervisorctl("stop", "airflow-dag-processor")
    try:
        yield
    finally:
        stack.supervisorctl("start", "airflow-dag-processor")


def test_running_stream_meeting_lost_offsets_restarts_through_a_reload(
        airflow_env, stack, source_db, target_db, pipelines, unique_name, dag_processor_paused):
    t = f"{unique_name}_run"
    make_table(source_db, t, 100)
    try:
        cfg, dag_id = dag_pipeline(pipelines, t, partitions=1,
                                   stream={"max_offsets_per_trigger": 100, "trigger_interval_s": 2})
        assert run_dag(dag_id, stream_mode="available_now")["__run__"] == "success"
        # A backlog of 8,000 events (~4 MB) the stream reads 100 at a time. Kafka's consumer fetches
        # ~1 MB ahead (~2,000 events here), and a stream rightly applies what it fetched before the
        # log was cut: the cut must lie beyond that, or the stream never needs a deleted offset.
        with source_db.cursor() as cur:
            for _ in range(80):
                cur.execute(f"UPDATE {t} SET qty = qty + 1")
        topic = cfg.topic(t)
        deadline = time.time() + 60
        from tideline.kafka_offsets import end_offsets
        while end_offsets(stack.kafka_bootstrap(), topic)[0] < 8000 and time.time() < deadline:
            time.sleep(0.5)
        first_batch = None

        def cut_the_log_under_the_running_stream():
            """Once the running job has committed a batch, Kafka drops the log below offset 7000
            (exactly what retention does), while the stream still needs offsets from ~2,000 on."""
            nonlocal first_batch
            conn = psycopg2.connect(stackctl.pg_url(stackctl.DATABASES["target"]))
            conn.autocommit = True
            try:
                with conn.cursor() as cur:
                    start = time.time()
                    while time.time() - start < 180:
                        cur.execute("SELECT count(*) FROM tideline.batches WHERE pipeline = %s", (cfg.name,))
                        if cur.fetchone()[0] >= 1:
                            first_batch = True
                            break
                        time.sleep(0.1)
                admin = AdminClient({"bootstrap.servers": stack.kafka_bootstrap()})
                for fut in admin.delete_records([TopicPartition(topic, 0, 7000)]).values():
                    fut.result(30)
            finally:
                conn.close()

        cutter = threading.Thread(target=cut_the_log_under_the_running_stream)
        cutter.start()
        states = run_dag(dag_id, stream_mode="available_now")
        cutter.join()
        assert first_batch, "the stream never committed a batch"
        assert states["__run__"] == "success", states
        assert states["incremental"] == "success" and states["restart"] == "success", states
        st = state.get(target_db, cfg.name, t)
        assert st.phase == "needs_resnapshot" and "retention deleted offsets" in st.last_error
        # the run the DAG queued for itself: it reloads, then streams; the target equals the source
        from airflow.models.dagrun import DagRun
        queued = [r for r in DagRun.find(dag_id=dag_id) if r.state == "queued"]
        assert len(queued) == 1 and queued[0].conf.get("action") == "auto"
        states = run_dag(dag_id, **queued[0].conf)
        assert states["full_load"] == "success" and states["__run__"] == "success", states
        converge(dag_id, source_db, target_db, cfg.name, t)
    finally:
        drop_source(source_db, t)


@pytest.mark.parametrize("conf,message", [
    ({"tables": ["no_such_table"]}, "has no table 'no_such_table'"),
    ({"tables": ["x; DROP TABLE y"]}, "has no table 'x; DROP TABLE y'"),   # a name, never SQL
    ({"action": "explode"}, "action='explode' is not one of"),
])
def test_bad_params_are_rejected_before_any_work(airflow_env, source_db, pipelines, unique_name, conf, message):
    from airflow.sdk.exceptions import AirflowFailException

    from tideline.airflow.tasks import check_params
    cfg = pipelines.make([{"name": f"{unique_name}_p"}], create_topics=False)
    with pytest.raises(AirflowFailException, match=message):
        check_params(cfg.name, conf)
    # The trigger itself: Airflow's param schema (the form) or check_params stops it; nothing else runs.
    dag = load_dag(f"sync_{cfg.name}")
    try:
        run = dag.test(run_conf=conf)
    except Exception as exc:
        bad_value = conf.get("action") or conf["tables"][0]
        assert bad_value in str(exc)
        return
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["check_params"] == "failed"
    assert all(s in (None, "upstream_failed", "skipped") for k, s in states.items() if k != "check_params")


def test_a_lake_pipelines_stream_is_submitted_with_the_jvms_optimizing_compiler(airflow_env, pipelines, unique_name):
    """Its MERGEs run in the stream's JVM (a PostgreSQL target's stream JVM only reads Kafka, and
    compiles with C1 alone): the DAG asks the target's capabilities, not its kind."""
    pipelines.make([{"name": "orders"}], create_topics=False, **lake_settings(unique_name))
    stream = load_dag(f"sync_{unique_name}").get_task("incremental")
    options = stream.conf["spark.driver.extraJavaOptions"]
    assert "-XX:+UseSerialGC" in options and "TieredStopAtLevel" not in options, options


def test_broken_pipeline_file_is_an_import_error_that_spares_the_others(airflow_env, pipelines, unique_name):
    from airflow.dag_processing.dagbag import DagBag
    pipelines.make([{"name": f"{unique_name}_ok"}], create_topics=False)
    (pipelines.dir / "broken.yaml").write_text("name: broken\nkafka: {topic_prefix: 'bad prefix!'}\n")
    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert f"sync_{unique_name}" in bag.dags
    [(file, error)] = bag.import_errors.items()
    assert file.endswith("tideline_config_errors.py")   # not the file that builds the good pipelines' DAGs
    assert "broken.yaml" in error and "kafka.topic_prefix (line 2)" in error and "source: Field required" in error


def test_dag_folder_with_50_pipelines_imports_cleanly(airflow_env, pipelines, unique_name, tmp_path):
    import yaml
    from airflow.dag_processing.dagbag import DagBag
    for i in range(50):
        (pipelines.dir / f"gen_{i:02d}.yaml").write_text(yaml.safe_dump({
            "name": f"gen_{i:02d}", "source": {"conn_id": "tideline_source"},
            "target": {"conn_id": "tideline_target", "schema": f"gen_{i:02d}"},
            "kafka": {"topic_prefix": f"gen.{i}"}, "tables": [{"name": f"t{j}"} for j in range(5)]}))
    started = time.perf_counter()
    bag = DagBag(dag_folder=str(ROOT / "dags"))
    parse_s = time.perf_counter() - started
    assert not bag.import_errors
    assert len([d for d in bag.dags if d.startswith("sync_gen_")]) == 50
    print(f"\n[measure] DAG folder with 50 pipelines parsed in {parse_s:.2f}s")


def test_rest_api_trigger_runs_the_demo_with_its_params(stack, source_db, target_db):
    """Through the running api-server and scheduler (LocalExecutor): the demo pipeline, in
    available_now mode, loads and streams the demo shop; the run carries the params it was given."""
    seed_demo(source_db)
    with pytest.raises(urllib.error.HTTPError) as bad:  # Airflow validates params against the form
        stack.airflow_api("POST", "dags/sync_demo/dagRuns", {"logical_date": None, "conf": {"action": "explode"}})
    assert bad.value.code == 400
    tables = (("customers", "id"), ("orders", "id"), ("order_items", "order_id, line_no"))
    for attempt in range(3):   # Debezium is asynchronous: a change may reach Kafka after a run read it
        run_id, info, tis = run_demo_dag(stack, {"stream_mode": "available_now", "tables": [t for t, _ in tables]})
        assert info["state"] == "success", tis
        assert info["conf"]["stream_mode"] == "available_now"
        assert tis["incremental"] == "success"
        for table, _order in tables:
            assert state.get(target_db, "demo", table).phase == "streaming"
        differ = [t for t, order in tables
                  if table_digest(source_db, "public", t, order) != table_digest(target_db, "demo", t, order)]
        if not differ:
            _prepare_cleared_alone_prepares_nothing_again(stack, run_id)
            return
        # the next try waits for the continuous stream this run handed its tables back to, or that
        # stream would take them from the next try's (the later claim wins, by design)
        deadline = time.time() + 300
        while not _count(target_db, "SELECT count(*) FROM tideline.runs WHERE pipeline = 'demo' AND "
                                    "kind = 'incremental' AND started_at > %s", (info["end_date"],)):
            assert time.time() < deadline, "the continuous stream handed back to did not start within 300 s"
            time.sleep(1)
    raise AssertionError(f"after three runs the target still differs from the source in {differ}")


def _prepare_cleared_alone_prepares_nothing_again(stack, run_id: str) -> None:
    """prepare run again in a run already past it — cleared alone, or given to a running run by an
    upgrade of the DAG under it — is skipped, saying why: planning again would resume halted
    tables, or alert a re-snapshot that no task of the run then does."""
    stack.airflow_api("POST", "dags/sync_demo/clearTaskInstances",
                      {"dry_run": False, "dag_run_id": run_id, "task_ids": ["prepare"], "only_failed": False})
    deadline = time.time() + 120
    while True:
        prepare = stack.airflow_api("GET", f"dags/sync_demo/dagRuns/{run_id}/taskInstances/prepare")
        run = stack.airflow_api("GET", f"dags/sync_demo/dagRuns/{run_id}")
        if prepare["try_number"] > 1 and prepare["state"] not in (None, "scheduled", "queued", "running") \
                and run["state"] in ("success", "failed"):
            break
        assert time.time() < deadline, f"prepare, cleared, did not run again within 120 s: {prepare['state']}"
        time.sleep(1)
    assert (prepare["state"], run["state"]) == ("skipped", "success"), (prepare, run)
    log = (stackctl.LOGS / "airflow-tasks" / "dag_id=sync_demo" / f"run_id={run_id}" / "task_id=prepare"
           / f"attempt={prepare['try_number']}.log").read_text()
    assert "this run is past its preparation (coverage: success), so it is not prepared again" in log


def _count(conn, query: str, args: tuple) -> int:
    with conn.cursor() as cur:
        cur.execute(query, args)
        return cur.fetchone()[0]


def test_validate_finds_differences_alerts_and_repair_fixes_them(
        airflow_env, webhook, source_db, target_db, pipelines, unique_name):
    t = f"{unique_name}_fix"
    make_table(source_db, t, 3000)
    try:
        cfg, dag_id = dag_pipeline(pipelines, t, alerts={"webhook_conn_id": "tideline_test_hook"})
        assert run_dag(dag_id, stream_mode="available_now")["__run__"] == "success"
        assert run_dag(dag_id, action="validate")["validate"] == "success"
        assert webhook == []
        with target_db.cursor() as cur:  # behind the pipeline's back
            cur.execute(f'UPDATE "{cfg.name}".{t} SET qty = -1 WHERE id BETWEEN 100 AND 110')
            cur.execute(f'DELETE FROM "{cfg.name}".{t} WHERE id BETWEEN 200 AND 205')
            cur.execute(f'INSERT INTO "{cfg.name}".{t} VALUES (250000, 1, \'extra\')')
        states = run_dag(dag_id, action="validate")
        assert states["validate"] == "failed" and states["prepare"] == "skipped"
        texts = [m["text"] for m in webhook]
        assert any("DIFFERENT: 6 missing, 1 extra, 11 different" in x and "different key (100)" in x for x in texts), texts
        assert any(f"{dag_id} stopped: task validate failed" in x for x in texts), texts
        offsets = state.get(target_db, cfg.name, t).resume_offsets
        states = run_dag(dag_id, action="repair", tables=[t])   # no range: what the validate found
        assert states["repair"] == "success" and states["incremental"] == "skipped", states
        assert state.get(target_db, cfg.name, t).resume_offsets == offsets   # the stream kept its position
        assert table_digest(source_db, "public", t, "id") == table_digest(target_db, cfg.name, t, "id")
        assert run_dag(dag_id, action="validate")["validate"] == "success"
        with target_db.cursor() as cur:
            cur.execute(f'UPDATE "{cfg.name}".{t} SET qty = -1 WHERE id BETWEEN 100 AND 110')
        states = run_dag(dag_id, action="repair", tables=[t], repair_key_from="100", repair_key_to="300000")
        assert states["repair"] == "success", states
        assert table_digest(source_db, "public", t, "id") == table_digest(target_db, cfg.name, t, "id")
        states = run_dag(dag_id, action="repair", tables=[t], repair_key_from="500", repair_key_to="20")
        # an inverted range is refused by check_params, typed by the source, before any work
        assert states["check_params"] == "failed" and states["repair"] in ("upstream_failed", None), states
        with target_db.cursor() as cur:
            cur.execute("SELECT kind, outcome, count(*) FROM tideline.runs WHERE pipeline = %s "
                        "AND kind <> 'incremental' GROUP BY 1, 2 ORDER BY 1, 2", (cfg.name,))
            assert cur.fetchall() == [("full_load", "succeeded", 1), ("repair", "succeeded", 2),
                                      ("verify", "failed", 1), ("verify", "succeeded", 2)]
    finally:
        drop_source(source_db, t)


def test_scheduled_verify_dag_repairs_what_it_finds_and_the_command_reports_it(
        airflow_env, source_db, target_db, pipelines, unique_name):
    import subprocess
    import sys
    t = f"{unique_name}_nightly"
    make_table(source_db, t, 4000)
    try:
        cfg, dag_id = dag_pipeline(pipelines, t, verify={"schedule": "30 2 * * *", "repair": True})
        # before the first load there is nothing to compare: the run is skipped, not failed
        assert run_dag(f"verify_{cfg.name}")["verify"] == "skipped"
        assert run_dag(dag_id, stream_mode="available_now")["__run__"] == "success"
        verify_dag = load_dag(f"verify_{cfg.name}")
        assert verify_dag.timetable.expression == "30 2 * * *"
        with target_db.cursor() as cur:   # behind the pipeline's back
            cur.execute(f'DELETE FROM "{cfg.name}".{t} WHERE id IN (7, 3999)')
            cur.execute(f'UPDATE "{cfg.name}".{t} SET note = NULL WHERE id = 2000')
        cmd = subprocess.run([sys.executable, "-m", "tideline.verify", "--pipeline", cfg.name,
                              "--pipelines-dir", str(pipelines.dir)], capture_output=True, text=True, timeout=300)
        assert cmd.returncode == 1, cmd.stderr[-2000:]
        assert "DIFFERENT: 2 missing, 1 different" in cmd.stderr and "different key (2000)" in cmd.stderr
        assert run_dag(f"verify_{cfg.name}")["verify"] == "success"   # found, repaired, verified again
        assert table_digest(source_db, "public", t, "id") == table_digest(target_db, cfg.name, t, "id")
        with target_db.cursor() as cur:
            cur.execute("SELECT kind, outcome FROM tideline.runs WHERE pipeline = %s AND kind IN ('verify', 'repair') "
                        "ORDER BY run_id", (cfg.name,))
            assert cur.fetchall() == [("verify", "failed"), ("verify", "failed"), ("repair", "succeeded"),
                                      ("verify", "succeeded")]
    finally:
        drop_source(source_db, t)
