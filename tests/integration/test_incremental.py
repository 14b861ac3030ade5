"""The change stream against real PostgreSQL, Debezium on Connect, Kafka and Spark: exactly once,
through crashes, zombies, schema drift, lost offsets and bad messages."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid

import psycopg2
import pytest
from confluent_kafka import Producer

import stackctl
from helpers import Writer, catching_up, drop_source, let_retention_delete, start_continuous, table_digest
from tideline import state
from tideline.core.errors import (EXIT_FENCED, EXIT_RESNAPSHOT, DataLossError, FencedError, HaltedError,
                                   ResnapshotRequired, SourceError)
from tideline.load.full_load import FullLoad
from tideline.stream.run import IncrementalRun
from tideline.spark_session import driver_conf

pytestmark = pytest.mark.integration
ROOT = stackctl.ROOT
SOURCE_URL = stackctl.pg_url(stackctl.DATABASES["source"])


def digests_equal(source_db, target_db, schema, tables: dict[str, str]) -> bool:
    return all(table_digest(source_db, "public", t, order) == table_digest(target_db, schema, t, order)
               for t, order in tables.items())


def sync_until_equal(cfg, spark, source_db, target_db, tables: dict[str, str], timeout: float = 90):
    """Applies what Kafka holds (availableNow) until the target equals the source: Debezium is
    asynchronous, so equality is reached, not assumed."""
    deadline = time.time() + timeout
    while True:
        IncrementalRun(cfg, spark, "available_now").run()
        if digests_equal(source_db, target_db, cfg.name, tables):
            return
        if time.time() > deadline:
            diffs = {t: (table_digest(source_db, "public", t, o), table_digest(target_db, cfg.name, t, o))
                     for t, o in tables.items()}
            raise AssertionError(f"target did not converge to the source within {timeout}s: {diffs}")
        time.sleep(1)


JOB_KINDS = {"incremental.py": "stream", "full_load.py": "load", "batch_sync.py": "batch", "maintain.py": "load"}


def spark_submit(job: str, cfg, *args: str, env_extra: dict | None = None, master: str = "local[2]",
                 submit_args: tuple[str, ...] = ()) -> subprocess.Popen:
    """`job` for pipeline `cfg` as the sync DAG submits it (dag_factory.spark_submission): its
    kind's Spark settings (a stream's collector and compiler) and memory environment, the
    target's jars, what the driver's host adds (driver_conf)."""
    from tideline.airflow.dag_factory import spark_submission
    how = spark_submission(cfg, JOB_KINDS[job])
    env = dict(os.environ, **how["env_vars"], **(env_extra or {}))
    return subprocess.Popen([str(stackctl.VENV_BIN / "spark-submit"), "--master", master, "--jars", how["jars"],
                             *[x for k, v in driver_conf(how["conf"]).items() for x in ("--conf", f"{k}={v}")],
                             *submit_args, str(ROOT / "spark_jobs" / job), "--pipeline", cfg.name, *args],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def batches(target_db, pipeline: str) -> list[tuple]:
    with target_db.cursor() as cur:
        cur.execute("SELECT batch_id, start_offsets, end_offsets FROM tideline.batches WHERE pipeline = %s "
                    "ORDER BY batch_id", (pipeline,))
        return cur.fetchall()


def kill_streams_mid_batch(cfg, target_db, env_extra: dict, times: int, rng, pause_s: float = 2.0) -> None:
    """Run the pipeline's stream `times` times, each killed (-9, its whole process group) at a
    random moment up to pause_s after it committed a batch of its own: sometimes between batches,
    sometimes in the middle of the next one's commit."""
    for _ in range(times):
        proc = spark_submit("incremental.py", cfg, env_extra=env_extra)
        start, deadline = len(batches(target_db, cfg.name)), time.time() + 120
        while time.time() < deadline and len(batches(target_db, cfg.name)) == start:
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            time.sleep(0.2)
        time.sleep(rng.uniform(0.0, pause_s))
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


def assert_batches_contiguous(target_db, pipeline: str, resume_at_load: dict[str, dict[int, int]]):
    """Batch ids 1..N without gaps or repeats, and each partition's applied offset ranges follow
    each other exactly from the full load's position: nothing skipped, nothing applied twice."""
    rows = batches(target_db, pipeline)
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1))
    position = {t: dict(p) for t, p in resume_at_load.items()}
    for batch_id, start, end in rows:
        for topic, parts in start.items():
            for p, first in parts.items():
                assert first == position[topic].get(int(p), 0), (batch_id, topic, p, first, position[topic])
                position[topic][int(p)] = end[topic][p]


