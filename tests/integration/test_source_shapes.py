"""The shapes real source tables have, against the real stack: carried exactly (row for row after
the full load and after changes through the stream), or refused before any work — per table,
with the reason and the fix in the table's state, while the pipeline's other tables go on."""
from __future__ import annotations

import time

import pytest

import stackctl

from helpers import drop_source, rows_as_text
from test_incremental import sync_until_equal
from tideline.capture.connector import ensure_capture
from tideline.core.connections import get_connection
from tideline.load.full_load import FullLoad

pytestmark = pytest.mark.integration


def capture(cfg):
    """The sync DAG's first task: refusals recorded in the target's state, then capture."""
    return ensure_capture(cfg, get_connection("tideline_kafka"), get_connection("tideline_connect"),
                          get_connection(cfg.source.conn_id), get_connection(cfg.target.conn_id))


def assert_equal(source_db, target_db, schema: str, table: str, order: str = "id"):
    assert rows_as_text(target_db, schema, table, order) == rows_as_text(source_db, "public", table, order)


def make_partitioned(source_db, t: str, rows: int = 1000) -> None:
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id int, region text NOT NULL, qty int, note text, "
                    f"PRIMARY KEY (id, region)) PARTITION BY LIST (region)")
        cur.execute(f"CREATE TABLE public.{t}_eu PARTITION OF public.{t} FOR VALUES IN ('eu')")
        cur.execute(f"CREATE TABLE public.{t}_us PARTITION OF public.{t} FOR VALUES IN ('us')")
        cur.execute(f"CREATE TABLE public.{t}_rest PARTITION OF public.{t} DEFAULT")
        cur.execute(f"INSERT INTO public.{t} SELECT g, (ARRAY['eu','us','apac'])[g % 3 + 1], g % 7, 'n' || g "
                    f"FROM generate_series(1, {rows}) g")


def test_a_partitioned_table_is_carried_as_one_table_through_load_and_stream(
        spark, source_db, target_db, pipelines, unique_name):
    t, plain = f"{unique_name}_pt", f"{unique_name}_plain"
    make_partitioned(source_db, t)
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{plain} (id int PRIMARY KEY, qty int)")
        cur.execute(f"INSERT INTO public.{plain} SELECT g, g FROM generate_series(1, 100) g")
    try:
        cfg = pipelines.adopt(pipelines.make([{"name": t}, {"name": plain}], create_topics=False))
        assert capture(cfg) == []
        FullLoad(cfg, spark).run([t, plain])
        assert_equal(source_db, target_db, cfg.name, t, "id, region")
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE public.{t} SET qty = qty + 100 WHERE id % 5 = 0")            # in place
            cur.execute(f"UPDATE public.{t} SET region = 'us' WHERE region = 'eu' AND id % 4 = 0")  # moves
            cur.execute(f"UPDATE public.{t} SET region = 'mars' WHERE id % 9 = 0 AND region <> 'mars'")  # to default
            cur.execute(f"DELETE FROM public.{t} WHERE id % 11 = 0")
            cur.execute(f"INSERT INTO public.{t} SELECT g, 'eu', 1, 'new 😀' FROM generate_series(2001, 2100) g")
            # a partition created mid-stream, its rows inserted through the root and into it directly
            cur.execute(f"CREATE TABLE public.{t}_jp PARTITION OF public.{t} FOR VALUES IN ('jp')")
            cur.execute(f"INSERT INTO public.{t} SELECT g, 'jp', 2, NULL FROM generate_series(3001, 3050) g")
            cur.execute(f"INSERT INTO public.{t}_jp VALUES (3100, 'jp', 3, 'direct')")
            cur.execute(f"UPDATE public.{plain} SET qty = -qty")
        sync_until_equal(cfg, spark, source_db, target_db, {t: "id, region", plain: "id"}, timeout=120)
        assert_equal(source_db, target_db, cfg.name, t, "id, region")
        with target_db.cursor() as cur:
            cur.execute(f'SELECT count(*) FROM "{cfg.name}".{t} WHERE region = %s', ("jp",))
            assert cur.fetchone()[0] == 51
    finally:
        drop_source(source_db, t, plain)


