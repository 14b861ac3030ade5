"""Soft deletes and change metadata on a PostgreSQL target, against the real stack: the load
fills them, the stream writes them from each event, a re-snapshot keeps what the source deleted,
verify compares the live rows, repair marks rather than deletes — and the live rows equal the
source row for row (`ROW(...)::text` over the source's columns) with the values real tables hold."""
from __future__ import annotations

import json
import re

import pytest

from helpers import drop_source, rows_as_text, stream_until
from test_mariadb import maria  # noqa: F401  (the MariaDB source fixture)
from tideline.core.table_extras import DELETED_AT
from tideline.load.full_load import FullLoad
from tideline.stream.run import IncrementalRun
from tideline.verify import command as compare

pytestmark = pytest.mark.integration
COLUMNS = "id, note, amount, at, tags"
POSITION = re.compile(r"^[0-9A-F]+/[0-9A-F]+ kafka \d+:\d+$")


def source_rows(source_db, table: str) -> list[str]:
    with source_db.cursor() as cur:
        cur.execute(f"SELECT ROW({COLUMNS})::text FROM public.{table} ORDER BY id")
        return [r[0] for r in cur.fetchall()]


def target_rows(target_db, schema: str, table: str, where: str = f"{DELETED_AT} IS NULL") -> list[str]:
    with target_db.cursor() as cur:
        cur.execute(f"SELECT ROW({COLUMNS})::text FROM {schema}.{table} WHERE {where} ORDER BY id")
        return [r[0] for r in cur.fetchall()]


def extras_of(target_db, schema: str, table: str, key: int) -> dict:
    with target_db.cursor() as cur:
        cur.execute(f"SELECT {DELETED_AT}, _tideline_synced_at, _tideline_op, _tideline_source_ts, "
                    f"_tideline_source_position, ROW({COLUMNS})::text FROM {schema}.{table} WHERE id = %s", (key,))
        row = cur.fetchone()
    return None if row is None else dict(zip(("deleted_at", "synced_at", "op", "source_ts", "position", "row"), row))


