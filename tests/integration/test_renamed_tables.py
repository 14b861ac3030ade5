"""target_name and rename against the real stack (core.target_names): a table lands under the
target's names — its key renamed too — through the full load, the change stream (every kind of
change, a large out-of-line value Debezium leaves out, a key change, a column added at the
source), the change log, verify and repair; a name changed after the load reloads the table by
itself under the new names; removing it with drop_target drops the table under its target name.
From PostgreSQL and MariaDB, into PostgreSQL and Iceberg (partitioned on a renamed column)."""
from __future__ import annotations

import pytest

from helpers import drop_source, lake_settings, stream_until
from test_mariadb import maria  # noqa: F401  (the MariaDB source fixture)
from tideline import state
from tideline.core.connections import get_connection
from tideline.core.errors import ResnapshotRequired
from tideline.load.full_load import FullLoad
from tideline.stream.run import IncrementalRun
from tideline.verify import command as compare
from tideline.verify.compare import verify

pytestmark = pytest.mark.integration
BIG = "z" * 9000 + " 😀"   # stored out of line (TOAST): an update of another column leaves it out
COLUMNS = "id, email, big, amount, tags"


def _rows(conn, query: str) -> list[tuple]:
    with conn.cursor() as cur:
        cur.execute(query)
        out = cur.fetchall()
    conn.rollback() if not conn.autocommit else None
    return out


def test_a_renamed_table_loads_streams_logs_verifies_repairs_and_reloads_under_its_target_names(
        spark, source_db, target_db, pipelines, unique_name):
    t, landed = f"{unique_name}_people", f"{unique_name}_contacts"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, email text, big text, amount numeric(12,2), "
                    f"tags text[])")
        cur.execute(f"INSERT INTO public.{t} SELECT g, CASE g % 5 WHEN 0 THEN NULL WHEN 1 THEN '' ELSE 'u' || g || "
                    f"'@example.com ✓' END, 'small ' || g, CASE WHEN g % 7 = 0 THEN NULL ELSE g * 1.25 END, "
                    f"ARRAY['a' || g, NULL, ''] FROM generate_series(1, 300) g")
        cur.execute(f"UPDATE public.{t} SET big = %s WHERE id IN (7, 8)", (BIG,))
    source = f"SELECT row({COLUMNS})::text FROM public.{t} ORDER BY id"
    rename = {"id": "person_id", "email": "contact"}
    try:
        cfg = pipelines.make([{"name": t, "target_name": landed, "rename": rename, "changelog": True,
                               "metadata": ["op"]}], capture=True)
        schema = cfg.target_schema(t)
        target = f"SELECT row(person_id, contact, big, amount, tags)::text FROM {schema}.{landed} ORDER BY person_id"
        FullLoad(cfg, spark).run([t])
        assert _rows(target_db, target) == _rows(source_db, source)
        assert _rows(target_db, f"SELECT to_regclass('{schema}.{t}')") == [(None,)]   # nothing under the source's name
        assert state.get(target_db, cfg.name, t).raw["target_names"]["table"] == landed
        target_db.rollback()

        with source_db.cursor() as cur:   # every kind of change; 7's large value left out of its update
            cur.execute(f"UPDATE public.{t} SET email = 'new' || id || '@example.com' WHERE id <= 10")
            cur.execute(f"UPDATE public.{t} SET amount = -0.01 WHERE id = 8")
            cur.execute(f"DELETE FROM public.{t} WHERE id BETWEEN 200 AND 209")
            cur.execute(f"INSERT INTO public.{t} VALUES (1001, 'a@b.c', %s, 0, '{{}}')", (BIG,))
            cur.execute(f"UPDATE public.{t} SET id = 2020 WHERE id = 20")   # a key change
        stream_until(cfg, spark, lambda: _rows(target_db, target) == _rows(source_db, source),
                     "the renamed table to equal the source")
        assert _rows(target_db, f"SELECT big = %s FROM {schema}.{landed} WHERE person_id = 7".replace(
            "%s", "'" + BIG + "'")) == [(True,)]

        with source_db.cursor() as cur:   # a column added at the source: added under its own name
            cur.execute(f"ALTER TABLE public.{t} ADD COLUMN added text")
            cur.execute(f"UPDATE public.{t} SET added = 'later ' || id WHERE id <= 3")
        stream_until(cfg, spark, lambda: _rows(target_db, f"SELECT count(added) FROM {schema}.{landed}") == [(3,)],
                     "the added column to arrive")

        # the change log lives beside the target table; its images are the events' (the source's names)
        log = _rows(target_db, f"SELECT _tideline_op, key->>'id' FROM {schema}.{landed}__changes "
                               f"WHERE key->>'id' IN ('20', '2020') ORDER BY _tideline_offset")
        assert ("d", "20") in log and ("c", "2020") in log

        args = ["--pipeline", cfg.name, "--tables", t, "--pipelines-dir", str(pipelines.dir)]
        assert compare.main(args) == 0
        with target_db.cursor() as cur:
            cur.execute(f"UPDATE {schema}.{landed} SET contact = 'wrong' WHERE person_id = 42")
        assert compare.main(args) != 0
        from tideline.verify.repair import repair
        repair(cfg, get_connection(cfg.source.conn_id), get_connection(cfg.target.conn_id), t, key_from="40",
               key_to="45")
        assert _rows(target_db, target) == _rows(source_db, source) and compare.main(args) == 0

        # a name changed after the load: the target holds the old names, so the table reloads by itself
        cfg = pipelines.make([{"name": t, "target_name": landed, "rename": {**rename, "email": "mail"},
                               "changelog": True, "metadata": ["op"]}], create_topics=False)
        with pytest.raises(ResnapshotRequired, match="rename email: contact -> mail"):
            IncrementalRun(cfg, spark, "available_now").run()
        assert state.get(target_db, cfg.name, t).phase == "needs_resnapshot"
        target_db.rollback()
        FullLoad(cfg, spark).run([t])
        assert _rows(target_db, target.replace("contact,", "mail,")) == _rows(source_db, source)
        stream_until(cfg, spark, lambda: True, "a stream to start on the reloaded table")

        # removed from the YAML with drop_target: its table goes under the name it landed with
        from tideline.ops.lifecycle import remove_tables
        with source_db.cursor() as cur:
            cur.execute(f"CREATE TABLE public.{t}_kept (id int PRIMARY KEY)")
        kept = pipelines.make([{"name": f"{t}_kept"}], create_topics=False)
        done = remove_tables(kept, drop_target=True)
        assert f"target table {schema}.{landed} dropped" in done
        assert _rows(target_db, f"SELECT to_regclass('{schema}.{landed}')") == [(None,)]
    finally:
        drop_source(source_db, t, f"{t}_kept")