def make_items(source_db, table: str, rows: int) -> None:
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{table} (id bigint PRIMARY KEY, qty int NOT NULL, note text, "
                    f"price numeric(12,2) DEFAULT 1.50)")
        cur.execute(f"INSERT INTO public.{table} (id, qty, note) SELECT g, g % 100, 'row ' || g "
                    f"FROM generate_series(1, {rows}) g")


def test_all_kinds_of_change_apply_exactly(spark, source_db, target_db, pipelines, unique_name):
    t, big, link = f"{unique_name}_chg", f"{unique_name}_toast", f"{unique_name}_link"
    make_items(source_db, t, 1000)
    with source_db.cursor() as cur:
        # a link table, all key: its changes are inserts and deletes only (nothing to update)
        cur.execute(f"CREATE TABLE public.{link} (a int, b text, PRIMARY KEY (a, b))")
        cur.execute(f"INSERT INTO public.{link} SELECT g % 10, 'b' || g FROM generate_series(1, 50) g")
        cur.execute(f"CREATE TABLE public.{big} (id int PRIMARY KEY, counter int, doc text, meta jsonb, "
                    f"blob bytea, tags text[])")
        cur.execute(f"INSERT INTO public.{big} SELECT g, 0, repeat(md5(g::text), 40000), "
                    f"jsonb_build_object('k', repeat('x', 300000)), decode(repeat(md5(g::text), 30000), 'hex'), "
                    f"ARRAY[repeat('t', 200000)] FROM generate_series(1, 3) g")
    try:
        cfg = pipelines.make([{"name": t}, {"name": big}, {"name": link}], capture=True)
        FullLoad(cfg, spark).run([t, big, link])
        with source_db.cursor() as cur:
            cur.execute(f"INSERT INTO {t} (id, qty, note) VALUES (5000, 1, 'new'), (5001, 2, NULL)")
            cur.execute(f"UPDATE {t} SET qty = qty * 2, price = 9.99 WHERE id <= 100")
            cur.execute(f"DELETE FROM {t} WHERE id BETWEEN 101 AND 150")
            cur.execute(f"UPDATE {t} SET id = id + 100000 WHERE id BETWEEN 200 AND 210")   # key updates
            cur.execute(f"INSERT INTO {t} (id, qty) VALUES (200, 7)")                     # reuse a moved key
            cur.execute(f"DELETE FROM {t} WHERE id = 5001")
            cur.execute(f"INSERT INTO {t} (id, qty, note) VALUES (5001, 3, 'again')")      # delete + re-insert
            # one 100k-row transaction
            cur.execute(f"BEGIN; INSERT INTO {t} (id, qty, note) SELECT g, 1, 'bulk' FROM generate_series(200001, "
                        f"300000) g; UPDATE {t} SET note = 'bulk2' WHERE id BETWEEN 200001 AND 200100; COMMIT")
            # TOASTed columns unchanged while another column changes: Debezium sends a placeholder
            cur.execute(f"UPDATE {big} SET counter = counter + 1")
            cur.execute(f"UPDATE {big} SET counter = counter + 1, doc = 'short now' WHERE id = 2")
            cur.execute(f"DELETE FROM {link} WHERE a = 3")
            cur.execute(f"INSERT INTO {link} VALUES (3, 'again'), (11, 'new')")
            cur.execute(f"UPDATE {link} SET b = b || '!' WHERE a = 4")             # a key change: delete + insert
        sync_until_equal(cfg, spark, source_db, target_db, {t: "id", big: "id", link: "a, b"}, timeout=120)
        with target_db.cursor() as cur:
            cur.execute(f'SELECT count(*) FROM "{unique_name}".{big} WHERE doc LIKE %s OR meta::text LIKE %s',
                        ("%debezium%", "%debezium%"))
            assert cur.fetchone()[0] == 0
    finally:
        drop_source(source_db, t, big, link)


def test_an_unchanged_large_value_for_a_row_the_target_lacks_is_read_back_and_the_row_restored(
        spark, source_db, target_db, pipelines, unique_name):
    """An update whose TOASTed column did not change carries Debezium's placeholder instead of the
    value; Debezium reads the value back from the source's row (core.debezium), so a row the
    target lacks (someone deleted it there) is written whole again — no divergence, no reload."""
    t = f"{unique_name}_gone"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, counter int, doc text)")
        cur.execute(f"INSERT INTO public.{t} SELECT g, 0, repeat(md5(g::text), 40000) FROM generate_series(1, 3) g")
    try:
        cfg = pipelines.make([{"name": t}], capture=True)
        FullLoad(cfg, spark).run([t])
        with target_db.cursor() as cur:
            cur.execute(f'DELETE FROM "{unique_name}".{t} WHERE id = 2')
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE {t} SET counter = counter + 1")   # doc unchanged: a placeholder in each event
        sync_until_equal(cfg, spark, source_db, target_db, {t: "id"})
        st = state.get(target_db, cfg.name, t)
        assert st.phase == "streaming" and not st.raw["auto_reloads"], st.last_error
    finally:
        drop_source(source_db, t)


