"""Full load against the real PostgreSQL, Kafka and Spark: fidelity, consistency, atomicity, failure."""
from __future__ import annotations

import os
import signal
import threading
import time

import psycopg2
import pytest
from confluent_kafka import Producer

import stackctl
from tideline.core.errors import TargetError
from helpers import drop_source, rows_as_text, table_digest, wait_until
from tideline import state
from tideline.core.errors import ConfigError, SourceError
from tideline.load.full_load import FullLoad
from test_incremental import spark_submit

pytestmark = pytest.mark.integration

ROOT = stackctl.ROOT


def test_every_type_loads_equal_value_by_value(spark, source_db, target_db, pipelines, unique_name):
    t = f"{unique_name}_types"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TYPE {t}_mood AS ENUM ('ok', 'sad')")
        cur.execute(f"""CREATE TABLE public.{t} (
            id bigint PRIMARY KEY, n_exact numeric(38,10), n_free numeric, money_eur numeric(12,2),
            f4 real, f8 double precision, small smallint, flag boolean,
            ts timestamp, tstz timestamptz, d date, tm time, tmtz time with time zone, iv interval,
            j json, jb jsonb, u uuid, b bytea, tags text[], ints integer[], vc varchar(20), ch char(3),
            big text, mood {t}_mood)""")
        cur.execute(f"""INSERT INTO public.{t} VALUES
            (1, 1234567890123456789012345678.0123456789, 1e-30 + 123456789012345678901234567890.5,
             -0.01, 3.4028235e38, 'NaN', -32768, true,
             '2024-02-29 23:59:59.999999', '1999-12-31 23:59:59.123456+14', '0001-01-01', '24:00:00',
             '12:00+05:30', '1 year 2 mons -3 days 04:05:06.789', '{{"a": [1, 2.50, null]}}',
             '{{"ß": "Zoë \\\\ \\"quoted\\" \\t tab", "n": 1.000}}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
             '\\x00015c0a0d09ff', ARRAY['a,b', 'c"d', NULL, 'back\\slash', 'line
break'], ARRAY[1, NULL, -3], 'Grüße, 李', 'ab', repeat('x€', 1000000), 'sad'),
            (2, NULL, NULL, NULL, '-Infinity', 'Infinity', NULL, false, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, 'null', NULL, '\\x', '{{}}', '{{}}', '', NULL, '', NULL),
            (3, 0, 0, 0, 0, -0.0, 0, NULL, '1970-01-01', '1970-01-01 00:00:00+00', '2262-04-11', '00:00',
             '00:00-12', '0', '[]', '[]', '00000000-0000-0000-0000-000000000000', NULL, ARRAY[NULL]::text[],
             NULL, 'tab	and
newline\\N', '   ', '\\N', 'ok')""")
    try:
        # batch mode: tmtz (timetz) loads exactly; only the change stream cannot carry it (test_types)
        cfg = pipelines.make([{"name": t, "mode": "batch", "cursor_column": "id"}])
        [result] = FullLoad(cfg, spark).run([t])
        assert result.rows == 3
        assert rows_as_text(target_db, unique_name, t) == rows_as_text(source_db, "public", t)
        # every column has the source's exact type (enums become text: the type is not in the target)
        q = ("SELECT attname, format_type(atttypid, atttypmod), attnotnull FROM pg_attribute "
             "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum")
        with source_db.cursor() as s, target_db.cursor() as g:
            s.execute(q, (f"public.{t}",))
            g.execute(q, (f"{unique_name}.{t}",))
            expected = [(n, "text" if n == "mood" else typ, nn) for n, typ, nn in s.fetchall()]
            assert g.fetchall() == expected
            g.execute("SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'p'",
                      (f"{unique_name}.{t}",))
            assert g.fetchone()[0] == f"{t}_pkey"
    finally:
        drop_source(source_db, t)
        with source_db.cursor() as cur:
            cur.execute(f"DROP TYPE IF EXISTS {t}_mood")


