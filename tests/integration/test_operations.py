"""Operations against the real stack: the doctor passes on a healthy pipeline and flags each
misconfiguration as it is introduced; a replication slot lost while the pipeline was stopped is
recovered by the next sync run, which reloads by itself; low retention headroom alerts."""
from __future__ import annotations

import time
from contextlib import closing

import psycopg2
import pytest
from confluent_kafka.admin import AdminClient

import stackctl
from helpers import _set_topic_configs, drop_source, table_digest
from test_dags import airflow_env, dag_pipeline, make_table, run_dag  # noqa: F401 (fixture)
from tideline import state
from tideline.ops import doctor
from tideline.capture import coverage
from tideline.alerts import notify
from tideline.capture.connector import ConnectClient
from tideline.core.connections import get_connection
from tideline.core.debezium import connector_name
from tideline.load.full_load import FullLoad

pytestmark = pytest.mark.integration


def by_name(checks):
    return {f"{c.part} {c.name}": c for c in checks}


def failing(checks):
    return {f"{c.part} {c.name}" for c in checks if c.status == "fail"}


def wait_slot_inactive(source_db, slot, timeout=60):
    deadline = time.time() + timeout
    with source_db.cursor() as cur:
        while True:
            cur.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,))
            row = cur.fetchone()
            if row is None or not row[0]:
                return
            assert time.time() < deadline, f"slot {slot} still active"
            time.sleep(0.5)


def stop_connector(cfg, source_db):
    client = ConnectClient(get_connection("tideline_connect").http_base_url())
    client.stop(connector_name(cfg))
    deadline = time.time() + 60
    while client.status(connector_name(cfg))["connector"]["state"] != "STOPPED":
        assert time.time() < deadline
        time.sleep(0.5)
    wait_slot_inactive(source_db, cfg.slot_name)


def test_doctor_passes_healthy_and_flags_each_misconfiguration(spark, source_db, target_db, pipelines, unique_name):
    t, keyless = f"{unique_name}_doc", f"{unique_name}_nokey"
    make_table(source_db, t, 100)
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{keyless} (a int, b text)")
    try:
        cfg = pipelines.make([{"name": t}], capture=True)
        FullLoad(cfg, spark).run([t])
        healthy = doctor.run(cfg)
        assert failing(healthy) == set(), doctor.format_checks(healthy)
        checks = by_name(healthy)
        assert checks[f"source slot {cfg.slot_name}"].status == "pass"
        assert checks[f"connect connector {connector_name(cfg)}"].status == "pass"
        assert checks["target state schema"].status == "pass"

        topic = cfg.topic(t)
        admin = AdminClient({"bootstrap.servers": stackctl.kafka_bootstrap()})
        _set_topic_configs(admin, topic, {"min.insync.replicas": "2"})
        _set_topic_configs(admin, topic, {"retention.ms": str(3600 * 1000)})   # 1 h < 72 h allowed downtime
        checks = doctor.run(cfg)
        assert {f"kafka topic {topic}", f"kafka topic {topic} retention"} <= failing(checks)
        assert "min.insync.replicas above the replication factor" in by_name(checks)[f"kafka topic {topic}"].detail
        assert "shorter than the pipeline's allowed downtime" in by_name(checks)[f"kafka topic {topic} retention"].detail
        _set_topic_configs(admin, topic, {"min.insync.replicas": "1", "retention.ms": str(7 * 24 * 3600 * 1000)})

        stop_connector(cfg, source_db)
        checks = by_name(doctor.run(cfg))
        assert checks[f"connect connector {connector_name(cfg)}"].status == "warn"
        assert checks[f"source slot {cfg.slot_name}"].status == "warn"   # inactive: nobody reads it
        with source_db.cursor() as cur:
            cur.execute("SELECT pg_drop_replication_slot(%s)", (cfg.slot_name,))
        checks = doctor.run(cfg)
        assert f"source slot {cfg.slot_name}" in failing(checks)
        assert "changes made since it went were not captured" in by_name(checks)[f"source slot {cfg.slot_name}"].detail

        production = pipelines.make([{"name": t}, {"name": keyless}], create_topics=False,
                                    kafka={"durability": "production"})
        checks = doctor.run(production)
        assert f"source table {keyless}" in failing(checks)   # refused alone: no key to apply changes by
        assert "has no primary key" in by_name(checks)[f"source table {keyless}"].detail
        assert "replication factor below 3" in by_name(checks)[f"kafka topic {topic}"].detail
        # refused: left out of capture, so its topic is never made — and not asked for
        assert f"kafka topic {production.topic(keyless)}" not in by_name(checks)
    finally:
        drop_source(source_db, t, keyless)