def test_soft_deletes_and_metadata_through_load_stream_resnapshot_verify_and_repair(
        spark, source_db, target_db, pipelines, unique_name):
    t = f"{unique_name}_orders"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, note text, amount numeric(12,2), at timestamptz, "
                    f"tags int[])")
        cur.execute(f"INSERT INTO public.{t} SELECT g, CASE WHEN g % 7 = 0 THEN NULL WHEN g % 5 = 0 THEN '' "
                    f"ELSE 'n' || g || ' 😀' END, CASE WHEN g % 3 = 0 THEN NULL ELSE g * 1.25 END, "
                    f"CASE g % 4 WHEN 0 THEN 'infinity' WHEN 1 THEN '0044-03-15 10:00 BC' ELSE now() END, "
                    f"CASE WHEN g % 2 = 0 THEN ARRAY[g, NULL] END FROM generate_series(1, 400) g")
    try:
        cfg = pipelines.make([{"name": t, "deletes": "soft",
                               "metadata": ["synced_at", "op", "source_ts", "source_position"]}],
                             capture=True, partitions=2)
        schema = cfg.target_schema(t)
        FullLoad(cfg, spark).run([t])
        assert target_rows(target_db, schema, t) == source_rows(source_db, t)
        loaded = extras_of(target_db, schema, t, 1)
        assert loaded["op"] == "r" and loaded["synced_at"] is not None and loaded["deleted_at"] is None
        assert loaded["source_ts"] is None and loaded["position"] is None

        # changes of every kind, a key deleted and inserted again, a key deleted for good
        before = {int(r[1:].split(",")[0]): r for r in source_rows(source_db, t)}
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE public.{t} SET note = note || ' ✓', tags = ARRAY[NULL]::int[] WHERE id <= 20")
            cur.execute(f"DELETE FROM public.{t} WHERE id BETWEEN 300 AND 309")
            cur.execute(f"INSERT INTO public.{t} VALUES (1001, 'new', 'NaN', '-infinity', '{{}}')")
            cur.execute(f"DELETE FROM public.{t} WHERE id = 50")
            cur.execute(f"INSERT INTO public.{t} VALUES (50, 'back', 1, now(), NULL)")
        stream_until(cfg, spark, lambda: target_rows(target_db, schema, t) == source_rows(source_db, t),
                     "the live rows to equal the source")
        gone = extras_of(target_db, schema, t, 305)
        assert gone["deleted_at"] is not None and gone["op"] == "d"
        assert gone["row"] == before[305]   # its last values, kept
        assert POSITION.match(gone["position"]), gone["position"]
        assert abs((gone["deleted_at"] - gone["source_ts"]).total_seconds()) < 1   # the source's delete time
        assert target_rows(target_db, schema, t, f"{DELETED_AT} IS NOT NULL") == [
            r for r in target_rows(target_db, schema, t, "true") if int(r[1:].split(",")[0]) in range(300, 310)]
        back = extras_of(target_db, schema, t, 50)
        assert back["deleted_at"] is None and back["op"] == "c" and back["row"].startswith("(50,back,")
        assert extras_of(target_db, schema, t, 3)["op"] == "u" and extras_of(target_db, schema, t, 1001)["op"] == "c"
        assert compare.main(["--pipeline", cfg.name, "--tables", t, "--pipelines-dir", str(pipelines.dir)]) == 0

        # a re-snapshot: what the source deleted stays, marked — also what it deleted while nothing streamed
        with source_db.cursor() as cur:
            cur.execute(f"DELETE FROM public.{t} WHERE id IN (398, 399)")
        FullLoad(cfg, spark).run([t])
        assert target_rows(target_db, schema, t) == source_rows(source_db, t)
        for key in (305, 398):
            kept = extras_of(target_db, schema, t, key)
            assert kept is not None and kept["deleted_at"] is not None, (key, kept)
        assert extras_of(target_db, schema, t, 305)["deleted_at"] == gone["deleted_at"]   # its own time kept

        # repair of a key range, before the stream applied the delete: the row is marked, not deleted
        from tideline.core.connections import get_connection
        from tideline.verify.repair import repair
        with source_db.cursor() as cur:
            cur.execute(f"DELETE FROM public.{t} WHERE id = 120")
        repair(cfg, get_connection(cfg.source.conn_id), get_connection(cfg.target.conn_id), t, key_from="100",
               key_to="130")
        marked = extras_of(target_db, schema, t, 120)
        assert marked["deleted_at"] is not None and marked["row"].startswith("(120,") and marked["op"] == "d"
        assert target_rows(target_db, schema, t) == source_rows(source_db, t)
        stream_until(cfg, spark, lambda: extras_of(target_db, schema, t, 120)["source_ts"] is not None,
                     "the delete's own event to stamp the row")   # then the stream's delete applies on top
        assert target_rows(target_db, schema, t) == source_rows(source_db, t)
    finally:
        drop_source(source_db, t)