def test_handover_under_load(spark, source_db, target_db, pipelines, unique_name):
    t = f"{unique_name}_ho"
    make_items(source_db, t, 200_000)
    writer = Writer(f"public.{t}", 200_001, pause=0.001)
    try:
        # events keep only source.ts_ms (kafka.source_fields, Tideline's SlimSource transform in the connector)
        cfg = pipelines.make([{"name": t}], partitions=3, capture=True, kafka={"source_fields": ["ts_ms"]})
        writer.start()
        time.sleep(1)
        before = writer.count
        [loaded] = FullLoad(cfg, spark).run([t])
        assert writer.count - before > 50, "the writer must keep writing through the snapshot"
        IncrementalRun(cfg, spark, "available_now").run()
        IncrementalRun(cfg, spark, "available_now").run()
        writer.stop()
        sync_until_equal(cfg, spark, source_db, target_db, {t: "id"})
        assert_batches_contiguous(target_db, cfg.name, {cfg.topic(t): loaded.offsets})
        assert set(first_event(pipelines.bootstrap(), cfg.topic(t))["source"]) == {"ts_ms"}
    finally:
        writer.stop_event.set()
        drop_source(source_db, t)


def first_event(bootstrap: str, topic: str) -> dict:
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"peek-{uuid.uuid4()}", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        msg = consumer.poll(30)
        assert msg is not None and not msg.error(), f"no event on {topic} partition 0"
        return json.loads(msg.value())
    finally:
        consumer.close()


def test_kill_9_at_random_moments_loses_and_duplicates_nothing(spark, source_db, target_db, pipelines, unique_name):
    t = f"{unique_name}_crash"
    make_items(source_db, t, 20_000)
    writer = Writer(f"public.{t}", 20_001, seed=5, pause=0.001)
    rng = random.Random(42)
    try:
        cfg = pipelines.make([{"name": t}], partitions=2, capture=True, stream={"max_offsets_per_trigger": 500,
                                                                                "trigger_interval_s": 0.5})
        [loaded] = FullLoad(cfg, spark).run([t])
        writer.start()
        kill_streams_mid_batch(cfg, target_db, {"TIDELINE_PIPELINES": str(pipelines.dir)}, 5, rng)
        writer.stop()
        sync_until_equal(catching_up(cfg), spark, source_db, target_db, {t: "id"})
        assert len(batches(target_db, cfg.name)) >= 5
        assert_batches_contiguous(target_db, cfg.name, {cfg.topic(t): loaded.offsets})
    finally:
        writer.stop_event.set()
        drop_source(source_db, t)


def test_a_batch_fences_and_advances_all_its_tables_in_one_statement_each(target_db, unique_name):
    """A stream's batch locks and checks the state rows of every table it streams in one statement,
    and writes every new position in one (100 tables made 200 and 100 round trips a batch). A table
    another run took over refuses the whole batch, named; nothing of it is written."""
    pipeline, tables = unique_name, [f"t{i}" for i in range(3)]
    state.migrate(target_db)
    epochs = {t: state.claim_epoch(target_db, pipeline, t, "incremental-a", f"topic.{t}") for t in tables}
    conn = psycopg2.connect(stackctl.pg_url(stackctl.DATABASES["target"]))
    try:
        with conn, conn.cursor() as cur:
            assert state.check_epochs(cur, pipeline, epochs) == {t: {} for t in tables}
            state.advance_streams(cur, pipeline, 7, [state.Advance(t, epochs[t], {0: 10 + i, 1: 20 + i}, 5 + i)
                                                     for i, t in enumerate(tables)])
        with conn, conn.cursor() as cur:
            assert state.check_epochs(cur, pipeline, epochs) == {t: {0: 10 + i, 1: 20 + i}
                                                                  for i, t in enumerate(tables)}
        for i, t in enumerate(tables):
            st = state.get(target_db, pipeline, t)
            assert (st.resume_offsets, st.last_batch_id, st.raw["events_applied"]) == ({0: 10 + i, 1: 20 + i}, 7, 5 + i)
        state.claim_epoch(target_db, pipeline, "t1", "incremental-b", "topic.t1")   # a newer run takes t1
        with pytest.raises(FencedError, match=rf"{pipeline}\.t1: this run holds fencing epoch 1 but the table's "
                                              r"epoch is now 2 \(claimed by incremental-b\)"):
            with conn, conn.cursor() as cur:
                state.check_epochs(cur, pipeline, epochs)
        with pytest.raises(FencedError, match=rf"{pipeline}\.t1: the state row changed epoch"):
            with conn, conn.cursor() as cur:
                state.advance_streams(cur, pipeline, 8, [state.Advance(t, epochs[t], {0: 99}, 1) for t in tables])
        assert [state.get(target_db, pipeline, t).last_batch_id for t in tables] == [7, 7, 7]   # rolled back
    finally:
        conn.close()
        with target_db.cursor() as cur:
            cur.execute("DELETE FROM tideline.table_state WHERE pipeline = %s", (pipeline,))


