"""The pure parts of the full load (FullLoad's table orchestration, SnapshotLoad's row check) and
of the stream's commit (BatchCommitter's figures and its handling of bad messages): no database."""
import json
from types import SimpleNamespace

import pytest

from tideline.core.config import parse_pipeline
from tideline.core.errors import LoadVerificationError, SourceError
from tideline.load.full_load import FullLoad, LoadResult
from tideline.stream.commit import BatchCommitter, StreamTable, _unapplied
from tideline.targets import SnapshotLoad

ENV = {"AIRFLOW_CONN_SRC": "postgresql://u:p@localhost:1/src", "AIRFLOW_CONN_TGT": "postgresql://u:p@localhost:1/tgt",
       "AIRFLOW_CONN_TIDELINE_KAFKA": json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": "localhost:1"}})}


def cfg(**stream):
    return parse_pipeline({"name": "shop", "source": {"conn_id": "src"}, "target": {"conn_id": "tgt"},
                           "kafka": {"topic_prefix": "tl.shop"}, "stream": stream, "spark": {"tables_at_once": 3},
                           "tables": [{"name": n} for n in ("a", "b", "c", "d")]}, "shop.yaml")


def snapshot_load(rows):
    return SnapshotLoad(None, None, None, None, None, SimpleNamespace(rows=rows), "shop", "shop.orders", "shop", 1,
                        {0: 0}, fill=None, fence=None, record=None)


def test_a_snapshot_whose_rows_do_not_add_up_stops_naming_the_counts():
    assert snapshot_load(3).verified(3, 3, "") == 3
    assert snapshot_load(None).verified(5, 5, "") == 5   # an engine that cannot count ahead: what was read
    with pytest.raises(LoadVerificationError) as info:
        snapshot_load(3).verified(3, 2, "3 were read and 2 stored by COPY; nothing was swapped in")
    assert str(info.value) == ("shop.orders: the snapshot holds 3 rows but 3 were read and 2 stored by COPY; "
                               "nothing was swapped in. Rerun the full load.")
    with pytest.raises(LoadVerificationError):
        snapshot_load(None).verified(5, 4, "")


def test_tables_load_side_by_side_and_one_that_fails_neither_stops_the_others_nor_hides_its_error(monkeypatch):
    load = FullLoad(cfg(), spark=None, environ=ENV)   # no connection is opened until a table loads
    done = []

    def load_table(name):
        if name in ("b", "d"):
            raise SourceError(f"{name} is broken", table=name)
        done.append(name)
        return LoadResult(name, 1, 1.0, 1, 1, {})
    monkeypatch.setattr(load, "load_table", load_table)
    with pytest.raises(SourceError, match="^b is broken$"):   # the first in the order asked
        load.load_tables(["a", "b", "c", "d"])
    assert sorted(done) == ["a", "c"]
    assert [r.table for r in load.load_tables(["c", "a"])] == ["c", "a"]   # results in the order asked
    assert LoadResult("a", 10, 4.0, 1, 1, {}).rows_per_s == 2.5 and LoadResult("a", 1, 0, 1, 1, {}).rows_per_s == 0


def test_a_target_that_cannot_load_tables_at_once_loads_them_one_after_another(monkeypatch):
    load = FullLoad(parse_pipeline({"name": "lake", "source": {"conn_id": "src"},
                                    "target": {"kind": "iceberg", "conn_id": "lake"}, "kafka": {"topic_prefix": "l"},
                                    "tables": [{"name": "a"}, {"name": "b"}]}, "lake.yaml"),
                    spark=None, environ={**ENV, "AIRFLOW_CONN_LAKE": json.dumps({"conn_type": "iceberg"})})
    import threading
    threads = set()
    monkeypatch.setattr(load, "load_table", lambda name: threads.add(threading.current_thread().name) or name)
    assert load.load_tables(["a", "b"]) == ["a", "b"] and threads == {threading.current_thread().name}


def test_a_batch_partition_counts_only_the_events_at_or_above_the_committed_position():
    part = {"topic": "t", "partition": 0, "lo": 10, "hi": 19}
    assert _unapplied(part, {"t": {}}) == 10
    assert _unapplied(part, {"t": {0: 15}}) == 5
    assert _unapplied(part, {"t": {0: 20}}) == 0


def committer(**stream):
    c = cfg(**stream)
    tables = {n: StreamTable(n, c.topic(n), 1, ["id"]) for n in ("a", "b")}
    return BatchCommitter(c, None, None, "test", tables, {t.topic: t for t in tables.values()}, {}, lambda h: None)


def bad(table: str, offset: int, value: str) -> dict:
    return {"topic": f"tl.shop.public.{table}", "partition": 0, "offset": offset, "key": '{"id":"1"}', "value": value}


def test_unparseable_events_halt_each_table_at_its_first_one_naming_topic_partition_offset_and_the_fix():
    dead, halting = committer(on_bad_message="stop")._bad_messages(None, [bad("a", 4, "not json"), bad("a", 9, "x"),
                                                                          bad("b", 2, "{]")])
    assert dead == 0 and sorted(halting) == ["a", "b"]
    why, event = halting["a"]
    assert "shop.a: cannot parse the change event at topic tl.shop.public.a partition 0 offset 4" in why
    assert "stream.on_bad_message: dead_letter" in why and event["offset"] == 4


def test_a_row_too_big_for_kafka_always_halts_its_table_even_with_dead_letters():
    marker = json.dumps({"tideline_too_large": {"bytes": 150 * 1048576, "limit": 64 * 1048576}})
    dead, halting = committer(on_bad_message="dead_letter")._bad_messages(None, [bad("b", 7, marker)])
    assert dead == 0 and list(halting) == ["b"]
    why, event = halting["b"]
    assert "about 150.0 MB as a change event, above the 64 MB" in why and "kafka.max_message_mb above 150" in why
    assert event["error"].startswith("change event too large")