def test_soft_deletes_and_metadata_from_mariadb(spark, target_db, pipelines, unique_name, maria):   # noqa: F811
    """The same from a MariaDB source: a delete marked with the source's delete time, every change
    stamped with its binlog position (a GTID, else file:position) and Kafka offset; verify equal."""
    from test_mariadb import _drop, _exec, mariadb_pipeline
    t = f"{unique_name}_m"
    _exec(maria, f"CREATE TABLE {t} (id int PRIMARY KEY, note varchar(50), amount decimal(12,2), "
                 f"at datetime(6), tags json)",
          f"INSERT INTO {t} SELECT seq, IF(seq % 5 = 0, NULL, CONCAT('n', seq, ' 😀')), seq * 1.25, "
          f"'2026-01-01 00:00:00' + INTERVAL seq SECOND, JSON_ARRAY(seq, NULL) FROM seq_1_to_300")
    try:
        cfg = mariadb_pipeline(pipelines, [{"name": t, "deletes": "soft", "metadata": ["op", "source_ts",
                                                                                        "source_position"]}],
                               capture=True)
        schema = cfg.target_schema(t)
        FullLoad(cfg, spark).run([t])
        _exec(maria, f"UPDATE {t} SET note = 'changed ✓' WHERE id <= 10", f"DELETE FROM {t} WHERE id > 290")

        def marked() -> int:
            with target_db.cursor() as cur:
                cur.execute(f"SELECT count(*) FROM {schema}.{t} WHERE {DELETED_AT} IS NOT NULL")
                return cur.fetchone()[0]
        stream_until(cfg, spark, lambda: marked() == 10, "the ten deletes to be marked")
        with target_db.cursor() as cur:
            cur.execute(f"SELECT count(*) FILTER (WHERE {DELETED_AT} IS NULL), min(_tideline_source_position) "
                        f"FILTER (WHERE _tideline_op = 'd'), count(*) FILTER (WHERE _tideline_op = 'u') "
                        f"FROM {schema}.{t}")
            live, position, updated = cur.fetchone()
        assert live == 290 and updated == 10
        assert re.match(r"^(\d+-\d+-\d+|[\w.-]+:\d+) kafka \d+:\d+$", position), position
        assert compare.main(["--pipeline", cfg.name, "--tables", t, "--pipelines-dir", str(pipelines.dir)]) == 0
    finally:
        _drop(maria, t)


def test_soft_deletes_metadata_and_partitions_in_iceberg_read_with_pyiceberg(
        spark, source_db, pipelines, unique_name, lake):
    """Into Iceberg: the table partitioned by day(at) and bucket(4, id) as the YAML says, a delete
    kept and marked, the metadata from each event, a re-snapshot keeping what the source deleted —
    read back with PyIceberg, the live rows equal the source's."""
    from test_iceberg import back_in_postgres, iceberg_pipeline
    t = f"{unique_name}_lk"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, note text, at timestamptz NOT NULL)")
        cur.execute(f"INSERT INTO public.{t} SELECT g, 'n' || g || ' 😀', '2026-11-01'::timestamptz + g * "
                    f"interval '1 hour' FROM generate_series(1, 200) g")
    try:
        cfg = iceberg_pipeline(pipelines, unique_name, [{"name": t, "deletes": "soft", "metadata": [
            "op", "source_ts", "source_position"], "partition_by": ["day(at)", "bucket(4, id)"]}], capture=True)
        FullLoad(cfg, spark).run([t])
        table = lake.pyiceberg_catalog().load_table((unique_name, t))
        assert [(f.name, str(f.transform)) for f in table.spec().fields] == [("at_day", "day"), ("id_bucket", "bucket[4]")]
        with source_db.cursor() as cur:
            cur.execute(f"DELETE FROM public.{t} WHERE id BETWEEN 10 AND 14")
            cur.execute(f"UPDATE public.{t} SET note = 'changed ✓' WHERE id = 20")

        def marked() -> int:
            rows = lake.pyiceberg_catalog().load_table((unique_name, t)).scan().to_arrow()
            return sum(v is not None for v in rows.column(DELETED_AT).to_pylist())
        stream_until(cfg, spark, lambda: marked() == 5, "the five deletes to be marked in Iceberg")
        rows = {r["id"]: r for r in lake.pyiceberg_catalog().load_table((unique_name, t)).scan().to_arrow().to_pylist()}
        assert len(rows) == 200 and rows[12]["_tideline_op"] == "d" and rows[20]["_tideline_op"] == "u"
        assert rows[12]["note"] == "n12 😀" and POSITION.match(rows[12]["_tideline_source_position"])
        assert rows[1]["_tideline_op"] == "r" and rows[1]["_tideline_source_ts"] is None
        with source_db.cursor() as cur:
            cur.execute(f"DELETE FROM public.{t} WHERE id = 199")
        FullLoad(cfg, spark).run([t])   # a re-snapshot: what the source deleted stays, marked
        table = lake.pyiceberg_catalog().load_table((unique_name, t))
        rows = {r["id"]: r for r in table.scan().to_arrow().to_pylist()}
        assert len(rows) == 200 and rows[199][DELETED_AT] is not None and rows[12][DELETED_AT] is not None
        live = table.scan(row_filter=f"{DELETED_AT} IS NULL", selected_fields=("id", "note", "at"))
        with source_db.cursor() as cur:
            cur.execute(f"CREATE TABLE public.{t}_live AS SELECT * FROM public.{t} WHERE false")
        try:
            class Live:   # the live rows as a table PyIceberg reads (back_in_postgres takes a table)
                def scan(self):
                    return live

                def schema(self):
                    return table.schema()
            assert sorted(back_in_postgres(source_db, f"{t}_live", Live())) == sorted(rows_as_text(source_db, "public", t))
        finally:
            drop_source(source_db, f"{t}_live")
        assert compare.main(["--pipeline", cfg.name, "--tables", t, "--pipelines-dir", str(pipelines.dir)]) == 0
    finally:
        drop_source(source_db, t)


