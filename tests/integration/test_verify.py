"""Verify and repair against the real databases (and, for live changes, the real stream): the
verify names exactly the rows changed behind the pipeline's back, a repair of what it found makes
the next verify clean, and changes in flight while it runs are not reported."""
from __future__ import annotations

import os
import signal
import time

import pytest

from helpers import Writer, drop_source, table_digest
from test_incremental import batches, spark_submit
from tideline.core.connections import get_connection
from tideline.load.full_load import FullLoad
from tideline.verify.repair import repair_verified
from tideline.verify.compare import VerifySettings, verify

pytestmark = pytest.mark.integration


def conns():
    return get_connection("tideline_source"), get_connection("tideline_target"), \
        get_connection("tideline_kafka").kafka_bootstrap


def tamper(target_db, schema, table, updated, deleted, inserted):
    """Changes the target directly, behind the pipeline's back."""
    with target_db.cursor() as cur:
        cur.execute(f'UPDATE "{schema}"."{table}" SET qty = qty + 1000 WHERE id = ANY(%s)', (updated,))
        cur.execute(f'DELETE FROM "{schema}"."{table}" WHERE id = ANY(%s)', (deleted,))
        for i in inserted:
            cur.execute(f'INSERT INTO "{schema}"."{table}" (id, qty, note) VALUES (%s, 1, %s)', (i, "planted"))


def expected(updated, deleted, inserted):
    return sorted([("different", (str(i),)) for i in updated] + [("missing", (str(i),)) for i in deleted]
                  + [("extra", (str(i),)) for i in inserted], key=lambda f: f[1])


def found(report):
    return sorted(((f.kind, f.key) for f in report.samples), key=lambda f: f[1])


def recorded_findings(target_db, pipeline, table):
    with target_db.cursor() as cur:
        cur.execute("SELECT r.outcome, f.kind, f.key FROM tideline.runs r LEFT JOIN tideline.verify_findings f "
                    "USING (run_id) WHERE r.pipeline = %s AND r.table_name = %s AND r.kind = 'verify' "
                    "AND r.run_id = (SELECT max(run_id) FROM tideline.runs WHERE pipeline = %s AND table_name = %s "
                    "AND kind = 'verify') ORDER BY f.key", (pipeline, table, pipeline, table))
        return cur.fetchall()


def test_verify_finds_exactly_the_tampered_rows_of_a_million_and_repair_makes_it_clean(
        spark, source_db, target_db, pipelines, unique_name):
    t = f"{unique_name}_ver"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id bigint PRIMARY KEY, qty int NOT NULL, note text, "
                    f"price numeric(12,2), seen timestamptz, tags text[], doc json)")
        cur.execute(f"INSERT INTO public.{t} SELECT g, g % 100, 'row ' || g, g / 7.0, "
                    f"'2026-01-01'::timestamptz + g * interval '1 s', ARRAY['a', g::text], "
                    f"json_build_object('g', g) FROM generate_series(1, 1000000) g")
    try:
        cfg = pipelines.make([{"name": t}])
        FullLoad(cfg, spark).run([t])
        source, target, bootstrap = conns()
        [clean] = verify(cfg, source, target, [t], bootstrap)
        assert clean.equal and clean.source_rows == clean.target_rows == 1_000_000, clean.summary()

        updated, deleted, inserted = [17, 500_000, 999_999], [1, 250_001, 1_000_000], [0, 6_000_005, 2_000_000]
        tamper(target_db, cfg.name, t, updated, deleted, inserted)
        with target_db.cursor() as cur:   # a json value changed: a column without a hash function
            cur.execute(f'UPDATE "{cfg.name}"."{t}" SET doc = \'{{"g": -1}}\' WHERE id = 777777')
        [report] = verify(cfg, source, target, [t], bootstrap)
        want = expected(updated + [777777], deleted, inserted)
        assert not report.equal
        assert found(report) == want, report.summary()
        assert report.counts == {"missing": 3, "extra": 3, "different": 4}
        assert report.settled == 0 and report.unsettled == 0
        assert 1 <= len(report.ranges) <= 10
        rows = recorded_findings(target_db, cfg.name, t)
        assert {r[0] for r in rows} == {"failed"}
        assert sorted((k, tuple(key)) for _o, k, key in rows) == sorted(want)

        with target_db.cursor() as cur:
            cur.execute("SELECT resume_offsets, epoch FROM tideline.table_state WHERE pipeline = %s", (cfg.name,))
            position = cur.fetchone()
        fixed = repair_verified(cfg, source, target, t)
        assert (fixed.deleted, fixed.upserted) == (3, fixed.read)
        with target_db.cursor() as cur:
            cur.execute("SELECT resume_offsets, epoch FROM tideline.table_state WHERE pipeline = %s", (cfg.name,))
            assert cur.fetchone() == position, "the repair moved the stream's position"
        [again] = verify(cfg, source, target, [t], bootstrap)
        assert again.equal, again.summary()
        assert table_digest(source_db, "public", t, "id") == table_digest(target_db, cfg.name, t, "id")
    finally:
        drop_source(source_db, t)