def test_composite_text_key_and_keyless_table(spark, source_db, target_db, pipelines, unique_name):
    keyed, keyless = f"{unique_name}_ck", f"{unique_name}_nokey"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{keyed} (region text, day date, seq int, v text, PRIMARY KEY (region, day, seq))")
        cur.execute(f"INSERT INTO public.{keyed} SELECT r, date '2024-01-01' + (g % 50), g, md5(g::text) "
                    f"FROM generate_series(1, 20000) g, unnest(ARRAY['north', 'süd', 'O''Hare', 'zz']) r")
        cur.execute(f"CREATE TABLE public.{keyless} (a int, b text)")
        cur.execute(f"INSERT INTO public.{keyless} SELECT g % 100, 'dup' FROM generate_series(1, 30000) g")
    try:
        cfg = pipelines.make([{"name": keyed, "primary_key": ["region", "day", "seq"]}, {"name": keyless}])
        results = FullLoad(cfg, spark).run([keyed, keyless])
        # the keyless table is refused alone (changes are applied by key), before any work
        # 80,000 rows: two key ranges (a partition per 50,000 rows at most), split on the composite text key
        assert [(r.table, r.rows, r.partitions) for r in results] == [(keyed, 80000, 2)]
        order = "region, day, seq"
        assert table_digest(target_db, unique_name, keyed, order) == table_digest(source_db, "public", keyed, order)
        st = state.get(target_db, cfg.name, keyless)
        assert st.phase == "refused" and "has no primary key" in st.last_error and "ADD PRIMARY KEY" in st.last_error
        with target_db.cursor() as cur:
            cur.execute("SELECT to_regclass(%s)", (f"{unique_name}.{keyless}",))
            assert cur.fetchone()[0] is None
    finally:
        drop_source(source_db, keyed, keyless)


def transfer_worker(dsn: str, table: str, n_accounts: int, stop: threading.Event, done: list, errors: list):
    """Moves money between random accounts, one transaction per transfer: the total never changes."""
    import random
    conn = psycopg2.connect(dsn)
    rng = random.Random(7)
    try:
        while not stop.is_set():
            a, b = rng.randrange(1, n_accounts + 1), rng.randrange(1, n_accounts + 1)
            amount = rng.randint(1, 500)
            with conn, conn.cursor() as cur:
                cur.execute(f"UPDATE {table} SET balance = balance - %s WHERE id = %s", (amount, a))
                cur.execute(f"UPDATE {table} SET balance = balance + %s WHERE id = %s", (amount, b))
            done.append(1)
    except Exception as exc:  # surfaced by the test
        errors.append(exc)
    finally:
        conn.close()


def test_snapshot_is_consistent_under_concurrent_transfers(spark, source_db, target_db, pipelines, unique_name):
    t = f"{unique_name}_acct"
    n = 400_000
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, owner text, balance numeric(14,2) NOT NULL)")
        cur.execute(f"INSERT INTO public.{t} SELECT g, 'owner ' || g, 1000 FROM generate_series(1, {n}) g")
        cur.execute(f"ANALYZE public.{t}")
    invariant = n * 1000
    stop, done, errors = threading.Event(), [], []
    workers = [threading.Thread(target=transfer_worker,
                                args=(stackctl.pg_url(stackctl.DATABASES["source"]), f"public.{t}", n, stop, done,
                                      errors)) for _ in range(2)]
    try:
        cfg = pipelines.make([{"name": t}])
        for w in workers:
            w.start()
        time.sleep(0.5)
        before = len(done)
        [result] = FullLoad(cfg, spark).run([t])
        during = len(done) - before
    finally:
        stop.set()
        for w in workers:
            w.join()
    try:
        assert not errors, errors
        assert during > 50, f"only {during} transfers ran during the load; the test proves nothing"
        assert result.rows == n
        with target_db.cursor() as cur:
            cur.execute(f'SELECT sum(balance), count(*) FROM "{unique_name}".{t}')
            total, count = cur.fetchone()
        assert count == n
        assert total == invariant, f"loaded total {total} != invariant {invariant}: snapshot not consistent"
    finally:
        drop_source(source_db, t)