def test_a_row_filter_holds_for_the_load_and_the_stream_rows_moving_in_and_out(
        spark, source_db, target_db, pipelines, unique_name):
    """`row_filter: status <> 'test'`: the load reads only those rows; an update out of the filter
    deletes the target row, an update into it inserts it (with its unchanged large value, which the
    update's event does not carry), a delete of a row never in it does nothing; verify compares the
    filtered rows and says equal; a repair keeps to the filter."""
    t = f"{unique_name}_f"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, status text NOT NULL, big text, n numeric)")
        cur.execute(f"INSERT INTO public.{t} SELECT g, CASE WHEN g % 3 = 0 THEN 'test' ELSE 'live' END, "
                    f"repeat(md5(g::text), 400), g FROM generate_series(1, 300) g")   # big: TOASTed, 12.8 kB
    kept = f"SELECT ROW(id, status, big, n)::text FROM public.{t} WHERE status <> 'test' ORDER BY id"

    def target() -> list[str]:
        with target_db.cursor() as cur:
            cur.execute(f"SELECT ROW(id, status, big, n)::text FROM {cfg.target_schema(t)}.{t} ORDER BY id")
            return [r[0] for r in cur.fetchall()]

    def source() -> list[str]:
        with source_db.cursor() as cur:
            cur.execute(kept)
            return [r[0] for r in cur.fetchall()]
    try:
        cfg = pipelines.make([{"name": t, "row_filter": "status <> 'test'"}], capture=True)
        FullLoad(cfg, spark).run([t])
        assert len(target()) == 200 and target() == source()
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE public.{t} SET status = 'test' WHERE id BETWEEN 1 AND 10")    # out of the filter
            cur.execute(f"UPDATE public.{t} SET status = 'live' WHERE id IN (3, 6, 9)")         # into it (big unchanged)
            cur.execute(f"UPDATE public.{t} SET n = n + 1 WHERE id IN (12, 15)")               # stays out
            cur.execute(f"DELETE FROM public.{t} WHERE id IN (18, 20)")                       # out / in
            cur.execute(f"INSERT INTO public.{t} VALUES (1001, 'live', 'x', 1), (1002, 'test', 'y', 2)")
        stream_until(cfg, spark, lambda: target() == source(), "the target to hold the filtered rows")
        assert compare.main(["--pipeline", cfg.name, "--tables", t, "--pipelines-dir", str(pipelines.dir)]) == 0
        from tideline.core.connections import get_connection
        from tideline.verify.repair import repair
        repair(cfg, get_connection(cfg.source.conn_id), get_connection(cfg.target.conn_id), t, key_from="1",
               key_to="400")
        assert target() == source()
    finally:
        drop_source(source_db, t)