def test_integer_keys_in_far_apart_clusters_are_cut_by_value_and_every_difference_found(
        spark, source_db, target_db, pipelines, unique_name):
    """An integer key is cut by value, not by rank: three clusters 10^15 apart (as ids from
    different shards are), negative keys, differences at each cluster's edges and outside the
    source's key range — all found, nothing more."""
    t = f"{unique_name}_clu"
    far = 10 ** 15
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id bigint PRIMARY KEY, qty int NOT NULL, note text)")
        for base in (-far, 1, far):
            cur.execute(f"INSERT INTO public.{t} SELECT {base} + g, g % 100, 'row ' || g "
                        f"FROM generate_series(0, 19999) g")
    try:
        cfg = pipelines.make([{"name": t}])
        FullLoad(cfg, spark).run([t])
        source, target, bootstrap = conns()
        settings = VerifySettings(leaf_rows=500, fine_leaf=16)   # small leaves: many cuts, and re-cuts
        updated = [-far, -far + 19999, 1, 64, 65, 10_000, far, far + 19999]
        deleted = [-far + 1, 20000, far + 12345]
        inserted = [-far - 5, 30_000, far * 2]
        tamper(target_db, cfg.name, t, updated, deleted, inserted)
        [report] = verify(cfg, source, target, [t], bootstrap, settings)
        assert found(report) == expected(updated, deleted, inserted), report.summary()
        assert report.counts == {"missing": 3, "extra": 3, "different": 8}
        fixed = repair_verified(cfg, source, target, t)
        assert fixed.deleted == 3
        [again] = verify(cfg, source, target, [t], bootstrap, settings)
        assert again.equal, again.summary()
    finally:
        drop_source(source_db, t)


def test_composite_text_key_is_narrowed_down_and_repaired(spark, source_db, target_db, pipelines, unique_name):
    t = f"{unique_name}_cmp"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (region text, code varchar(20), n int, v text, "
                    f"PRIMARY KEY (region, code))")
        cur.execute(f"INSERT INTO public.{t} SELECT 'R' || (g % 37), 'c-' || g, g, 'v' || g "
                    f"FROM generate_series(1, 60000) g")
    try:
        cfg = pipelines.make([{"name": t}])
        FullLoad(cfg, spark).run([t])
        source, target, bootstrap = conns()
        with target_db.cursor() as cur:
            cur.execute(f'UPDATE "{cfg.name}"."{t}" SET v = \'x\' WHERE region = \'R5\' AND code = \'c-5\'')
            cur.execute(f'DELETE FROM "{cfg.name}"."{t}" WHERE region = \'R0\' AND code = \'c-37\'')
            cur.execute(f'INSERT INTO "{cfg.name}"."{t}" VALUES (\'R9\', \'zz\', 0, \'planted\')')
        [report] = verify(cfg, source, target, [t], bootstrap, VerifySettings(leaf_rows=500, fanout=8))
        assert found(report) == [("missing", ("R0", "c-37")), ("different", ("R5", "c-5")),
                                 ("extra", ("R9", "zz"))], report.summary()
        repair_verified(cfg, source, target, t)
        [again] = verify(cfg, source, target, [t], bootstrap)
        assert again.equal, again.summary()
    finally:
        drop_source(source_db, t)