def test_reload_swaps_atomically_for_readers(spark, source_db, target_db, pipelines, unique_name):
    t = f"{unique_name}_swap"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, v text)")
        cur.execute(f"INSERT INTO public.{t} SELECT g, repeat('v', 50) FROM generate_series(1, 50000) g")
    try:
        cfg = pipelines.make([{"name": t}])
        FullLoad(cfg, spark).run([t])
        with source_db.cursor() as cur:
            cur.execute(f"INSERT INTO public.{t} SELECT g, 'new' FROM generate_series(50001, 120000) g")
        seen, errors, stop = set(), [], threading.Event()

        def reader():
            conn = psycopg2.connect(stackctl.pg_url(stackctl.DATABASES["target"]))
            conn.autocommit = True
            try:
                while not stop.is_set():
                    try:
                        with conn.cursor() as cur:
                            cur.execute(f'SELECT count(*) FROM "{unique_name}".{t}')
                            seen.add(cur.fetchone()[0])
                    except psycopg2.Error as exc:
                        errors.append(str(exc))
            finally:
                conn.close()

        readers = [threading.Thread(target=reader) for _ in range(2)]
        for r in readers:
            r.start()
        try:
            FullLoad(cfg, spark).run([t])
            time.sleep(0.3)
        finally:
            stop.set()
            for r in readers:
                r.join()
        assert not errors, errors[:3]
        assert seen == {50000, 120000}, f"readers saw row counts {sorted(seen)}"
    finally:
        drop_source(source_db, t)


def test_recorded_offsets_are_the_topic_end_offsets(spark, source_db, target_db, pipelines, unique_name, stack):
    t = f"{unique_name}_off"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY)")
        cur.execute(f"INSERT INTO public.{t} SELECT generate_series(1, 10)")
    try:
        cfg = pipelines.make([{"name": t}], partitions=3)
        producer = Producer({"bootstrap.servers": stack.kafka_bootstrap(), "acks": "all"})
        counts = {0: 5, 1: 0, 2: 12}
        for p, c in counts.items():
            for i in range(c):
                producer.produce(cfg.topic(t), key=str(i), value="x", partition=p)
        producer.flush(30)
        [result] = FullLoad(cfg, spark).run([t])
        assert result.offsets == counts
        st = state.get(target_db, cfg.name, t)
        assert st.phase == "streaming" and st.resume_offsets == counts and st.snapshot_rows == 10
        assert st.topic == cfg.topic(t)
        with target_db.cursor() as cur:
            cur.execute("SELECT kind, outcome, rows FROM tideline.runs WHERE pipeline = %s", (cfg.name,))
            assert cur.fetchall() == [("full_load", "succeeded", 10)]
    finally:
        drop_source(source_db, t)


