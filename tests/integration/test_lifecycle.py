"""A pipeline's lifecycle through its DAG and the lifecycle command: a table paused and resumed
while the others stream, a pipeline decommissioned that leaves nothing behind, a deleted YAML whose
stream stops itself and whose leftovers are listed and removed."""
from __future__ import annotations

import time

import psycopg2
import pytest
from confluent_kafka.admin import AdminClient

import stackctl
from helpers import query, drop_source, start_continuous, table_digest, wait_until
from test_dags import airflow_env, make_table, run_dag  # noqa: F401,F811 — fixture
from tideline import state
from tideline.capture.connector import ConnectClient
from tideline.core.config import load_pipeline
from tideline.core.connections import get_connection
from tideline.core.debezium import connector_name
from tideline.core.errors import PipelineRemovedError
from tideline.load.full_load import FullLoad
from tideline.ops import lifecycle
from tideline.stream.run import IncrementalRun

pytestmark = pytest.mark.integration
SOURCE_SUPER = stackctl.pg_url(stackctl.DATABASES["source"], stackctl.PG_SUPERUSER, stackctl.PG_SUPERPASS)


def _source(sql: str, args=()) -> list:
    return query(SOURCE_SUPER, sql, args)


def _equal(source_db, target_db, schema: str, table: str) -> bool:
    return table_digest(source_db, "public", table, "id") == table_digest(target_db, schema, table, "id")


def _leftovers(cfg) -> dict:
    """Everything of the pipeline the source, Kafka, Connect and the state still hold."""
    topics = AdminClient({"bootstrap.servers": get_connection("tideline_kafka").kafka_bootstrap}) \
        .list_topics(timeout=15).topics
    client = ConnectClient(get_connection("tideline_connect").http_base_url())
    conn = psycopg2.connect(stackctl.pg_url(stackctl.DATABASES["target"]))
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT table_name FROM information_schema.columns WHERE table_schema = 'tideline' "
                        "AND column_name = 'pipeline'")
            rows = 0
            for (name,) in cur.fetchall():
                cur.execute(f"SELECT count(*) FROM tideline.{name} WHERE pipeline = %s", (cfg.name,))
                rows += cur.fetchone()[0]
    finally:
        conn.close()
    return {"slot": _source("SELECT slot_name FROM pg_replication_slots WHERE slot_name = %s", (cfg.slot_name,)),
            "publication": _source("SELECT pubname FROM pg_publication WHERE pubname = %s", (cfg.publication_name,)),
            "heartbeat": _source(f"SELECT pipeline FROM public.{cfg.source.heartbeat_table} WHERE pipeline = %s",
                                 (cfg.name,)) if cfg.source.heartbeat_table else [],
            "connector": client.status(connector_name(cfg)),
            "topics": sorted(t for t in topics if t.startswith(cfg.kafka.topic_prefix + ".")
                             or t == f"__debezium-heartbeat.{cfg.kafka.topic_prefix}"),
            "state_rows": rows}


def _decommission_read_only(cfg, folder):
    """`tideline decommission` run with the pipelines folder mounted read-only (its own mount namespace)."""
    import os
    import shlex
    import subprocess
    import sys
    command = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "tideline", "decommission", cfg.name,
                                                 "--confirm", cfg.name, "--pipelines-dir", str(folder)])
    return subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind -o ro {shlex.quote(str(folder))} "
                           f"{shlex.quote(str(folder))} && exec {command}"], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(stackctl.ROOT / "plugins")})