def test_a_publication_made_before_partitions_were_carried_is_repaired_and_the_table_reloaded(
        spark, source_db, target_db, pipelines, unique_name):
    t = f"{unique_name}_old"
    make_partitioned(source_db, t, rows=200)
    try:
        cfg = pipelines.adopt(pipelines.make([{"name": t}], create_topics=False))
        admin = stackctl.pg_connect(stackctl.DATABASES["source"])   # a DBA, for the capture role
        admin.autocommit = True
        with admin.cursor() as cur:   # what landed main's connector made: published by partition
            cur.execute(f"CREATE PUBLICATION {cfg.publication_name} FOR TABLE public.{t}")
            cur.execute(f"ALTER PUBLICATION {cfg.publication_name} OWNER TO {stackctl.PG_CDC_USER}")
        assert capture(cfg) == []           # never loaded: nothing to reload yet
        FullLoad(cfg, spark).run([t])
        with admin.cursor() as cur:
            cur.execute(f"ALTER PUBLICATION {cfg.publication_name} SET (publish_via_partition_root = false)")
        admin.close()
        assert capture(cfg) == [t]          # streaming while published by partition: reloaded
        with source_db.cursor() as cur:
            cur.execute("SELECT pubviaroot FROM pg_publication WHERE pubname = %s", (cfg.publication_name,))
            assert cur.fetchone()[0] is True
        with target_db.cursor() as cur:
            cur.execute("SELECT phase, last_error FROM tideline.table_state WHERE pipeline = %s", (cfg.name,))
            phase, error = cur.fetchone()
        assert phase == "needs_resnapshot" and "published by partition" in error
    finally:
        drop_source(source_db, t)


REFUSED = {
    "unlogged": ("CREATE UNLOGGED TABLE public.{t} (id int PRIMARY KEY)", "UNLOGGED",
                 "ALTER TABLE public.{t} SET LOGGED"),
    "view": ("CREATE VIEW public.{t} AS SELECT 1 AS id", "is a view", "sync the tables it reads from"),
    "matview": ("CREATE MATERIALIZED VIEW public.{t} AS SELECT 1 AS id", "is a materialized view",
                "sync the tables it reads from"),
    "nothing": ("CREATE TABLE public.{t} (id int PRIMARY KEY); ALTER TABLE public.{t} REPLICA IDENTITY NOTHING",
                "REPLICA IDENTITY NOTHING", "ALTER TABLE public.{t} REPLICA IDENTITY DEFAULT;"),
    "nokey": ("CREATE TABLE public.{t} (id int)", "has no primary key", "ADD PRIMARY KEY"),
    "parent": ("CREATE TABLE public.{t} (id int PRIMARY KEY); CREATE TABLE public.{t}_kid () INHERITS (public.{t})",
               "INHERITS", "name each child table"),
    "idx": ("CREATE TABLE public.{t} (id int PRIMARY KEY, u int NOT NULL UNIQUE); "
            "ALTER TABLE public.{t} REPLICA IDENTITY USING INDEX {t}_u_key", "USING INDEX",
            "REPLICA IDENTITY DEFAULT"),
    "timetz": ("CREATE TABLE public.{t} (id int PRIMARY KEY, at time with time zone)", "time with time zone",
               "exclude_columns"),
}