def test_killed_load_leaves_target_and_state_unchanged_and_rerun_succeeds(
        stack, spark, source_db, target_db, pipelines, unique_name):
    t = f"{unique_name}_kill"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, v text, n numeric(10,2))")
        cur.execute(f"INSERT INTO public.{t} SELECT g, md5(g::text), g / 7.0 FROM generate_series(1, 1000) g")
    try:
        # two partitions: each COPY lasts long enough to be seen at work and killed (eight of
        # 62,500 rows each were done, in the driver while Spark started, between two looks)
        cfg = pipelines.make([{"name": t}], parallelism=2)
        FullLoad(cfg, spark).run([t])
        before_rows = table_digest(target_db, unique_name, t, "id")
        before_state = state.get(target_db, cfg.name, t).raw
        with source_db.cursor() as cur:
            cur.execute(f"INSERT INTO public.{t} SELECT g, repeat(md5(g::text), 8), g / 7.0 "
                        f"FROM generate_series(1001, 500000) g")   # a COPY of seconds; killed after 50,000 rows
        proc = spark_submit("full_load.py", cfg, env_extra={"TIDELINE_PIPELINES": str(pipelines.dir)})
        copied = 0
        deadline = time.time() + 180
        with target_db.cursor() as cur:
            while time.time() < deadline and proc.poll() is None:
                cur.execute("SELECT coalesce(sum(tuples_processed), 0) FROM pg_stat_progress_copy")
                copied = cur.fetchone()[0]
                if copied > 50_000:
                    break
                time.sleep(0.02)
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        assert copied > 50_000
        assert table_digest(target_db, unique_name, t, "id") == before_rows
        after_state = state.get(target_db, cfg.name, t).raw
        for key in ("phase", "resume_offsets", "snapshot_id", "snapshot_rows", "last_batch_id"):
            assert after_state[key] == before_state[key], key
        # the rerun cleans up after the killed one and lands everything
        [result] = FullLoad(cfg, spark).run([t])
        assert result.rows == 500_000
        assert table_digest(target_db, unique_name, t, "id") == table_digest(source_db, "public", t, "id")
        with target_db.cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_tables WHERE schemaname = %s AND tablename LIKE '%%shadow'",
                        (unique_name,))
            assert cur.fetchone()[0] == 0
            # the killed run is closed in the history as abandoned, not left 'running'
            cur.execute("SELECT outcome, detail FROM tideline.runs WHERE pipeline = %s ORDER BY run_id", (cfg.name,))
            runs = cur.fetchall()
            assert [o for o, _ in runs] == ["succeeded", "failed", "succeeded"]
            assert "abandoned" in runs[1][1]
    finally:
        drop_source(source_db, t)


def test_bad_input_gets_errors_that_name_it(spark, source_db, target_db, pipelines, unique_name, stack):
    keyless, hidden, no_topic = f"{unique_name}_nk", f"{unique_name}_hidden", f"{unique_name}_nt"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{keyless} (a int)")
    admin = psycopg2.connect(stackctl.pg_url(stackctl.DATABASES["source"], stackctl.PG_SUPERUSER,
                                             stackctl.PG_SUPERPASS))
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{hidden} (id int PRIMARY KEY)")
    try:
        cfg = pipelines.make([{"name": keyless, "primary_key": ["a"]}, {"name": hidden}])
        with pytest.raises(ConfigError, match="no table 'nope'"):
            FullLoad(cfg, spark).run(["nope"])
        with pytest.raises(SourceError, match=rf"{keyless} refused: .*{keyless} has no primary key.*ADD PRIMARY KEY"):
            FullLoad(cfg, spark).run([keyless])
        with pytest.raises(SourceError, match=rf"{hidden}.*no SELECT privilege.*GRANT SELECT"):
            FullLoad(cfg, spark).run([hidden])
        with source_db.cursor() as cur:
            cur.execute(f"CREATE TABLE public.{no_topic} (id int PRIMARY KEY)")
        missing_topic = pipelines.make([{"name": no_topic}], create_topics=False)
        with pytest.raises(SourceError, match=rf"topic '{missing_topic.topic(no_topic)}'.*does not exist"):
            FullLoad(missing_topic, spark).run([no_topic])
        # the failed run is in the history and the state names the error; no shadow is left behind
        st = state.get(target_db, missing_topic.name, no_topic)
        assert "does not exist" in st.last_error and st.phase == "new"
        with target_db.cursor() as cur:
            cur.execute("SELECT outcome, detail FROM tideline.runs WHERE pipeline = %s AND table_name = %s",
                        (missing_topic.name, no_topic))
            outcome, detail = cur.fetchone()
            assert outcome == "failed" and "does not exist" in detail
            cur.execute("SELECT count(*) FROM pg_tables WHERE schemaname = %s", (unique_name,))
            assert cur.fetchone()[0] == 0
    finally:
        drop_source(source_db, keyless, no_topic)
        with admin.cursor() as cur:
            cur.execute(f"DROP TABLE public.{hidden}")
        admin.close()