def test_pause_one_table_while_the_other_streams_then_resume_it_from_its_position(
        airflow_env, source_db, target_db, pipelines, unique_name, webhook):
    a, b = f"{unique_name}_a", f"{unique_name}_b"
    make_table(source_db, a, 200)
    make_table(source_db, b, 200)
    try:
        cfg = pipelines.adopt(pipelines.make([{"name": a}, {"name": b}], partitions=1, create_topics=False,
                                             alerts={"webhook_conn_id": "tideline_test_hook",
                                                     "headroom_below_hours": 100000}))
        dag = f"sync_{cfg.name}"
        assert run_dag(dag, stream_mode="available_now")["__run__"] == "success"
        wait_until(lambda: _equal(source_db, target_db, cfg.name, a) and _equal(source_db, target_db, cfg.name, b)
                   or run_dag(dag, stream_mode="available_now") and False, 120, "both tables loaded and equal")
        position = state.get(target_db, cfg.name, a).resume_offsets
        states = run_dag(dag, action="pause", tables=[a], stream_mode="available_now")
        assert states["__run__"] == "success" and states["incremental"] == "success", states
        st = state.get(target_db, cfg.name, a)
        assert st.phase == "paused" and "action=resume" in st.last_error
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE {a} SET qty = qty + 7 WHERE id <= 20")
            cur.execute(f"UPDATE {b} SET qty = qty + 7 WHERE id <= 20")
        # the others stream on; the paused one keeps its position and applies nothing
        wait_until(lambda: run_dag(dag, stream_mode="available_now")["__run__"] == "success"
                   and _equal(source_db, target_db, cfg.name, b), 120, "the table that was not paused to stream on")
        assert not _equal(source_db, target_db, cfg.name, a)
        st = state.get(target_db, cfg.name, a)
        assert st.phase == "paused" and st.resume_offsets == position
        # the watch says when Kafka's retention takes the paused table's position
        assert run_dag(f"watch_{cfg.name}")["headroom"] == "success"
        said = [m["text"] for m in webhook if f"{a} is paused: Kafka's retention deletes its position in" in m["text"]]
        assert said and "UTC" in said[0] and "action=resume" in said[0], [m["text"] for m in webhook]
        states = run_dag(dag, action="resume", tables=[a], stream_mode="available_now")
        assert states["__run__"] == "success" and states.get("full_load") in ("skipped", None), states
        wait_until(lambda: _equal(source_db, target_db, cfg.name, a)
                   or run_dag(dag, stream_mode="available_now") and False, 120, "the resumed table to catch up")
        assert state.get(target_db, cfg.name, a).phase == "streaming"
    finally:
        drop_source(source_db, a)
        drop_source(source_db, b)


def test_decommission_leaves_nothing_behind_but_the_target_tables(
        airflow_env, source_db, target_db, pipelines, unique_name):
    t = f"{unique_name}_dec"
    make_table(source_db, t, 100)
    try:
        cfg = pipelines.adopt(pipelines.make([{"name": t}], partitions=1, create_topics=False))
        dag = f"sync_{cfg.name}"
        assert run_dag(dag, stream_mode="available_now")["__run__"] == "success"
        # the connector's first heartbeat makes its heartbeat topic (every one left it behind before)
        def with_heartbeat_topic():
            found = _leftovers(cfg)
            return found if f"__debezium-heartbeat.{cfg.kafka.topic_prefix}" in found["topics"] else None
        held = wait_until(with_heartbeat_topic, 120, "the connector's heartbeat topic")
        assert held["slot"] and held["publication"] and held["connector"] and held["topics"] and held["state_rows"]
        # the pipelines folder read-only (a deployment's mount): refused before anything is taken down
        refused = _decommission_read_only(cfg, pipelines.dir)
        assert refused.returncode == 2 and "nothing was touched" in refused.stderr, (refused.stdout, refused.stderr)
        assert "Read-only file system" in refused.stderr and _leftovers(cfg) == held
        # a wrong confirmation is refused before any work
        states = run_dag(dag, action="decommission", confirm="yes")
        assert states["check_params"] == "failed" and _leftovers(cfg)["slot"], states
        states = run_dag(dag, action="decommission", confirm=cfg.name)
        assert states["decommission"] == "success" and states["prepare"] == "skipped", states
        assert _leftovers(cfg) == {"slot": [], "publication": [], "heartbeat": [], "connector": None, "topics": [],
                                   "state_rows": 0}
        assert not (pipelines.dir / f"{cfg.name}.yaml").exists()
        assert (pipelines.dir / f"{cfg.name}.yaml.decommissioned").exists()
        with target_db.cursor() as cur:   # the users' data stays
            cur.execute(f'SELECT count(*) FROM "{cfg.name}"."{t}"')
            assert cur.fetchone()[0] == 100
    finally:
        drop_source(source_db, t)


