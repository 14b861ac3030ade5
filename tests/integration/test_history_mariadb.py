"""History (SCD type 2) from a MariaDB source into PostgreSQL, against the real stack. MariaDB's
binlog times are whole seconds, and the times of statements, which may run back: the versions
follow the GTID order, never start before the version they follow, and the changes of one second
fold into its last. Each partition of the load seeds its rows with its own snapshot's place in that
order, so what a snapshot holds is never a version again; a replay adds nothing."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from helpers import stream_until
from test_mariadb import CONN_ID, DB, _drop, _exec, maria, mariadb_pipeline  # noqa: F401  (the MariaDB source fixture)
from tideline.core.table_extras import SOURCE_ORDER
from tideline.load.full_load import FullLoad
from tideline.stream.run import IncrementalRun
from tideline.verify import command as compare

pytestmark = pytest.mark.integration


def _source(maria, t: str) -> list[tuple]:   # noqa: F811
    with maria.cursor() as cur:
        cur.execute(f"SELECT id, note, amount FROM `{t}` ORDER BY id")
        return [tuple(r) for r in cur.fetchall()]


def test_history_from_mariadb_follows_the_gtid_order_folds_a_second_and_adds_nothing_on_replay(
        spark, target_db, pipelines, unique_name, maria):   # noqa: F811
    """Into PostgreSQL (see _scenario), verified equal to the source."""
    t = f"{unique_name}_mh"

    def versions(key: int) -> list[tuple]:
        with target_db.cursor() as cur:
            cur.execute(f"SELECT note, _tideline_valid_from, _tideline_valid_to, _tideline_current, {SOURCE_ORDER} "
                        f"FROM {cfg.target_schema(t)}.{t} WHERE id = %s ORDER BY _tideline_valid_from", (key,))
            return cur.fetchall()

    def current() -> list[tuple]:
        with target_db.cursor() as cur:
            cur.execute(f"SELECT id, note, amount FROM {cfg.target_schema(t)}.{t} WHERE _tideline_current ORDER BY id")
            return [tuple(r) for r in cur.fetchall()]

    def count() -> int:
        with target_db.cursor() as cur:
            cur.execute(f"SELECT count(*) FROM {cfg.target_schema(t)}.{t}")
            return cur.fetchone()[0]

    def replay() -> None:
        with target_db.cursor() as cur:
            cur.execute("UPDATE tideline.table_state SET resume_offsets = %s WHERE pipeline = %s AND table_name = %s",
                        (json.dumps({"0": 0, "1": 0}), cfg.name, t))
    _create(maria, t)
    cfg = mariadb_pipeline(pipelines, [{"name": t, "history": True}], partitions=2, capture=True)
    _scenario(cfg, spark, maria, t, versions, current, count, replay, verify=str(pipelines.dir))


def test_history_from_mariadb_into_iceberg_read_with_pyiceberg(spark, pipelines, unique_name, maria, lake):   # noqa: F811
    """Into Iceberg (see _scenario), every version read with PyIceberg."""
    from test_iceberg import iceberg_pipeline
    t = f"{unique_name}_mi"

    def rows() -> list[dict]:
        return lake.pyiceberg_catalog().load_table((unique_name, t)).scan().to_arrow().to_pylist()

    def versions(key: int) -> list[tuple]:
        return sorted(((r["note"], r["_tideline_valid_from"], r["_tideline_valid_to"], r["_tideline_current"],
                        r[SOURCE_ORDER]) for r in rows() if r["id"] == key), key=lambda v: v[1])

    def current() -> list[tuple]:
        return sorted((r["id"], r["note"], r["amount"]) for r in rows() if r["_tideline_current"])

    def replay() -> None:
        conn = lake.connect()
        try:
            with conn, conn.cursor() as cur:
                cur.execute("UPDATE tideline.table_state SET resume_offsets = %s WHERE pipeline = %s AND "
                            "table_name = %s", (json.dumps({"0": 0, "1": 0}), cfg.name, t))
        finally:
            conn.close()
    _create(maria, t)
    cfg = iceberg_pipeline(pipelines, unique_name, [{"name": t, "history": True}], capture=True,
                           source={"kind": "mariadb", "conn_id": CONN_ID, "schema": DB})
    _scenario(cfg, spark, maria, t, versions, current, lambda: len(rows()), replay, verify=None)


def _create(maria, t: str) -> None:   # noqa: F811
    _exec(maria, f"CREATE TABLE `{t}` (id int PRIMARY KEY, note varchar(40), amount decimal(10,2))",
          f"INSERT INTO `{t}` SELECT seq, CONCAT('v0 ', seq, ' 😀'), seq * 1.5 FROM seq_1_to_400")


def _scenario(cfg, spark, maria, t, versions, current, count, replay, verify: str | None) -> None:   # noqa: F811
    """The load seeds one version per row, each with its partition's snapshot GTID. Then, at times
    set with SET timestamp (a day ahead, so after the seeds):
    - key 1: two transactions in one second fold into the second's last, a later one follows;
    - key 2: a change whose binlog time runs back before the one it follows starts where that one
      starts (and folds into it);
    - key 3: an update and a delete in one second: the row's first version closes there, nothing opens;
    - key 4: deleted, inserted again later; key 5 changes its key.
    - key 7: two transactions in one second, in one batch.
    Each group of changes is streamed before the next, so folds happen across commits too. Then every event again from the
    topic's start (a replay, the load's overlap included) adds no version; a re-snapshot closes
    the row changed meanwhile; the current versions verify equal to the source, and a repair (into
    PostgreSQL) opens versions its rows' own events do not open again."""
    try:
        FullLoad(cfg, spark).run([t])
        seed = versions(1)
        assert len(seed) == 1 and seed[0][3] and seed[0][2] is None and seed[0][4] > 0 and count() == 400
        with maria.cursor() as cur:
            cur.execute("SELECT UNIX_TIMESTAMP() + 86400")
            day = int(cur.fetchone()[0])
        at = lambda s: f"SET timestamp = {day + s}"   # noqa: E731
        groups = [  # each streamed before the next: a fold across commits, then within one
            [at(10), f"UPDATE `{t}` SET note = 'a' WHERE id = 1", at(30), f"UPDATE `{t}` SET note = 'late' WHERE id = 2",
             at(40), f"UPDATE `{t}` SET note = 'gone' WHERE id = 3"],
            [at(10), f"UPDATE `{t}` SET note = 'b' WHERE id = 1", at(25), f"UPDATE `{t}` SET note = 'back' WHERE id = 2",
             at(40), f"DELETE FROM `{t}` WHERE id = 3", at(50), f"DELETE FROM `{t}` WHERE id = 4"],
            [at(20), f"UPDATE `{t}` SET note = 'c' WHERE id = 1", at(60), f"INSERT INTO `{t}` VALUES (4, 'again', 4)",
             at(70), f"UPDATE `{t}` SET id = 1005 WHERE id = 5",
             at(80), f"UPDATE `{t}` SET note = 'x' WHERE id = 7", f"UPDATE `{t}` SET note = 'y' WHERE id = 7"]]
        for n, group in enumerate(groups):
            _exec(maria, *group, "SET timestamp = DEFAULT")
            stream_until(cfg, spark, lambda: current() == _source(maria, t), f"group {n + 1} in the current versions")
        base = datetime.fromtimestamp(day, timezone.utc)
        sec = lambda s: base + timedelta(seconds=s)   # noqa: E731
        one = versions(1)
        assert [(v[0], v[1], v[2], v[3]) for v in one[1:]] == [("b", sec(10), sec(20), False), ("c", sec(20), None, True)]
        assert one[0][2] == sec(10) and one[1][4] < one[2][4]   # the seed closes where b starts; GTIDs rise
        two = versions(2)
        assert [(v[0], v[1], v[3]) for v in two[1:]] == [("back", sec(30), True)] and two[0][2] == sec(30)
        assert [(v[0], v[2], v[3]) for v in versions(3)] == [("v0 3 😀", sec(40), False)]
        assert [(v[0], v[1], v[2], v[3]) for v in versions(4)[1:]] == [("again", sec(60), None, True)]
        assert versions(4)[0][2] == sec(50)
        assert [v[2] for v in versions(5)] == [sec(70)] and [v[1] for v in versions(1005)] == [sec(70)]
        assert [(v[0], v[1]) for v in versions(7)[1:]] == [("y", sec(80))]
        total = count()
        assert total == 400 + 2 + 1 + 1 + 1 + 1
        # every event again, from the topic's start, in larger batches: no version added or changed
        before = {k: versions(k) for k in (1, 2, 3, 4, 5, 7, 1005)}
        replay()
        IncrementalRun(cfg, spark, "available_now").run()
        assert count() == total and {k: versions(k) for k in before} == before
        assert current() == _source(maria, t)
        if verify:
            assert compare.main(["--pipeline", cfg.name, "--tables", t, "--pipelines-dir", verify]) == 0
            # a repair of keys 8..9 before the stream sees their changes: 8's version closes and the
            # source's row opens one at the GTID before the read, 9's closes; their own events add nothing
            from tideline.core.connections import get_connection
            from tideline.verify.repair import repair
            _exec(maria, f"UPDATE `{t}` SET note = 'fixed' WHERE id = 8", f"DELETE FROM `{t}` WHERE id = 9")
            repair(cfg, get_connection(cfg.source.conn_id), get_connection(cfg.target.conn_id), t, key_from="8",
                   key_to="9")
            eight = versions(8)
            assert [(v[0], v[3]) for v in eight] == [("v0 8 😀", False), ("fixed", True)] and eight[1][4] > eight[0][4]
            assert [v[3] for v in versions(9)] == [False] and count() == total + 1
            IncrementalRun(cfg, spark, "available_now").run()
            assert versions(8) == eight and count() == total + 1 and current() == _source(maria, t)
            total += 1
        # a re-snapshot: row 6 changed while nothing streamed closes at the snapshot; the rest stay
        _exec(maria, f"UPDATE `{t}` SET note = 'meanwhile' WHERE id = 6")
        FullLoad(cfg, spark).run([t])
        six = versions(6)
        assert [(v[0], v[3]) for v in six] == [("v0 6 😀", False), ("meanwhile", True)] and six[0][2] == six[1][1]
        assert versions(1) == before[1] and count() == total + 1
        stream_until(cfg, spark, lambda: current() == _source(maria, t), "the stream after the reload")
        assert count() == total + 1   # the reload's overlap (the 'meanwhile' event) is no version again
    finally:
        _drop(maria, t)