def test_reload_keeps_grants_comments_and_the_views_built_on_the_table(
        spark, source_db, target_db, pipelines, unique_name):
    t = f"{unique_name}_views"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id bigint PRIMARY KEY, qty int NOT NULL, note text)")
        cur.execute(f"INSERT INTO public.{t} SELECT g, g % 10, 'n' || g FROM generate_series(1, 1000) g")
    try:
        cfg = pipelines.make([{"name": t}])
        FullLoad(cfg, spark).run([t])
        s = f'"{cfg.name}"'
        with target_db.cursor() as cur:   # what analysts build on a synced table
            cur.execute(f"CREATE VIEW {s}.big AS SELECT id, qty FROM {s}.{t} WHERE qty >= 5")
            cur.execute(f"CREATE VIEW {s}.big_count WITH (security_barrier) AS SELECT count(*) AS n FROM {s}.big")
            cur.execute(f"CREATE MATERIALIZED VIEW {s}.per_qty AS SELECT qty, count(*) AS n FROM {s}.{t} GROUP BY qty")
            cur.execute(f"CREATE UNIQUE INDEX per_qty_qty ON {s}.per_qty (qty)")
            cur.execute(f"GRANT SELECT ON {s}.{t}, {s}.big, {s}.per_qty TO PUBLIC")
            cur.execute(f"COMMENT ON TABLE {s}.{t} IS 'synced by tideline'")
            cur.execute(f"COMMENT ON VIEW {s}.big IS 'rows with qty >= 5'")
        with source_db.cursor() as cur:
            cur.execute(f"INSERT INTO public.{t} SELECT g, 9, 'late' FROM generate_series(1001, 1100) g")
        FullLoad(cfg, spark).run([t])   # full reload: a new table is swapped in
        with target_db.cursor() as cur:
            cur.execute(f"SELECT n FROM {s}.big_count")
            assert cur.fetchone()[0] == 600   # 500 of the first 1000 + the 100 new rows
            cur.execute(f"SELECT n FROM {s}.per_qty WHERE qty = 9")
            assert cur.fetchone()[0] == 200   # recreated from the new rows
            cur.execute("SELECT c.relname, c.relacl::text, obj_description(c.oid, 'pg_class'), c.reloptions "
                        "FROM pg_class c WHERE c.relnamespace = %s::regnamespace ORDER BY 1", (cfg.name,))
            rels = {r[0]: r[1:] for r in cur.fetchall()}
        assert "=r/" in rels[t][0] and "=r/" in rels["big"][0] and "=r/" in rels["per_qty"][0]   # PUBLIC SELECT
        assert rels[t][1] == "synced by tideline" and rels["big"][1] == "rows with qty >= 5"
        assert rels["big_count"][2] == ["security_barrier=true"]
        assert "per_qty_qty" in rels
    finally:
        drop_source(source_db, t)


