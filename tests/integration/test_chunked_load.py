"""Chunked full loads: a load read in key-range chunks, each its own short source transaction,
killed mid-way under writes of every kind, resumes at the first chunk not done without re-reading
one, and the stream from the offsets taken before the first chunk brings the target to equal the
source row for row. The source's oldest transaction stays within a chunk's read throughout."""
from __future__ import annotations

import os
import random
import signal
import threading
import time

import psycopg2
import pytest

import stackctl
from helpers import SOURCE_URL, Writer, drop_source, rows_as_text, wait_until
from test_mariadb import maria  # noqa: F401,F811 — fixture
from test_incremental import spark_submit
from tideline import state
from tideline.load.full_load import FullLoad
from tideline.stream.run import IncrementalRun

pytestmark = pytest.mark.integration
ROWS, CHUNK = 150_000, 2_000          # 75 chunks
BIG = "(SELECT string_agg(md5(random()::text || g::text || x::text), '') FROM generate_series(1, 120) x)"


class EveryKindOfWrite(threading.Thread):
    """Changes the table while it loads: inserts, updates, updates of rows whose large value lives
    out of line (TOAST: their events leave it out), deletes, and key changes that move a row to a
    chunk read earlier (negative ids: the first range) or later (new high ids: the last range)."""

    def __init__(self, table: str):
        super().__init__(daemon=True)
        self.table, self.rng, self.next_id = table, random.Random(55), ROWS * 10 + 1
        self.stop_event, self.errors, self.done = threading.Event(), [], {}

    def run(self):
        conn = psycopg2.connect(SOURCE_URL)
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                while not self.stop_event.is_set():
                    some = self.rng.randrange(1, ROWS) * 10
                    kind = self.rng.choice(["insert", "update", "toast", "delete", "key_up", "key_down"])
                    if kind == "insert":
                        cur.execute(f"INSERT INTO {self.table} VALUES (%s, 1, 'new ✓ 😀', NULL)", (self.next_id,))
                        self.next_id += 1
                    elif kind == "update":
                        cur.execute(f"UPDATE {self.table} SET qty = qty + 1, note = note || '!' WHERE id = %s", (some,))
                    elif kind == "toast":   # another column of a row with a large value
                        cur.execute(f"UPDATE {self.table} SET qty = qty + 1 WHERE id = %s", (some - some % 500,))
                    elif kind == "delete":
                        cur.execute(f"DELETE FROM {self.table} WHERE id = %s", (some,))
                    elif kind == "key_up":
                        cur.execute(f"UPDATE {self.table} SET id = %s WHERE id = %s", (self.next_id, some))
                        self.next_id += 1
                    else:
                        cur.execute(f"UPDATE {self.table} SET id = -id WHERE id = %s", (some,))
                    self.done[kind] = self.done.get(kind, 0) + cur.rowcount
                    time.sleep(0.003)
        except Exception as exc:   # noqa: BLE001 — the test asserts there was none
            self.errors.append(exc)
        finally:
            conn.close()

    def stop(self):
        self.stop_event.set()
        self.join(30)
        assert not self.errors, self.errors


