"""Decoding raw Kafka records into change events on the driver (core.change_events)."""
import json

import pyarrow as pa

from tideline.core.batch_events import EVENT_SCHEMA, split_batch
from tideline.core.change_events import decode_records

SOURCE = {"version": "3.4.3.Final", "connector": "postgresql", "ts_ms": 1_795_456_928_873, "db": "src",
          "sequence": "[\"53929776\",\"66742944\"]", "schema": "public", "table": "t", "txId": 901, "xmin": None}


def record(offset, key, value, topic="p.public.t", partition=0):
    enc = lambda v: v if v is None or isinstance(v, bytes) else (v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))).encode()
    return {"topic": topic, "partition": partition, "offset": offset, "key": enc(key), "value": enc(value)}


def decode(*records):
    cols = {c: [r[c] for r in records] for c in ("topic", "partition", "offset", "key", "value")}
    table = pa.table({"topic": pa.array(cols["topic"], pa.string()), "partition": pa.array(cols["partition"], pa.int32()),
                      "offset": pa.array(cols["offset"], pa.int64()), "key": pa.array(cols["key"], pa.binary()),
                      "value": pa.array(cols["value"], pa.binary())})
    out = decode_records(table.to_batches())
    assert out.schema == EVENT_SCHEMA
    return out.to_pylist()


def event(op, after, before=None):
    return {"before": before, "after": after, "source": SOURCE, "transaction": None, "op": op,
            "ts_ms": 1_795_456_948_288, "ts_us": 1_795_456_948_288_503}


def test_row_image_is_the_connectors_exact_text_not_a_re_serialisation():
    # numbers with more digits than a double holds, escapes, emoji, key order and spacing: byte for byte
    after = '{"id":"7","n":1.000000000000000000001,"big":123456789012345678901234567890,"s":"tab\\t \\"q\\" \\u00e9 \\ud83d\\ude00 😀"}'
    value = '{"before":null,"after":' + after + ',"source":' + json.dumps(SOURCE) + ',"op":"u","ts_ms":5}'
    [ev] = decode(record(3, '{"id":"7"}', value))
    assert ev["after"] == after
    assert (ev["op"], ev["key"], ev["ts_ms"], ev["bad"], ev["tombstone"], ev["value"]) == (
        "u", '{"id":"7"}', SOURCE["ts_ms"], False, False, None)
    assert (ev["topic"], ev["partition"], ev["offset"]) == ("p.public.t", 0, 3)


def test_deletes_tombstones_and_truncates():
    rows = decode(record(1, {"id": "1"}, event("d", None, before={"id": "1"})),
                  record(2, {"id": "1"}, None),
                  record(3, None, event("t", None)))
    assert [(r["op"], r["after"], r["tombstone"], r["bad"]) for r in rows] == [
        ("d", None, False, False), (None, None, True, False), ("t", None, False, False)]


def test_events_with_kafka_connect_schemas_are_read_from_their_payload_and_so_are_their_keys():
    key = {"schema": {"type": "struct", "fields": [{"field": "id", "type": "int64"}]}, "payload": {"id": 42}}
    value = {"schema": {"type": "struct", "fields": []}, "payload": event("c", {"id": 42, "v": "x"})}
    [ev] = decode(record(0, key, value))
    assert (ev["key"], ev["op"], ev["after"], ev["ts_ms"], ev["bad"]) == (
        '{"id":42}', "c", '{"id":42,"v":"x"}', SOURCE["ts_ms"], False)


def test_a_key_that_merely_has_a_column_named_schema_stays_the_key():
    [ev] = decode(record(0, {"schema": None, "id": "1"}, event("u", {"schema": None, "id": "1"})))
    assert ev["key"] == '{"schema":null,"id":"1"}' and not ev["bad"]


def test_what_is_not_a_change_event_is_bad_and_keeps_its_value_for_the_report():
    cases = [
        record(0, {"id": "1"}, "not json at all"),
        record(1, {"id": "1"}, '{"op":"u","after":{"id":"1"'),                     # cut short
        record(2, {"id": "1"}, event("x", {"id": "1"})),                           # unknown op
        record(3, {"id": "1"}, {"after": {"id": "1"}}),                            # no op
        record(4, None, event("u", {"id": "1"})),                                  # no key
        record(5, {"id": "1"}, event("c", None)),                                  # insert without a row
        record(6, {"id": "1"}, event("u", "a string, not a row")),
        record(7, {"id": "1"}, {"op": 5, "after": {"id": "1"}}),                   # op of the wrong type
        record(8, {"id": "1"}, b"\xff\xfe not utf-8"),
        record(9, {"id": "1"}, "[1, 2]"),
        record(10, {"id": "1"}, '{"op":"u","after":{"id":"1"},"source":{"ts_ms":99999999999999999999}}'),
    ]
    rows = decode(*cases)
    assert [r["bad"] for r in rows] == [True] * len(cases)
    assert rows[0]["value"] == "not json at all" and rows[8]["value"].endswith(" not utf-8")
    assert all(r["after"] is None for r in rows)