def test_a_table_that_lost_its_key_and_differs_only_in_duplicated_rows_is_reported(
        spark, source_db, target_db, pipelines, unique_name):
    """A keyless table is refused before any load; one whose key was dropped after its load is
    still verified, by a sum of row hashes (duplicated rows would cancel under XOR)."""
    t = f"{unique_name}_dup"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (n int PRIMARY KEY, v text)")
        cur.execute(f"INSERT INTO public.{t} VALUES (1, 'x'), (2, 'y')")
    try:
        cfg = pipelines.make([{"name": t}])
        FullLoad(cfg, spark).run([t])
        with source_db.cursor() as cur, target_db.cursor() as tcur:
            cur.execute(f"ALTER TABLE public.{t} DROP CONSTRAINT {t}_pkey")
            tcur.execute(f'ALTER TABLE "{cfg.name}"."{t}" DROP CONSTRAINT {t}_pkey')
        source, target, bootstrap = conns()
        [clean] = verify(cfg, source, target, [t], bootstrap)
        assert clean.equal, clean.summary()
        with source_db.cursor() as cur, target_db.cursor() as tcur:   # same count; each side's pair XORs to nothing
            cur.execute(f"INSERT INTO public.{t} VALUES (3, 'z'), (3, 'z')")
            tcur.execute(f'INSERT INTO "{cfg.name}"."{t}" VALUES (4, \'w\'), (4, \'w\')')
        [report] = verify(cfg, source, target, [t], bootstrap)
        assert not report.equal and report.keyless, report.summary()
    finally:
        drop_source(source_db, t)


def test_live_changes_during_verify_are_not_reported(spark, source_db, target_db, pipelines, unique_name):
    t = f"{unique_name}_live"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id bigint PRIMARY KEY, qty int NOT NULL, note text)")
        cur.execute(f"INSERT INTO public.{t} SELECT g, g % 10, 'n' || g FROM generate_series(1, 300000) g")
    writer = Writer(f"public.{t}", 1_000_001, seed=5, pause=0.003, max_id=200_000)
    stream = None
    try:
        cfg = pipelines.make([{"name": t}], capture=True, stream={"trigger_interval_s": 0.5})
        FullLoad(cfg, spark).run([t])
        stream = spark_submit("incremental.py", cfg, env_extra={"TIDELINE_PIPELINES": str(pipelines.dir)})
        writer.start()
        deadline = time.time() + 120
        while time.time() < deadline and not batches(target_db, cfg.name):
            assert stream.poll() is None, stream.stdout.read()[-3000:]
            time.sleep(0.3)
        updated, deleted, inserted = [250_000], [299_999], [900_000]
        tamper(target_db, cfg.name, t, updated, deleted, inserted)
        source, target, bootstrap = conns()
        [report] = verify(cfg, source, target, [t], bootstrap, VerifySettings(settle_s=2))
        changes = writer.count
        assert changes > 100 and stream.poll() is None
        assert found(report) == expected(updated, deleted, inserted), report.summary()
        assert report.unsettled == 0, report.summary()
    finally:
        writer.stop_event.set()
        if stream is not None and stream.poll() is None:
            os.killpg(stream.pid, signal.SIGTERM)
            stream.wait(60)
        drop_source(source_db, t)


