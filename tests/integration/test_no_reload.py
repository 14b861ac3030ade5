"""No reload without cause: a batch that folds several events of one row whose large (TOASTed,
out-of-line) value Debezium leaves out of the later ones — insert then update, update then update,
key change then update, in one transaction or several — is applied exactly, on both targets, and no table reloads. Only a
value that neither the batch nor the target has is a divergence (test_incremental)."""
from __future__ import annotations

import pytest

from helpers import drop_source, full_loads, rows_as_text, wait_until
from test_iceberg import iceberg_pipeline, lake_rows_equal
from tideline import kafka_offsets, state
from tideline.load.full_load import FullLoad
from tideline.stream.run import IncrementalRun

pytestmark = pytest.mark.integration

BIG = "repeat(md5(id::text), 40000)"   # ~1.3 MB of text: stored out of line


@pytest.mark.parametrize("kind", ["postgres", "iceberg"])
def test_events_of_one_row_folded_into_one_batch_keep_its_unchanged_large_value_and_reload_nothing(
        kind, spark, source_db, target_db, pipelines, unique_name, request):
    t = f"{unique_name}_fold"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, n int NOT NULL, doc text, meta jsonb)")
        cur.execute(f"INSERT INTO public.{t} SELECT id, 0, {BIG}, jsonb_build_object('k', {BIG}) "
                    f"FROM generate_series(1, 3) id")
    lake = request.getfixturevalue("lake") if kind == "iceberg" else None
    try:
        tables = [{"name": t}]
        cfg = (iceberg_pipeline(pipelines, unique_name, tables, capture=True) if lake
               else pipelines.make(tables, capture=True, partitions=1))
        FullLoad(cfg, spark).run([t])
        loaded = state.get(lake.connect() if lake else target_db, cfg.name, t)
        topic = cfg.topic(t)
        before = sum(kafka_offsets.end_offsets(pipelines.bootstrap(), topic).values())
        with source_db.cursor() as cur:
            # insert, then update another column: the update carries the placeholder
            cur.execute(f"INSERT INTO public.{t} VALUES (10, 0, repeat('ten', 500000), '{{\"k\": 1}}')")
            cur.execute(f"UPDATE public.{t} SET n = 1 WHERE id = 10")
            # update the large value, then twice another column
            cur.execute(f"UPDATE public.{t} SET doc = repeat('one', 500000) WHERE id = 1")
            cur.execute(f"UPDATE public.{t} SET n = n + 1 WHERE id = 1")
            cur.execute(f"UPDATE public.{t} SET n = n + 1 WHERE id = 1")
            # a key change whose row keeps its large value in the same transaction as a write of it
            cur.execute(f"BEGIN; UPDATE public.{t} SET doc = repeat('three', 300000) WHERE id = 3; "
                        f"UPDATE public.{t} SET n = 7 WHERE id = 3; COMMIT")
            # a key change, then an update of the new key: the new row's large values are in no event
            # and not in the target (the source's row now gives them: stream.source_fill)
            cur.execute(f"UPDATE public.{t} SET id = 20 WHERE id = 2")
            cur.execute(f"UPDATE public.{t} SET n = 5 WHERE id = 20")
        # every event on Kafka before the stream reads, so they fold into one batch
        wait_until(lambda: sum(kafka_offsets.end_offsets(pipelines.bootstrap(), topic).values()) >= before + 10, 60,
                   "the changes on Kafka")
        run = IncrementalRun(cfg, spark, "available_now")
        run.run()
        st = state.get(lake.connect() if lake else target_db, cfg.name, t)
        assert st.phase == "streaming" and st.last_error is None, st.last_error
        if lake:
            assert lake_rows_equal(source_db, lake, cfg.name, t)
        else:
            assert rows_as_text(target_db, unique_name, t, "id") == rows_as_text(source_db, "public", t, "id")
        runs = full_loads(lake.connect() if lake else target_db, cfg.name)
        assert runs == 1 and not st.raw["auto_reloads"], "the full load only: no automatic reload"
        assert st.epoch >= loaded.epoch
    finally:
        drop_source(source_db, t)


def test_a_key_changed_twice_before_capture_reads_it_reloads_nothing(spark, source_db, target_db, pipelines,
                                                                     unique_name):
    """Debezium reads a left-out value back from the source; a key changed again right after has
    no row to read back, so its create event keeps the placeholder — for a row the target never
    had. The source decides (stream.source_fill): it no longer has that key, so a later event of
    the key removes it, and the event is left out instead of reloading the table."""
    from tideline.capture.connector import ConnectClient
    from tideline.core.connections import get_connection
    from tideline.core.debezium import connector_name
    import stackctl
    t = f"{unique_name}_rekey"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, n int NOT NULL, doc text)")
        cur.execute(f"INSERT INTO public.{t} SELECT id, 0, {BIG} FROM generate_series(1, 3) id")
    try:
        # batches of 100 events, and 97 before the key changes: the first batch ends with the create
        # of key 20 (delete 2, its tombstone, create 20), the next one deletes it again
        cfg = pipelines.make([{"name": t}], capture=True, partitions=1, stream={"max_offsets_per_trigger": 100})
        FullLoad(cfg, spark).run([t])
        client = ConnectClient(get_connection(cfg.connect.conn_id).http_base_url())
        client.stop(connector_name(cfg))   # capture reads the changes only after both key changes
        admin = stackctl.pg_connect(stackctl.DATABASES["source"])
        admin.autocommit = True
        try:
            wait_until(lambda: _inactive(admin, cfg.slot_name), 60, "the slot to have no reader")
        finally:
            admin.close()
        topic = cfg.topic(t)
        before = sum(kafka_offsets.end_offsets(pipelines.bootstrap(), topic).values())
        with source_db.cursor() as cur:
            for _ in range(97):
                cur.execute(f"UPDATE public.{t} SET n = n + 1 WHERE id = 1")
            cur.execute(f"UPDATE public.{t} SET id = 20 WHERE id = 2")
            cur.execute(f"UPDATE public.{t} SET id = 30 WHERE id = 20")
            cur.execute(f"UPDATE public.{t} SET n = 9 WHERE id = 30")
        client.resume(connector_name(cfg))
        wait_until(lambda: sum(kafka_offsets.end_offsets(pipelines.bootstrap(), topic).values()) >= before + 104, 90,
                   "the changes on Kafka")
        IncrementalRun(cfg, spark, "available_now").run()
        st = state.get(target_db, cfg.name, t)
        assert st.phase == "streaming" and st.last_error is None and not st.raw["auto_reloads"], st.last_error
        assert rows_as_text(target_db, unique_name, t, "id") == rows_as_text(source_db, "public", t, "id")
        assert full_loads(target_db, cfg.name) == 1
    finally:
        drop_source(source_db, t)


def _inactive(conn, slot: str) -> bool:
    with conn.cursor() as cur:
        cur.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,))
        row = cur.fetchone()
    return row is not None and not row[0]