class OldestLoadTransaction(threading.Thread):
    """The age of the oldest transaction Tideline's source role holds, sampled all along."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stop_event, self.oldest, self.samples = threading.Event(), 0.0, 0

    def run(self):
        conn = psycopg2.connect(stackctl.pg_url(stackctl.DATABASES["source"], stackctl.PG_SUPERUSER,
                                                stackctl.PG_SUPERPASS))
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                while not self.stop_event.wait(0.1):
                    cur.execute("SELECT coalesce(max(extract(epoch FROM clock_timestamp() - xact_start)), 0) "
                                "FROM pg_stat_activity WHERE usename = %s AND backend_type = 'client backend' "
                                "AND xact_start IS NOT NULL AND application_name NOT LIKE 'Debezium%%'",
                                (stackctl.PG_CDC_USER,))
                    self.oldest = max(self.oldest, float(cur.fetchone()[0]))
                    self.samples += 1
        finally:
            conn.close()

    def stop(self) -> float:
        self.stop_event.set()
        self.join(10)
        return self.oldest


def _kill_after_chunks(cfg, pipelines, state_db, table: str, at_least: int) -> dict[int, tuple]:
    """The load as its DAG submits it, kill -9'd (driver and executors) once `at_least` chunks
    are recorded; returns the chunks recorded then."""
    proc = spark_submit("full_load.py", cfg, env_extra={"TIDELINE_PIPELINES": str(pipelines.dir)})
    output: list[str] = []
    threading.Thread(target=lambda: output.extend(proc.stdout), daemon=True).start()
    wait_until(lambda: len(_chunks(state_db, cfg.name, table)) >= at_least or proc.poll() is not None, 300,
               f"{at_least} chunks to commit", every=0.05)
    assert proc.poll() is None, "".join(output)[-3000:]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    return _chunks(state_db, cfg.name, table)


def _resumed(state_db, cfg, table: str, before: dict) -> None:
    """The next run resumed the load: every chunk done before is as it was (never read again),
    every planned chunk is done, and the run's history says how many were left."""
    after = _chunks(state_db, cfg.name, table)
    assert all(after[c] == before[c] for c in before), "a chunk done before the kill was read again"
    with state_db.cursor() as cur:
        cur.execute("SELECT jsonb_array_length(ranges), outcome FROM tideline.chunked_loads WHERE pipeline = %s "
                    "AND table_name = %s", (cfg.name, table))
        [(planned, outcome)] = cur.fetchall()
        cur.execute("SELECT detail FROM tideline.runs WHERE pipeline = %s AND table_name = %s AND kind = 'full_load' "
                    "AND outcome = 'succeeded'", (cfg.name, table))
        [(detail,)] = cur.fetchall()
    assert outcome == "succeeded" and len(after) == planned, (outcome, len(after), planned)
    assert f"resumed: {planned - len(before)} of {planned} chunks left" in detail, detail


def _chunks(target_db, pipeline: str, table: str) -> dict[int, tuple]:
    with target_db.cursor() as cur:
        cur.execute("SELECT c.chunk, c.committed_at, c.epoch FROM tideline.load_chunks c JOIN tideline.chunked_loads l "
                    "USING (load_id) WHERE l.pipeline = %s AND l.table_name = %s", (pipeline, table))
        return {chunk: (at, epoch) for chunk, at, epoch in cur.fetchall()}


def test_a_chunked_load_killed_under_writes_resumes_without_rereading_a_chunk_and_the_stream_converges(
        stack, spark, source_db, target_db, pipelines, unique_name):
    t = f"{unique_name}_chunked"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, qty int NOT NULL, note text, big text)")
        cur.execute(f"INSERT INTO public.{t} SELECT g * 10, g % 7, 'n' || g || ' ü', CASE WHEN g % 50 = 0 "
                    f"THEN {BIG} END FROM generate_series(1, {ROWS}) g")
        cur.execute(f"ANALYZE public.{t}")
    writes, oldest = EveryKindOfWrite(f"public.{t}"), OldestLoadTransaction()
    try:
        cfg = pipelines.make([{"name": t, "snapshot": "chunked", "chunk_rows": CHUNK}], capture=True, partitions=2)
        oldest.start()
        writes.start()
        before = _kill_after_chunks(cfg, pipelines, target_db, t, 30)
        assert state.get(target_db, cfg.name, t) is None or state.get(target_db, cfg.name, t).phase != "streaming"
        # the next run resumes: the chunks done are kept as they were, the rest read
        [result] = FullLoad(cfg, spark).run([t])
        _resumed(target_db, cfg, t, before)
        assert result.rows > 0
        writes.stop()
        assert all(writes.done.get(k) for k in ("insert", "update", "toast", "delete", "key_up", "key_down")), \
            writes.done
        # the stream from the offsets taken before the first chunk: the target equals the source
        IncrementalRun(cfg, spark, "available_now").run()
        assert rows_as_text(target_db, unique_name, t, "id") == rows_as_text(source_db, "public", t, "id")
        st = state.get(target_db, cfg.name, t)
        assert st.phase == "streaming" and not st.raw["auto_reloads"]
        held = oldest.stop()
        assert oldest.samples > 50 and held <= 10, f"the source held a transaction {held:.1f}s"
        print(f"\n[measure] chunked load: oldest source transaction {held:.2f}s over {oldest.samples} samples")
    finally:
        writes.stop_event.set()
        oldest.stop_event.set()
        drop_source(source_db, t)