def test_tables_that_cannot_be_carried_are_refused_alone_and_the_others_load_and_stream(
        spark, source_db, target_db, pipelines, unique_name):
    good = f"{unique_name}_good"
    names = {kind: f"{unique_name}_{kind}" for kind in REFUSED}
    kid = f"{names['parent']}_kid"   # an INHERITS child: carried with its own rows
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{good} (id int PRIMARY KEY, note text)")
        cur.execute(f"INSERT INTO public.{good} SELECT g, 'g' || g FROM generate_series(1, 50) g")
        for kind, (ddl, _, _) in REFUSED.items():
            cur.execute(ddl.format(t=names[kind]))
        cur.execute(f"ALTER TABLE public.{kid} ADD PRIMARY KEY (id)")   # keys are not inherited
        cur.execute(f"INSERT INTO public.{kid} SELECT g FROM generate_series(1, 20) g")
        cur.execute(f"INSERT INTO public.{names['parent']} VALUES (1000)")
    try:
        cfg = pipelines.adopt(pipelines.make([{"name": good}, {"name": kid}, {"name": f"{unique_name}_missing"}]
                                             + [{"name": n} for n in names.values()], create_topics=False))
        assert capture(cfg) == []
        with target_db.cursor() as cur:
            cur.execute("SELECT table_name, phase, last_error FROM tideline.table_state WHERE pipeline = %s",
                        (cfg.name,))
            found = {name: (phase, error) for name, phase, error in cur.fetchall()}
        for kind, (_, reason, fix) in REFUSED.items():
            phase, error = found[names[kind]]
            assert phase == "refused", (kind, phase, error)
            assert reason in error and fix.format(t=names[kind]) in error, (kind, error)
        assert "does not exist" in found[f"{unique_name}_missing"][1]
        assert good not in found and kid not in found
        # the publication holds the carried tables alone (PostgreSQL would refuse an unlogged one)
        with source_db.cursor() as cur:
            cur.execute("SELECT tablename FROM pg_publication_tables WHERE pubname = %s", (cfg.publication_name,))
            assert {r[0] for r in cur.fetchall()} == {good, kid, "tideline_heartbeat"}
        # the load skips the refused tables (checked again) and loads the carried ones
        loaded = FullLoad(cfg, spark).run([t.name for t in cfg.tables])
        assert sorted(r.table for r in loaded) == sorted([good, kid])
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE public.{good} SET note = note || ' ✓'")
            cur.execute(f"DELETE FROM public.{kid} WHERE id < 5")
            cur.execute(f"INSERT INTO public.{kid} VALUES (500)")
        sync_until_equal(cfg, spark, source_db, target_db, {good: "id", kid: "id"})
        assert_equal(source_db, target_db, cfg.name, kid)   # its own rows, not the parent's
        # fixed at the source: no longer refused, loaded afresh by the next run
        with source_db.cursor() as cur:
            cur.execute(f"ALTER TABLE public.{names['unlogged']} SET LOGGED")
            cur.execute(f"INSERT INTO public.{names['unlogged']} VALUES (1), (2)")
        capture(cfg)
        with target_db.cursor() as cur:
            cur.execute("SELECT phase FROM tideline.table_state WHERE pipeline = %s AND table_name = %s",
                        (cfg.name, names["unlogged"]))
            assert cur.fetchone()[0] == "new"
        FullLoad(cfg, spark).run([names["unlogged"]])
        assert_equal(source_db, target_db, cfg.name, names["unlogged"])
    finally:
        with source_db.cursor() as cur:
            cur.execute(f"DROP VIEW IF EXISTS public.{names['view']}")
            cur.execute(f"DROP MATERIALIZED VIEW IF EXISTS public.{names['matview']}")
        drop_source(source_db, good, kid, *[n for k, n in names.items() if k not in ("view", "matview")])


