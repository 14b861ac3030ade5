"""A batch staged by Spark's tasks (stream.stage_on: executors): each task's rows and summary, and
the driver's merge of the summaries."""
import json

import pyarrow as pa

from tideline.core.batch_events import BAD_ROWS_KEPT, EVENT_SCHEMA, split_batch
from tideline.core.copy_text import batch_to_copy_text
from tideline.core.staged_batch import COLUMNS, ESCAPE, applied_floors, fill_across, merge_summaries, staged_rows, task_summary

U = "__debezium_unavailable_value"


def ev(topic, part, off, key, op="u", after='{"id": 1}', before=None, bad=False, value=None):
    return dict(topic=topic, partition=part, offset=off, key=key, op=op, after=after if op != "d" else None,
                before=before, ts_ms=1000 + off, ts_us=(1000 + off) * 1000, position=f"0/{off:X}", tombstone=False,
                bad=bad, value=value)


def split(rows, versioned=frozenset(), logged=frozenset()):
    return split_batch(pa.Table.from_pylist(rows, schema=EVENT_SCHEMA), versioned, logged)


def test_a_task_stages_the_last_row_per_key_every_logged_event_and_marks_what_the_source_must_fill():
    batch = split([
        ev("a", 0, 1, '{"id":1}', op="c", after='{"id":1,"doc":"big","n":1}'),
        ev("a", 0, 2, '{"id":1}', after='{"id":1,"doc":"' + U + '","n":2}'),   # filled from offset 1
        ev("a", 0, 3, '{"id":2}', after='{"id":2,"doc":"' + U + '","n":2}'),   # nothing earlier: a hole
        ev("h", 1, 4, '{"id":7}', after='{"id":7,"doc":"' + U + '"}'),         # history: its apply reads the version before
        ev("l", 2, 5, '{"id":9}', op="c", after='{"id":9,"t":"x\\ty"}'),
        ev("l", 2, 6, '{"id":9}', after='{"id":9,"t":"z"}', before='{"id":9,"t":"x\\ty"}'),
    ], versioned=frozenset({"h"}), logged=frozenset({"l"}))
    staged = staged_rows(3, batch, {"a": "ta", "h": "th", "l": "tl"})
    rows = staged.to_pylist()
    kept = {(r["kind"], r["topic"], r["off"]): r for r in rows}
    assert sorted(kept) == [("l", "l", "5"), ("l", "l", "6"), ("r", "a", "2"), ("r", "a", "3"), ("r", "h", "4"),
                            ("r", "l", "6")]
    assert {r["task"] for r in rows} == {"3"} and kept[("r", "a", "2")]["tbl"] == "ta"
    assert json.loads(kept[("r", "a", "2")]["after"])["doc"] == "big" and kept[("r", "a", "2")]["hole"] == "f"
    assert kept[("r", "a", "3")]["hole"] == "t" and kept[("r", "h", "4")]["hole"] == "t"
    assert kept[("l", "l", "6")]["before"] == '{"id":9,"t":"x\\ty"}' and kept[("r", "l", "6")]["before"] is None
    assert kept[("r", "a", "2")]["ts"] == "1002000" and kept[("r", "a", "2")]["pos"] == "0/2"
    # the COPY text has one field per column, the tab inside a value escaped
    lines = batch_to_copy_text(staged.select([c for c, _, _ in COLUMNS]).to_batches()[0], ESCAPE).to_pybytes()
    assert all(line.count(b"\t") == len(COLUMNS) - 1 for line in lines.splitlines())
    summary = json.loads(task_summary(3, batch, staged))
    assert summary["staged"] == 6 and summary["holes"] == 2
    assert summary["topics"] == ["a", "h", "l"] and summary["log_topics"] == ["l"]
    assert {(p["topic"], p["partition"], p["lo"], p["hi"], p["n"]) for p in summary["per_partition"]} == {
        ("a", 0, 1, 3, 3), ("h", 1, 4, 4, 1), ("l", 2, 5, 6, 2)}


