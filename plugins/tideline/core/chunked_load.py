"""Chunked full loads, the pure part: which tables load in chunks, how many, whether a load that
was cut off may resume, and how far along it is.

A consistent load holds one source transaction open for the whole table: on a big table that is
hours of vacuum held back on the whole source database, and a kill at 90% starts again from zero.
A chunked load records the topic offsets the stream resumes from *before* it plans, then reads
the table as key-range chunks, each in its own short source transaction, each committed into the
target's shadow table together with its record in the state (load.chunked). Why the stream's
replay from those offsets converges whatever the writers do meanwhile is argued in
docs/how-it-works.md ("Chunked loads").
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from tideline.core import column_hash
from tideline.core.table_shape import TableShape

# `snapshot: auto` loads a table of at least this many rows (the source's estimate) in chunks: at
# ~300k rows/s on 2 cores a consistent read of 10M rows holds its transaction for ~35 s; beyond that
# the transaction grows with the table. Below it the chunks' own costs (a transaction, a commit and
# a state record per chunk) buy little: a 5M-row table loaded at 0.80x pgcopydb chunked and 0.85x
# consistent (tests/bench/full_load.py, one run each, 2026-12-06); at 20M rows chunked and
# consistent take the same time (tests/bench/chunked_load.py: 0.99 / 1.20 / 1.05).
CHUNKED_FROM_ROWS = 10_000_000


def use_chunks(mode: str, rows_estimate: int | None, can_chunk: bool) -> tuple[bool, str]:
    """(load in chunks?, why, in words for the run's history)."""
    if mode == "consistent":
        return False, "snapshot: consistent"
    if not can_chunk:
        why = "the source engine or target cannot load in chunks yet"
        if mode == "chunked":
            return False, f"snapshot: chunked asked, but {why}: one consistent snapshot"
        return False, why
    if mode == "chunked":
        return True, "snapshot: chunked"
    if rows_estimate is not None and rows_estimate >= CHUNKED_FROM_ROWS:
        return True, f"snapshot: auto, ~{rows_estimate:,} rows (chunked from {CHUNKED_FROM_ROWS:,})"
    return False, f"snapshot: auto, ~{rows_estimate or 0:,} rows (chunked from {CHUNKED_FROM_ROWS:,})"


def chunk_count(rows_estimate: int | None, chunk_rows: int) -> int:
    """How many key ranges to plan: at least one, one per `chunk_rows` of the estimate."""
    return max(1, -(-(rows_estimate or 0) // max(1, chunk_rows)))


def shape_digest(shape: TableShape, row_filter: str | None = None) -> str:
    """What a chunk's rows look like: the columns read (as the target names them), their types, the
    key, the rows the table's filter keeps and the target table (when named otherwise). A load planned for another shape or filter (changed while it was
    stopped) cannot be resumed: its shadow table holds rows of the old one."""
    hashed = column_hash.hashed_columns(shape)   # a salt changed mid-load: chunks hashed two ways
    text = "|".join(f"{c}:{shape.column(c).type}" + (f":hashed {hashed[c]}" if c in hashed else "")
                    for c in shape.written_columns) + "#" + ",".join(shape.primary_key)
    text += f"#{row_filter}" if row_filter else ""
    text += f"#into {shape.name}" if shape.origin is not None and shape.name != shape.origin.name else ""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class OpenLoad:
    """A chunked load that was started and not finished (state.chunks)."""
    load_id: int
    topic_id: str | None
    offsets: dict[int, int]
    ranges: list[str]
    shape: str
    rows_estimate: int | None
    done: dict[int, int]          # chunk -> rows committed


def may_resume(load: OpenLoad, shape: str, topic_id: str | None, earliest: dict[int, int]) -> str | None:
    """None when the load may go on from its first chunk not done; else why it starts over. The
    stream resumes from the offsets taken before the first chunk: every one of them must still be
    in Kafka (retention deletes from the oldest), in the same topic (a recreated one has another id)."""
    if shape != load.shape:
        return "the table's columns changed since its chunked load started"
    if load.topic_id is not None and topic_id is not None and topic_id != load.topic_id:
        return f"its topic was recreated since its chunked load started (topic id {load.topic_id} → {topic_id})"
    lost = {p: (o, earliest.get(p, 0)) for p, o in load.offsets.items() if earliest.get(p, 0) > o}
    if lost:
        p, (o, first) = sorted(lost.items())[0]
        return (f"Kafka retention deleted changes its stream needs to resume from (partition {p}: offset {o} "
                f"needed, {first} is the oldest kept) while its chunked load was stopped")
    return None