def test_rows_of_16_mb_are_carried_and_a_row_over_the_limit_halts_its_table_with_key_and_size(
        spark, source_db, target_db, pipelines, unique_name):
    from tideline.capture.connector import capture_failure
    from tideline.core.errors import HaltedError
    from tideline.stream.run import IncrementalRun
    t = f"{unique_name}_big"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, n int, doc text, blob bytea, body jsonb)")
        cur.execute(f"INSERT INTO public.{t} VALUES (1, 0, repeat('ü', 8 * 1024 * 1024), NULL, NULL), "
                    f"(2, 0, NULL, decode(repeat('ab', 16 * 1024 * 1024), 'hex'), NULL), "
                    f"(3, 0, NULL, NULL, jsonb_build_object('k', repeat('x', 16 * 1024 * 1024))), (4, 0, 'small', NULL, NULL)")
    try:
        cfg = pipelines.adopt(pipelines.make([{"name": t}], create_topics=False))
        capture(cfg)
        FullLoad(cfg, spark).run([t])
        digest = "id, md5(coalesce(doc, '')), md5(coalesce(blob, '')), md5(coalesce(body::text, '')), n"
        with source_db.cursor() as cur:   # each big value changes: its whole 16 MB travels in the event
            cur.execute(f"UPDATE public.{t} SET n = n + 1, doc = doc || '!' WHERE id = 1")
            cur.execute(f"UPDATE public.{t} SET n = n + 1, blob = blob || '\\x00'::bytea WHERE id = 2")
            cur.execute(f"UPDATE public.{t} SET n = n + 1, body = body || '{{\"z\": 1}}' WHERE id = 3")
            cur.execute(f"INSERT INTO public.{t} VALUES (5, 0, repeat('€', 6 * 1024 * 1024), NULL, NULL)")
        sync_until_equal(cfg, spark, source_db, target_db, {t: "id"}, timeout=180)
        with source_db.cursor() as cur, target_db.cursor() as tcur:
            cur.execute(f"SELECT {digest} FROM public.{t} ORDER BY id")
            tcur.execute(f'SELECT {digest} FROM "{cfg.name}".{t} ORDER BY id')
            assert tcur.fetchall() == cur.fetchall()
        assert capture_failure(cfg, get_connection("tideline_connect")) is None
        # a row past kafka.max_message_mb (64): its table halts at it, naming key and size; capture runs on
        with source_db.cursor() as cur:
            cur.execute(f"INSERT INTO public.{t} VALUES (6, 0, repeat('y', 70 * 1024 * 1024), NULL, NULL)")
            cur.execute(f"UPDATE public.{t} SET n = 42 WHERE id = 4")
        deadline = time.time() + 90
        while True:
            try:
                IncrementalRun(cfg, spark, "available_now").run()
            except HaltedError:
                break
            assert time.time() < deadline, "a row too big for Kafka must halt its table"
            time.sleep(1)
        with target_db.cursor() as cur:
            cur.execute("SELECT phase, last_error, last_error_event FROM tideline.table_state WHERE pipeline = %s",
                        (cfg.name,))
            phase, error, event = cur.fetchone()
        assert phase == "halted" and "about 70.0 MB" in error and "kafka.max_message_mb" in error, error
        assert event["key"] == '{"id":"6"}' and "too large" in event["error"], event
        assert capture_failure(cfg, get_connection("tideline_connect")) is None
    finally:
        drop_source(source_db, t)