def test_history_keeps_a_version_per_change_exactly_once_through_a_replay_and_a_resnapshot(
        spark, source_db, target_db, pipelines, unique_name):
    """history: true — the load seeds a version per row at the snapshot's time; updates, a delete,
    a key inserted again and a key changed make versions in source order, contiguous, one current
    per live key; every event applied again (the committed offsets set back: a commit whose answer
    was lost, a kill -9 before the offsets) adds no version; a re-snapshot closes what changed
    meanwhile and keeps the rest; the current versions verify equal to the source."""
    t = f"{unique_name}_h"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, note text, big text)")
        cur.execute(f"INSERT INTO public.{t} SELECT g, 'v0', repeat(md5(g::text), 300) FROM generate_series(1, 50) g")

    def versions(key: int) -> list[tuple]:
        with target_db.cursor() as cur:
            cur.execute(f"SELECT note, _tideline_valid_from, _tideline_valid_to, _tideline_current, length(big) "
                        f"FROM {cfg.target_schema(t)}.{t} WHERE id = %s ORDER BY _tideline_valid_from", (key,))
            return cur.fetchall()

    def current() -> list[str]:
        with target_db.cursor() as cur:
            cur.execute(f"SELECT ROW(id, note, big)::text FROM {cfg.target_schema(t)}.{t} WHERE _tideline_current "
                        f"ORDER BY id")
            return [r[0] for r in cur.fetchall()]

    def all_versions() -> int:
        with target_db.cursor() as cur:
            cur.execute(f"SELECT count(*) FROM {cfg.target_schema(t)}.{t}")
            return cur.fetchone()[0]
    try:
        cfg = pipelines.make([{"name": t, "history": True}], capture=True)
        FullLoad(cfg, spark).run([t])
        seeded = versions(1)
        assert len(seeded) == 1 and seeded[0][3] and seeded[0][2] is None and all_versions() == 50
        for n in (1, 2, 3):   # three transactions: three versions (big unchanged: Debezium does not send it)
            with source_db.cursor() as cur:
                cur.execute(f"UPDATE public.{t} SET note = 'v{n}' WHERE id = 1")
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE public.{t} SET note = 'x' WHERE id = 4; UPDATE public.{t} SET note = 'y' WHERE id = 4")
            cur.execute(f"DELETE FROM public.{t} WHERE id = 2")
            cur.execute(f"INSERT INTO public.{t} VALUES (2, 'again', 'b')")
            cur.execute(f"UPDATE public.{t} SET id = 1003 WHERE id = 3")
        stream_until(cfg, spark, lambda: current() == rows_as_text(source_db, "public", t, "id"),
                     "the current versions to equal the source")
        one = versions(1)
        assert [v[0] for v in one] == ["v0", "v1", "v2", "v3"] and [v[3] for v in one] == [False] * 3 + [True]
        assert all(a[2] == b[1] for a, b in zip(one, one[1:])) and one[-1][2] is None   # contiguous, open-ended
        assert {v[4] for v in one} == {9600}   # the unsent large value is every version's
        assert [v[0] for v in versions(4)] == ["v0", "y"]            # one transaction: its last change
        two = versions(2)
        assert [(v[0], v[3]) for v in two] == [("v0", False), ("again", True)] and two[0][2] <= two[1][1]
        assert [v[3] for v in versions(3)] == [False] and [v[0] for v in versions(1003)] == ["v0"]
        total = all_versions()
        # every event again, from the topic's start: nothing applied before adds a version
        with target_db.cursor() as cur:
            cur.execute("UPDATE tideline.table_state SET resume_offsets = %s WHERE pipeline = %s AND table_name = %s",
                        (json.dumps({"0": 0, "1": 0}), cfg.name, t))
        IncrementalRun(cfg, spark, "available_now").run()
        assert all_versions() == total and current() == rows_as_text(source_db, "public", t, "id")
        assert compare.main(["--pipeline", cfg.name, "--tables", t, "--pipelines-dir", str(pipelines.dir)]) == 0
        # a re-snapshot: row 5 changed while nothing streamed closes at the snapshot, the rest stay as they are
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE public.{t} SET note = 'meanwhile' WHERE id = 5")
        FullLoad(cfg, spark).run([t])
        five = versions(5)
        assert [(v[0], v[3]) for v in five] == [("v0", False), ("meanwhile", True)] and five[0][2] == five[1][1]
        assert versions(1) == one and len(versions(6)) == 1
        assert all_versions() == total + 1
    finally:
        drop_source(source_db, t)