def test_a_deleted_yaml_stops_its_stream_and_its_leftovers_are_listed_and_removed(
        spark, source_db, target_db, pipelines, unique_name):
    t = f"{unique_name}_orph"
    make_table(source_db, t, 50)
    run = None
    try:
        made = pipelines.make([{"name": t}], partitions=1, capture=True, stream={"trigger_interval_s": 0.5})
        path = pipelines.dir / f"{made.name}.yaml"
        cfg = load_pipeline(path)   # as the stream's driver reads it
        FullLoad(cfg, spark).run([t])
        run = IncrementalRun(cfg, spark, "continuous")
        thread, ended = start_continuous(run)
        path.rename(path.with_suffix(".deleted"))
        started = time.monotonic()
        thread.join(90)
        assert not thread.is_alive(), "the stream of a deleted pipeline went on"
        assert isinstance(ended.get("exc"), PipelineRemovedError), ended
        assert "lifecycle orphans" in str(ended["exc"])
        print(f"\n[measure] a deleted pipeline's stream stopped {time.monotonic() - started:.0f}s after")
        # what it left: listed with the WAL its slot retains, and the command that removes it (the
        # folder has no pipeline left to name the connections: they are given, as --connect/--kafka/--source)
        reach = lifecycle.Reach(["tideline_connect"], "tideline_kafka", [cfg.source.conn_id])
        found = {o.connector: o for o in lifecycle.orphans(pipelines.dir, reach=reach)}
        orphan = found[connector_name(cfg)]
        assert orphan.slot == cfg.slot_name and cfg.topic(t) in orphan.topics
        assert orphan.retained and orphan.retained.endswith("MB of WAL")
        assert f"remove-orphan {connector_name(cfg)} --confirm {connector_name(cfg)}" in orphan.describe()
        with pytest.raises(lifecycle.ConfirmationError):
            lifecycle.remove_orphan(connector_name(cfg), pipelines.dir, confirm="y", reach=reach)
        removed = lifecycle.remove_orphan(connector_name(cfg), pipelines.dir, confirm=connector_name(cfg),
                                          reach=reach)
        assert any(cfg.slot_name in line for line in removed), removed
        left = _leftovers(cfg)
        assert (left["slot"], left["publication"], left["connector"]) == ([], [], None), left
        assert cfg.topic(t) not in left["topics"]
        assert connector_name(cfg) not in {o.connector for o in lifecycle.orphans(pipelines.dir, reach=reach)}
    finally:
        if run is not None and run.query is not None and run.query.isActive:
            run.query.stop()
        drop_source(source_db, t)


def test_a_table_removed_from_the_yaml_stops_being_captured_and_action_remove_takes_its_topic(
        airflow_env, source_db, target_db, pipelines, unique_name):
    a, b = f"{unique_name}_keep", f"{unique_name}_gone"
    make_table(source_db, a, 50)
    make_table(source_db, b, 50)
    try:
        cfg = pipelines.adopt(pipelines.make([{"name": a}, {"name": b}], partitions=1, create_topics=False))
        dag = f"sync_{cfg.name}"
        assert run_dag(dag, stream_mode="available_now")["__run__"] == "success"
        gone_topic = cfg.topic(b)
        assert gone_topic in _leftovers(cfg)["topics"]
        pipelines.make([{"name": a}], partitions=1, create_topics=False)   # the YAML without b
        states = run_dag(dag, action="remove", drop_target=True, stream_mode="available_now")
        assert states["__run__"] == "success", states
        st = state.get(target_db, cfg.name, b)
        assert st.phase == "removed" and "removed from pipeline" in st.last_error
        assert gone_topic not in _leftovers(cfg)["topics"] and cfg.topic(a) in _leftovers(cfg)["topics"]
        published = _source("SELECT tablename FROM pg_publication_tables WHERE pubname = %s", (cfg.publication_name,))
        assert (b,) not in published and (a,) in published
        with target_db.cursor() as cur:
            cur.execute("SELECT to_regclass(%s), to_regclass(%s)", (f'"{cfg.name}"."{b}"', f'"{cfg.name}"."{a}"'))
            dropped, kept = cur.fetchone()
        assert dropped is None and kept is not None
        with source_db.cursor() as cur:   # the table that stays streams on
            cur.execute(f"UPDATE {a} SET qty = qty + 3")
        wait_until(lambda: run_dag(dag, stream_mode="available_now")["__run__"] == "success"
                   and _equal(source_db, target_db, cfg.name, a), 120, "the remaining table to stream on")
    finally:
        drop_source(source_db, a)
        drop_source(source_db, b)