def test_unknown_fields_are_ignored_and_missing_source_gives_no_time():
    [ev] = decode(record(0, {"id": "1"}, {"op": "r", "after": {"id": "1"}, "new_field": {"deep": [1, 2]}}))
    assert (ev["op"], ev["ts_ms"], ev["bad"]) == ("r", None, False)


def test_decoded_events_split_as_before():
    rows = [record(i, {"id": str(i % 3)}, event("u", {"id": str(i % 3), "v": str(i)})) for i in range(10)]
    cols = {c: [r[c] for r in rows] for c in ("topic", "partition", "offset", "key", "value")}
    table = pa.table({"topic": cols["topic"], "partition": pa.array(cols["partition"], pa.int32()),
                      "offset": cols["offset"], "key": pa.array(cols["key"], pa.binary()),
                      "value": pa.array(cols["value"], pa.binary())})
    batch = split_batch(decode_records(table.to_batches()))
    assert sorted((r["key"], r["offset"]) for r in batch.rows.to_pylist()) == [
        ('{"id":"0"}', 9), ('{"id":"1"}', 7), ('{"id":"2"}', 8)]
    assert batch.per_partition[0]["n"] == 10 and batch.per_partition[0]["ts_ms"] == SOURCE["ts_ms"]


def test_large_batches_are_decoded_in_chunks_without_losing_order():
    rows = [record(i, {"id": str(i)}, event("c", {"id": str(i)})) for i in range(120_001)]
    out = decode(*rows)
    assert [r["offset"] for r in out] == list(range(120_001))
    assert out[-1]["after"] == '{"id":"120000"}'


def test_the_connectors_marker_for_a_row_too_big_for_kafka_is_recognised():
    from tideline.core.change_events import too_large_marker
    marker = '{"op":"u","source":{"ts_ms":1},"tideline_too_large":{"bytes":73400765,"limit":67108864}}'
    assert too_large_marker(marker) == (73400765, 67108864)
    assert too_large_marker('{"schema":{},"payload":' + marker + '}') == (73400765, 67108864)
    assert too_large_marker('{"op":"u","after":{"note":"tideline_too_large"}}') is None
    assert too_large_marker(None) is None


def test_batches_decoded_as_tasks_hand_them_over_in_any_order_split_as_the_whole_batch():
    # a stream batch's records arrive as its read tasks finish: batches of any size (one above the
    # decode's chunk), in any order, with extra columns (Spark's own) — same events as decoded whole
    from tideline.core.change_events import CHUNK_ROWS
    rows = [record(i, {"id": str(i % 7)}, event("u" if i % 5 else "d", {"id": str(i % 7), "v": str(i)}),
                   partition=i % 2) for i in range(CHUNK_ROWS + 1_234)]
    rows[17]["value"], rows[40]["value"] = b"not json", None
    cols = {c: [r[c] for r in rows] for c in ("topic", "partition", "offset", "key", "value")}
    table = pa.table({"topic": cols["topic"], "partition": pa.array(cols["partition"], pa.int32()),
                      "offset": cols["offset"], "key": pa.array(cols["key"], pa.binary()),
                      "value": pa.array(cols["value"], pa.binary()), "timestamp": pa.array([0] * len(rows))})
    pieces = [table.slice(CHUNK_ROWS - 5), table.slice(3, CHUNK_ROWS - 8), table.slice(0, 3)]
    streamed = decode_records(b for piece in pieces for b in piece.to_batches())
    assert streamed.num_rows == len(rows) and streamed.schema == EVENT_SCHEMA
    whole, parts = split_batch(decode_records(table.to_batches())), split_batch(streamed)
    assert sorted(parts.rows.to_pylist(), key=lambda r: r["key"]) == sorted(whole.rows.to_pylist(), key=lambda r: r["key"])
    by_partition = lambda b: sorted(b.per_partition, key=lambda p: p["partition"])
    assert by_partition(parts) == by_partition(whole) and parts.bad_rows == whole.bad_rows
    assert [b["offset"] for b in parts.bad_rows] == [17]
