"""A stream batch staged by Spark's tasks (`stream.stage_on: executors`): what one task stages
from its share of the batch, and what it tells the driver.

Each task reads Kafka offset ranges (a big partition's range is cut into several tasks' parts, so
that a batch's work spreads evenly over the executors' cores: with whole ranges, 3 partitions on 2
cores left one core idle a third of the time, tests/bench/incremental.py). A task does what
core.batch_events does for a whole batch on the driver, for its own events: the last event per
key, each unchanged-value placeholder filled from the key's earlier events. It stages those rows
(kind 'r') and the change-log events of its ranges (kind 'l') in the batch's table, and hands the
driver only a summary: its per-partition figures, the bad messages and the truncates it met.

A partition read by several tasks (`StagedSummary.split`) is joined up at the commit: a key's
placeholders left in one task's row are filled from an earlier task's row of it (fill_across),
then only each key's last row is kept (stream.batch_rows). Pure: no Spark, no database.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from tideline.core.batch_events import BAD_ROWS_KEPT, SplitBatch, fill_image

ROW, LOG = "r", "l"
# the batch table's columns (stream.executor_stage creates it), in COPY order, and whether each
# column's text may hold a COPY metacharacter (core.copy_text)
COLUMNS = (("task", "int NOT NULL", False), ("kind", '"char" NOT NULL', False), ("tbl", "text NOT NULL", True),
           ("topic", "text NOT NULL", True), ("op", '"char" NOT NULL', False), ("key", "jsonb", True),
           ("before", "jsonb", True), ("after", "jsonb", True), ("part", "int NOT NULL", False),
           ("off", "bigint NOT NULL", False), ("ts", "bigint", False), ("pos", "text", True),
           ("hole", "boolean NOT NULL", False))
ESCAPE = [escape for _, _, escape in COLUMNS]
_ORDER = [("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")]


def staged_rows(task: int, split: SplitBatch, table_of_topic: dict[str, str]) -> pa.Table:
    """The task's rows for the batch table, as text for COPY. `hole`: an unchanged-value
    placeholder is left in the row: an earlier task's row of the key may fill it (fill_across),
    else, for a table without history, the source's row (stream.source_fill); a history table's
    apply reads the version before."""
    parts = []
    for kind, rows in ((ROW, split.rows), (LOG, split.log)):
        if rows is None or not rows.num_rows:
            continue
        n = rows.num_rows
        topics = pc.dictionary_encode(rows.column("topic").combine_chunks())
        names = pa.array([table_of_topic[t] for t in topics.dictionary.to_pylist()], pa.string())
        if kind == ROW:
            hole = pc.and_(pc.fill_null(pc.match_substring(rows.column("after"), "__debezium_unavailable_value"), False),
                           pc.fill_null(pc.not_equal(rows.column("op"), "d"), True))   # a delete's image: source_fill
            before = pa.nulls(n, pa.string())
        else:
            hole, before = pa.array([False] * n), rows.column("before")
        parts.append(pa.table({
            "task": pa.array([str(task)] * n), "kind": pa.array([kind] * n), "tbl": pc.take(names, topics.indices),
            "topic": rows.column("topic"), "op": rows.column("op"), "key": rows.column("key"), "before": before,
            "after": rows.column("after"), "part": pc.cast(rows.column("partition"), pa.string()),
            "off": pc.cast(rows.column("offset"), pa.string()), "ts": pc.cast(rows.column("ts_us"), pa.string()),
            "pos": rows.column("position"), "hole": pc.if_else(hole, "t", "f")}))
    if not parts:
        return pa.table({name: pa.array([], pa.string()) for name, _, _ in COLUMNS})
    return pa.concat_tables(parts, promote_options="permissive")


def task_summary(task: int, split: SplitBatch, staged: pa.Table) -> str:
    """What one task tells the driver, as JSON: small whatever the batch (at most BAD_ROWS_KEPT bad
    messages, cut to 2,000 characters each by core.batch_events)."""
    kinds = staged.column("kind").to_pylist() if staged.num_rows else []
    topics = staged.column("topic").to_pylist() if staged.num_rows else []
    return json.dumps({
        "task": task, "staged": staged.num_rows, "per_partition": split.per_partition, "bad_rows": split.bad_rows,
        "truncates": split.truncates,
        "holes": int(pc.sum(pc.equal(staged.column("hole"), "t")).as_py() or 0) if staged.num_rows else 0,
        "topics": sorted({t for k, t in zip(kinds, topics) if k == ROW}),
        "log_topics": sorted({t for k, t in zip(kinds, topics) if k == LOG})})


@dataclass
class StagedSummary:
    """The batch as its tasks staged it."""
    per_partition: list[dict] = field(default_factory=list)
    bad_rows: list[dict] = field(default_factory=list)
    truncates: list[dict] = field(default_factory=list)
    staged: int = 0                 # rows in the batch table (the commit checks they are all there)
    holes: int = 0                  # rows with a placeholder left
    topics: set[str] = field(default_factory=set)       # topics with rows to apply
    log_topics: set[str] = field(default_factory=set)   # topics with change-log events
    split: set[tuple[str, int]] = field(default_factory=set)   # partitions read by several tasks


def merge_summaries(summaries: list[str]) -> StagedSummary:
    """The tasks' summaries as one batch's: a partition read by several tasks has its parts'
    figures added up (offsets lo..hi over all of them) and is named in `split`."""
    out, parts = StagedSummary(), {}
    for text in summaries:
        s = json.loads(text)
        for p in s["per_partition"]:
            where = (p["topic"], p["partition"])
            seen = parts.get(where)
            if seen is None:
                parts[where] = dict(p)
                continue
            out.split.add(where)
            seen.update(lo=min(seen["lo"], p["lo"]), hi=max(seen["hi"], p["hi"]), n=seen["n"] + p["n"],
                        bad=seen["bad"] + p["bad"], truncates=seen["truncates"] + p["truncates"],
                        ts_ms=max((t for t in (seen["ts_ms"], p["ts_ms"]) if t is not None), default=None))
        out.bad_rows += s["bad_rows"]
        out.truncates += s["truncates"]
        out.staged += s["staged"]
        out.holes += s["holes"]
        out.topics.update(s["topics"])
        out.log_topics.update(s["log_topics"])
    out.per_partition = [parts[k] for k in sorted(parts)]
    key = lambda r: (r["topic"], r["partition"], r["offset"])   # noqa: E731
    out.bad_rows = sorted(out.bad_rows, key=key)[:BAD_ROWS_KEPT]
    out.truncates.sort(key=key)
    return out


def applied_floors(per_partition: list[dict], live: set[str],
                   current: dict[str, dict[int, int]]) -> list[tuple[str, int, int]]:
    """(topic, partition, committed offset) of each live partition whose staged rows start below
    its committed offset: the rows an earlier batch applied, which the commit leaves out."""
    return [(r["topic"], r["partition"], floor) for r in per_partition
            if r["topic"] in live and r["topic"] in current
            and (floor := current[r["topic"]].get(r["partition"], 0)) > r["lo"]]


def fill_across(rows: list[tuple[str, str, int, int, str, str | None]]) -> dict[tuple[str, int, int], str]:
    """Staged rows (topic, key, partition, offset, op, after) of the keys with a placeholder left,
    every task's -> the new image of each row an earlier row of its key fills (by (topic,
    partition, offset)). core.batch_events' rule, across tasks: a row's placeholder takes the
    latest earlier value of the field, none from before a delete."""
    chains: dict[tuple[str, str], list] = {}
    for row in rows:
        chains.setdefault((row[0], row[1]), []).append(row)
    out = {}
    for chain in chains.values():
        chain.sort(key=lambda r: r[3])
        earlier: list[tuple[int, str, str | None]] = []
        for topic, _key, part, off, op, after in chain:
            if after is not None and "__debezium_unavailable_value" in after and earlier:
                filled = fill_image(after, earlier)
                if filled != after:
                    out[(topic, part, off)] = after = filled
            earlier.append((off, op, after))
    return out
