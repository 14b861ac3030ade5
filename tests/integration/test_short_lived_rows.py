"""Rows that live shortest: a key inserted (or updated) and deleted within one stream batch, on
both targets, for soft deletes, history and the change log — and through kill -9 of the stream.

Found from outside: with `deletes: soft` into Iceberg, one key a writer inserted and later deleted
had no row at all (neither live nor marked): its insert and its delete fell in one batch, the
batch kept the key's last event (the delete, a key and nothing else), and the MERGE found no row
to mark. Now the delete carries the row's last image of its batch (core.batch_events), and both
targets write the row marked with its last values."""
from __future__ import annotations

import os
import random
import signal
import time

import pytest

from helpers import Writer, catching_up, drop_source, stream_until, wait_until
from tideline.core.table_extras import DELETED_AT
from tideline.kafka_offsets import end_offsets
from tideline.load.full_load import FullLoad
from tideline.stream.run import IncrementalRun

pytestmark = pytest.mark.integration
# per table: two keys born, one updated, then deleted with a loaded key updated first; 10 messages
# in Kafka (7 events and 3 tombstones)
CHANGES = ["INSERT INTO public.{t} VALUES (101, 'born'), (102, 'born')", "UPDATE public.{t} SET note = 'last' WHERE id = 101",
           "UPDATE public.{t} SET note = 'changed' WHERE id = 3", "DELETE FROM public.{t} WHERE id IN (101, 102, 3)"]
MESSAGES = 10


def _make(source_db, *tables: str) -> None:
    with source_db.cursor() as cur:
        for t in tables:
            cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, note text)")
            cur.execute(f"INSERT INTO public.{t} SELECT g, 'v0' FROM generate_series(1, 20) g")


def _change_within_one_batch(cfg, source_db, pipelines, loaded: dict, tables: list[str], run) -> None:
    """The changes made with no stream running, then one available_now run once Kafka holds them
    all: one batch (asserted by the caller from the batches recorded)."""
    with source_db.cursor() as cur:
        for t in tables:
            for statement in CHANGES:
                cur.execute(statement.format(t=t))
    bootstrap = pipelines.bootstrap()
    for t in tables:
        start = sum(loaded[t].values())
        wait_until(lambda t=t, start=start: sum(end_offsets(bootstrap, cfg.topic(t)).values()) - start >= MESSAGES,
                   60, f"Debezium to write {t}'s changes")
    run()


@pytest.mark.parametrize("stage_on", ["driver", "executors"])
def test_a_key_inserted_and_deleted_within_one_batch_is_marked_versioned_and_logged_in_postgresql(
        spark, source_db, target_db, pipelines, unique_name, stage_on):
    soft, hist, log = f"{unique_name}_sd", f"{unique_name}_hi", f"{unique_name}_cl"
    _make(source_db, soft, hist, log)
    try:
        cfg = pipelines.make([{"name": soft, "deletes": "soft"}, {"name": hist, "history": True},
                              {"name": log, "changelog": True}], capture=True, stream={"stage_on": stage_on})
        schema = cfg.target_schema(soft)
        loaded = {r.table: r.offsets for r in FullLoad(cfg, spark).run([soft, hist, log])}
        _change_within_one_batch(cfg, source_db, pipelines, loaded, [soft, hist, log],
                                 lambda: IncrementalRun(cfg, spark, "available_now").run())
        with target_db.cursor() as cur:
            cur.execute("SELECT count(*) FROM tideline.batches WHERE pipeline = %s", (cfg.name,))
            assert cur.fetchone()[0] == 1, "the changes were not applied in one batch"
            # soft deletes: every key ends as a row, the deleted ones marked with their last values
            cur.execute(f"SELECT id, note, {DELETED_AT} IS NOT NULL FROM {schema}.{soft} WHERE id IN (3, 101, 102) "
                        f"ORDER BY id")
            assert cur.fetchall() == [(3, "changed", True), (101, "last", True), (102, "born", True)]
            cur.execute(f"SELECT count(*) FROM {schema}.{soft} WHERE {DELETED_AT} IS NULL")
            assert cur.fetchone()[0] == 19
            # history: each version opens and closes, none stays current
            cur.execute(f"SELECT id, note, _tideline_current, _tideline_valid_to IS NOT NULL FROM {schema}.{hist} "
                        f"WHERE id IN (3, 101, 102) ORDER BY id, _tideline_valid_from")
            assert cur.fetchall() == [(3, "v0", False, True), (3, "changed", False, True), (101, "born", False, True),
                                      (101, "last", False, True), (102, "born", False, True)]
            # the change log: every event once
            cur.execute(f"SELECT (key->>'id')::int, string_agg(_tideline_op, '' ORDER BY _tideline_offset) "
                        f"FROM {schema}.{log}__changes WHERE (key->>'id')::int IN (3, 101, 102) GROUP BY 1 ORDER BY 1")
            assert cur.fetchall() == [(3, "ud"), (101, "cud"), (102, "cd")]
    finally:
        drop_source(source_db, soft, hist, log)


