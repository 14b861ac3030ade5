"""A table's full load read in key-range chunks, each in its own short source transaction, and
resumable: what the full load (load.full_load) uses instead of one consistent snapshot when the
table's `snapshot` setting (or its size) asks for it (core.chunked_load.use_chunks).

The order that makes the stream's replay converge (docs/how-it-works.md, "Chunked loads"):
1. the topic's end offsets, taken before anything is read: the stream resumes from them;
2. the plan — key ranges covering the whole key space — stored with those offsets;
3. each chunk read by one statement (its own snapshot, seconds long) and COPYed into the shadow
   table; its record (state.chunks) commits in the same target transaction, fenced by the run's
   epoch;
4. once every chunk has a record, the shadow goes live with the state, as a consistent load does.
A load cut off anywhere resumes at step 3 with the chunks that have no record, as long as Kafka
still holds every offset of step 1 (else it starts over and says why).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from psycopg2 import sql

from tideline.core.chunked_load import OpenLoad, may_resume, shape_digest
from tideline.core.errors import LoadVerificationError
from tideline.core.table_shape import TableShape
from tideline.engines import Snapshot
from tideline.load.copy_rows import copy_source_rows
from tideline import state
from tideline.state import chunks

log = logging.getLogger("tideline.full_load")


@dataclass
class ChunkedRead:
    """One table's chunked read, planned or resumed by `open`; `fill` then reads the chunks left."""
    load_id: int
    snap: Snapshot                 # what the full load records: the plan's predicates, no open transaction
    ranges: list[str]              # every chunk's key range, by chunk number
    done: dict[int, int]           # chunks committed before this run: chunk -> rows
    offsets: dict[int, int]
    topic_id: str | None
    rows_estimate: int | None
    resumed: bool
    why: str                       # for the run's history: planned, resumed (n of m left), or started over

    @property
    def pending(self) -> list[int]:
        return [i for i in range(len(self.ranges)) if i not in self.done]


def open_read(load, src, tgt, shape: TableShape, table: str, epoch: int) -> ChunkedRead:
    """The table's open chunked load taken over by this run (epoch), when it may resume; else a
    new one planned — after the handover offsets are taken."""
    cfg, tcfg = load.cfg, load.cfg.table(table)
    landing = cfg.target_names(table).shape(shape)   # a load renamed since it was cut off starts over
    topic, digest = cfg.topic(table), shape_digest(landing, tcfg.row_filter)
    found: OpenLoad | None = chunks.open_load(tgt, cfg.name, table)
    tgt.rollback()
    over = ""
    if found is not None:
        topic_id, earliest = load.retained(topic)
        why_not = may_resume(found, digest, topic_id, earliest)
        if why_not is None:
            with tgt, tgt.cursor() as cur:
                chunks.take_over(cur, found.load_id, epoch)
            left = len(found.ranges) - len(found.done)
            why = (f"chunked load {found.load_id} resumed: {left} of {len(found.ranges)} chunks left "
                   f"({sum(found.done.values()):,} rows kept from earlier runs)")
            log.info("%s.%s: %s", cfg.name, table, why)
            return ChunkedRead(found.load_id, _snapshot(found.load_id, found.ranges, found.done), found.ranges,
                               dict(found.done), found.offsets, found.topic_id, found.rows_estimate, True, why)
        chunks.abandon_open(tgt, cfg.name, table, f"started over: {why_not}")
        over = f"chunked load {found.load_id} started over because {why_not}; "
        log.warning("%s.%s: %s", cfg.name, table, over.rstrip("; "))
    topic_id, offsets = load.handover(topic)   # 1. before anything is read
    estimate, ranges = load.engine.plan_chunks(src, shape, tcfg.chunk_rows)   # 2. the plan, in its own transaction
    with tgt, tgt.cursor() as cur:
        load_id = chunks.start(cur, cfg.name, table, epoch, topic, topic_id, offsets, ranges, digest, estimate)
    why = f"{over}chunked load {load_id}: {len(ranges)} chunks of ~{tcfg.chunk_rows:,} rows (~{estimate:,} rows)"
    return ChunkedRead(load_id, _snapshot(load_id, ranges, {}), ranges, {}, offsets, topic_id, estimate, False, why)