def test_history_in_iceberg_read_with_pyiceberg(spark, source_db, pipelines, unique_name, lake):
    """history: true into Iceberg: the versions of a row updated twice and of a deleted row, read
    with PyIceberg — contiguous, one current per live key; a full replay adds none; verify compares
    the current versions."""
    from test_iceberg import iceberg_pipeline
    t = f"{unique_name}_lh"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, note text)")
        cur.execute(f"INSERT INTO public.{t} SELECT g, 'v0' FROM generate_series(1, 20) g")

    def versions() -> dict[int, list[dict]]:
        rows = lake.pyiceberg_catalog().load_table((unique_name, t)).scan().to_arrow().to_pylist()
        out: dict[int, list[dict]] = {}
        for r in sorted(rows, key=lambda r: (r["id"], r["_tideline_valid_from"])):
            out.setdefault(r["id"], []).append(r)
        return out
    try:
        cfg = iceberg_pipeline(pipelines, unique_name, [{"name": t, "history": True}], capture=True)
        FullLoad(cfg, spark).run([t])
        assert all(len(v) == 1 and v[0]["_tideline_current"] for v in versions().values())
        for n in (1, 2):
            with source_db.cursor() as cur:
                cur.execute(f"UPDATE public.{t} SET note = 'v{n}' WHERE id = 1")
        with source_db.cursor() as cur:
            cur.execute(f"DELETE FROM public.{t} WHERE id = 2")
        stream_until(cfg, spark, lambda: len(versions()[1]) == 3 and not versions()[2][-1]["_tideline_current"],
                     "the versions to land in Iceberg")
        one, two = versions()[1], versions()[2]
        assert [v["note"] for v in one] == ["v0", "v1", "v2"] and [v["_tideline_current"] for v in one] == [False, False, True]
        assert all(a["_tideline_valid_to"] == b["_tideline_valid_from"] for a, b in zip(one, one[1:]))
        assert len(two) == 1 and two[0]["_tideline_valid_to"] is not None
        total = sum(len(v) for v in versions().values())
        conn = lake.connect()
        try:
            with conn, conn.cursor() as cur:   # every event again from the topic's start
                cur.execute("UPDATE tideline.table_state SET resume_offsets = %s WHERE pipeline = %s AND "
                            "table_name = %s", (json.dumps({"0": 0, "1": 0}), cfg.name, t))
        finally:
            conn.close()
        IncrementalRun(cfg, spark, "available_now").run()
        assert sum(len(v) for v in versions().values()) == total, "a replay added versions"
        args = ["--pipeline", cfg.name, "--tables", t, "--pipelines-dir", str(pipelines.dir)]
        assert compare.main(args) == 0

        # a repair of keys 1..10 before the stream sees two changes: row 5's current version closes and
        # the source's row opens one, row 6's (gone) closes, the others and every closed version stay
        from tideline.core.connections import get_connection
        from tideline.verify.repair import repair
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE public.{t} SET note = 'fixed' WHERE id = 5")
            cur.execute(f"DELETE FROM public.{t} WHERE id = 6")
        before = versions()
        repair(cfg, get_connection(cfg.source.conn_id), get_connection(cfg.target.conn_id), t, key_from="1",
               key_to="10")
        after = versions()
        assert [(v["note"], v["_tideline_current"]) for v in after[5]] == [("v0", False), ("fixed", True)]
        assert after[5][0]["_tideline_valid_to"] == after[5][1]["_tideline_valid_from"]   # no gap, no overlap
        assert len(after[6]) == 1 and not after[6][0]["_tideline_current"]
        assert {k: v for k, v in after.items() if k not in (5, 6)} == {k: v for k, v in before.items() if k not in (5, 6)}
        assert compare.main(args) == 0
        IncrementalRun(cfg, spark, "available_now").run()   # the two changes' own events: nothing new
        assert sum(len(v) for v in versions().values()) == total + 1
    finally:
        drop_source(source_db, t)