def test_copy_pipe_reports_the_side_that_failed_and_stores_nothing(stack, target_db, unique_name):
    """The COPY pipe of a PostgreSQL source: a source that fails mid-stream raises the source's
    error even though the target saw a clean end of data (nothing committed); a value the target
    refuses raises the target's error, not the broken pipe the source then sees."""
    from tideline.pipes.copy_pipe import SESSION_OPTIONS, pipe_copy
    t = f"{unique_name}_pipe"
    with target_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (n integer NOT NULL)")
    src = psycopg2.connect(stackctl.pg_url(stackctl.DATABASES["source"]), options=SESSION_OPTIONS)
    tgt = psycopg2.connect(stackctl.pg_url(stackctl.DATABASES["target"]), options=SESSION_OPTIONS)
    try:
        # 1. the source dies after ~200k rows: its error, and the target transaction rolls back
        with pytest.raises(psycopg2.errors.DivisionByZero):
            with tgt, src.cursor() as scur, tgt.cursor() as tcur:
                pipe_copy(scur, "COPY (SELECT CASE WHEN g = 200000 THEN g / 0 ELSE g END "
                                "FROM generate_series(1, 400000) g) TO STDOUT", tcur, f"COPY public.{t} FROM STDIN")
        src.rollback()
        # 2. the target refuses row 300,000 (far beyond the pipe's buffer): the target's error, naming it
        with pytest.raises(psycopg2.errors.InvalidTextRepresentation, match="not-a-number"):
            with tgt, src.cursor() as scur, tgt.cursor() as tcur:
                pipe_copy(scur, "COPY (SELECT CASE WHEN g = 300000 THEN 'not-a-number' ELSE g::text END "
                                "FROM generate_series(1, 400000) g) TO STDOUT", tcur, f"COPY public.{t} FROM STDIN")
        src.close()
        src = psycopg2.connect(stackctl.pg_url(stackctl.DATABASES["source"]), options=SESSION_OPTIONS)
        # 3. and a whole stream arrives, counted by both sides
        with tgt, src.cursor() as scur, tgt.cursor() as tcur:
            moved = pipe_copy(scur, "COPY (SELECT g FROM generate_series(1, 250000) g) TO STDOUT",
                              tcur, f"COPY public.{t} FROM STDIN")
        assert (moved.read, moved.stored) == (250000, 250000)
        with target_db.cursor() as cur:
            cur.execute(f"SELECT count(*), sum(n) FROM public.{t}")
            assert cur.fetchone() == (250000, 250000 * 250001 // 2)
    finally:
        src.close()
        tgt.close()
        with target_db.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS public.{t}")


def test_tables_load_side_by_side_and_one_that_fails_stops_only_itself(spark, source_db, target_db, pipelines,
                                                                        unique_name, monkeypatch):
    """spark.tables_at_once loads run at the same time in one Spark application; a table whose
    load fails (its target schema refuses the target role) fails alone, the others land — and a
    retry of the Airflow task loads only the one that failed."""
    for key, value in {"DAG_ID": f"sync_{unique_name}", "DAG_RUN_ID": "manual__retry", "TASK_ID": "full_load",
                       "TRY_NUMBER": "1"}.items():
        monkeypatch.setenv(f"AIRFLOW_CTX_{key}", value)
    good = [f"{unique_name}_g{i}" for i in range(5)]
    bad = f"{unique_name}_bad"
    with source_db.cursor() as cur:
        for i, t in enumerate([*good, bad]):
            cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, v text, at timestamptz)")
            cur.execute(f"INSERT INTO public.{t} SELECT g, repeat('ü', g % 9), now() - g * interval '1 s' "
                        f"FROM generate_series(1, {2000 + 30000 * i}) g")
    try:
        cfg = pipelines.make([*({"name": t} for t in good), {"name": bad, "target_schema": "information_schema"}],
                             spark={"parallelism": 2, "tables_at_once": 3})
        with pytest.raises(TargetError, match="cannot create tables in schema 'information_schema'"):
            FullLoad(cfg, spark).run([*good[:2], bad, *good[2:]])
        for t in good:
            assert table_digest(target_db, unique_name, t, "id") == table_digest(source_db, "public", t, "id")
            assert state.get(target_db, cfg.name, t).phase == "streaming"
        st = state.get(target_db, cfg.name, bad)
        assert st is None or st.phase != "streaming"
        with target_db.cursor() as cur:
            # side by side: some load started before another one ended
            cur.execute("SELECT count(*) FROM tideline.runs a JOIN tideline.runs b ON a.run_id < b.run_id "
                        "AND a.pipeline = b.pipeline AND b.started_at < a.ended_at AND a.started_at < b.ended_at "
                        "WHERE a.pipeline = %s AND a.kind = 'full_load' AND b.kind = 'full_load'", (cfg.name,))
            assert cur.fetchone()[0] > 0
        # the task's retry: the tables that landed stay as they are, the failed one is tried again
        monkeypatch.setenv("AIRFLOW_CTX_TRY_NUMBER", "2")
        with pytest.raises(TargetError, match="cannot create tables in schema 'information_schema'"):
            FullLoad(cfg, spark).run([*good[:2], bad, *good[2:]])
        with target_db.cursor() as cur:
            cur.execute("SELECT table_name, count(*) FROM tideline.runs WHERE pipeline = %s AND kind = 'full_load' "
                        "GROUP BY table_name", (cfg.name,))
            loads = dict(cur.fetchall())
        assert all(loads[t] == 1 for t in good) and loads.get(bad, 0) <= 2, loads
    finally:
        drop_source(source_db, *good, bad)