def kept_rows(cfg, table: str) -> str | None:
    """The table's row_filter (core.row_filter) in the source's SQL, or None: a read's `where`,
    inside its scan of the table (the read query's columns are the source's own there)."""
    tcfg = cfg.table(table)
    if not tcfg.row_filter:
        return None
    from tideline.core.row_filter import RowFilter
    return RowFilter(tcfg.row_filter, cfg.source.kind).source_sql()


def _snapshot(load_id: int, ranges: list[str], done: dict[int, int]) -> Snapshot:
    """The load as the full load records it: no transaction is held, so no snapshot id or count."""
    return Snapshot(f"chunked load {load_id}", datetime.now(timezone.utc), None, None,
                    [r for i, r in enumerate(ranges) if i not in done], None)


def fill(load, read: ChunkedRead, src, tgt, shape: TableShape, schema: str, into: str, label: str, epoch: int,
         started: float, run_id: int) -> list[dict]:
    """Reads the chunks left into `into` (the shadow table), each committed with its record; then
    checks that every chunk has one and that the shadow holds exactly the rows they recorded.
    `shape` is the target's (core.target_names); the state and the source know the table by the
    source's name."""
    cfg, source = load.cfg, shape.at_source
    pending = read.pending
    if pending:
        record = (chunks.record_chunk_sql(), {"load_id": read.load_id, "pipeline": cfg.name, "table": source.name,
                                              "epoch": epoch})
        log.info("%s: reading %d of %d chunks (each its own source transaction)", label, len(pending),
                 len(read.ranges))
        where = kept_rows(cfg, source.name)
        copy_source_rows(load.spark, load.engine, load.store, tgt, shape, load.engine.read_query(src, source, where),
                         [read.ranges[i] for i in pending], schema, into, label,
                         session_init=load.engine.chunk_session_init, started=started, run_id=run_id,
                         numbers=pending, record=record, where=where)
    now = chunks.open_load(tgt, cfg.name, source.name)
    with tgt.cursor() as cur:
        cur.execute(sql.SQL("SELECT count(*) FROM {}.{}").format(sql.Identifier(schema), sql.Identifier(into)))
        stored = cur.fetchone()[0]
    tgt.rollback()
    done = now.done if now is not None and now.load_id == read.load_id else {}
    missing = [i for i in range(len(read.ranges)) if i not in done]
    recorded = sum(done.values())
    if missing or recorded != stored:
        chunks.abandon_open(tgt, cfg.name, source.name, f"verification failed: {len(missing)} chunks unrecorded, "
                                                        f"{recorded:,} rows recorded, {stored:,} in the shadow table")
        raise LoadVerificationError(
            f"{label}: chunked load {read.load_id} recorded {recorded:,} rows in {len(done)} of {len(read.ranges)} "
            f"chunks but its shadow table {schema}.{into} holds {stored:,}; nothing was swapped in and the load "
            f"starts over on its next run.")
    log.info("%s: every chunk read: %s rows in %d chunks (%d this run, %.1fs)", label, f"{recorded:,}",
             len(read.ranges), len(pending), time.monotonic() - started)
    return [{"partition": i, "rows": n, "copied": n, "seconds": 0.0, "how": "COPY pipe, chunked"}
            for i, n in sorted(done.items())]


def staged(cur, read: ChunkedRead, chunks_rows: dict[int, int], epoch: int, run_id: int) -> None:
    """Chunks a target staged itself (Iceberg), recorded in the transaction that fenced them, with
    a progress sample of the rows staged so far (the view's bar)."""
    chunks.record_staged(cur, read.load_id, chunks_rows, epoch)
    state.record_load_progress(cur.connection, run_id, chunks.rows_stored(cur, read.load_id), 0)