def test_a_chunked_load_into_iceberg_killed_mid_way_resumes_from_its_staged_chunks(
        spark, source_db, pipelines, unique_name, lake):
    from test_iceberg import iceberg_pipeline, stream_until_equal
    from tideline.targets.iceberg.load import staging_name
    t = f"{unique_name}_lakechunks"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, qty int NOT NULL, note text)")
        cur.execute(f"INSERT INTO public.{t} SELECT g, g % 10, 'n' || g FROM generate_series(1, 40000) g")
    writer = Writer(f"public.{t}", 40_001, seed=3, pause=0.005, max_id=40_000)
    state_db = lake.connect(autocommit=True)
    try:
        cfg = iceberg_pipeline(pipelines, unique_name, [{"name": t, "snapshot": "chunked", "chunk_rows": 1000}],
                               capture=True, parallelism=2)
        writer.start()
        before = _kill_after_chunks(cfg, pipelines, state_db, t, 6)
        assert not lake.pyiceberg_catalog().table_exists((unique_name, t)), "nothing is live before the load ends"
        FullLoad(cfg, spark).run([t])
        _resumed(state_db, cfg, t, before)
        assert not lake.pyiceberg_catalog().table_exists((unique_name, staging_name(t)))
        writer.stop()
        stream_until_equal(cfg, spark, source_db, lake, [t])
        assert state.get(state_db, cfg.name, t).phase == "streaming"
    finally:
        writer.stop_event.set()
        state_db.close()
        drop_source(source_db, t)


def test_a_chunked_load_from_mariadb_killed_mid_way_resumes_and_converges(
        stack, spark, maria, target_db, pipelines, unique_name):
    from psycopg2 import sql
    from test_mariadb import DB, _drop, _exec, converge, mariadb_pipeline
    t, scratch = f"{unique_name}_mchunks", f"{unique_name}_oracle"
    _exec(maria, f"CREATE TABLE `{t}` (id bigint PRIMARY KEY, qty int NOT NULL, note varchar(400)) "
                 f"CHARACTER SET utf8mb4",
          f"INSERT INTO `{t}` (id, qty, note) SELECT seq, seq % 100, CONCAT('row ', seq, ' ü😀') FROM seq_1_to_400000",
          f"ANALYZE TABLE `{t}`")
    # 400,000 rows in 267 chunks: piped by the driver with no Spark session to wait for, 60,000
    # rows took 0.3 s, ended before a kill could land
    writer = Writer(f"`{t}`", 400_001, seed=9, pause=0.002, max_id=400_000,
                    connect=lambda: stackctl.mariadb_connect(DB))
    try:
        cfg = mariadb_pipeline(pipelines, [{"name": t, "snapshot": "chunked", "chunk_rows": 1500}], partitions=2,
                               capture=True)
        writer.start()
        before = _kill_after_chunks(cfg, pipelines, target_db, t, 12)
        FullLoad(cfg, spark).run([t])
        _resumed(target_db, cfg, t, before)
        writer.stop()
        converge(cfg, spark, target_db, [t], scratch)
    finally:
        writer.stop_event.set()
        _drop(maria, t)
        with target_db.cursor() as cur:
            cur.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(scratch)))