def test_history_through_kill_9_of_the_stream_at_random_moments_has_no_version_twice(
        spark, source_db, target_db, pipelines, unique_name):
    """A writer changes the source (inserts, updates, deletes, key changes) while the stream of a
    history table is killed with SIGKILL five times at random moments, some mid-commit: afterwards
    the current versions equal the source, each key's versions follow each other without gap or
    overlap, and no version repeats the one before it (a replayed event would)."""
    import random

    from helpers import Writer, catching_up
    from test_incremental import kill_streams_mid_batch, make_items
    t = f"{unique_name}_hk"
    make_items(source_db, t, 2_000)
    writer = Writer(f"public.{t}", 2_001, seed=7, pause=0.002)
    rng = random.Random(11)
    schema = None
    try:
        cfg = pipelines.make([{"name": t, "history": True}], partitions=2, capture=True,
                             stream={"max_offsets_per_trigger": 300, "trigger_interval_s": 0.5})
        schema = cfg.target_schema(t)
        FullLoad(cfg, spark).run([t])
        writer.start()
        kill_streams_mid_batch(cfg, target_db, {"TIDELINE_PIPELINES": str(pipelines.dir)}, 5, rng, 1.5)
        writer.stop()
        live = "SELECT ROW(id, qty, note, price)::text FROM {} WHERE {} ORDER BY id"
        stream_until(catching_up(cfg), spark, lambda: _rows(target_db, live.format(f"{schema}.{t}", "_tideline_current"))
                     == _rows(source_db, live.format(f"public.{t}", "true")), "the current versions to equal the source")
        with target_db.cursor() as cur:
            cur.execute(f"""
                SELECT count(*) FILTER (WHERE next_from IS NOT NULL AND _tideline_valid_to IS DISTINCT FROM next_from),
                       count(*) FILTER (WHERE next_from IS NOT NULL
                                        AND (qty, note, price) IS NOT DISTINCT FROM (nqty, nnote, nprice)
                                        AND _tideline_valid_from > (SELECT min(_tideline_valid_from) FROM {schema}.{t})),
                       count(*) FILTER (WHERE _tideline_current AND _tideline_valid_to IS NOT NULL), count(*)
                  FROM (SELECT *, lead(_tideline_valid_from) OVER w AS next_from, lead(qty) OVER w AS nqty,
                               lead(note) OVER w AS nnote, lead(price) OVER w AS nprice
                          FROM {schema}.{t} WINDOW w AS (PARTITION BY id ORDER BY _tideline_valid_from)) v""")
            gaps, repeated, open_closed, total = cur.fetchone()
        assert (gaps, repeated, open_closed) == (0, 0, 0), (gaps, repeated, open_closed, total)
        assert total > 2_000 + writer.count // 2   # versions, not rows
    finally:
        writer.stop_event.set()
        drop_source(source_db, t)