def test_quoted_mixed_case_unicode_and_reserved_names_are_carried(spark, source_db, target_db, pipelines, unique_name):
    from helpers import table_digest
    from tideline.stream.run import IncrementalRun
    schema, target_schema = f"{unique_name} Verkäufe", f"{unique_name} Ziel"
    lines, kaeufe, user = "Order Lines", "Käufe", "user"
    with source_db.cursor() as cur:
        cur.execute(f'CREATE SCHEMA "{schema}"')
        cur.execute(f'CREATE TABLE "{schema}"."{lines}" ("Line No" int PRIMARY KEY, "Select" text, '
                    f'"Ümlaut ✓" text, "MixedCase" int, "order" date)')
        cur.execute(f'INSERT INTO "{schema}"."{lines}" SELECT g, \'s\' || g, \'ü😀\' || g, g, DATE \'2026-01-01\' + g '
                    f'FROM generate_series(1, 200) g')
        cur.execute(f'CREATE TABLE "{schema}"."{kaeufe}" (id text PRIMARY KEY, "Straße" text)')
        cur.execute(f'INSERT INTO "{schema}"."{kaeufe}" VALUES (\'a\', \'x\'), (\'A\', \'y\'), (\'a \', \'trailing\'), '
                    f'(\'\', \'empty\'), (\'Straße\', \'ß\')')
        cur.execute(f'CREATE TABLE "{schema}"."{user}" (id int PRIMARY KEY, "group" text)')
        cur.execute(f'INSERT INTO "{schema}"."{user}" VALUES (1, \'admins\')')
        cur.execute("CREATE EXTENSION IF NOT EXISTS citext")   # a key that ignores case at the source
        cur.execute(f'CREATE TABLE "{schema}".ci (id citext PRIMARY KEY, v int)')
        cur.execute(f'INSERT INTO "{schema}".ci VALUES (\'Apfel\', 1), (\'ß\', 2), (\'b \', 3)')
    with target_db.cursor() as cur:
        cur.execute("CREATE EXTENSION IF NOT EXISTS citext")
    orders = {lines: '"Line No"', kaeufe: "id", user: "id", "ci": "id"}
    try:
        cfg = pipelines.adopt(pipelines.make([{"name": t} for t in orders], create_topics=False,
                                             source={"conn_id": "tideline_source", "schema": schema},
                                             target={"conn_id": "tideline_target", "schema": target_schema}))
        assert capture(cfg) == []
        FullLoad(cfg, spark).run(list(orders))
        with source_db.cursor() as cur:
            cur.execute(f'UPDATE "{schema}"."{lines}" SET "Select" = "Select" || \'!\', "MixedCase" = -"MixedCase" '
                        f'WHERE "Line No" % 3 = 0')
            cur.execute(f'DELETE FROM "{schema}"."{lines}" WHERE "Line No" % 7 = 0')
            cur.execute(f'INSERT INTO "{schema}"."{kaeufe}" VALUES (\'b  \', \'two spaces\')')
            cur.execute(f'UPDATE "{schema}"."{kaeufe}" SET "Straße" = \'changed\' WHERE id = \'A\'')
            cur.execute(f'UPDATE "{schema}"."{user}" SET "group" = \'users\'')
            cur.execute(f'UPDATE "{schema}".ci SET v = 10 WHERE id = \'APFEL\'')   # matches 'Apfel'
            cur.execute(f'INSERT INTO "{schema}".ci VALUES (\'c\', 4)')
            cur.execute(f'DELETE FROM "{schema}".ci WHERE id = \'SS\'')   # citext: 'ß' is not 'SS'; nothing

        def equal():
            return all(table_digest(source_db, schema, t, o) == table_digest(target_db, target_schema, t, o)
                       for t, o in orders.items())
        deadline = time.time() + 120
        while True:
            IncrementalRun(cfg, spark, "available_now").run()
            if equal():
                break
            assert time.time() < deadline, "names with spaces, case and unicode did not converge"
            time.sleep(1)
        for t, o in orders.items():
            assert rows_as_text(target_db, target_schema, t, o) == rows_as_text(source_db, schema, t, o)
    finally:
        with source_db.cursor() as cur:
            cur.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        with target_db.cursor() as cur:
            cur.execute(f'DROP SCHEMA IF EXISTS "{target_schema}" CASCADE')


