"""Splitting a stream batch in Arrow: figures per partition, bad messages, truncates, last event per key."""
import pyarrow as pa

from tideline.core.batch_events import BAD_ROWS_KEPT, EVENT_SCHEMA, split_batch


def events(rows):
    return pa.Table.from_pylist(rows, schema=EVENT_SCHEMA)


def ev(topic, part, off, key, op="u", after='{"id": 1}', ts=1000, tombstone=False, bad=False, value=None):
    return dict(topic=topic, partition=part, offset=off, key=key, op=op, after=after if op != "d" else None,
                ts_ms=ts, tombstone=tombstone, bad=bad, value=value)


def test_the_last_good_event_per_key_wins_whatever_the_input_order():
    batch = split_batch(events([
        ev("a", 0, 12, '{"id":1}', after='{"v": 3}'), ev("a", 0, 10, '{"id":1}', op="c", after='{"v": 1}'),
        ev("a", 0, 11, '{"id":1}', op="d"), ev("a", 1, 5, '{"id":2}', after='{"v": 9}'),
        ev("b", 0, 7, '{"id":1}', op="d"),                     # same key, other table: its own row
        ev("a", 1, 6, '{"id":2}', tombstone=True, op=None),    # tombstone after a delete: ignored
        ev("a", 1, 7, '{"id":2}', bad=True, op=None, value="not json at all"),  # bad: reported, not applied
    ]))
    rows = sorted(batch.rows.to_pylist(), key=lambda r: (r["topic"], r["key"]))
    assert [(r["topic"], r["key"], r["op"], r["offset"], r["after"]) for r in rows] == [
        ("a", '{"id":1}', "u", 12, '{"v": 3}'), ("a", '{"id":2}', "u", 5, '{"v": 9}'), ("b", '{"id":1}', "d", 7, None)]
    figures = {(p["topic"], p["partition"]): p for p in batch.per_partition}
    assert figures[("a", 0)] == {"topic": "a", "partition": 0, "lo": 10, "hi": 12, "n": 3, "bad": 0,
                                      "truncates": 0, "ts_ms": 1000}
    assert (figures[("a", 1)]["lo"], figures[("a", 1)]["hi"], figures[("a", 1)]["n"], figures[("a", 1)]["bad"]) == (5, 7, 3, 1)
    assert batch.bad_rows == [{"topic": "a", "partition": 1, "offset": 7, "key": '{"id":2}', "value": "not json at all"}]
    assert batch.truncates == []


def test_truncates_are_listed_in_kafka_order_and_never_applied_as_rows():
    batch = split_batch(events([ev("a", 0, 9, None, op="t", after=None), ev("a", 0, 3, None, op="t", after=None),
                                ev("a", 0, 4, '{"id":1}')]))
    assert batch.truncates == [{"topic": "a", "partition": 0, "offset": 3}, {"topic": "a", "partition": 0, "offset": 9}]
    assert batch.per_partition[0]["truncates"] == 2
    assert [r["offset"] for r in batch.rows.to_pylist()] == [4]


def test_bad_messages_are_kept_in_order_up_to_the_limit_and_cut_to_2000_characters():
    rows = [ev("a", 0, i, None, op=None, bad=True, value="x" * 3000) for i in range(BAD_ROWS_KEPT + 5, 0, -1)]
    batch = split_batch(events(rows))
    assert len(batch.bad_rows) == BAD_ROWS_KEPT
    assert [b["offset"] for b in batch.bad_rows[:3]] == [1, 2, 3]
    assert len(batch.bad_rows[0]["value"]) == 2000
    assert batch.rows.num_rows == 0 and batch.per_partition[0]["n"] == BAD_ROWS_KEPT + 5


def test_newest_source_commit_is_the_latest_event_time_of_the_topics_asked_for():
    from datetime import datetime, timezone

    from tideline.core.batch_events import newest_source_commit
    split = split_batch(events([ev("a", 0, 1, "k1", ts=1_700_000_000_000), ev("a", 1, 5, "k2", ts=1_700_000_005_000),
                                ev("b", 0, 3, "k3", ts=1_700_000_009_000), ev("b", 0, 4, "k4", ts=None)]))
    at = lambda ms: datetime.fromtimestamp(ms / 1000, timezone.utc)   # noqa: E731
    assert newest_source_commit(split.per_partition) == at(1_700_000_009_000)
    assert newest_source_commit(split.per_partition, {"a": {}}) == at(1_700_000_005_000)
    assert newest_source_commit(split.per_partition, {"c": {}}) is None
    assert newest_source_commit(split_batch(events([ev("a", 0, 1, "k", ts=None)])).per_partition) is None


U = "__debezium_unavailable_value"