def test_slot_lost_while_stopped_is_recovered_and_reloaded_by_the_next_run(
        airflow_env, webhook, source_db, target_db, pipelines, unique_name):
    t = f"{unique_name}_slot"
    make_table(source_db, t, 2000)
    try:
        cfg, dag_id = dag_pipeline(pipelines, t, alerts={"webhook_conn_id": "tideline_test_hook"})
        assert run_dag(dag_id, stream_mode="available_now")["__run__"] == "success"
        stop_connector(cfg, source_db)
        with source_db.cursor() as cur:
            cur.execute("SELECT pg_drop_replication_slot(%s)", (cfg.slot_name,))
            # written while nothing captures: only a reload can bring these to the target
            cur.execute(f"UPDATE {t} SET qty = qty + 100 WHERE id <= 500")
            cur.execute(f"INSERT INTO {t} SELECT g, 1, 'late' FROM generate_series(2001, 2500) g")
            cur.execute(f"DELETE FROM {t} WHERE id BETWEEN 1000 AND 1099")
        states = run_dag(dag_id, stream_mode="available_now")
        assert states["__run__"] == "success", states
        assert states["prepare"] == "success" and states["full_load"] == "success", states
        assert table_digest(source_db, "public", t, "id") == table_digest(target_db, cfg.name, t, "id")
        texts = [m["text"] for m in webhook]
        assert texts == [f"Tideline {cfg.name}: {t}: re-snapshot started automatically — replication slot "
                         f"{cfg.slot_name} no longer exists at the source: changes made while it was missing were "
                         f"never captured",
                         f"Tideline {cfg.name}: {t}: automatic re-snapshot finished; streaming resumes"], texts
        with target_db.cursor() as cur:
            cur.execute("SELECT count(*) FROM tideline.runs WHERE pipeline = %s AND kind = 'full_load' "
                        "AND outcome = 'succeeded'", (cfg.name,))
            assert cur.fetchone()[0] == 2
        with source_db.cursor() as cur:
            cur.execute("SELECT active IS NOT NULL FROM pg_replication_slots WHERE slot_name = %s", (cfg.slot_name,))
            assert cur.fetchone() == (True,)
            cur.execute(f"UPDATE {t} SET note = 'after' WHERE id <= 10")   # captured again
        deadline = time.time() + 120
        while table_digest(source_db, "public", t, "id") != table_digest(target_db, cfg.name, t, "id"):
            assert time.time() < deadline, "changes after the recovery did not arrive"
            assert run_dag(dag_id, stream_mode="available_now")["full_load"] == "skipped"
            time.sleep(2)
    finally:
        drop_source(source_db, t)