def test_zombie_run_is_fenced(spark, source_db, target_db, pipelines, unique_name):
    t = f"{unique_name}_zmb"
    make_items(source_db, t, 1000)
    writer = Writer(f"public.{t}", 1001, seed=9, pause=0.005)
    first = second = None
    try:
        cfg = pipelines.make([{"name": t}], capture=True, stream={"trigger_interval_s": 0.5})
        [loaded] = FullLoad(cfg, spark).run([t])
        writer.start()
        env = {"TIDELINE_PIPELINES": str(pipelines.dir)}
        first = spark_submit("incremental.py", cfg, env_extra=env)
        deadline = time.time() + 120
        while time.time() < deadline and not batches(target_db, cfg.name):
            assert first.poll() is None, first.stdout.read()[-3000:]
            time.sleep(0.3)
        second = spark_submit("incremental.py", cfg, env_extra=env)
        out, _ = first.communicate(timeout=180)
        assert first.returncode == EXIT_FENCED, out[-3000:]
        assert "replaced" in out and "claimed by incremental" in out
        # the second keeps committing
        n = len(batches(target_db, cfg.name))
        deadline = time.time() + 60
        while time.time() < deadline and len(batches(target_db, cfg.name)) <= n:
            time.sleep(0.3)
        assert len(batches(target_db, cfg.name)) > n
        assert second.poll() is None
        writer.stop()
        os.killpg(second.pid, signal.SIGTERM)
        second.wait(60)
        sync_until_equal(cfg, spark, source_db, target_db, {t: "id"})
        assert_batches_contiguous(target_db, cfg.name, {cfg.topic(t): loaded.offsets})
    finally:
        writer.stop_event.set()
        for p in (first, second):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        drop_source(source_db, t)


