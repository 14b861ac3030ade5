"""A change the target refuses halts that table alone, loudly and down to the event; the other
tables of the pipeline keep streaming; once a person fixes the cause and resumes it, the table
continues from its own offsets — nothing lost, nothing doubled."""
from __future__ import annotations

import time

import pytest

from helpers import drop_source, rows_as_text, start_continuous, wait_until
from test_incremental import assert_batches_contiguous, make_items
from tideline import state
from tideline.core.errors import HaltedError
from tideline.load.full_load import FullLoad
from tideline.stream.run import IncrementalRun

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("stage_on", ["driver", "executors"])   # the halted table's rows left out of either
def test_refused_change_halts_one_table_and_the_others_go_on(spark, source_db, target_db, pipelines, unique_name,
                                                              webhook, stage_on):
    a, b, c = (f"{unique_name}_{x}" for x in ("a", "b", "c"))
    for t in (a, b, c):
        make_items(source_db, t, 200)
    try:
        cfg = pipelines.make([{"name": a}, {"name": b}, {"name": c}], partitions=1, capture=True,
                             alerts={"webhook_conn_id": "tideline_test_hook"}, stream={"stage_on": stage_on})
        FullLoad(cfg, spark).run([a, b, c])
        resume_at_load = {cfg.topic(t): dict(state.get(target_db, cfg.name, t).resume_offsets) for t in (a, b, c)}
        # a person adds, on the target only, a rule the source does not have
        with target_db.cursor() as cur:
            cur.execute(f'ALTER TABLE "{unique_name}".{b} ADD CONSTRAINT qty_small CHECK (qty < 1000)')
        with source_db.cursor() as cur:
            for t in (a, b, c):
                cur.execute(f"UPDATE {t} SET qty = qty + 1 WHERE id <= 20")
            cur.execute(f"UPDATE {b} SET qty = 5000, note = 'too big' WHERE id = 77")   # refused by the target
            for t in (a, b, c):
                cur.execute(f"INSERT INTO {t} (id, qty, note) VALUES (1000, 1, 'after')")
                cur.execute(f"DELETE FROM {t} WHERE id = 150")
        refused_offset = _offset_of_update(cfg, b)

        def others_equal():
            try:
                IncrementalRun(cfg, spark, "available_now").run()
            except HaltedError as exc:
                assert b in str(exc)
            return all(rows_as_text(source_db, "public", t, "id") == rows_as_text(target_db, unique_name, t, "id")
                       for t in (a, c)) and state.get(target_db, cfg.name, b).phase == "halted"
        wait_until(others_equal, 90, "tables a and c to converge while b halts")

        st = state.get(target_db, cfg.name, b)
        event = st.raw["last_error_event"]
        assert (event["topic"], event["partition"], event["offset"]) == (cfg.topic(b), 0, refused_offset)
        assert event["key"] == '{"id": "77"}' and event["op"] == "u" and event["sqlstate"] == "23514"
        assert (event["constraint"], event["column"], event["value"]) == ("qty_small", "qty", "5000")
        assert f"offset {refused_offset}" in st.last_error and "qty_small" in st.last_error
        assert "trigger the sync DAG" in st.last_error
        assert st.resume_offsets == resume_at_load[cfg.topic(b)]          # nothing of b applied after the halt
        with target_db.cursor() as cur:
            cur.execute(f'SELECT count(*) FROM "{unique_name}".{b} WHERE id = 1000')
            assert cur.fetchone()[0] == 0
        assert any(b in m["text"] and f"offset {refused_offset}" in m["text"] and "qty_small" in m["text"]
                   for m in webhook), webhook
        # a stream started now leaves the halted table alone and streams the others
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE {a} SET note = 'later' WHERE id = 5")
        wait_until(others_equal, 60, "a later change of a to arrive while b stays halted")

        # the person drops the rule and resumes the table (what the sync DAG's prepare does)
        with target_db.cursor() as cur:
            cur.execute(f'ALTER TABLE "{unique_name}".{b} DROP CONSTRAINT qty_small')
        state.set_phase(target_db, cfg.name, b, "streaming", None)
        IncrementalRun(cfg, spark, "available_now").run()
        for t in (a, b, c):
            assert rows_as_text(source_db, "public", t, "id") == rows_as_text(target_db, unique_name, t, "id"), t
        assert_batches_contiguous(target_db, cfg.name, resume_at_load)
    finally:
        drop_source(source_db, a, b, c)