def test_headroom_alert_fires_when_retention_is_shortened_below_the_threshold(
        spark, airflow_env, webhook, source_db, target_db, pipelines, unique_name):
    t = f"{unique_name}_head"
    make_table(source_db, t, 100)
    try:
        cfg = pipelines.make([{"name": t}], capture=True,
                             alerts={"webhook_conn_id": "tideline_test_hook", "headroom_below_hours": 6})
        FullLoad(cfg, spark).run([t])
        with source_db.cursor() as cur:   # pending events the (stopped) stream still needs
            cur.execute(f"UPDATE {t} SET qty = qty + 1 WHERE id <= 20")
        bootstrap = stackctl.kafka_bootstrap()
        conn = psycopg2.connect(get_connection("tideline_target").postgres_dsn())

        def review():
            return coverage.review(cfg, conn, bootstrap, [t], lambda e, m, subject="": notify(cfg, e, m))
        try:
            deadline = time.time() + 60
            while not sum(coverage.check(cfg, conn, bootstrap, [t])[0].lag.values()):
                assert time.time() < deadline, "Debezium did not publish the changes"
                time.sleep(0.5)
            assert review() == [] and webhook == []   # a week of retention: plenty of headroom
            admin = AdminClient({"bootstrap.servers": bootstrap})
            _set_topic_configs(admin, cfg.topic(t), {"retention.ms": str(2 * 3600 * 1000)})
            assert review() == []
            assert len(webhook) == 1, webhook
            text = webhook[0]["text"]
            assert text.startswith(f"Tideline {cfg.name}: {t}: the oldest needed offset expires in 1h5")
            assert "alert threshold 6h" in text
            assert state.get(conn, cfg.name, t).phase == "streaming"   # an alert, not a reload
            # the watch_<pipeline> DAG says the same on its schedule, whether the stream runs or not
            assert run_dag(f"watch_{cfg.name}")["headroom"] == "success"
            assert len(webhook) == 2 and "the oldest needed offset expires in 1h5" in webhook[1]["text"]
            assert run_dag(f"watch_{cfg.name}")["headroom"] == "success"
            assert len(webhook) == 2   # the same condition again: not repeated within repeat_after_hours
        finally:
            conn.close()
    finally:
        drop_source(source_db, t)


def test_an_idle_pipeline_does_not_pin_the_sources_wal(spark, source_db, pipelines, unique_name):
    """Writes elsewhere in the source database must not pile up WAL behind an idle pipeline's slot:
    the connector's heartbeat row keeps a captured change flowing, so the slot confirms its position."""
    t, busy = f"{unique_name}_idle", f"{unique_name}_busy"
    make_table(source_db, t, 10)
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{busy} (id bigint, pad text)")   # not synced
    try:
        cfg = pipelines.make([{"name": t}], capture=True)
        with source_db.cursor() as cur:
            cur.execute(f"INSERT INTO public.{busy} SELECT g, repeat('x', 200) FROM generate_series(1, 100000) g")
            cur.execute("SELECT pg_current_wal_lsn()")
            after_writes = cur.fetchone()[0]
            deadline = time.time() + 90
            while True:
                cur.execute("SELECT confirmed_flush_lsn >= %s::pg_lsn, pg_size_pretty(pg_wal_lsn_diff("
                            "pg_current_wal_lsn(), restart_lsn)) FROM pg_replication_slots WHERE slot_name = %s",
                            (after_writes, cfg.slot_name))
                advanced, retained = cur.fetchone()
                if advanced:
                    break
                assert time.time() < deadline, f"the idle pipeline's slot still retains {retained} of WAL"
                time.sleep(1)
        # the heartbeat table is the capture role's (its DBA made it for it): read it as that role
        with closing(psycopg2.connect(stackctl.pg_url(stackctl.DATABASES["source"], stackctl.PG_CDC_USER,
                                                      stackctl.PG_CDC_PASS))) as cdc, cdc.cursor() as cur:
            while True:   # (another pipeline's heartbeat on the shared table may have come first)
                cur.execute(f"SELECT count(*) FROM public.{cfg.source.heartbeat_table} WHERE pipeline = %s",
                            (cfg.name,))
                if cur.fetchone()[0] == 1:
                    break
                assert time.time() < deadline, "the connector never wrote its heartbeat row"
                time.sleep(1)
                cdc.rollback()   # a fresh snapshot for the next look
    finally:
        drop_source(source_db, t, busy)