def test_a_renamed_mariadb_table_lands_under_its_names_in_postgresql_and_in_iceberg_partitioned_on_a_renamed_column(
        spark, target_db, pipelines, unique_name, lake, maria):   # noqa: F811 — the fixture
    from test_mariadb import _drop, _exec, mariadb_pipeline
    t = f"{unique_name}_m"
    _exec(maria, f"CREATE TABLE {t} (id int PRIMARY KEY, note varchar(50), amount decimal(12,2), at datetime(6))",
          f"INSERT INTO {t} SELECT seq, IF(seq % 5 = 0, NULL, CONCAT('n', seq, ' 😀')), seq * 1.25, "
          f"'2026-01-01 00:00:00' + INTERVAL seq SECOND FROM seq_1_to_200")
    tables = [{"name": t, "target_name": f"{t}_orders", "rename": {"id": "order_id", "note": "remark"}}]
    try:
        into_pg = mariadb_pipeline(pipelines, tables, capture=True)
        into_lake = mariadb_pipeline(pipelines, [{**tables[0], "partition_by": ["bucket(4, id)"]}],
                                     create_topics=False, **lake_settings(unique_name))
        schema = into_pg.target_schema(t)
        pg_rows = f"SELECT order_id, remark, amount::text FROM {schema}.{t}_orders ORDER BY 1"

        def source_rows() -> list[tuple]:
            with maria.cursor() as cur:
                cur.execute(f"SELECT id, note, CAST(amount AS CHAR) FROM {t} ORDER BY id")
                return [tuple(r) for r in cur.fetchall()]

        def lake_rows() -> list[tuple]:
            table = lake.pyiceberg_catalog().load_table((unique_name, f"{t}_orders"))
            return sorted((r["order_id"], r["remark"], None if r["amount"] is None else f"{r['amount']:.2f}")
                          for r in table.scan().to_arrow().to_pylist())
        FullLoad(into_pg, spark).run([t])
        FullLoad(into_lake, spark).run([t])
        assert _rows(target_db, pg_rows) == source_rows() == lake_rows()
        spec = lake.pyiceberg_catalog().load_table((unique_name, f"{t}_orders")).spec()
        assert [(f.name, str(f.transform)) for f in spec.fields] == [("order_id_bucket", "bucket[4]")]

        _exec(maria, f"UPDATE {t} SET note = 'changed ✓' WHERE id <= 10", f"DELETE FROM {t} WHERE id > 190",
              f"INSERT INTO {t} VALUES (500, 'new', 1.00, '2026-02-01 00:00:00')")
        stream_until(into_pg, spark, lambda: _rows(target_db, pg_rows) == source_rows(),
                     "the renamed MariaDB table to equal the source in PostgreSQL")
        stream_until(into_lake, spark, lambda: lake_rows() == source_rows(),
                     "the renamed MariaDB table to equal the source in Iceberg")
        [report] = verify(into_pg, get_connection(into_pg.source.conn_id),
                                  get_connection(into_pg.target.conn_id), [t])   # (its YAML is into_lake's now)
        assert report.equal and report.target_rows == len(source_rows())
    finally:
        _drop(maria, t)


def test_a_renamed_batch_table_merges_its_intervals_under_the_target_s_names(spark, source_db, target_db, pipelines,
                                                                             unique_name):
    from datetime import datetime, timedelta, timezone

    from tideline.load.batch import BatchSync
    t = f"{unique_name}_ev"
    day0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, v text)")
        cur.execute(f"INSERT INTO public.{t} SELECT g, %s::timestamptz + g * interval '1 hour', 'v ' || g || ' ✓' "
                    f"FROM generate_series(1, 47) g", (day0,))   # all inside the two days synced
    try:
        cfg = pipelines.make([{"name": t, "mode": "batch", "cursor_column": "updated_at", "target_name": "events",
                               "rename": {"id": "event_id", "v": "value"}}], create_topics=False)
        sync = BatchSync(cfg, spark)
        sync.run(day0, day0 + timedelta(days=1))
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE public.{t} SET v = 'changed', updated_at = %s WHERE id = 3",
                        (day0 + timedelta(days=1, hours=20),))
        sync.run(day0 + timedelta(days=1), day0 + timedelta(days=2))
        assert _rows(target_db, f"SELECT row(event_id, updated_at, value)::text FROM {cfg.name}.events ORDER BY 1") == \
            _rows(source_db, f"SELECT row(id, updated_at, v)::text FROM public.{t} ORDER BY 1")
    finally:
        drop_source(source_db, t)