def _stats(target_db, schema: str, table: str) -> tuple[int, int, bool]:
    """(rows changed since the last analyze, columns with statistics, analyzed by anyone) of a table."""
    with target_db.cursor() as cur:
        cur.execute("SELECT n_mod_since_analyze, last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL "
                    "FROM pg_stat_user_tables WHERE schemaname = %s AND relname = %s", (schema, table))
        changed, analyzed = cur.fetchone() or (0, False)
        cur.execute("SELECT count(*) FROM pg_stats WHERE schemaname = %s AND tablename = %s", (schema, table))
        return changed, cur.fetchone()[0], analyzed


def _autovacuum() -> str:
    probe = psycopg2.connect(stackctl.pg_url(stackctl.DATABASES["target"]))
    try:
        with probe.cursor() as cur:
            cur.execute("SHOW autovacuum")
            return cur.fetchone()[0]
    finally:
        probe.close()


def test_a_loaded_table_gets_statistics_from_autovacuum_or_else_from_the_load(spark, source_db, target_db,
                                                                                pipelines, unique_name):
    """The load leaves a new table's statistics to autovacuum (its rows count as changes since an
    analyze that never happened, so autovacuum analyzes it within its naptime); on a server where
    autovacuum is off, the load analyzes the table itself before the swap."""
    t = f"{unique_name}_stats"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, v text)")
        cur.execute(f"INSERT INTO public.{t} SELECT g, 'v' || g % 7 FROM generate_series(1, 3000) g")
    superuser = stackctl.pg_connect()
    superuser.autocommit = True
    try:
        cfg = pipelines.make([{"name": t}])
        FullLoad(cfg, spark).run([t])
        deadline = time.monotonic() + 30   # the table's counters reach the statistics views within ~1 s
        while (found := _stats(target_db, unique_name, t)) and not (found[0] >= 3000 or found[2]) \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        changed, columns, analyzed = found
        assert changed >= 3000 or analyzed, "autovacuum would not see the loaded rows as changes to analyze"
        with superuser.cursor() as cur:
            cur.execute("ALTER SYSTEM SET autovacuum = off")
            cur.execute("SELECT pg_reload_conf()")
        deadline = time.monotonic() + 10   # new sessions see the reloaded setting
        while _autovacuum() != "off" and time.monotonic() < deadline:
            time.sleep(0.1)
        FullLoad(cfg, spark).run([t])
        changed, columns, analyzed = _stats(target_db, unique_name, t)
        assert columns == 2, "with autovacuum off the load must analyze the new table itself"
    finally:
        with superuser.cursor() as cur:
            cur.execute("ALTER SYSTEM RESET autovacuum")
            cur.execute("SELECT pg_reload_conf()")
        superuser.close()
        drop_source(source_db, t)