@pytest.mark.parametrize("stage_on", ["driver", "executors"])   # decoded by the driver, or by Spark's tasks
def test_schema_drift_mid_stream(spark, source_db, target_db, pipelines, unique_name, stage_on):
    t = f"{unique_name}_drift"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, small int, code varchar(10), "
                    f"amount numeric(10,2), legacy text)")
        cur.execute(f"INSERT INTO public.{t} SELECT g, g, 'c' || g, g / 3.0, 'old' FROM generate_series(1, 100) g")
    try:
        cfg = pipelines.make([{"name": t}], capture=True, stream={"stage_on": stage_on})
        FullLoad(cfg, spark).run([t])
        with source_db.cursor() as cur:
            cur.execute(f"ALTER TABLE {t} ADD COLUMN added text")
            cur.execute(f"ALTER TABLE {t} ADD COLUMN flag boolean DEFAULT true")   # constant default
            cur.execute(f"UPDATE {t} SET added = 'a' || id WHERE id <= 10")
            cur.execute(f"ALTER TABLE {t} ALTER COLUMN small TYPE bigint")
            cur.execute(f"ALTER TABLE {t} ALTER COLUMN code TYPE text")
            cur.execute(f"ALTER TABLE {t} ALTER COLUMN amount TYPE numeric(14,4)")
            cur.execute(f"UPDATE {t} SET small = 9000000000, code = repeat('long', 10), amount = 123.4567 "
                        f"WHERE id = 1")
            cur.execute(f"ALTER TABLE {t} DROP COLUMN legacy")
            cur.execute(f"UPDATE {t} SET added = 'changed after the drop' WHERE id = 1")
            cur.execute(f"INSERT INTO {t} (id, small) VALUES (1000, 1)")
        cols = "id, small, code, amount, added, flag"
        deadline = time.time() + 90
        while True:
            IncrementalRun(cfg, spark, "available_now").run()
            with source_db.cursor() as s, target_db.cursor() as g:
                s.execute(f"SELECT {cols} FROM public.{t} ORDER BY id")
                src = s.fetchall()
                try:
                    g.execute(f'SELECT {cols} FROM "{unique_name}".{t} ORDER BY id')
                    tgt = g.fetchall()
                except psycopg2.errors.UndefinedColumn:  # the added columns have not arrived yet
                    tgt = None
            if src == tgt or time.time() > deadline:
                break
            time.sleep(1)
        assert src == tgt
        with target_db.cursor() as cur:
            cur.execute(f'SELECT legacy FROM "{unique_name}".{t} WHERE id IN (1, 50, 1000) ORDER BY id')
            assert cur.fetchall() == [(None,), ("old",), (None,)]   # dropped at source: kept, NULL from then on
            cur.execute("SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = %s::regclass "
                        "AND attname IN ('small', 'code', 'amount') ORDER BY attname", (f"{unique_name}.{t}",))
            assert [r[0] for r in cur.fetchall()] == ["numeric(14,4)", "text", "bigint"]
        # an unsafe change halts at the last committed batch, naming table, column and types
        last = batches(target_db, cfg.name)[-1][0]
        before = table_digest(target_db, unique_name, t, "id")
        with source_db.cursor() as cur:
            cur.execute(f"ALTER TABLE {t} ALTER COLUMN small TYPE text")
            cur.execute(f"UPDATE {t} SET small = 'not a number' WHERE id = 2")
        deadline = time.time() + 60
        with pytest.raises(HaltedError, match=r"column small: type changed at the source from bigint to text"):
            while time.time() < deadline:
                IncrementalRun(cfg, spark, "available_now").run()
                time.sleep(1)
        assert batches(target_db, cfg.name)[-1][0] == last
        assert table_digest(target_db, unique_name, t, "id") == before
        st = state.get(target_db, cfg.name, t)
        assert st.phase == "halted" and "bigint to text" in st.last_error
    finally:
        drop_source(source_db, t)


def test_lost_offsets_exit_with_documented_status_and_change_nothing(
        stack, spark, source_db, target_db, pipelines, unique_name):
    t = f"{unique_name}_lost"
    make_items(source_db, t, 100)
    try:
        cfg = pipelines.make([{"name": t}], partitions=1, capture=True)
        FullLoad(cfg, spark).run([t])
        sync_until_equal(cfg, spark, source_db, target_db, {t: "id"})
        before = table_digest(target_db, unique_name, t, "id")
        resume = state.get(target_db, cfg.name, t).resume_offsets
        # the job is stopped; changes go on; retention is shortened until needed offsets are gone
        topic = cfg.topic(t)
        let_retention_delete(stack.kafka_bootstrap(), topic, resume[0],
                             lambda: source_db.cursor().execute(f"UPDATE {t} SET qty = qty + 1 WHERE id <= 20"))
        proc = spark_submit("incremental.py", cfg, "--mode", "available_now",
                            env_extra={"TIDELINE_PIPELINES": str(pipelines.dir)})
        out, _ = proc.communicate(timeout=180)
        assert proc.returncode == EXIT_RESNAPSHOT, out[-3000:]
        assert f"{topic} partition 0: needs offset {resume[0]}" in out
        st = state.get(target_db, cfg.name, t)
        assert st.phase == "needs_resnapshot" and "retention deleted offsets" in st.last_error
        assert st.resume_offsets == resume
        assert table_digest(target_db, unique_name, t, "id") == before
        with pytest.raises(SourceError, match=r"needs_resnapshot: Kafka no longer holds"):
            IncrementalRun(cfg, spark, "available_now").run()  # refuses to stream it until reloaded
    finally:
        drop_source(source_db, t)