def test_a_key_inserted_and_deleted_within_one_batch_is_marked_and_versioned_in_iceberg(
        spark, source_db, pipelines, unique_name, lake):
    from test_iceberg import iceberg_pipeline
    soft, hist = f"{unique_name}_lsd", f"{unique_name}_lhi"
    _make(source_db, soft, hist)

    def rows(t: str) -> list[dict]:
        return sorted(lake.pyiceberg_catalog().load_table((unique_name, t)).scan().to_arrow().to_pylist(),
                      key=lambda r: (r["id"], r.get("_tideline_valid_from") or 0))
    try:
        cfg = iceberg_pipeline(pipelines, unique_name, [{"name": soft, "deletes": "soft"},
                                                        {"name": hist, "history": True}], capture=True)
        loaded = {r.table: r.offsets for r in FullLoad(cfg, spark).run([soft, hist])}
        _change_within_one_batch(cfg, source_db, pipelines, loaded, [soft, hist],
                                 lambda: IncrementalRun(cfg, spark, "available_now").run())
        kept = {r["id"]: (r["note"], r[DELETED_AT] is not None) for r in rows(soft)}
        assert len(kept) == 22 and sum(not marked for _n, marked in kept.values()) == 19
        assert (kept[3], kept[101], kept[102]) == (("changed", True), ("last", True), ("born", True))
        versions = [(r["id"], r["note"], r["_tideline_current"], r["_tideline_valid_to"] is not None)
                    for r in rows(hist) if r["id"] in (3, 101, 102)]
        assert versions == [(3, "v0", False, True), (3, "changed", False, True), (101, "born", False, True),
                            (101, "last", False, True), (102, "born", False, True)]
    finally:
        drop_source(source_db, soft, hist)


