"""One stream batch's parsed events (an Arrow table, Kafka order not assumed) split into what the
commit needs: per-partition figures, the bad messages, the truncates, and the compacted rows —
the last good event per key and table. Done here in Arrow on the driver rather than in Spark: a
batch is at most `max_offsets_per_trigger` events, and one Spark job without a shuffle or a cached
copy of the batch is what made the stream's Spark side ~25% cheaper (tests/bench/incremental.py).

A key always lives in one partition, so its highest offset is its latest event.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

BAD_ROWS_KEPT = 1000
# A batch's events as core.change_events decodes them from the raw Kafka records.
EVENT_SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                          ("key", pa.string()), ("value", pa.string()), ("op", pa.string()),
                          ("before", pa.string()), ("after", pa.string()), ("ts_ms", pa.int64()), ("ts_us", pa.int64()),
                          ("position", pa.string()),
                          ("tombstone", pa.bool_()), ("bad", pa.bool_())])


@dataclass
class SplitBatch:
    per_partition: list[dict]   # topic, partition, lo, hi, n, bad, truncates, ts_ms
    bad_rows: list[dict]        # topic, partition, offset, key, value (first BAD_ROWS_KEPT, Kafka order)
    truncates: list[dict]       # topic, partition, offset
    rows: pa.Table              # topic, op, key, after, partition, offset, ts_us, position: the last good event per key
    log: pa.Table | None = None  # every good event of the tables with a change log, with its before image


def split_batch(events: pa.Table, versioned: frozenset[str] = frozenset(),
                logged: frozenset[str] = frozenset()) -> SplitBatch:
    """`versioned`: topics of history tables (SCD2), whose every good event is kept in Kafka order
    (each a version), not only the last per key; `logged`: topics of tables with a change log,
    whose every good event also goes to `log`."""
    op = events.column("op")
    bad = pc.fill_null(events.column("bad"), True)
    truncate = pc.fill_null(pc.equal(op, "t"), False)
    stats = (pa.table({"topic": events.column("topic"), "partition": events.column("partition"),
                       "offset": events.column("offset"), "ts_ms": events.column("ts_ms"),
                       "bad": pc.cast(bad, pa.int64()), "truncate": pc.cast(truncate, pa.int64())})
             .group_by(["topic", "partition"])
             .aggregate([("offset", "min"), ("offset", "max"), ("offset", "count"), ("bad", "sum"),
                         ("truncate", "sum"), ("ts_ms", "max")]))
    per_partition = [{"topic": r["topic"], "partition": r["partition"], "lo": r["offset_min"], "hi": r["offset_max"],
                      "n": r["offset_count"], "bad": r["bad_sum"], "truncates": r["truncate_sum"],
                      "ts_ms": r["ts_ms_max"]} for r in stats.to_pylist()]
    order = [("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")]
    bad_rows = []
    if any(p["bad"] for p in per_partition):
        found = events.filter(bad).select(["topic", "partition", "offset", "key", "value"])
        found = found.take(pc.sort_indices(found, sort_keys=order)).slice(0, BAD_ROWS_KEPT)
        bad_rows = [{**r, "value": r["value"] if r["value"] is None else r["value"][:2000]} for r in found.to_pylist()]
    truncates = []
    if any(p["truncates"] for p in per_partition):
        found = events.filter(truncate).select(["topic", "partition", "offset"])
        truncates = found.take(pc.sort_indices(found, sort_keys=order)).to_pylist()
    good = pc.and_(pc.and_(pc.invert(bad), pc.invert(pc.fill_null(events.column("tombstone"), False))),
                   pc.invert(truncate))
    log = None
    if logged:
        log = events.filter(pc.and_(good, pc.is_in(events.column("topic"), pa.array(sorted(logged), pa.string())))) \
            .select(["topic", "op", "key", "before", "after", "partition", "offset", "ts_us", "position"])
    rows = events.filter(good).select(["topic", "op", "key", "after", "partition", "offset", "ts_us", "position"])
    if not versioned:
        return SplitBatch(per_partition, bad_rows, truncates, compacted(rows), log)
    every = pc.is_in(rows.column("topic"), pa.array(sorted(versioned), pa.string()))
    plain, history = rows.filter(pc.invert(every)), rows.filter(every)
    return SplitBatch(per_partition, bad_rows, truncates, pa.concat_tables([compacted(plain), fill_chains(history)]),
                      log)


def compacted(rows: pa.Table) -> pa.Table:
    """The last event per key, a delete carrying the row's last image (with_last_image), each
    unchanged-value placeholder filled from the key's earlier events (fill_unavailable)."""
    return fill_unavailable(with_last_image(latest_per_key(rows), rows), rows)


