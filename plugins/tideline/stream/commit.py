"""The stream's commit: one decoded batch applied to the target in one transaction, together
with the offsets it consumed and the fencing check — so a batch is applied once or not at all.

In order: lock every table's state row and refuse the batch if a newer run holds a table (fencing);
skip events below each table's committed offsets (exactly once across retries and restarts);
reload instead of misordering (a truncate, a partition added to a topic); then per table, alone
(a refusal halts that table, the others go on): schema evolution, deletes and upserts; last, the
new offsets and the batch record. A lost connection is waited out and the batch is run again.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc

from tideline import state
from tideline.state import ledger
from tideline.core import schema_drift
from tideline.stream.batch_rows import ArrowRows
from tideline.stream.handed import hand_over
from tideline.stream.source_fill import fill_from_source
from tideline.core.batch_events import newest_source_commit
from tideline.core.change_events import too_large_marker
from tideline.core.config import PipelineConfig
from tideline.core.errors import FencedError, ResnapshotRequired, SourceError, TidelineError
from tideline.core.offsets import merge_committed
from tideline.core.row_filter import RowFilter
from tideline.core.table_extras import PREFIX as EXTRAS_PREFIX, TableExtras
from tideline.core.table_shape import Column, TableShape
from tideline.core.target_names import TargetNames
from tideline.targets import ApplyRefused, CommitStamp, StagedTable

log = logging.getLogger("tideline.incremental.commit")
RECONNECT_EVERY_S = 5.0   # the longest wait between tries of a batch whose database went away


@dataclass
class StreamTable:
    name: str
    topic: str
    epoch: int
    primary_key: list[str]
    columns: list[Column] = field(default_factory=list)
    partitions: int | None = None   # the change topic's partition count at the full load
    source: dict[str, Column] = field(default_factory=dict)   # the source's columns: how events carry
                                                               # each, what existing rows hold
    # what the target calls it and its columns (core.target_names): `columns` and `primary_key` are
    # the target's; the state, the topic and the events know the source's names
    names: TargetNames | None = None

    @property
    def target(self) -> str:
        """The target table it lands in."""
        return self.names.table if self.names is not None else self.name

    @property
    def source_key(self) -> list[str]:
        """The key as the source (and its events) name it."""
        return [self.names.source_column(k) for k in self.primary_key] if self.names is not None else self.primary_key


@dataclass
class BatchFigures:
    events: int = 0
    upserts: int = 0
    deletes: int = 0
    skipped: int = 0
    dead_letters: int = 0
    per_table: dict[str, tuple[int, int]] = field(default_factory=dict)
    batch_id: int | None = None
    end_offsets: dict[str, dict[str, int]] = field(default_factory=dict)


def _unapplied(part: dict, committed: dict[str, dict[int, int]]) -> int:
    """Events of one batch partition (offsets lo..hi) at or above the table's committed position."""
    return part["hi"] - max(part["lo"], committed[part["topic"]].get(part["partition"], 0)) + 1