def test_soft_deletes_in_iceberg_keep_every_short_lived_row_through_kill_9_of_the_stream(
        spark, source_db, pipelines, unique_name, lake):
    """The reported run: a writer inserts new keys and deletes keys, one change per transaction,
    while the stream's driver is killed -9 three times. Every key that ever existed ends in the
    Iceberg table — live where the source has it, marked where the source deleted it."""
    from test_iceberg import iceberg_pipeline
    from test_incremental import make_items, spark_submit
    t = f"{unique_name}_ksd"
    make_items(source_db, t, 2_000)
    with source_db.cursor() as cur:   # every key the source ever has, inserted or changed to
        cur.execute(f"CREATE TABLE public.{t}_born (id bigint)")
        cur.execute(f"CREATE FUNCTION public.{t}_born() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                    f"INSERT INTO public.{t}_born VALUES (NEW.id); RETURN NEW; END $$")
        cur.execute(f"CREATE TRIGGER born AFTER INSERT OR UPDATE OF id ON public.{t} FOR EACH ROW "
                    f"EXECUTE FUNCTION public.{t}_born()")
    writer = Writer(f"public.{t}", 2_001, seed=13, pause=0.002)
    rng = random.Random(17)
    proc = None
    try:
        cfg = iceberg_pipeline(pipelines, unique_name, [{"name": t, "deletes": "soft"}], capture=True,
                               stream={"max_offsets_per_trigger": 400, "trigger_interval_s": 0.5})
        FullLoad(cfg, spark).run([t])
        writer.start()
        env = {"TIDELINE_PIPELINES": str(pipelines.dir)}
        for _ in range(3):
            snapshots = len(lake.pyiceberg_catalog().load_table((unique_name, t)).snapshots())
            proc = spark_submit("incremental.py", cfg, env_extra=env)
            wait_until(lambda: proc.poll() is not None
                       or len(lake.pyiceberg_catalog().load_table((unique_name, t)).snapshots()) > snapshots,
                       180, "a commit of the stream")
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            time.sleep(rng.uniform(0.0, 1.5))
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        writer.stop()
        with source_db.cursor() as cur:
            cur.execute(f"SELECT id FROM public.{t}")
            live_at_source = {r[0] for r in cur.fetchall()}

        def ends() -> dict[int, bool]:
            table = lake.pyiceberg_catalog().load_table((unique_name, t))
            got = table.scan(selected_fields=("id", DELETED_AT)).to_arrow().to_pylist()
            return {r["id"]: r[DELETED_AT] is None for r in got}
        stream_until(catching_up(cfg), spark, lambda: {k for k, live in ends().items() if live} == live_at_source,
                     "the live rows to equal the source", timeout=180)
        got = ends()
        with source_db.cursor() as cur:
            cur.execute(f"SELECT id FROM public.{t}_born")
            born = set(range(1, 2_001)) | {r[0] for r in cur.fetchall()}
        assert set(got) == born, f"keys never in the Iceberg table: {sorted(born - set(got))[:20]}"
        deleted = born - live_at_source
        assert deleted and all(not got[k] for k in deleted)
    finally:
        writer.stop_event.set()
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        drop_source(source_db, t, f"{t}_born")
        with source_db.cursor() as cur:
            cur.execute(f"DROP FUNCTION IF EXISTS public.{t}_born()")


def test_keys_inserted_in_one_task_and_deleted_in_the_next_of_a_staged_batch_are_marked_with_their_values(
        spark, source_db, target_db, pipelines, unique_name):
    """stream.stage_on: executors cuts a big partition of a batch into several tasks, each keeping
    its own last event per key: a key inserted in one task's part and deleted in the next one's is
    joined up at the commit (stream.batch_rows), its delete carrying the insert's row image."""
    t = f"{unique_name}_split"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, note text)")
    try:
        cfg = pipelines.make([{"name": t, "deletes": "soft"}], partitions=2, capture=True,
                             stream={"stage_on": "executors", "max_offsets_per_trigger": 8_000})   # tasks of 2,000 events
        schema = cfg.target_schema(t)
        [loaded] = FullLoad(cfg, spark).run([t])
        with source_db.cursor() as cur:
            cur.execute(f"INSERT INTO public.{t} SELECT g, 'born ' || g FROM generate_series(1, 3000) g")
            cur.execute(f"DELETE FROM public.{t} WHERE id % 3 <> 0")   # 2,000 short-lived rows
        wait_until(lambda: sum(end_offsets(pipelines.bootstrap(), cfg.topic(t)).values())
                   - sum(loaded.offsets.values()) >= 7000, 60, "Debezium to write the changes")
        IncrementalRun(cfg, spark, "available_now").run()
        with target_db.cursor() as cur:
            cur.execute("SELECT count(*) FROM tideline.batches WHERE pipeline = %s", (cfg.name,))
            assert cur.fetchone()[0] == 1
            cur.execute(f"SELECT count(*) FILTER (WHERE {DELETED_AT} IS NULL), count(*) FILTER (WHERE {DELETED_AT} "
                        f"IS NOT NULL AND note = 'born ' || id), count(*) FROM {schema}.{t}")
            assert cur.fetchone() == (1000, 2000, 3000)
    finally:
        drop_source(source_db, t)