def test_partitions_added_to_a_change_topic_reload_the_table_instead_of_misordering_a_key(
        stack, spark, source_db, target_db, pipelines, unique_name):
    import json

    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewPartitions
    t = f"{unique_name}_parts"
    make_items(source_db, t, 20)
    try:
        cfg = pipelines.make([{"name": t}], partitions=1, capture=True)
        FullLoad(cfg, spark).run([t])
        topic = cfg.topic(t)
        assert state.get(target_db, cfg.name, t).raw["topic_partitions"] == 1
        before = table_digest(target_db, unique_name, t, "id")
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE {t} SET qty = 500 WHERE id = 7")          # key 7, partition 0
        consumer = Consumer({"bootstrap.servers": stack.kafka_bootstrap(), "group.id": f"probe-{t}",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline, first = time.time() + 60, None
        while first is None and time.time() < deadline:
            msg = consumer.poll(1)
            if msg is not None and not msg.error() and msg.value() and b'"500"' in msg.value():
                first = msg
        consumer.close()
        assert first is not None, "the change to key 7 did not reach Kafka"
        # an operator adds partitions; the producer now hashes key 7 to another partition, where its
        # next change lands at an offset lower than the first one's
        admin = AdminClient({"bootstrap.servers": stack.kafka_bootstrap()})
        admin.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE {t} SET qty = 600 WHERE id = 7")
        later = json.loads(first.value())
        (later.get("payload") or later)["after"]["qty"] = "600"
        producer = Producer({"bootstrap.servers": stack.kafka_bootstrap(), "acks": "all"})
        producer.produce(topic, key=first.key(), value=json.dumps(later).encode(), partition=1)
        producer.flush(30)
        with pytest.raises(DataLossError, match="has 3 partitions, it had 1 at the full load"):
            IncrementalRun(cfg, spark, "available_now").run()
        st = state.get(target_db, cfg.name, t)
        assert st.phase == "needs_resnapshot" and "it had 1 at the full load" in st.last_error
        assert table_digest(target_db, unique_name, t, "id") == before        # nothing applied out of order
        FullLoad(cfg, spark).run([t])                                          # what the DAG does next
        assert state.get(target_db, cfg.name, t).raw["topic_partitions"] == 3
        sync_until_equal(cfg, spark, source_db, target_db, {t: "id"})
        with target_db.cursor() as cur:
            cur.execute(f'SELECT qty FROM "{unique_name}".{t} WHERE id = 7')
            assert cur.fetchone()[0] == 600
    finally:
        drop_source(source_db, t)


def test_source_truncate_marks_the_table_for_a_reload_and_changes_nothing(
        spark, source_db, target_db, pipelines, unique_name):
    t = f"{unique_name}_trunc"
    make_items(source_db, t, 50)
    try:
        cfg = pipelines.make([{"name": t}], partitions=1, capture=True)
        FullLoad(cfg, spark).run([t])
        sync_until_equal(cfg, spark, source_db, target_db, {t: "id"})
        before = table_digest(target_db, unique_name, t, "id")
        resume = state.get(target_db, cfg.name, t).resume_offsets
        with source_db.cursor() as cur:
            cur.execute(f"TRUNCATE {t}")
            cur.execute(f"INSERT INTO {t} (id, qty) VALUES (1, 1)")
        deadline = time.time() + 60
        with pytest.raises(ResnapshotRequired, match=r"was truncated"):
            while time.time() < deadline:
                IncrementalRun(cfg, spark, "available_now").run()
                time.sleep(1)
        st = state.get(target_db, cfg.name, t)
        assert st.phase == "needs_resnapshot" and "truncated" in st.last_error
        assert st.resume_offsets == resume
        assert table_digest(target_db, unique_name, t, "id") == before
    finally:
        drop_source(source_db, t)


def test_a_failed_commit_ends_a_continuous_stream_that_then_sits_idle(
        spark, source_db, target_db, pipelines, unique_name):
    """Batches commit in a thread of their own while Spark reads the next. A commit that fails (here:
    the source truncated, one event, then nothing) must end the run although no further batch comes
    to hear of it, with the meaning recorded and the position untouched."""
    t = f"{unique_name}_idle"
    make_items(source_db, t, 20)
    run = None
    try:
        cfg = pipelines.make([{"name": t}], partitions=1, capture=True, stream={"trigger_interval_s": 0.5})
        FullLoad(cfg, spark).run([t])
        sync_until_equal(cfg, spark, source_db, target_db, {t: "id"})
        resume = state.get(target_db, cfg.name, t).resume_offsets
        run = IncrementalRun(cfg, spark, "continuous")
        thread, ended = start_continuous(run)
        with source_db.cursor() as cur:
            cur.execute(f"TRUNCATE {t}")
        thread.join(120)
        assert not thread.is_alive(), "the stream went on idling after its commit failed"
        assert isinstance(ended.get("exc"), ResnapshotRequired), ended
        st = state.get(target_db, cfg.name, t)
        assert st.phase == "needs_resnapshot" and "truncated" in st.last_error
        assert st.resume_offsets == resume
    finally:
        if run is not None and run.query is not None and run.query.isActive:
            run.query.stop()
        drop_source(source_db, t)


@pytest.mark.parametrize("stage_on", ["driver", "executors"])   # found by the driver, or by Spark's tasks
def test_poison_message_stops_or_goes_to_dead_letters(stack, spark, source_db, target_db, pipelines, unique_name,
                                                      stage_on):
    t = f"{unique_name}_poison"
    make_items(source_db, t, 10)
    try:
        cfg = pipelines.make([{"name": t}], partitions=1, capture=True, stream={"stage_on": stage_on})
        FullLoad(cfg, spark).run([t])
        sync_until_equal(cfg, spark, source_db, target_db, {t: "id"})
        producer = Producer({"bootstrap.servers": stack.kafka_bootstrap(), "acks": "all"})
        producer.produce(cfg.topic(t), key=b'{"id":1}', value=b"this is not json")
        producer.flush(30)
        poison_offset = state.get(target_db, cfg.name, t).resume_offsets[0]
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE {t} SET qty = 1000 WHERE id = 2")
        time.sleep(3)
        with pytest.raises(HaltedError, match=rf"partition 0 offset {poison_offset}.*dead_letter"):
            IncrementalRun(cfg, spark, "available_now").run()
        assert state.get(target_db, cfg.name, t).resume_offsets[0] == poison_offset
        st = state.get(target_db, cfg.name, t)
        assert st.phase == "halted"
        # opt in to dead letters: it is recorded, the stream goes on and converges
        dl = pipelines.make([{"name": t}], partitions=1, create_topics=False,
                            stream={"on_bad_message": "dead_letter", "stage_on": stage_on})
        with target_db.cursor() as cur:
            cur.execute("UPDATE tideline.table_state SET phase = 'streaming' WHERE pipeline = %s", (cfg.name,))
        sync_until_equal(dl, spark, source_db, target_db, {t: "id"})
        with target_db.cursor() as cur:
            cur.execute("SELECT kafka_offset, value FROM tideline.dead_letters WHERE pipeline = %s", (cfg.name,))
            assert cur.fetchall() == [(poison_offset, "this is not json")]
    finally:
        drop_source(source_db, t)


def test_excluded_column_never_reaches_the_target(spark, source_db, target_db, pipelines, unique_name):
    t = f"{unique_name}_cols"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, name text, password_hash text)")
        cur.execute(f"INSERT INTO public.{t} SELECT g, 'n' || g, md5(g::text) FROM generate_series(1, 50) g")
    try:
        cfg = pipelines.make([{"name": t, "exclude_columns": ["password_hash"]}], capture=True)
        FullLoad(cfg, spark).run([t])
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE {t} SET name = 'changed', password_hash = 'new' WHERE id <= 10")
            cur.execute(f"INSERT INTO {t} VALUES (51, 'new', 'x')")
        deadline = time.time() + 60
        while True:
            IncrementalRun(cfg, spark, "available_now").run()
            with source_db.cursor() as s, target_db.cursor() as g:
                s.execute(f"SELECT id, name FROM {t} ORDER BY id")
                g.execute(f'SELECT id, name FROM "{unique_name}".{t} ORDER BY id')
                if s.fetchall() == g.fetchall():
                    break
            assert time.time() < deadline, "did not converge"
            time.sleep(1)
        with target_db.cursor() as cur:
            cur.execute("SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
                        "AND NOT attisdropped ORDER BY attnum", (f"{unique_name}.{t}",))
            assert [r[0] for r in cur.fetchall()] == ["id", "name"]
    finally:
        drop_source(source_db, t)


def test_big_events_make_smaller_batches(spark, source_db, target_db, pipelines, unique_name, caplog):
    """A batch's raw events are held by the driver: with stream.max_batch_mb, a table of big rows
    streams in batches of fewer events (sized from the topic's events at the start), and nothing
    is lost or applied twice across them."""
    from tideline import kafka_offsets
    t = f"{unique_name}_wide"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id bigint PRIMARY KEY, doc text NOT NULL)")
    try:
        cfg = pipelines.make([{"name": t}], capture=True, stream={"max_batch_mb": 1})
        FullLoad(cfg, spark).run([t])
        resume = {cfg.topic(t): dict(state.get(target_db, cfg.name, t).resume_offsets)}
        with source_db.cursor() as cur:   # ~4 KB of text per row: each change event is bigger than that
            cur.execute(f"INSERT INTO public.{t} SELECT g, repeat(md5(g::text), 125) FROM generate_series(1, 1500) g")
        deadline = time.time() + 60
        while sum(kafka_offsets.end_offsets(pipelines.bootstrap(), cfg.topic(t)).values()) < 1500:
            assert time.time() < deadline, "Debezium did not deliver the 1,500 inserts within 60 s"
            time.sleep(0.5)
        with caplog.at_level("INFO", logger="tideline.incremental"):
            sync_until_equal(cfg, spark, source_db, target_db, {t: "id"})
        assert "stream.max_batch_mb=1" in caplog.text
        sizes = [sum(end[topic][p] - start[topic][p] for topic in start for p in start[topic])
                 for _id, start, end in batches(target_db, cfg.name)]
        assert sum(sizes) == 1500 and len(sizes) >= 6 and max(sizes) <= 1_000_000 // 4_000, sizes
        assert_batches_contiguous(target_db, cfg.name, resume)
    finally:
        drop_source(source_db, t)


