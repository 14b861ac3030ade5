"""A stream whose batches Spark's tasks decode and stage (stream.stage_on: executors), against the
real stack: every kind of failure around a staged batch loses and doubles nothing, and leaves no
staged table behind. (Into Iceberg: test_iceberg's kill -9 test runs this path.)"""
from __future__ import annotations

import os
import signal
import time

import psycopg2
import pytest

import stackctl

from helpers import Writer, active_query, catching_up, drop_source, kill_tasks_mid_copy, wait_until
from test_incremental import assert_batches_contiguous, batches, spark_submit, sync_until_equal
from tideline.core.errors import EXIT_FENCED
from tideline.load.full_load import FullLoad

pytestmark = pytest.mark.integration

BIG = "(SELECT string_agg(md5({}::text || ':' || i), '') FROM generate_series(1, 100) i)"   # ~3 KB, TOASTed


CHANGED = "qty || '-' || id"


def _staged_tables(conn) -> list[str]:
    with conn.cursor() as cur:
        cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'tideline' AND tablename LIKE 'stage\\_%'")
        return sorted(r[0] for r in cur.fetchall())


def test_staged_batches_survive_tasks_killed_mid_copy_the_driver_killed_before_and_during_commit_and_two_runs(
        spark, source_db, target_db, pipelines, unique_name):
    t = f"{unique_name}_staged"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id bigint PRIMARY KEY, qty int NOT NULL, note text, doc text)")
        cur.execute(f"INSERT INTO public.{t} SELECT g, g % 100, 'row ' || g, CASE WHEN g % 10 = 0 THEN {BIG.format('g')} END "
                    f"FROM generate_series(1, 10000) g")
    writer = Writer(f"public.{t}", 10_001, seed=11, pause=0.001)
    env = {"TIDELINE_PIPELINES": str(pipelines.dir)}
    watch = psycopg2.connect(stackctl.pg_url(stackctl.DATABASES["target"]))   # beside the test's own
    watch.autocommit = True
    procs = []

    def backlog():   # 10,000+ events at once: batches of 4,000 whose partitions are cut into several tasks
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE public.{t} SET qty = qty + 1")          # the TOASTed docs: placeholders
            cur.execute(f"UPDATE public.{t} SET doc = {BIG.format(CHANGED)} WHERE id % 10 = 1 AND id < 2000")

    def stream(master: str = "local[2]"):
        proc = spark_submit("incremental.py", cfg, env_extra=env, master=master)
        procs.append(proc)
        return proc

    def committed_more(than: int, proc) -> None:
        wait_until(lambda: len(batches(target_db, cfg.name)) > than, 180, "a batch of this run to commit", 0.1,
                   proc=proc)

    try:
        cfg = pipelines.make([{"name": t}], partitions=2, capture=True, stream={
            "stage_on": "executors", "max_offsets_per_trigger": 4000, "trigger_interval_s": 0.5})
        [loaded] = FullLoad(cfg, spark).run([t])
        writer.start()

        # 1. a task's Python killed while it COPYs its rows: Spark runs the task again (local[2,4]:
        # four attempts) and the run goes on; the attempt's rows are staged once
        backlog()
        proc = stream("local[2,4]")
        kill_tasks_mid_copy(watch, proc)
        committed_more(len(batches(target_db, cfg.name)), proc)
        assert proc.poll() is None, "the stream ended instead of running the killed tasks again"

        # 2. the driver killed while a batch is staged and not committed
        backlog()
        staged = wait_until(lambda: [n for n in _staged_tables(watch) if _rows(watch, n)], 180, "a staged batch", 0.02,
                            proc=proc)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        assert set(staged) <= set(_staged_tables(watch)), "the killed run's staged batch is gone before any run swept"

        # 3. the next run drops what the killed one staged; killed itself in the middle of a commit
        backlog()
        proc = stream()
        before = len(batches(target_db, cfg.name))
        wait_until(lambda: active_query(watch, "%tl_stage%"), 180, "a commit applying from its staged batch", 0.02,
                   proc=proc)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        assert not set(staged) & set(_staged_tables(watch)), "the staged tables of the run killed in 2. were left"
        assert len(batches(target_db, cfg.name)) >= before

        # 4. two runs at once: the second claims the table; the first is fenced and leaves nothing
        first = stream()
        committed_more(len(batches(target_db, cfg.name)), first)
        backlog()
        second = stream()
        out, _ = first.communicate(timeout=180)
        assert first.returncode == EXIT_FENCED, out[-3000:]
        committed_more(len(batches(target_db, cfg.name)), second)
        os.killpg(second.pid, signal.SIGTERM)   # stops after its batch, as Airflow stops a task
        second.communicate(timeout=120)

        writer.stop()
        sync_until_equal(catching_up(cfg), spark, source_db, target_db, {t: "id"})
        assert_batches_contiguous(target_db, cfg.name, {cfg.topic(t): loaded.offsets})
        assert _staged_tables(watch) == [], "staged tables left after every run ended"
    finally:
        writer.stop_event.set()
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        watch.close()
        drop_source(source_db, t)


def _rows(conn, table: str) -> int:
    try:
        with conn.cursor() as cur:
            cur.execute(f'SELECT count(*) FROM tideline."{table}"')
            return cur.fetchone()[0]
    except psycopg2.errors.UndefinedTable:   # committed meanwhile
        return 0