def test_an_unchanged_large_value_folded_into_one_batch_comes_from_the_earlier_event_of_its_key():
    big = "x" * 10_000 + ' "quoted" 😀'
    import json
    batch = split_batch(events([
        # insert then update of another column: the update carries the placeholder
        ev("a", 0, 1, '{"id":"1"}', op="c", after=json.dumps({"id": "1", "doc": big, "n": "1"})),
        ev("a", 0, 2, '{"id":"1"}', after=json.dumps({"id": "1", "doc": U, "n": "2"})),
        # update then update: the first one changed the value, the second did not touch it
        ev("a", 0, 3, '{"id":"2"}', after=json.dumps({"id": "2", "doc": "new", "n": "1"})),
        ev("a", 0, 4, '{"id":"2"}', after=json.dumps({"id": "2", "doc": U, "n": "2"})),
        ev("a", 0, 5, '{"id":"2"}', after=json.dumps({"id": "2", "doc": U, "n": "3"})),
        # delete and insert again between: the old value is not the row's
        ev("a", 0, 6, '{"id":"3"}', after=json.dumps({"id": "3", "doc": "old", "n": "1"})),
        ev("a", 0, 7, '{"id":"3"}', op="d"),
        ev("a", 0, 8, '{"id":"3"}', op="c", after=json.dumps({"id": "3", "doc": None, "n": "2"})),
        ev("a", 0, 9, '{"id":"3"}', after=json.dumps({"id": "3", "doc": U, "n": "3"})),
        # nothing earlier in the batch: left for the target to fill from its row
        ev("a", 0, 10, '{"id":"4"}', after=json.dumps({"id": "4", "doc": U, "n": "9"})),
        ev("a", 0, 11, '{"id":"5"}', after=json.dumps({"id": "5", "doc": "gone", "n": "1"})),
        ev("a", 0, 12, '{"id":"5"}', op="d"),
        ev("a", 0, 13, '{"id":"5"}', after=json.dumps({"id": "5", "doc": U, "n": "2"})),
    ]))
    rows = {json.loads(r["key"])["id"]: r for r in batch.rows.to_pylist()}
    assert json.loads(rows["1"]["after"]) == {"id": "1", "doc": big, "n": "2"} and rows["1"]["offset"] == 2
    assert json.loads(rows["2"]["after"]) == {"id": "2", "doc": "new", "n": "3"}
    assert json.loads(rows["3"]["after"]) == {"id": "3", "doc": None, "n": "3"}   # NULL is a value too
    assert rows["4"]["after"] == json.dumps({"id": "4", "doc": U, "n": "9"})     # untouched, byte for byte
    assert json.loads(rows["5"]["after"])["doc"] == U
    # the values travel as the connector wrote them (raw JSON, not re-serialised)
    raw = '{"id":"1","doc":"a\\u00e9\\n","n":"1"}'
    batch = split_batch(events([ev("b", 0, 1, '{"id":"1"}', op="c", after=raw),
                                ev("b", 0, 2, '{"id":"1"}', after='{"id":"1","doc":"' + U + '","n":"2"}')]))
    assert batch.rows.to_pylist()[0]["after"] == '{"id":"1","doc":"a\\u00e9\\n","n":"2"}'


def test_a_delete_carries_the_rows_last_image_from_its_batch_so_soft_deletes_can_mark_it():
    """Found from outside: a key inserted and deleted within one batch vanished from an Iceberg
    table with soft deletes (neither live nor marked): the delete had only its key, and the table
    no row to mark. Now the delete carries the row's last image of the batch."""
    batch = split_batch(events([
        ev("a", 0, 1, '{"id":1}', op="c", after='{"id": 1, "v": "born"}'),
        ev("a", 0, 2, '{"id":1}', op="u", after='{"id": 1, "v": "last"}'),
        ev("a", 0, 3, '{"id":1}', op="d"),                                     # inserted, updated, deleted
        ev("a", 0, 4, '{"id":2}', op="d"),                                     # deleted, nothing before it
        ev("a", 0, 5, '{"id":3}', op="c", after='{"id": 3, "v": "one"}'),
        ev("a", 0, 6, '{"id":3}', op="d"),
        ev("a", 0, 7, '{"id":3}', op="c", after='{"id": 3, "v": "two"}'),
        ev("a", 0, 8, '{"id":3}', op="d"),                                     # born twice: the second's image
        ev("a", 0, 9, '{"id":4}', op="c", after='{"id": 4, "v": "stays"}'),
        ev("b", 0, 1, '{"id":1}', op="c", after='{"id": 1, "v": "other table"}'),
        ev("a", 0, 10, '{"id":5}', op="u", after='{"id": 5, "big": "__debezium_unavailable_value", "v": 1}'),
        ev("a", 0, 11, '{"id":5}', op="d"),   # the image's placeholder stays: the target's row holds the value
    ]))
    rows = {(r["topic"], r["key"]): (r["op"], r["offset"], r["after"]) for r in batch.rows.to_pylist()}
    assert rows == {("a", '{"id":1}'): ("d", 3, '{"id": 1, "v": "last"}'), ("a", '{"id":2}'): ("d", 4, None),
                    ("a", '{"id":3}'): ("d", 8, '{"id": 3, "v": "two"}'), ("a", '{"id":4}'): ("c", 9, '{"id": 4, "v": "stays"}'),
                    ("b", '{"id":1}'): ("c", 1, '{"id": 1, "v": "other table"}'),
                    ("a", '{"id":5}'): ("d", 11, '{"id": 5, "big": "__debezium_unavailable_value", "v": 1}')}


def test_a_deletes_image_is_never_filled_from_the_source_which_no_longer_has_the_row():
    """stream.source_fill leaves out an event whose key the source lacks: a delete with a carried
    image must never be one of them (that would drop the delete itself)."""
    from tideline.stream.source_fill import fill_from_source
    batch = split_batch(events([
        ev("a", 0, 1, '{"id":5}', op="u", after='{"id": 5, "big": "__debezium_unavailable_value"}'),
        ev("a", 0, 2, '{"id":5}', op="d")]))

    class NoSource:
        def current_values(self, *args):
            raise AssertionError("a delete's image was looked up at the source")
    assert fill_from_source(batch.rows, {}, None, NoSource(), None).num_rows == 1