def _offset_of_update(cfg, table: str) -> int:
    """The Kafka offset of the change to id 77 (partition 0), once Debezium has published it."""
    import json

    from confluent_kafka import Consumer, TopicPartition

    import stackctl
    consumer = Consumer({"bootstrap.servers": stackctl.kafka_bootstrap(), "group.id": f"probe-{table}",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(cfg.topic(table), 0, 0)])
        deadline = time.time() + 60
        while time.time() < deadline:
            msg = consumer.poll(1)
            if msg is None or msg.error() or msg.value() is None:
                continue
            after = (json.loads(msg.value()).get("payload") or json.loads(msg.value())).get("after") or {}
            if str(after.get("id")) == "77" and str(after.get("qty")) == "5000":
                return msg.offset()
        raise AssertionError(f"the change to id 77 of {table} did not reach Kafka")
    finally:
        consumer.close()


def test_with_dead_letters_a_refused_change_is_recorded_and_the_table_goes_on(spark, source_db, target_db,
                                                                             pipelines, unique_name):
    t = f"{unique_name}_dl"
    make_items(source_db, t, 100)
    try:
        cfg = pipelines.make([{"name": t}], partitions=1, capture=True, stream={"on_bad_message": "dead_letter"})
        FullLoad(cfg, spark).run([t])
        with target_db.cursor() as cur:
            cur.execute(f'ALTER TABLE "{unique_name}".{t} ADD CONSTRAINT note_short CHECK (length(note) < 20)')
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE {t} SET qty = -qty WHERE id <= 30")
            cur.execute(f"UPDATE {t} SET note = repeat('long ', 10) WHERE id IN (12, 61)")   # both refused
            cur.execute(f"INSERT INTO {t} (id, qty, note) VALUES (500, 5, 'fine')")
        refused = {12, 61}
        expected = [r for r in rows_as_text(source_db, "public", t, "id") if int(r[1:].split(",")[0]) not in refused]

        def applied():
            IncrementalRun(cfg, spark, "available_now").run()
            with target_db.cursor() as cur:
                cur.execute("SELECT count(*) FROM tideline.dead_letters WHERE pipeline = %s", (cfg.name,))
                return cur.fetchone()[0] == 2
        wait_until(applied, 60, "both refused changes in tideline.dead_letters")
        got = [r for r in rows_as_text(target_db, unique_name, t, "id") if int(r[1:].split(",")[0]) not in refused]
        assert got == expected
        assert state.get(target_db, cfg.name, t).phase == "streaming"
        with target_db.cursor() as cur:
            cur.execute("SELECT key, error FROM tideline.dead_letters WHERE pipeline = %s ORDER BY kafka_offset",
                        (cfg.name,))
            rows = cur.fetchall()
        assert [k for k, _ in rows] == ['{"id": "12"}', '{"id": "61"}']
        assert all("note_short" in e and "column note" in e for _, e in rows), rows
    finally:
        drop_source(source_db, t)



def test_a_column_the_stream_cannot_carry_added_mid_stream_halts_that_table_alone(spark, source_db, target_db,
                                                                                   pipelines, unique_name):
    """A running stream's batch describes all its tables' source catalog at once
    (engine.describe_many): one table the catalog now refuses (a `time with time zone` column
    added: Debezium would lose its offset) halts alone, naming the column, at its last committed
    offsets; the other table of the same batch is applied, and the stream goes on with it."""
    a, b = f"{unique_name}_a", f"{unique_name}_b"
    for t in (a, b):
        make_items(source_db, t, 100)
    run = None
    try:
        cfg = pipelines.make([{"name": a}, {"name": b}], partitions=1, capture=True,
                             stream={"trigger_interval_s": 0.5})
        FullLoad(cfg, spark).run([a, b])
        resume_b = dict(state.get(target_db, cfg.name, b).resume_offsets)
        run = IncrementalRun(cfg, spark, "continuous")   # started before the change: its start checks passed
        thread, ended = start_continuous(run)
        with source_db.cursor() as cur:
            cur.execute(f"ALTER TABLE {b} ADD COLUMN opens_at time with time zone")
            for t in (b, a):
                cur.execute(f"UPDATE {t} SET qty = qty + 1 WHERE id <= 10")
                cur.execute(f"INSERT INTO {t} (id, qty, note) VALUES (1000, 1, 'after')")
        wait_until(lambda: rows_as_text(source_db, "public", a, "id") == rows_as_text(target_db, unique_name, a, "id")
                   and state.get(target_db, cfg.name, b).phase == "halted", 90, "table a to converge while b halts")
        assert thread.is_alive(), ended   # the stream goes on with table a

        st = state.get(target_db, cfg.name, b)
        assert "opens_at (time with time zone)" in st.last_error and "cannot be streamed exactly" in st.last_error
        assert st.resume_offsets == resume_b                           # nothing of b applied
        with target_db.cursor() as cur:
            cur.execute(f'SELECT count(*) FROM "{unique_name}".{b} WHERE id = 1000')
            assert cur.fetchone()[0] == 0
    finally:
        if run is not None and run.query is not None and run.query.isActive:
            run.query.stop()
        drop_source(source_db, a, b)