def test_the_doctor_judges_the_source_role_least_privilege_naming_the_grant(source_db, pipelines, unique_name):
    """Each role a user's DBA might give Tideline, asked the real database what it may do."""
    from tideline.engines.postgres.capture import role_checks
    t, role = f"{unique_name}_priv", f"r_{unique_name}"
    make_table(source_db, t, 10)
    super_url = stackctl.pg_url(stackctl.DATABASES["source"], stackctl.PG_SUPERUSER, stackctl.PG_SUPERPASS)
    admin = psycopg2.connect(super_url)
    admin.autocommit = True

    def judged(user: str, password: str) -> dict:
        conn = psycopg2.connect(stackctl.pg_url(stackctl.DATABASES["source"], user, password))
        try:
            with conn.cursor() as cur:
                return {c.status + " " + c.name: c for c in role_checks(cur, cfg)}
        finally:
            conn.close()
    try:
        cfg = pipelines.make([{"name": t}], create_topics=False,
                             source={"conn_id": "tideline_source", "schema": "public", "heartbeat_table": None})
        with admin.cursor() as cur:
            cur.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw'")
        # no REPLICATION, no SELECT, no publication it could make: each missing right named with its fix
        got = judged(role, "pw")
        assert got["fail role"].fix == f"ALTER ROLE {role} REPLICATION"
        assert got[f"fail privilege on public.{t}"].fix == f"GRANT SELECT ON public.{t} TO {role}"
        assert got[f"fail privilege on public.{t}"].table == t   # refuses that table alone
        assert f"CREATE PUBLICATION {cfg.publication_name} FOR TABLE public.{t}" in \
            got[f"fail publication {cfg.publication_name}"].fix
        # what a DBA gives it, and nothing more: pass
        with admin.cursor() as cur:
            cur.execute(f"ALTER ROLE {role} REPLICATION")
            cur.execute(f"GRANT SELECT ON public.{t} TO {role}")
            cur.execute(f"CREATE PUBLICATION {cfg.publication_name} FOR TABLE public.{t} "
                        f"WITH (publish_via_partition_root = true)")
            cur.execute(f"ALTER PUBLICATION {cfg.publication_name} OWNER TO {role}")
        got = judged(role, "pw")
        assert list(got) == ["pass role"], [c.describe() for c in got.values()]
        # more than needed warns: writing the table, or being a superuser
        with admin.cursor() as cur:
            cur.execute(f"GRANT DELETE, TRUNCATE ON public.{t} TO {role}")
        got = judged(role, "pw")
        assert got["warn role"].fix == f"REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON public.{t} FROM {role}"
        assert "may DELETE/TRUNCATE" in got["warn role"].detail
        assert "is a superuser" in judged(stackctl.PG_SUPERUSER, stackctl.PG_SUPERPASS)["warn role"].detail
        # the stack's own role owns the tables it made: it works, and the doctor says it is more than needed
        assert "owns (so may ALTER or DROP)" in judged(stackctl.PG_USER, stackctl.PG_PASS)["warn role"].detail
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP PUBLICATION IF EXISTS {cfg.publication_name}")
        drop_source(source_db, t)
        with admin.cursor() as cur:
            cur.execute(f"DROP ROLE IF EXISTS {role}")
        admin.close()