def test_a_table_reloaded_alone_leaves_the_pipelines_other_tables_streaming(
        spark, source_db, target_db, pipelines, unique_name):
    """Before, a running stream met the reloaded table's new epoch at its next batch and stopped
    for every table, for as long as the load took; now it leaves that table to the load and the
    others stream on, until the reload's own run takes every table over."""
    from helpers import start_continuous, table_digest
    from tideline.core.errors import FencedError
    a, b = f"{unique_name}_reloaded", f"{unique_name}_other"
    with source_db.cursor() as cur:
        for t in (a, b):
            cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, qty int NOT NULL, note text)")
            cur.execute(f"INSERT INTO public.{t} SELECT g, g % 10, 'n' || g FROM generate_series(1, 3000) g")
    run = None
    try:
        cfg = pipelines.make([{"name": a}, {"name": b}], capture=True, partitions=1,
                             stream={"trigger_interval_s": 0.5})
        FullLoad(cfg, spark).run([a, b])
        run = IncrementalRun(cfg, spark, "continuous")
        thread, ended = start_continuous(run)
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE public.{a} SET qty = qty + 1 WHERE id <= 100")
        FullLoad(cfg, spark).run([a])   # the reload of one table, while the stream runs
        with source_db.cursor() as cur:   # the other table's changes still arrive
            cur.execute(f"UPDATE public.{b} SET note = note || ' after the reload ✓' WHERE id <= 500")
            cur.execute(f"DELETE FROM public.{b} WHERE id > 2900")
        wait_until(lambda: table_digest(target_db, unique_name, b, "id") == table_digest(source_db, "public", b, "id"),
                   90, "the other table's changes to stream on", every=1)
        assert thread.is_alive(), ended
        assert a in run.handed and run.handed[a].startswith("full_load ")
        # (the reload's own run would take every table over and fence this one; in one Spark
        # session two streams of a pipeline cannot run, so this one is stopped first)
        run.query.stop()
        thread.join(60)
        assert not thread.is_alive() and not isinstance(ended.get("exc"), FencedError), ended
        IncrementalRun(cfg, spark, "available_now").run()
        for t in (a, b):
            assert rows_as_text(target_db, unique_name, t, "id") == rows_as_text(source_db, "public", t, "id")
            assert state.get(target_db, cfg.name, t).phase == "streaming"
    finally:
        if run is not None and run.query is not None and run.query.isActive:
            run.query.stop()
        drop_source(source_db, a, b)


def test_auto_sees_the_size_of_a_plain_table_and_of_a_partitioned_one(source_db, unique_name):
    """snapshot: auto chunks from the catalog's estimate: a plain table's own (pg_partition_tree
    lists nothing for a table outside a partition tree, and every plain table once loaded in one
    consistent snapshot whatever its size), a partitioned one's leaves'; none before ANALYZE."""
    from tideline.core.connections import get_connection
    from tideline.core.table_shape import TableShape
    from tideline.engines.postgres.engine import PostgresEngine
    plain, parted = f"{unique_name}_plain", f"{unique_name}_parted"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{plain} (id int PRIMARY KEY)")
        cur.execute(f"CREATE TABLE public.{parted} (id int PRIMARY KEY) PARTITION BY RANGE (id)")
        cur.execute(f"CREATE TABLE public.{parted}_a PARTITION OF public.{parted} FOR VALUES FROM (0) TO (500)")
        cur.execute(f"CREATE TABLE public.{parted}_b PARTITION OF public.{parted} FOR VALUES FROM (500) TO (1000)")
    engine = PostgresEngine(get_connection("tideline_source"))
    conn = psycopg2.connect(SOURCE_URL)
    try:
        shape = lambda name: TableShape("public", name, [], [])   # noqa: E731 — only its names are asked
        assert engine.estimate_rows(conn, shape(plain)) is None, "never analyzed: no estimate"
        with source_db.cursor() as cur:
            cur.execute(f"INSERT INTO public.{plain} SELECT generate_series(1, 700)")
            cur.execute(f"INSERT INTO public.{parted} SELECT generate_series(0, 899)")
            cur.execute(f"ANALYZE public.{plain}")
            cur.execute(f"ANALYZE public.{parted}")
        assert engine.estimate_rows(conn, shape(plain)) == 700
        assert engine.estimate_rows(conn, shape(parted)) == 900
    finally:
        conn.close()
        drop_source(source_db, plain, parted)