def with_last_image(kept: pa.Table, rows: pa.Table) -> pa.Table:
    """`kept` (the last event per key of `rows`) where a key's last event is a delete that an
    insert or update of the same batch came before: the delete carries that event's row image as
    its `after` (a delete's own is NULL). A table with soft deletes writes the row marked deleted
    with its last values — and writes it at all when the target never had it: a key inserted and
    deleted within one batch was lost from soft-delete tables (found from outside; the apply had
    only a key to mark, and no row to mark it on). Other tables' deletes ignore it. A delete with
    nothing before it in the batch keeps NULL: the target has the row, with its values."""
    deletes = pc.fill_null(pc.equal(kept.column("op"), "d"), False)
    if not pc.any(deletes).as_py() or rows.num_rows == kept.num_rows:
        return kept
    live = rows.filter(pc.invert(pc.fill_null(pc.equal(rows.column("op"), "d"), False)))
    if not live.num_rows:
        return kept
    last = latest_per_key(live).select(["topic", "key", "after"]).rename_columns(["topic", "key", "__image"])
    joined = kept.join(last, keys=["topic", "key"], join_type="left outer")
    after = pc.if_else(pc.and_(pc.fill_null(pc.equal(joined.column("op"), "d"), False),
                               pc.is_null(joined.column("after"))), joined.column("__image"), joined.column("after"))
    return joined.set_column(joined.schema.get_field_index("after"), "after", after).drop_columns(["__image"]) \
        .select(kept.column_names)


def fill_chains(rows: pa.Table) -> pa.Table:
    """Every event of a history table's batch, each unchanged-value placeholder filled from the
    key's earlier events in the batch (fill_unavailable's rule, for each event, not only the last)."""
    if not rows.num_rows or not pc.any(pc.fill_null(pc.match_substring(rows.column("after"),
                                                                      "__debezium_unavailable_value"), False)).as_py():
        return rows
    rows = rows.take(pc.sort_indices(rows, sort_keys=[("topic", "ascending"), ("key", "ascending"),
                                                      ("offset", "ascending")]))
    chains: dict[tuple, list] = {}
    filled = []
    for t, k, off, op, a in zip(*(rows.column(c).to_pylist() for c in ("topic", "key", "offset", "op", "after"))):
        before = chains.setdefault((t, k), [])
        filled.append(fill_image(a, before) if a is not None and "__debezium_unavailable_value" in a else a)
        before.append((off, op, filled[-1]))
    return rows.set_column(rows.schema.get_field_index("after"), "after", pa.array(filled, pa.string()))


def latest_per_key(rows: pa.Table) -> pa.Table:
    """The row of the highest offset of each (topic, key)."""
    if rows.num_rows <= 1:
        return rows
    rows = rows.take(pc.sort_indices(rows, sort_keys=[("topic", "ascending"), ("key", "ascending"),
                                                      ("offset", "descending")])).combine_chunks()
    topic, key = rows.column("topic").chunk(0), rows.column("key").chunk(0)
    n = rows.num_rows
    same = pc.and_(pc.equal(topic.slice(1), topic.slice(0, n - 1)), pc.equal(key.slice(1), key.slice(0, n - 1)))
    first = pa.concat_arrays([pa.array([True]), pc.invert(pc.fill_null(same, False))])
    return rows.filter(first)


# Debezium's stand-in for a value PostgreSQL did not send: an unchanged TOASTed (out-of-line) value
# of an updated row (core.debezium.UNAVAILABLE, as a JSON string in the row image)
_PLACEHOLDER = b'"__debezium_unavailable_value"'
_DECODE_IMAGE = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode


def fill_unavailable(kept: pa.Table, rows: pa.Table) -> pa.Table:
    """The last event per key (`kept`, of the batch's good events `rows`) with each unchanged-value
    placeholder replaced by the value an earlier event of the same key in this batch carried — the
    row's value, since nothing changed it in between. A batch that folds an insert (or an update
    that changed the large value) and a later update of another column of the same row would
    otherwise keep only the placeholder: an insert of a row the target lacks, with a value nobody
    has, which the apply must treat as a divergence and reload the table for. Events before a
    delete of the key are not the row's any more. A placeholder no earlier event fills is left for
    the target to fill from its row (core.apply_sql), or, where it has none, to report."""
    after = kept.column("after")
    holes = pc.fill_null(pc.match_substring(after, "__debezium_unavailable_value"), False)
    if not pc.any(holes).as_py() or rows.num_rows == kept.num_rows:
        return kept
    wanted = {(t, k) for t, k, h in zip(kept.column("topic").to_pylist(), kept.column("key").to_pylist(),
                                        holes.to_pylist()) if h}
    earlier: dict[tuple, list[tuple[int, str, str | None]]] = {}
    for t, k, off, op, a in zip(*(rows.column(c).to_pylist() for c in ("topic", "key", "offset", "op", "after"))):
        if (t, k) in wanted:
            earlier.setdefault((t, k), []).append((off, op, a))
    filled = after.to_pylist()
    for i, (t, k, off, h) in enumerate(zip(kept.column("topic").to_pylist(), kept.column("key").to_pylist(),
                                           kept.column("offset").to_pylist(), holes.to_pylist())):
        if h:
            filled[i] = fill_image(filled[i], sorted(e for e in earlier[(t, k)] if e[0] < off))
    return kept.set_column(kept.schema.get_field_index("after"), "after", pa.array(filled, pa.string()))


def fill_image(image: str, before: list[tuple[int, str, str | None]]) -> str:
    """`image` with its placeholders replaced by the latest earlier value of each field (raw JSON,
    never re-serialised); `before` is the key's earlier events in offset order."""
    known: dict[str, msgspec.Raw] = {}
    for _off, op, a in before:
        if op == "d" or a is None:
            known = {}   # the row was deleted: what came before is not its value
            continue
        for name, raw in _DECODE_IMAGE(a.encode()).items():
            if bytes(raw) != _PLACEHOLDER:
                known[name] = raw
            # a placeholder in an earlier event: the value before it stands
    fields = _DECODE_IMAGE(image.encode())
    if not any(bytes(raw) == _PLACEHOLDER and name in known for name, raw in fields.items()):
        return image
    return msgspec.json.encode({name: known[name] if bytes(raw) == _PLACEHOLDER and name in known else raw
                                for name, raw in fields.items()}).decode()


def newest_source_commit(per_partition: list[dict], topics=None) -> datetime | None:
    """The newest source commit time among a batch's events (of `topics` only, if given): the
    batch's source-to-target lag is its commit time minus this. None when no event carried one."""
    newest = max((r["ts_ms"] for r in per_partition
                  if r.get("ts_ms") and (topics is None or r["topic"] in topics)), default=None)
    return None if newest is None else datetime.fromtimestamp(newest / 1000, timezone.utc)


def drop_applied(rows: pa.Table, current: dict[str, dict[int, int]]) -> pa.Table:
    """The exactly-once guard: events below the committed offset of their topic's partition
    (`current`: topic -> {partition: next offset to apply}) were applied by an earlier batch."""
    if rows.num_rows == 0:
        return rows
    keep = None
    for topic, parts in current.items():   # few topics x partitions: one vector pass each
        for partition, floor in parts.items():
            if floor <= 0:
                continue
            here = pc.and_(pc.equal(rows.column("topic"), topic), pc.equal(rows.column("partition"), partition))
            ok = pc.or_(pc.invert(here), pc.greater_equal(rows.column("offset"), floor))
            keep = ok if keep is None else pc.and_(keep, ok)
    return rows if keep is None else rows.filter(keep)
