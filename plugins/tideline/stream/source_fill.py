"""What Debezium left out, from the source's row now.

An update that leaves a large (TOASTed) value alone carries a placeholder for it. The batch fills
what an earlier event of the key carried (core.batch_events); what is left — the key's value
is in no event of the batch: an update of a row loaded or changed before, the new row of a key
change — is read from the source's row now, one query per table per batch, before the batch is
applied (Debezium's own reselect post processor would query once per event, and hands values
back in its own encodings; this reads them as the text the change events carry, `::text`):

- the source has the key: its current value stands in. The target may show a newer value a
  moment early; every later change of that value is an event of its own, so the stream still
  ends where the source is;
- the source no longer has the key: the event is left out of the batch. A later event of the
  same key (same partition, later offset) deletes it or moves it away, so leaving it out changes
  nothing the target ends with — where applying it would have meant a row with a value nobody
  has, a divergence, and a reload of the whole table.
"""
from __future__ import annotations

import logging

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

log = logging.getLogger("tideline.incremental")

PLACEHOLDER = b'"__debezium_unavailable_value"'
_DECODE = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode


def fill_from_source(rows: pa.Table, by_topic: dict, source_schema, engine, src) -> pa.Table:
    """`rows` with the placeholders the source can fill filled, and the events of keys the source
    no longer has left out (see the module). `by_topic`: topic -> StreamTable; `source_schema(name)`."""
    if not rows.num_rows:
        return rows
    # a delete's image (core.batch_events.with_last_image) is never read from the source, which no
    # longer has the row: what it leaves unfilled, the target's row holds (core.apply_sql)
    holes = pc.and_(pc.fill_null(pc.match_substring(rows.column("after"), "__debezium_unavailable_value"), False),
                    pc.fill_null(pc.not_equal(rows.column("op"), "d"), True))
    if not pc.any(holes).as_py():
        return rows
    after, keep = rows.column("after").to_pylist(), [True] * rows.num_rows
    wanted: dict[str, list[int]] = {}
    for i, (topic, hole) in enumerate(zip(rows.column("topic").to_pylist(), holes.to_pylist())):
        if hole:
            wanted.setdefault(topic, []).append(i)
    keys = rows.column("key").to_pylist()
    for topic, idx in wanted.items():
        table = by_topic[topic]
        images = [_DECODE(after[i].encode()) for i in idx]
        columns = sorted({n for image in images for n, raw in image.items() if bytes(raw) == PLACEHOLDER})
        found = engine.current_values(src, source_schema(table.name), table.name, table.source_key,
                                      [keys[i] for i in idx], columns)
        gone = 0
        for n, (i, image) in enumerate(zip(idx, images)):
            now = found.get(n)
            if now is None:
                keep[i], gone = False, gone + 1
                continue
            after[i] = msgspec.json.encode({name: msgspec.Raw(msgspec.json.encode(now[name]))
                                            if bytes(raw) == PLACEHOLDER else raw
                                            for name, raw in image.items()}).decode()
        log.info("%s: %d event(s) with values Debezium left out: %d filled from the source's row now, %d of "
                 "keys the source no longer has left out (a later event of the key removes them)",
                 table.name, len(idx), len(idx) - gone, gone)
    rows = rows.set_column(rows.schema.get_field_index("after"), "after", pa.array(after, pa.string()))
    return rows.filter(pa.array(keep))