def test_partitions_attached_with_rows_or_detached_reload_the_table_created_ones_just_stream(
        spark, source_db, target_db, pipelines, unique_name):
    from tideline.core.errors import ResnapshotRequired
    from tideline.stream.run import IncrementalRun
    t = f"{unique_name}_tree"
    make_partitioned(source_db, t, rows=300)
    try:
        cfg = pipelines.adopt(pipelines.make([{"name": t}], create_topics=False))
        capture(cfg)
        FullLoad(cfg, spark).run([t])
        with source_db.cursor() as cur:   # created as a partition: every row it gets is an event
            cur.execute(f"CREATE TABLE public.{t}_jp PARTITION OF public.{t} FOR VALUES IN ('jp')")
            cur.execute(f"INSERT INTO public.{t} VALUES (5000, 'jp', 1, 'new')")
        sync_until_equal(cfg, spark, source_db, target_db, {t: "id, region"})
        for change in (f"CREATE TABLE public.{t}_br (LIKE public.{t}); "   # a table with rows, then attached
                       f"INSERT INTO public.{t}_br VALUES (6000, 'br', 1, 'was never an event'); "
                       f"ALTER TABLE public.{t} ATTACH PARTITION public.{t}_br FOR VALUES IN ('br')",
                       f"ALTER TABLE public.{t} DETACH PARTITION public.{t}_us"):   # its rows leave silently
            with source_db.cursor() as cur:
                cur.execute(change)
            with pytest.raises(ResnapshotRequired, match="attached|detached"):
                IncrementalRun(cfg, spark, "available_now").run()
            with target_db.cursor() as cur:
                cur.execute("SELECT phase FROM tideline.table_state WHERE pipeline = %s", (cfg.name,))
                assert cur.fetchone()[0] == "needs_resnapshot"
            FullLoad(cfg, spark).run([t])     # what the sync DAG does by itself
            sync_until_equal(cfg, spark, source_db, target_db, {t: "id, region"})
            assert_equal(source_db, target_db, cfg.name, t, "id, region")
    finally:
        drop_source(source_db, t, f"{t}_us")


def test_tables_of_several_schemas_land_in_the_target_schemas_chosen_per_table(
        spark, source_db, target_db, pipelines, unique_name):
    from helpers import table_digest
    from tideline.stream.run import IncrementalRun
    home, eu, lake = f"{unique_name}_a", f"{unique_name}_eu", f"{unique_name}_lake"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE SCHEMA {eu}")
        cur.execute(f"CREATE TABLE public.{home} (id int PRIMARY KEY, v text)")
        cur.execute(f"CREATE TABLE {eu}.orders (id int PRIMARY KEY, v text)")
        cur.execute(f"INSERT INTO public.{home} SELECT g, 'home' FROM generate_series(1, 50) g")
        cur.execute(f"INSERT INTO {eu}.orders SELECT g, 'eu' FROM generate_series(1, 80) g")
    where = {home: ("public", unique_name), "orders": (eu, lake)}
    try:
        cfg = pipelines.adopt(pipelines.make([{"name": home}, {"name": "orders", "schema": eu, "target_schema": lake}],
                                             create_topics=False))
        assert cfg.topic("orders") == f"test.{unique_name}.{eu}.orders"
        capture(cfg)
        FullLoad(cfg, spark).run([home, "orders"])
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE {eu}.orders SET v = 'changed' WHERE id < 10")
            cur.execute(f"DELETE FROM {eu}.orders WHERE id > 70")
            cur.execute(f"INSERT INTO public.{home} VALUES (100, 'new')")
        deadline = time.time() + 120
        while not all(table_digest(source_db, s, t, "id") == table_digest(target_db, ts, t, "id")
                      for t, (s, ts) in where.items()):
            assert time.time() < deadline, "tables of two schemas did not converge"
            IncrementalRun(cfg, spark, "available_now").run()
        for t, (s, ts) in where.items():
            assert rows_as_text(target_db, ts, t) == rows_as_text(source_db, s, t)
        with source_db.cursor() as cur:   # the publication names each table in its own schema
            cur.execute("SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s",
                        (cfg.publication_name,))
            assert {(eu, "orders"), ("public", home)} <= set(cur.fetchall())
    finally:
        with source_db.cursor() as cur:
            cur.execute(f"DROP SCHEMA IF EXISTS {eu} CASCADE")
        drop_source(source_db, home)
        with target_db.cursor() as cur:
            cur.execute(f"DROP SCHEMA IF EXISTS {lake} CASCADE")