def test_a_batch_is_sized_by_the_backlog_it_reads_not_only_the_topics_tail(stack, unique_name):
    """A backlog of big updates whose newest events are deletes and their tombstones: the tail
    alone averages a fraction of what the batch will hold. The size the run plans with is the
    larger of the tail's and the resume position's."""
    from confluent_kafka.admin import AdminClient, NewTopic
    from tideline import kafka_offsets
    topic = f"{unique_name}.public.sizes"
    admin = AdminClient({"bootstrap.servers": stack.kafka_bootstrap()})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    try:
        producer = Producer({"bootstrap.servers": stack.kafka_bootstrap(), "acks": "all"})
        for i in range(400):   # updates of ~4 KB rows, then deletes: an event and its tombstone each
            producer.produce(topic, key=b'{"id":"%d"}' % i, value=b'{"after":"' + b"x" * 4000 + b'"}')
        for i in range(200):
            producer.produce(topic, key=b'{"id":"%d"}' % i, value=b'{"before":{"id":"%d"},"after":null}' % i)
            producer.produce(topic, key=b'{"id":"%d"}' % i, value=None)
        producer.flush(30)
        marks = {topic: kafka_offsets.watermarks(stack.kafka_bootstrap(), topic)}
        tail = kafka_offsets.mean_event_bytes(stack.kafka_bootstrap(), marks)
        assert tail < 40, tail
        planned = kafka_offsets.mean_event_bytes(stack.kafka_bootstrap(), marks, starts={topic: {"0": 0}})
        assert planned > 4000, planned
        # resumed within the tail: the tail's own size
        assert kafka_offsets.mean_event_bytes(stack.kafka_bootstrap(), marks, starts={topic: {"0": 700}}) == tail
    finally:
        admin.delete_topics([topic])[topic].result(30)