def test_a_stopped_stream_is_named_in_the_report_instead_of_waited_for(spark, source_db, target_db, pipelines,
                                                                      unique_name):
    t = f"{unique_name}_stop"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id bigint PRIMARY KEY, qty int NOT NULL, note text)")
        cur.execute(f"INSERT INTO public.{t} SELECT g, g % 10, 'n' || g FROM generate_series(1, 5000) g")
    try:
        cfg = pipelines.make([{"name": t}], capture=True)
        FullLoad(cfg, spark).run([t])
        with source_db.cursor() as cur:   # captured, but no stream runs to apply it
            cur.execute(f"UPDATE public.{t} SET qty = -1 WHERE id = 42")
        source, target, bootstrap = conns()
        started = time.time()
        [report] = verify(cfg, source, target, [t], bootstrap, VerifySettings(settle_s=2, stall_s=4))
        assert time.time() - started < 60   # not 3 rounds of the 120 s catch-up timeout
        assert found(report) == [("different", ("42",))]
        assert "applied nothing for 4s (is the sync DAG running?)" in report.note, report.summary()
        assert "may be changes it has not applied yet" in report.summary()
    finally:
        drop_source(source_db, t)


def test_a_repair_key_range_is_typed_before_any_work(source_db, pipelines, unique_name):
    from tideline.verify.repair import RepairError, check_key_range
    t = f"{unique_name}_rk"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id bigint PRIMARY KEY, v text)")
    try:
        cfg = pipelines.make([{"name": t}], create_topics=False)
        source, target = get_connection("tideline_source"), get_connection("tideline_target")
        check_key_range(cfg, source, target, t, "1", "100")
        with pytest.raises(RepairError, match=r"param repair_key_from: '1; DELETE FROM orders' is not a value of "
                                              rf"{t}\.id \(bigint\): invalid input syntax"):
            check_key_range(cfg, source, target, t, "1; DELETE FROM orders", "100")
        with pytest.raises(RepairError, match="param repair_key_to: 'x'"):
            check_key_range(cfg, source, target, t, "1", "x")
        with pytest.raises(RepairError, match="inverted"):
            check_key_range(cfg, source, target, t, "100", "2")
    finally:
        drop_source(source_db, t)


def test_repair_while_the_stream_applies_changes_to_the_same_keys(spark, source_db, target_db, pipelines,
                                                                 unique_name):
    """The repair holds the stream's fence before it reads the source: a batch the stream commits
    meanwhile is either in the repair's read or applied after it — never overwritten by older rows."""
    from tideline.verify.repair import repair
    t = f"{unique_name}_rrace"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id bigint PRIMARY KEY, qty int NOT NULL, note text)")
        cur.execute(f"INSERT INTO public.{t} SELECT g, g % 10, 'n' || g FROM generate_series(1, 3000) g")
    writer = Writer(f"public.{t}", 10_001, seed=11, pause=0.001, max_id=3000)
    stream = None
    try:
        cfg = pipelines.make([{"name": t}], capture=True, stream={"trigger_interval_s": 0.2})
        FullLoad(cfg, spark).run([t])
        stream = spark_submit("incremental.py", cfg, env_extra={"TIDELINE_PIPELINES": str(pipelines.dir)})
        writer.start()
        deadline = time.time() + 120
        while time.time() < deadline and len(batches(target_db, cfg.name)) < 3:
            assert stream.poll() is None, stream.stdout.read()[-3000:]
            time.sleep(0.3)
        source, target, _ = conns()
        before = len(batches(target_db, cfg.name))
        for _ in range(20):   # repairs of the range the writer and the stream are changing
            repair(cfg, source, target, t, key_from="1", key_to="3000")
            time.sleep(0.5)
        applied_during = len(batches(target_db, cfg.name)) - before
        writer.stop()
        assert stream.poll() is None, stream.stdout.read()[-3000:]
        deadline = time.time() + 90
        while table_digest(source_db, "public", t, "id") != table_digest(target_db, cfg.name, t, "id"):
            assert time.time() < deadline, "the target did not converge after repairs under a live stream"
            time.sleep(1)
        assert writer.count > 200 and applied_during >= 1, (writer.count, applied_during)
    finally:
        writer.stop_event.set()
        if stream is not None and stream.poll() is None:
            os.killpg(stream.pid, signal.SIGTERM)
            stream.wait(60)
        drop_source(source_db, t)