def test_a_failed_connector_is_an_incident_in_status_the_stream_and_never_caught_up(
        spark, source_db, target_db, pipelines, unique_name):
    from tideline.capture.connector import ConnectClient, capture_failure
    from tideline.core.debezium import connector_name
    from tideline.stream.run import IncrementalRun
    from tideline.ops.status import not_caught_up, pipeline_status, render
    t, role, admin = f"{unique_name}_cf", f"{unique_name}_cdc", None
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY)")
    try:
        # a login refused is retried for connect.retry_minutes (here 3 tries, 10 s apart), then the task FAILS
        cfg = pipelines.adopt(pipelines.make([{"name": t}], create_topics=False,
                                             connect={"conn_id": "tideline_connect", "retry_minutes": 0.5}))
        capture(cfg)
        FullLoad(cfg, spark).run([t])
        client = ConnectClient(get_connection("tideline_connect").http_base_url())
        config = client._call("GET", f"/connectors/{connector_name(cfg)}/config")
        # Connect checks a new config's login, so the task runs as a role whose password then changes
        admin = stackctl.pg_connect(stackctl.DATABASES["source"])
        admin.autocommit = True
        with admin.cursor() as cur:
            cur.execute(f"CREATE ROLE {role} LOGIN REPLICATION PASSWORD 'right'")
            cur.execute(f"GRANT SELECT ON public.{t} TO {role}")
        client.put_config(connector_name(cfg), {**config, "database.user": role, "database.password": "right"})
        with admin.cursor() as cur:
            cur.execute(f"ALTER ROLE {role} PASSWORD 'changed'")
        client._call("POST", f"/connectors/{connector_name(cfg)}/restart?includeTasks=true")
        deadline = time.time() + 120   # (while it restarts, it is reported as not capturing too)
        while "FAILED" not in (failure := capture_failure(cfg, get_connection("tideline_connect")) or ""):
            assert time.time() < deadline, f"a failed connector must be reported; last seen: {failure}"
            time.sleep(1)
        assert "FAILED" in failure and "password" in failure.lower(), failure
        rows = pipeline_status(cfg)
        assert "FAILED" in rows[0].capture_error and "CAPTURE FAILED" in render(cfg, rows)
        assert not_caught_up(cfg, rows)
        run = IncrementalRun(cfg, spark, "available_now")
        run.prepare()
        run.watch.check_capture()   # what a running stream does every 30 s
        with target_db.cursor() as cur:
            cur.execute("SELECT last_error FROM tideline.table_state WHERE pipeline = %s", (cfg.name,))
            assert cur.fetchone()[0].startswith("capture: connector")
        capture(cfg)   # the sync DAG's first task puts the right config back
        assert capture_failure(cfg, get_connection("tideline_connect")) is None
    finally:
        drop_source(source_db, t)
        if admin is not None:
            with admin.cursor() as cur:
                cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
                cur.execute(f"DROP ROLE IF EXISTS {role}")
            admin.close()


def test_a_partition_named_alone_is_carried_as_its_own_table(spark, source_db, target_db, pipelines, unique_name):
    t = f"{unique_name}_solo"
    make_partitioned(source_db, t, rows=300)
    try:
        cfg = pipelines.adopt(pipelines.make([{"name": f"{t}_eu"}], create_topics=False))
        capture(cfg)
        FullLoad(cfg, spark).run([f"{t}_eu"])
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE public.{t} SET qty = -qty WHERE region = 'eu' AND id % 2 = 0")   # through the root
            cur.execute(f"INSERT INTO public.{t}_eu VALUES (9000, 'eu', 1, 'direct')")
            cur.execute(f"UPDATE public.{t} SET region = 'us' WHERE region = 'eu' AND id % 5 = 0")  # leaves it
        sync_until_equal(cfg, spark, source_db, target_db, {f"{t}_eu": "id, region"})
        assert_equal(source_db, target_db, cfg.name, f"{t}_eu", "id, region")
    finally:
        drop_source(source_db, t)