def test_a_batch_read_hands_over_every_row_as_tasks_finish_and_a_consumer_that_stops_early_hangs_nothing(spark):
    from pyspark.sql import functions as F
    from tideline.stream.handover import arrow_batches
    rows = spark.range(0, 300_000, numPartitions=12).select(F.col("id"), F.repeat(F.lit("x"), 200).alias("pad"))
    got = sorted(i for b in arrow_batches(rows) for i in b.column("id").to_pylist())
    assert got == list(range(300_000))   # every row once, whatever order the tasks finished in
    failing = spark.range(0, 1_000, numPartitions=4).select(
        F.when(F.col("id") == 777, F.raise_error(F.lit("tideline test: task failed"))).otherwise(F.col("id")).alias("id"))
    with pytest.raises(Exception, match="tideline test: task failed"):   # the job's own error reaches the reader
        list(arrow_batches(failing))
    # The decode failing on the first batch while the JVM still sends ~55 MB more: the read must end
    # with the decode's error, not wait for ever on a JVM writing into a socket nobody reads. In a
    # process of its own, so a hang is a failed test, not a stalled session.
    script = """
from contextlib import closing
from pyspark.sql import functions as F
from tideline.spark_session import get_session
from tideline.stream.handover import arrow_batches
spark = get_session("tideline-test-stop-early")
rows = spark.range(0, 300_000, numPartitions=12).select(F.col("id"), F.repeat(F.lit("x"), 200).alias("pad"))
try:
    with closing(arrow_batches(rows)) as batches:
        for _ in batches:
            raise ValueError("the decode failed")
except ValueError as exc:
    print("stopped:", exc, flush=True)
print("rows after:", sum(b.num_rows for b in arrow_batches(rows)), flush=True)
spark.stop()
"""
    try:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240,
                              env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"a read whose consumer stopped early still waits for the JVM:\n{(exc.stdout or b'')[-2000:]!r}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["stopped: the decode failed", "rows after: 300000"], done.stdout