def _event_offsets(bootstrap: str, topic: str, start: dict[int, int], ends: dict[int, int]) -> set[tuple[int, int]]:
    """(partition, offset) of every record with a value (not a tombstone) from `start` to `ends`."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, start.get(p, 0)) for p in ends])
    out, left = set(), {p for p, e in ends.items() if e > start.get(p, 0)}
    try:
        while left:
            for m in consumer.consume(500, timeout=10):
                if m.error() or m.offset() >= ends[m.partition()]:
                    continue
                if m.value() is not None:
                    out.add((m.partition(), m.offset()))
                if m.offset() == ends[m.partition()] - 1:
                    left.discard(m.partition())
    finally:
        consumer.close()
    return out


def _rows(conn, query: str) -> list[str]:
    with conn.cursor() as cur:
        cur.execute(query)
        return [r[0] for r in cur.fetchall()]


def test_a_change_log_holds_every_event_once_through_kill_9_and_a_reload(
        spark, source_db, target_db, pipelines, unique_name):
    """changelog: true — `<table>__changes` gets every change event (inserts, each of several
    updates, deletes; op, key, before and after image, source time and position) exactly once:
    the stream killed with SIGKILL at random moments and a reload (whose stream replays Kafka's
    overlap) add no event twice, and every Kafka offset of the topic from the load on is there."""
    import random

    from helpers import Writer, catching_up
    from test_incremental import kill_streams_mid_batch, make_items
    from tideline.kafka_offsets import end_offsets
    t = f"{unique_name}_cl"
    make_items(source_db, t, 500)
    writer = Writer(f"public.{t}", 501, seed=3, pause=0.002)
    rng = random.Random(5)
    try:
        cfg = pipelines.make([{"name": t, "changelog": True}], partitions=2, capture=True,
                             stream={"max_offsets_per_trigger": 200, "trigger_interval_s": 0.5})
        schema = cfg.target_schema(t)
        [loaded] = FullLoad(cfg, spark).run([t])
        writer.start()
        kill_streams_mid_batch(cfg, target_db, {"TIDELINE_PIPELINES": str(pipelines.dir)}, 3, rng, 1.5)
        FullLoad(cfg, spark).run([t])   # a reload: its stream replays from offsets the log already holds
        writer.stop()
        live = "SELECT ROW(id, qty, note, price)::text FROM {} ORDER BY id"
        stream_until(catching_up(cfg), spark, lambda: _rows(target_db, live.format(f"{schema}.{t}"))
                     == _rows(source_db, live.format(f"public.{t}")), "the table to equal the source")
        ends = end_offsets(pipelines.bootstrap(), cfg.topic(t))
        with target_db.cursor() as cur:
            cur.execute(f"SELECT _tideline_partition, count(*), count(DISTINCT _tideline_offset), min(_tideline_offset), "
                        f"max(_tideline_offset) FROM {schema}.{t}__changes GROUP BY 1 ORDER BY 1")
            per_partition = cur.fetchall()
            cur.execute(f"SELECT count(*) FILTER (WHERE _tideline_op = 'd' AND before IS NULL), "
                        f"count(*) FILTER (WHERE _tideline_op <> 'd' AND after IS NULL), "
                        f"count(*) FILTER (WHERE _tideline_source_ts IS NULL) FROM {schema}.{t}__changes")
            assert cur.fetchone() == (0, 0, 0)
        assert all(n == distinct for _p, n, distinct, _f, _l in per_partition), "an event logged twice"
        # every event the topic holds from the load's position on (a delete's tombstone is no event)
        with target_db.cursor() as cur:
            cur.execute(f"SELECT _tideline_partition, _tideline_offset FROM {schema}.{t}__changes")
            logged = set(cur.fetchall())
        assert logged == _event_offsets(pipelines.bootstrap(), cfg.topic(t), loaded.offsets, ends)
    finally:
        writer.stop_event.set()
        drop_source(source_db, t)


def test_a_change_log_in_iceberg_read_with_pyiceberg(spark, source_db, pipelines, unique_name, lake):
    from test_iceberg import iceberg_pipeline
    t = f"{unique_name}_lcl"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, note text)")
        cur.execute(f"INSERT INTO public.{t} SELECT g, 'v0' FROM generate_series(1, 10) g")
    try:
        cfg = iceberg_pipeline(pipelines, unique_name, [{"name": t, "changelog": True}], capture=True)
        FullLoad(cfg, spark).run([t])
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE public.{t} SET note = 'v1' WHERE id = 1")
            cur.execute(f"UPDATE public.{t} SET note = 'v2' WHERE id = 1")
            cur.execute(f"DELETE FROM public.{t} WHERE id = 2")

        def logged() -> list[dict]:
            table = lake.iceberg_table(unique_name, f"{t}__changes")
            return [] if table is None else sorted(table.scan().to_arrow().to_pylist(),
                                                   key=lambda r: (r["_tideline_partition"], r["_tideline_offset"]))
        stream_until(cfg, spark, lambda: len(logged()) >= 3, "the three events to be logged in Iceberg")
        IncrementalRun(cfg, spark, "available_now").run()   # again: nothing more
        rows = logged()
        assert [(r["_tideline_op"], json.loads(r["after"])["note"] if r["after"] else None) for r in rows
                if json.loads(r["key"])["id"] in ("1", 1)] == [("u", "v1"), ("u", "v2")]
        assert len(rows) == 3 and [r["_tideline_op"] for r in rows].count("d") == 1
    finally:
        drop_source(source_db, t)