def test_sessions_kept_between_tables_that_the_server_dropped_are_replaced(spark, source_db, target_db,
                                                                          pipelines, unique_name):
    """A load keeps each finished table's sessions for the next table; when the server ended them
    in between (a restart, an administrator), the next table opens new ones instead of failing."""
    first, second = f"{unique_name}_k1", f"{unique_name}_k2"
    with source_db.cursor() as cur:
        for t in (first, second):
            cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, v text)")
            cur.execute(f"INSERT INTO public.{t} SELECT g, 'ü' || g FROM generate_series(1, 500) g")
    cfg = pipelines.make([{"name": first}, {"name": second}], spark={"tables_at_once": 1})
    load = FullLoad(cfg, spark)
    superuser = stackctl.pg_connect()
    superuser.autocommit = True
    try:
        load.load_tables([first])
        kept = [conn.get_backend_pid() for pair in load._idle for conn in pair]
        assert len(kept) == 2
        with superuser.cursor() as cur:
            cur.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) pid", (kept,))
        [result] = load.load_tables([second])
        assert result.rows == 500
        assert table_digest(target_db, unique_name, second, "id") == table_digest(source_db, "public", second, "id")
        assert all(conn.get_backend_pid() not in kept for pair in load._idle for conn in pair)
    finally:
        load.close()
        superuser.close()
        drop_source(source_db, first, second)


def test_the_driver_pipes_partitions_while_the_spark_session_starts(spark, source_db, target_db, pipelines,
                                                                     unique_name, monkeypatch):
    """A job's Spark session takes seconds to start; a piped load does not wait for it: the driver
    pipes key ranges itself until it is ready, then (a local master) half of what is left, Spark
    takes the others — each exactly once, in the load's one snapshot. A load of one range is not held up by a session still starting."""
    from tideline import spark_session
    from tideline.load import copy_rows
    t = f"{unique_name}_early"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, v text, at timestamptz)")
        cur.execute(f"INSERT INTO public.{t} SELECT g, 'Zoë ' || g, now() - g * interval '1 s' "
                    f"FROM generate_series(1, 200000) g")
    release = threading.Event()
    by_driver = []
    real_copier = copy_rows.make_pipe_copier

    def recording_copier(*args, **kwargs):
        copy = real_copier(*args, **kwargs)
        if not args[-1]:          # Spark's side: runs in its Python workers
            return copy

        def driver_copy(items):
            for figures in copy(items):
                by_driver.append(figures["partition"])
                yield figures
        return driver_copy

    def slow_start(app_name, **kwargs):   # ready once the driver has piped its range
        release.wait(120)
        return spark

    monkeypatch.setattr(copy_rows, "make_pipe_copier", recording_copier)
    monkeypatch.setattr(spark_session, "get_session", slow_start)
    try:
        starting = spark_session.SessionStarting("test-early")
        def release_once_the_driver_piped() -> None:
            try:
                wait_until(lambda: by_driver, 120, "the driver to pipe a range", every=0.05)
            finally:
                release.set()
        threading.Thread(target=release_once_the_driver_piped, daemon=True).start()
        [result] = FullLoad(pipelines.make([{"name": t}], parallelism=4), starting).run([t])
        assert result.rows == 200000 and result.partitions == 4
        # the session is let go once range 0 is in (the driver may have taken a range or two more by
        # the time it is ready: 50,000 rows pipe in ~0.2 s); then (a local master) the driver keeps
        # the last of what is left, Spark takes the rest (the load checks every row landed once)
        assert by_driver in ([0, 3], [0, 1, 3], [0, 1, 2]), by_driver
        assert rows_as_text(target_db, unique_name, t) == rows_as_text(source_db, "public", t)

        # one range (parallelism 1) and a session that never becomes ready: nothing waits for it
        release.clear()
        by_driver.clear()
        monkeypatch.setattr(spark_session, "get_session", lambda app_name, **kwargs: release.wait(120) and spark)
        never = spark_session.SessionStarting("test-never")
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE public.{t} SET v = v || ' again' WHERE id % 7 = 0")
        [result] = FullLoad(pipelines.make([{"name": t}], parallelism=1, create_topics=False), never).run([t])
        assert result.rows == 200000 and by_driver == [0] and not never.ready()
        assert rows_as_text(target_db, unique_name, t) == rows_as_text(source_db, "public", t)
    finally:
        release.set()
        drop_source(source_db, t)