def test_history_from_mariadb_through_kill_9_of_the_stream_has_no_gap_overlap_or_version_twice(
        spark, target_db, pipelines, unique_name, maria):   # noqa: F811
    """A writer changes the MariaDB source (inserts, updates, deletes, key changes, many in one
    second) while the stream of its history table is killed with SIGKILL four times at random
    moments, some mid-commit: afterwards the current versions equal the source, each key's
    versions follow each other without gap or overlap, start in the order of their GTIDs, and none
    repeats the one before it (a replayed event would; every change here changes the row)."""
    import random

    import stackctl
    from helpers import Writer, catching_up
    from test_incremental import kill_streams_mid_batch
    t = f"{unique_name}_mk"
    _exec(maria, f"CREATE TABLE `{t}` (id bigint PRIMARY KEY, qty int NOT NULL, note varchar(500))",
          f"INSERT INTO `{t}` SELECT seq, seq % 100, CONCAT('n', seq) FROM seq_1_to_2000")
    writer = Writer(f"`{t}`", 2_001, seed=7, pause=0.002, connect=lambda: stackctl.mariadb_connect(DB))
    try:
        cfg = mariadb_pipeline(pipelines, [{"name": t, "history": True}], partitions=2, capture=True,
                               stream={"max_offsets_per_trigger": 300, "trigger_interval_s": 0.5})
        schema = cfg.target_schema(t)
        FullLoad(cfg, spark).run([t])
        writer.start()
        kill_streams_mid_batch(cfg, target_db, {"TIDELINE_PIPELINES": str(pipelines.dir)}, 4, random.Random(13), 1.5)
        writer.stop()

        def current() -> list[tuple]:
            with target_db.cursor() as cur:
                cur.execute(f"SELECT id, qty, note FROM {schema}.{t} WHERE _tideline_current ORDER BY id")
                return [tuple(r) for r in cur.fetchall()]

        def source() -> list[tuple]:
            with maria.cursor() as cur:
                cur.execute(f"SELECT id, qty, note FROM `{t}` ORDER BY id")
                return [tuple(r) for r in cur.fetchall()]
        stream_until(catching_up(cfg), spark, lambda: current() == source(), "the current versions to equal the source")
        with target_db.cursor() as cur:
            cur.execute(f"""
                SELECT count(*) FILTER (WHERE next_from IS NOT NULL AND _tideline_valid_to IS DISTINCT FROM next_from),
                       count(*) FILTER (WHERE next_from IS NOT NULL AND (qty, note) IS NOT DISTINCT FROM (nqty, nnote)),
                       count(*) FILTER (WHERE next_order <= {SOURCE_ORDER}),
                       count(*) FILTER (WHERE _tideline_current AND _tideline_valid_to IS NOT NULL), count(*)
                  FROM (SELECT *, lead(_tideline_valid_from) OVER w AS next_from, lead(qty) OVER w AS nqty,
                               lead(note) OVER w AS nnote, lead({SOURCE_ORDER}) OVER w AS next_order
                          FROM {schema}.{t} WINDOW w AS (PARTITION BY id ORDER BY _tideline_valid_from)) v""")
            gaps, repeated, unordered, open_closed, total = cur.fetchone()
        assert (gaps, repeated, unordered, open_closed) == (0, 0, 0, 0), (gaps, repeated, unordered, open_closed, total)
        assert total > 2_000 + writer.count // 4   # versions, not rows (a second's changes fold into one)
    finally:
        writer.stop_event.set()
        _drop(maria, t)