def test_summaries_merge_in_kafka_order_and_a_partition_read_by_two_tasks_adds_up_and_is_named():
    one = split([ev("b", 0, 9, '{"id":1}'), ev("b", 0, 8, None, bad=True, op=None, value="x"),
                 ev("b", 0, 10, None, op="t", after=None)])
    two = split([ev("a", 1, 3, '{"id":2}'), ev("a", 1, 2, None, bad=True, op=None, value="y")])
    merged = merge_summaries([task_summary(0, one, staged_rows(0, one, {"b": "tb"})),
                              task_summary(1, two, staged_rows(1, two, {"a": "ta"}))])
    assert [(p["topic"], p["partition"]) for p in merged.per_partition] == [("a", 1), ("b", 0)]
    assert [(b["topic"], b["offset"]) for b in merged.bad_rows] == [("a", 2), ("b", 8)]
    assert merged.truncates == [{"topic": "b", "partition": 0, "offset": 10}]
    assert merged.staged == 2 and merged.topics == {"a", "b"} and merged.log_topics == set()
    assert merged.split == set()
    again = split([ev("b", 0, 11, '{"id":1}'), ev("b", 0, 12, None, bad=True, op=None, value="z")])
    merged = merge_summaries([task_summary(1, again, staged_rows(1, again, {"b": "tb"})),
                              task_summary(0, one, staged_rows(0, one, {"b": "tb"}))])
    [b] = merged.per_partition
    assert (b["lo"], b["hi"], b["n"], b["bad"], b["truncates"], b["ts_ms"]) == (8, 12, 5, 2, 1, 1012)
    assert merged.split == {("b", 0)} and [r["offset"] for r in merged.bad_rows] == [8, 12]


def test_a_placeholder_left_by_one_task_is_filled_from_an_earlier_tasks_row_never_from_before_a_delete():
    rows = [("a", '{"id": 1}', 0, 20, "u", '{"id": 1, "doc": "' + U + '", "n": 3}'),   # task 2's last
            ("a", '{"id": 1}', 0, 12, "u", '{"id": 1, "doc": "' + U + '", "n": 2}'),   # task 1's: a hole too
            ("a", '{"id": 1}', 0, 5, "c", '{"id": 1, "doc": "big", "n": 1}'),          # task 0's
            ("a", '{"id": 2}', 0, 6, "u", '{"id": 2, "doc": "old", "n": 1}'),
            ("a", '{"id": 2}', 0, 13, "d", None),
            ("a", '{"id": 2}', 0, 21, "u", '{"id": 2, "doc": "' + U + '", "n": 2}'),   # after a delete: stays
            ("b", '{"id": 1}', 0, 30, "u", '{"id": 1, "doc": "' + U + '"}')]           # other table, no earlier
    filled = fill_across(rows)
    assert set(filled) == {("a", 0, 12), ("a", 0, 20)}
    assert json.loads(filled[("a", 0, 20)]) == {"id": 1, "doc": "big", "n": 3}
    assert json.loads(filled[("a", 0, 12)]) == {"id": 1, "doc": "big", "n": 2}


def test_bad_messages_stay_bounded_across_tasks():
    tasks = [split([ev("a", p, o, None, bad=True, op=None, value="v") for o in range(BAD_ROWS_KEPT)]) for p in range(2)]
    merged = merge_summaries([task_summary(p, b, staged_rows(p, b, {"a": "t"})) for p, b in enumerate(tasks)])
    assert len(merged.bad_rows) == BAD_ROWS_KEPT and merged.bad_rows[-1]["partition"] == 0
    assert merged.staged == 0 and merged.topics == set()


def test_only_live_partitions_that_start_below_their_committed_offset_have_rows_left_out():
    per_partition = [{"topic": "a", "partition": 0, "lo": 10}, {"topic": "h", "partition": 0, "lo": 50},
                     {"topic": "z", "partition": 0, "lo": 5}, {"topic": "z", "partition": 1, "lo": 70}]
    # "a" is halted (not live): its figures come first in Kafka order and must not shift the others'
    current = {"h": {0: 40}, "z": {0: 8, 1: 70}}
    assert applied_floors(per_partition, {"h", "z"}, current) == [("z", 0, 8)]
    assert applied_floors(per_partition, {"a", "h", "z"}, {"a": {0: 12}, **current}) == [("a", 0, 12), ("z", 0, 8)]