class BatchCommitter:
    """Commits the run's batches over its own connections (the target's, and the source's for
    the schema it evolves to); shares the run's tables and halts."""

    def __init__(self, cfg: PipelineConfig, store, engine, owner: str, tables: dict[str, StreamTable],
                 by_topic: dict[str, StreamTable], halted: dict[str, str],
                 on_halts: Callable[[dict[str, tuple[str, dict | None]]], None], handed: dict[str, str] | None = None):
        self.cfg, self.store, self.engine, self.owner = cfg, store, engine, owner
        self.tables, self.by_topic, self.halted = tables, by_topic, halted
        self.handed = handed if handed is not None else {}   # tables a full load took over (stream.handed)
        self.on_halts = on_halts   # after the commit: log, alert, and end the run if no table is left
        self._tgt = self._src = None

    def attach(self, tgt, src) -> None:
        self._tgt, self._src = tgt, src

    def close(self) -> None:
        for conn in (self._tgt, self._src):
            if conn is not None:
                conn.close()

    def commit_through_outages(self, *batch, log_rows: pa.Table | None = None) -> BatchFigures | None:
        """Commits the batch, waiting out a database that restarts or refuses connections for up
        to stream.outage_wait_minutes: the failed attempt committed nothing, so the batch is simply
        run again on new connections (its offsets decide what applies), after 1, 2, 4 s, then every
        RECONNECT_EVERY_S: a connection attempt costs the database little, and each second of
        waiting longer than the outage is a second of lag. Then the stream catches up by itself,
        with no task restart."""
        deadline = time.monotonic() + self.cfg.stream.outage_wait_minutes * 60
        delay, lost_at = 1.0, None
        while True:
            try:
                if lost_at is not None:
                    self._reconnect()
                figures = self._commit(*batch, log_rows=log_rows)
                if lost_at is not None:
                    log.warning("connection back after %.0fs; batch committed", time.monotonic() - lost_at)
                return figures
            except self.store.errors as exc:
                if not self.store.lost_connection(exc) or time.monotonic() + delay > deadline:
                    raise
                lost_at = lost_at or time.monotonic()
                log.warning("database connection lost during the batch (%s); nothing of it committed; trying "
                            "again in %.0fs (gives up after stream.outage_wait_minutes=%g)",
                            str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__, delay,
                            self.cfg.stream.outage_wait_minutes)
                time.sleep(delay)
                delay = min(delay * 2, RECONNECT_EVERY_S)

    def _reconnect(self) -> None:
        for conn in (self._tgt, self._src):
            try:
                conn.close()
            except Exception:   # already broken: nothing to close
                pass
        self._tgt = self.store.connect(connect_timeout=10)
        self._src = self.engine.connect(autocommit=True, connect_timeout=10)

    def _commit(self, *batch, log_rows: pa.Table | None = None) -> BatchFigures | None:
        """The batch; a table a full load took meanwhile is left to it (stream.handed) and the batch
        committed again without it (nothing of the refused attempt committed)."""
        while True:
            try:
                return self._commit_once(*batch, log_rows=log_rows)
            except FencedError as exc:
                if not hand_over(self.cfg.name, self.tables, self.halted, self.handed, exc.table, exc.owner):
                    raise

    def _commit_once(self, spark_batch_id, per_partition, bad_rows, truncates, rows, started_at: datetime,
                     log_rows: pa.Table | None = None) -> BatchFigures | None:
        """`rows`: the batch's rows (stream.batch_rows), or its compacted rows as Arrow with
        `log_rows` its change-log events."""
        cfg, conn = self.cfg, self._tgt
        if isinstance(rows, pa.Table):
            rows = ArrowRows(rows, log_rows)
        live = {t.topic for t in self.tables.values() if t.name not in self.halted and t.name not in self.handed}
        per_partition = [r for r in per_partition if r["topic"] in live]   # a halted table keeps its offsets
        bad_rows = [b for b in bad_rows if b["topic"] in live]
        truncates = [t for t in truncates if t["topic"] in live]
        figures = BatchFigures(events=sum(r["n"] for r in per_partition))
        halting: dict[str, tuple[str, dict | None]] = {}
        with conn, conn.cursor() as cur:
            if not per_partition:
                rows.discard(cur)
                return None
            # 1. fencing: lock every state row this run owns; any newer epoch refuses the batch
            streamed = {t.name: t for t in self.tables.values() if t.topic in live}
            recorded = state.check_epochs(cur, cfg.name, {name: t.epoch for name, t in streamed.items()})
            current: dict[str, dict[int, int]] = {
                t.topic: self.store.applied_offsets(cur, cfg.name, cfg.target_schema(name), t.target, recorded[name]) or {}
                for name, t in streamed.items()}
            # 2. exactly once: events below the committed position were applied by an earlier batch
            fresh = [r for r in per_partition if r["hi"] >= current[r["topic"]].get(r["partition"], 0)]
            if not fresh and not rows.logs(live):   # a change log starts before its table
                log.info("spark batch %d holds only events already applied; skipped", spark_batch_id)
                rows.discard(cur)
                return None
            # staged where the apply reads them, without the events applied already; what Debezium
            # left out and the batch cannot fill: the source's row now (stream.source_fill); not a
            # history table's: a version's value is the one before it (its apply reads it there)
            topics = rows.stage(cur, self.store, live, current, self._fill_from_source,
                                {tp: t.target for tp, t in self.by_topic.items()})
            figures.skipped = figures.events - sum(_unapplied(r, current) for r in fresh)
            bad_rows = [b for b in bad_rows if b["offset"] >= current[b["topic"]].get(b["partition"], 0)]
            truncates = [t for t in truncates if t["offset"] >= current[t["topic"]].get(t["partition"], 0)]
            for r in fresh:   # partitions added while the stream runs: see coverage_gaps
                t = self.by_topic[r["topic"]]
                if t.partitions is not None and r["partition"] >= t.partitions:
                    raise ResnapshotRequired(
                        f"{cfg.name}.{t.name}: events arrived on partition {r['partition']} of {t.topic}, which had "
                        f"{t.partitions} partition(s) at the full load; keys now hash to other partitions, so one "
                        f"key's changes can no longer be put in order. The table is reloaded by itself.",
                        table=t.name)
            if truncates:
                t = truncates[0]
                table = self.by_topic[t["topic"]].name
                raise ResnapshotRequired(
                    f"{cfg.name}.{table}: the source table was truncated (event at {t['topic']} partition "
                    f"{t['partition']} offset {t['offset']}); a truncate cannot be ordered against changes on "
                    f"other partitions, so the table is reloaded instead.", table=table)
            if bad_rows:
                figures.dead_letters, unparsed = self._bad_messages(cur, bad_rows)
                halting.update(unparsed)
            # 3. per table, under its own savepoint: schema drift, then the rows. A table the
            # target refuses is halted alone; the others are applied and advance.
            touched = sorted({self.by_topic[tp].name for tp in topics} - set(halting))
            # the source's catalog now: any schema change behind this batch's events shows in it
            shapes = self.engine.describe_many(self._src, [(cfg.source_schema(n), n, cfg.table(n)) for n in touched],
                                               check_key=False, for_stream=True)
            for name in touched:
                t = self.tables[name]
                batch_max = {r["partition"]: r["hi"] for r in per_partition if r["topic"] == t.topic}
                stamp = CommitStamp(cfg.name, t.epoch, merge_committed(current[t.topic], batch_max))
                applied = self._apply_isolated(cur, t, stamp, shapes[(cfg.source_schema(name), name)])
                if isinstance(applied, tuple) and isinstance(applied[0], str):
                    halting[name] = applied
                else:
                    figures.per_table[name], dead = applied
                    figures.dead_letters += dead
            for name, (why, event) in halting.items():
                state.halt_in(cur, pipeline=cfg.name, table=name, epoch=self.tables[name].epoch, error=why,
                              event=event)
            figures.upserts = sum(u for u, _ in figures.per_table.values())
            figures.deletes = sum(d for _, d in figures.per_table.values())
            # 4. the new position, the batch record, all in this transaction
            batch_id = state.next_batch_id(cur, cfg.name)
            start_offsets, end_offsets, table_events, advances = {}, {}, {}, []
            for t in self.tables.values():
                batch_max = {r["partition"]: r["hi"] for r in per_partition if r["topic"] == t.topic}
                if not batch_max or t.name in halting:
                    continue
                new = merge_committed(current[t.topic], batch_max)
                if new == current[t.topic]:   # only events its change log lacked (stream.position): no move
                    continue
                table_events[t.name] = sum(_unapplied(r, current) for r in fresh if r["topic"] == t.topic)
                advances.append(state.Advance(t.name, t.epoch, new, table_events[t.name]))
                start_offsets[t.topic] = {str(p): current[t.topic].get(p, 0) for p in sorted(batch_max)}
                end_offsets[t.topic] = {str(p): new[p] for p in sorted(batch_max)}
            state.advance_streams(cur, cfg.name, batch_id, advances)
            if end_offsets:   # a batch whose every table halted applied nothing: no batch record
                figures.events = sum(r["n"] for r in per_partition if r["topic"] in end_offsets)
                state.commit_batch(cur, pipeline=cfg.name, batch_id=batch_id, run=self.owner,
                                   spark_batch_id=spark_batch_id,
                                   tables=sorted(self.by_topic[tp].name for tp in end_offsets),
                                   start=start_offsets, end=end_offsets, events=figures.events,
                                   upserts=figures.upserts, deletes=figures.deletes,
                                   dead_letters=figures.dead_letters, started_at=started_at,
                                   source_ts_max=newest_source_commit(per_partition, end_offsets),
                                   table_events=table_events)
            rows.discard(cur)
        self.on_halts(halting)
        if not end_offsets:
            return None
        figures.batch_id, figures.end_offsets = batch_id, end_offsets
        return figures

    def _fill_from_source(self, rows: pa.Table) -> pa.Table:
        versioned = [t.topic for t in self.tables.values() if self.cfg.table(t.name).history]
        if not versioned or not rows.num_rows:
            return fill_from_source(rows, self.by_topic, self.cfg.source_schema, self.engine, self._src)
        every = pc.is_in(rows.column("topic"), pa.array(versioned, pa.string()))
        return pa.concat_tables([fill_from_source(rows.filter(pc.invert(every)), self.by_topic, self.cfg.source_schema,
                                                  self.engine, self._src), rows.filter(every)])

    def _apply_isolated(self, cur, table: StreamTable, stamp: CommitStamp, shape: TableShape | SourceError):
        """((upserts, deletes), dead letters) — or (why, event) when the table must halt."""
        self.store.begin_table(cur)
        try:
            self._evolve(cur, table, shape)
            tcfg = self.cfg.table(table.name)
            if tcfg.changelog:   # before the table: a target that commits each apart logs first (its dedup)
                self.store.hash_log(cur, table.target, table.columns)
                self.store.append_changes(cur, self.cfg.name, self.cfg.target_schema(table.name), table.target, stamp)
            if tcfg.row_filter:   # what the filter does not keep leaves the target (core.row_filter)
                predicate = RowFilter(tcfg.row_filter, self.cfg.source.kind).target_sql(
                    [c.source_name for c in table.columns], "v", {c.source_name: c.name for c in table.columns})
                self.store.leave_filter(cur, table.target, table.columns, predicate)
            staged = StagedTable(self.cfg.target_schema(table.name), table.target, table.topic, table.columns,
                                 table.primary_key, dead_letter=self.cfg.stream.on_bad_message == "dead_letter",
                                 extras=TableExtras.of(tcfg, self.cfg.source.kind))
            applied = self.store.apply_changes(cur, staged, stamp)
        except (schema_drift.SchemaChangeError, SourceError) as exc:   # e.g. a column added that cannot stream
            self.store.undo_table(cur)
            return str(exc), None
        except ApplyRefused as exc:
            self.store.undo_table(cur)
            return str(exc), exc.event.as_state()
        self.store.end_table(cur)
        return applied

    def _bad_messages(self, cur, bad_rows) -> tuple[int, dict[str, tuple[str, dict]]]:
        """Unparseable events: dead letters (count), or, with on_bad_message: stop, the tables whose
        topics hold one, to halt (each at its first bad event)."""
        halting = {}
        for b in bad_rows:   # a row too big for Kafka: always halts, never a skipped event
            table = self.by_topic[b["topic"]].name
            too_large = too_large_marker(b["value"])
            if too_large is None or table in halting:
                continue
            at = f"topic {b['topic']} partition {b['partition']} offset {b['offset']}"
            halting[table] = (
                f"{self.cfg.name}.{table}: the row with key {b['key']} changed at {at} is about "
                f"{too_large[0] / 1048576:,.1f} MB as a change event, above the {too_large[1] / 1048576:,.0f} MB the "
                f"pipeline carries (kafka.max_message_mb): the connector sent a marker in its place, so the change "
                f"itself is not on Kafka. The table is HALTED before it; the other tables keep streaming. Raise "
                f"kafka.max_message_mb above {too_large[0] / 1048576:,.0f} (at most 90), then trigger the sync DAG "
                f"with action=full_reload for {table!r}.",
                {"table": table, "topic": b["topic"], "partition": b["partition"], "offset": b["offset"],
                 "key": b["key"], "error": f"change event too large: {too_large[0]} bytes, limit {too_large[1]}"})
        bad_rows = [b for b in bad_rows if self.by_topic[b["topic"]].name not in halting]
        if not bad_rows:
            return 0, halting
        first = bad_rows[0]
        where = f"topic {first['topic']} partition {first['partition']} offset {first['offset']}"
        if self.cfg.stream.on_bad_message == "stop":
            for b in bad_rows:   # ordered by topic, partition, offset
                table = self.by_topic[b["topic"]].name
                if table in halting:
                    continue
                at = f"topic {b['topic']} partition {b['partition']} offset {b['offset']}"
                halting[table] = (
                    f"{self.cfg.name}.{table}: cannot parse the change event at {at} (key {b['key']}, value starts "
                    f"{str(b['value'])[:120]!r}). The table is HALTED before it (nothing of it from this batch on "
                    f"was applied; the other tables keep streaming). Fix or remove the producer of that message, "
                    f"then trigger the sync DAG to resume; or set stream.on_bad_message: dead_letter in the "
                    f"pipeline config to record such events in tideline.dead_letters and go on.",
                    {"table": table, "topic": b["topic"], "partition": b["partition"], "offset": b["offset"],
                     "key": b["key"], "error": "not a Debezium change event"})
            return 0, halting
        ledger.keep_unparseable(cur, self.cfg.name, bad_rows)
        log.warning("pipeline %s: %d unparseable events recorded in tideline.dead_letters, first at %s",
                    self.cfg.name, len(bad_rows), where)
        return len(bad_rows), halting

    def _evolve(self, cur, table: StreamTable, shape: TableShape | SourceError) -> None:
        """Source catalog (engine.describe_many's) vs target: add/widen in this transaction, or
        stop with the reason."""
        if isinstance(shape, SourceError):
            raise shape
        try:
            drift = schema_drift.plan(f"{self.cfg.name}.{table.name}", list(self.cfg.target_names(table.name)
                                                                            .shape(shape).columns), table.columns)
        except TidelineError as exc:
            exc.table = exc.table or table.name   # plan() names the table only in its message
            raise
        if drift.changes_target:
            self.store.evolve(cur, self.cfg.target_schema(table.name), table.target, drift)
            log.info("%s.%s: schema change applied: added %s, widened %s", self.cfg.name, table.name,
                     [c.name for c in drift.add] or "-", [f"{c}: {o} -> {n}" for c, o, n in drift.widen] or "-")
            table.source = {c.name: c for c in shape.columns}
            table.columns = self.columns(cur, table.name, table.source)

    def columns(self, cur, table: str, source: dict[str, Column]) -> list[Column]:
        """The target's columns, each with how the source's events carry it and what the source's
        existing rows hold for it (core.apply_sql: an event from before the column was added), and
        the source's name of a renamed one (core.target_names)."""
        out, names = [], self.cfg.target_names(table)
        for n, t, nn, g in self.store.columns(cur, self.cfg.target_schema(table), names.table):
            src = source.get(names.source_column(n))
            if src is None and n.startswith(EXTRAS_PREFIX):   # Tideline's own (core.table_extras): not from events
                continue
            renamed = names.source_column(n)
            out.append(Column(n, t, nn, generated=g, encoding=src.encoding if src else "pgtext",
                              has_missing=bool(src and src.has_missing),
                              missing_value=src.missing_value if src else None,
                              hash_salt=src.hash_salt if src else None, source=renamed if renamed != n else None))
        return out