def test_the_stacks_own_roles_are_least_privileged_and_the_dbas_functions_do_only_their_job(
        source_db, pipelines, unique_name):
    """Tideline runs as tideline_cdc / tideline_sync, as a DBA would set it up: the publication and
    heartbeat table come from tideline_dba's two functions, and those refuse anything else."""
    from tideline import engines
    from tideline.engines.postgres.capture import role_checks
    t, t2, hidden = f"{unique_name}_a", f"{unique_name}_b", f"{unique_name}_hidden"
    make_table(source_db, t, 10)
    make_table(source_db, t2, 10)
    admin = stackctl.pg_connect(stackctl.DATABASES["source"])
    admin.autocommit = True
    with admin.cursor() as cur:   # a table the DBA never granted to the capture role
        cur.execute(f"CREATE TABLE public.{hidden} (id int PRIMARY KEY)")
    cdc = psycopg2.connect(stackctl.pg_url(stackctl.DATABASES["source"], stackctl.PG_CDC_USER,
                                           stackctl.PG_CDC_PASS))
    cdc.autocommit = True
    try:
        source = get_connection("tideline_source")
        assert source.login == stackctl.PG_CDC_USER
        assert get_connection("tideline_target").login == stackctl.PG_SYNC_USER
        cfg = pipelines.adopt(pipelines.make([{"name": t}], create_topics=False))
        engine = engines.for_source(source)
        assert engine.prepare_capture(cfg) == []
        cfg2 = pipelines.make([{"name": t}, {"name": t2}], create_topics=False)
        assert engine.prepare_capture(cfg2) == []   # a table added later: the function changes the publication
        with cdc.cursor() as cur:
            cur.execute("SELECT pubowner::regrole::text, pubviaroot, ARRAY(SELECT tablename::text FROM "
                        "pg_publication_tables WHERE pubname = %s ORDER BY 1) FROM pg_publication WHERE pubname = %s",
                        (cfg.publication_name, cfg.publication_name))
            assert cur.fetchone() == (stackctl.PG_CDC_USER, True, sorted([t, t2, "tideline_heartbeat"]))
            checks = role_checks(cur, cfg2)
            assert [(c.status, c.name) for c in checks] == [("pass", "role")], [c.describe() for c in checks]
        refused = {
            f"DELETE FROM public.{t}": "permission denied for table",
            f"DROP TABLE public.{t}": "must be owner of table",
            f"CREATE PUBLICATION tideline_{unique_name}_own FOR TABLE public.{t}": "permission denied for database",
            f"SELECT tideline_dba.publish('mine_{unique_name}', ARRAY['public.{t}'])": "only publications named tideline_",
            f"SELECT tideline_dba.publish('tideline_{unique_name}_x', ARRAY['public.{hidden}'])":
                f"may not SELECT public.{hidden}, so it may not publish it",
            f"SELECT tideline_dba.publish('tideline_{unique_name}_x', ARRAY['public.{t}; DROP TABLE public.{t}'])":
                "invalid name syntax",   # a table name is one name, never SQL
            f"SELECT tideline_dba.heartbeat_table('public', '{t}')": "is not a heartbeat table",
        }
        for statement, says in refused.items():
            with cdc.cursor() as cur, pytest.raises(psycopg2.Error, match=says):
                cur.execute(statement)
        with admin.cursor() as cur:   # a publication someone else owns is not the capture role's to change
            cur.execute(f"CREATE PUBLICATION tideline_{unique_name}_theirs FOR TABLE public.{t2}")
        with cdc.cursor() as cur, pytest.raises(psycopg2.Error, match="belongs to postgres, not tideline_cdc"):
            cur.execute(f"SELECT tideline_dba.publish('tideline_{unique_name}_theirs', ARRAY['public.{t}'])")
        # the target's role is no superuser and cannot read the source
        sync = psycopg2.connect(stackctl.pg_url(stackctl.DATABASES["source"], stackctl.PG_SYNC_USER,
                                                stackctl.PG_SYNC_PASS))
        with sync.cursor() as cur:
            cur.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
            assert cur.fetchone() == (False,)
            with pytest.raises(psycopg2.Error, match="permission denied for table"):
                cur.execute(f"SELECT * FROM public.{t}")
        sync.close()
    finally:
        with admin.cursor() as cur:
            for pub in (cfg.publication_name, f"tideline_{unique_name}_theirs"):
                cur.execute(f"DROP PUBLICATION IF EXISTS {pub}")
            cur.execute(f"DROP TABLE IF EXISTS public.{hidden}")
        admin.close()
        cdc.close()
        drop_source(source_db, t, t2)
