"""Verify: compare a table between source and target without moving it.

Both databases fingerprint the same key range at the same time (count + XOR of row hashes, see
tideline.core.verify_plan); equal → done. Different → the range is cut into sub-ranges at keys
taken from the side with more rows, both sides fingerprint the sub-ranges in one grouped query,
and only differing sub-ranges are narrowed further, down to ranges small enough to compare row
by row (keys + hashes only). A range of up to fine_rows with a one-column key is cut at once into
sub-ranges of ~fine_leaf rows where both sides can (_fine). Memory stays at one leaf range plus
the differing keys.

Rows that differ on the first look are re-checked after the stream has applied what Kafka held
by then, so a change in flight (source committed, target not yet) is not reported as a
difference; a row still changing at the source after every re-check is counted as unsettled.
Confirmed differences, their key ranges (what a repair re-reads) and a bounded sample of keys go
to the run history.
"""
from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tideline import engines, kafka_offsets, state, targets
from tideline.state.ledger import record_verify
from tideline.verify.findings import missing_report
from tideline.core.verify_side import KEY_CHECKS, VerifySide, shared_fingerprint
from tideline.core.kafka_access import KafkaAccess
from tideline.core.config import PipelineConfig
from tideline.core.connections import Conn
from tideline.core.errors import SourceError, TargetError
from tideline.core.row_filter import RowFilter
from tideline.core.table_extras import DELETED_AT, VALID_TO, TableExtras
from tideline.core.table_shape import TableShape
from tideline.core.verify_plan import (INTEGER_KEY_TYPES, Candidate, Finding, KeyRange, VerifyReport, classify,
                                       integer_cuts)

log = logging.getLogger("tideline.verify")

@dataclass
class VerifySettings:
    leaf_rows: int = 2000         # compare row by row below this many rows in a range
    fanout: int = 32              # sub-ranges per narrowing step
    sample_rows: int = 100        # keys listed in the report (totals are always complete)
    max_candidates: int = 100_000  # stop narrowing beyond this many differing rows (reload instead)
    settle_s: float = 3.0         # let the source's last changes reach Kafka before re-checking
    catch_up_timeout_s: float = 120.0
    sample_above_rows: int = 200_000   # cut ranges bigger than this at sampled keys...
    sample_rows_target: int = 20_000   # ...sampling about this many rows of the table
    stall_s: float = 15.0         # a stream that applies nothing this long is taken as not running
    rechecks: int = 3
    fine_rows: int = 100_000      # a differing range up to this size (one-column key, both sides able)...
    fine_leaf: int = 64           # ...is cut at once into sub-ranges of about this many rows
    fine_cuts: int = 50_000       # an integer key is cut by value: a range up to fine_leaf × this many rows


class TableVerifier:
    def __init__(self, cfg: PipelineConfig, engine, src: VerifySide, tgt: VerifySide, state_conn,
                 pool: ThreadPoolExecutor, settings: VerifySettings, kafka: KafkaAccess | None):
        self.cfg, self.engine, self.src, self.tgt, self.pool, self.s = cfg, engine, src, tgt, pool, settings
        self.state, self.kafka = state_conn, kafka

    def _both(self, fn, *args):
        fs, ft = self.pool.submit(fn, self.src, *args), self.pool.submit(fn, self.tgt, *args)
        return fs.result(), ft.result()

    # ---------------------------------------------------------------- setup

    def _shape(self, table: str) -> TableShape:
        shape = self.engine.describe(self.src.conn, self.cfg.source_schema(table), table, self.cfg.table(table), False)
        where, landing = self.cfg.target_schema(table), self.cfg.target_names(table).shape(shape)   # its own names
        self.landing = landing
        try:
            cols = self.tgt.column_types(where, landing.name)
        except self.tgt.errors as exc:
            raise TargetError(f"{self.cfg.name}.{table}: cannot read the target table {where}.{landing.name}: "
                              f"{str(exc).strip()}", table=table) from None
        absent = [c for c in landing.column_names if c not in cols]
        if absent:
            raise TargetError(f"{self.cfg.name}.{table}: the target table lacks synced column(s) "
                              f"{', '.join(absent)}; the stream adds columns as it meets them — run the sync, "
                              f"or action=full_reload", table=table)
        return shape

    # ---------------------------------------------------------------- compare

    def _dialects(self, shape: TableShape) -> None:
        """Each side's fingerprint SQL, for the first fingerprint (in the source's preference) both
        sides compute: the sides build it (core.verify_side), this asks neither's kind."""
        src_schema, tgt_schema = self.cfg.source_schema(shape.name), self.cfg.target_schema(shape.name)
        mode = shared_fingerprint(self.src, self.tgt)
        if mode is None:
            raise TargetError(f"{self.cfg.name}.{shape.name}: verify cannot compare a {self.engine.label} source with "
                              f"a {self.cfg.target.kind} target in this version of Tideline (the source fingerprints "
                              f"rows as {'/'.join(self.src.fingerprints)}, the target as "
                              f"{'/'.join(self.tgt.fingerprints)}). The stream's own checks still hold; `make status` "
                              f"compares row counts, and action=full_reload re-copies the table.", table=shape.name)
        if mode in KEY_CHECKS:
            KEY_CHECKS[mode](shape, f"{self.cfg.name}.{shape.name}")
        self.src.dialect, self.tgt.dialect, note = self.src.pair_dialects(mode, shape, src_schema, self.tgt,
                                                                          tgt_schema, self.landing)
        if note:
            log.warning("%s: %s", shape.name, note)

    def _live_rows_only(self, table: str) -> None:
        """A table with soft deletes keeps the rows the source deleted: the target compares the
        rows it holds as existing (core.table_extras), its extra columns never (the shape is the
        source's); a history table, its current versions (VALID_TO NULL). A table with a
        row_filter: the source compares only the rows it keeps."""
        tcfg = self.cfg.table(table)
        if TableExtras.of(tcfg).soft_deletes:
            self.tgt.dialect.only_where_null(DELETED_AT)
        if tcfg.history:   # a version per change: the current ones are the source's rows
            self.tgt.dialect.only_where_null(VALID_TO)
        if tcfg.row_filter:
            self.src.dialect.only_rows(RowFilter(tcfg.row_filter, self.cfg.source.kind).source_sql())

    def run(self, table: str) -> VerifyReport:
        started = time.time()
        report = VerifyReport(table)
        shape = self._shape(table)
        self._dialects(shape)
        self._live_rows_only(table)
        self.shape = shape
        whole = KeyRange()
        (s_count, s_sum), (t_count, t_sum) = self._both(VerifySide.fingerprint, whole)
        report.source_rows, report.target_rows = s_count, t_count
        if (s_count, s_sum) != (t_count, t_sum):
            if not shape.primary_key:
                report.keyless = True
                report.note = ("DIFFERENT (count or checksum), and a table without a primary key cannot be "
                               "narrowed down: run action=full_reload")
            else:
                candidates = self._narrow(whole, s_count, t_count, report)
                self._recheck(candidates, report)
        report.seconds = time.time() - started
        return report

    def _boundaries(self, cutter: VerifySide, rng: KeyRange, parts: int, in_range: int, in_table: int) -> list[tuple]:
        """Cut points inside rng; a block sample of the table when the range is big (exact keys
        are only needed for small ranges, where a sample would miss them)."""
        pct = None
        if in_range > self.s.sample_above_rows and in_table:
            pct = min(100.0, round(100.0 * self.s.sample_rows_target / in_table, 4))
        return cutter.boundaries(rng, parts, pct)

    def _narrow(self, whole: KeyRange, s_count: int, t_count: int, report: VerifyReport) -> list[Candidate]:
        """Depth-first over differing ranges; returns the rows that differed at first look."""
        candidates: list[Candidate] = []
        stack = [(whole, s_count, t_count)]
        while stack:
            rng, sc, tc = stack.pop()
            if len(candidates) >= self.s.max_candidates:
                report.truncated = True
                break
            if max(sc, tc) <= self.s.leaf_rows:
                src_rows, tgt_rows = self._both(VerifySide.rows, rng)
                self._classify(src_rows, tgt_rows, rng, candidates)
                continue
            if max(sc, tc) <= (self.s.fine_leaf * self.s.fine_cuts if self._integer_key() else self.s.fine_rows):
                larger = self._fine(rng, sc, tc, candidates)
                if larger is not None:
                    stack.extend(larger)
                    continue
            parts = min(self.s.fanout, -(-max(sc, tc) // self.s.leaf_rows) + 1)
            cutter = self.src if sc >= tc else self.tgt
            boundaries = self._boundaries(cutter, rng, parts, max(sc, tc),
                                          report.source_rows if sc >= tc else report.target_rows)
            if not boundaries:   # cannot happen with more than leaf_rows distinct keys; never loop on it
                raise TargetError(f"{report.table}: could not cut {rng.describe()} ({max(sc, tc):,} rows) into "
                                  f"smaller ranges", table=report.table)
            subs = rng.split(boundaries)
            s_b, t_b = self._both(VerifySide.buckets, rng, boundaries)
            for i in reversed(range(len(subs))):
                s_fp, t_fp = s_b.get(i, (0, 0)), t_b.get(i, (0, 0))
                if s_fp != t_fp:
                    stack.append((subs[i], s_fp[0], t_fp[0]))
        return candidates

    def _integer_key(self) -> bool:
        key = self.shape.primary_key
        return (len(key) == 1 and self.src.fine_buckets and self.tgt.fine_buckets
                and self.shape.column(key[0]).type in INTEGER_KEY_TYPES)

    @staticmethod
    def _classify(src_rows: dict, tgt_rows: dict, rng: KeyRange, candidates: list[Candidate]) -> None:
        for key in src_rows.keys() | tgt_rows.keys():
            s, t = src_rows.get(key), tgt_rows.get(key)
            kind = classify(s, t)
            if kind:
                candidates.append(Candidate(kind, key, s, t, rng))

    def _fine(self, rng: KeyRange, sc: int, tc: int, candidates: list[Candidate]) -> list | None:
        """A range of one-column keys cut at once into sub-ranges of about fine_leaf rows (never
        more than leaf_rows), fingerprinted in one grouped query per side; the rows of the differing
        sub-ranges are then read in one query per side. Scattered differences (a thousand rows in
        a table) cost a few queries per range instead of a query pair per 2,000-row leaf, and a
        repair re-reads only those small sub-ranges. Returns the differing sub-ranges still holding
        more than leaf_rows rows on a side (narrowed further, as a leaf would be); None when the
        sides cannot (the caller narrows as usual). An integer key is cut by value (no ranking of
        its keys), so a table of millions of rows takes this path whole."""
        if len(self.shape.primary_key) != 1 or not (self.src.fine_buckets and self.tgt.fine_buckets):
            return None
        per_cut = min(self.s.fine_leaf, self.s.leaf_rows)
        ends = ([int(v) for pair in self._both(VerifySide.key_bounds, rng) for v in pair if v is not None]
                if self._integer_key() else [])
        if ends and max(ends) - min(ends) < 2 ** 62:   # (key - lo) cannot overflow a bigint
            boundaries = integer_cuts(min(ends), max(ends), max(sc, tc), per_cut, self.s.fine_cuts)
        else:
            cutter = self.src if sc >= tc else self.tgt
            boundaries = cutter.boundaries(rng, -(-max(sc, tc) // per_cut))
        if not boundaries:
            return None
        s_b, t_b = self._both(VerifySide.buckets, rng, boundaries)
        differing = sorted(i for i in s_b.keys() | t_b.keys() if s_b.get(i, (0, 0)) != t_b.get(i, (0, 0)))
        larger: list = []
        for at in range(0, len(differing), 500):
            chunk = differing[at:at + 500]
            src_rows, tgt_rows = self._both(VerifySide.bucket_rows, rng, boundaries, chunk)
            for i in chunk:
                s_rows, t_rows = src_rows.get(i, {}), tgt_rows.get(i, {})
                if max(len(s_rows), len(t_rows)) > self.s.leaf_rows:
                    larger.append((rng.part(boundaries, i), len(s_rows), len(t_rows)))
                else:
                    self._classify(s_rows, t_rows, rng.part(boundaries, i), candidates)
        return larger

    # ---------------------------------------------------------------- re-check

    def _wait_for_stream(self, table: str) -> tuple[str, bool]:
        """Lets the source's latest changes reach Kafka, then waits until the stream has applied
        everything Kafka holds for the table. Returns a note when it could not wait it out: the
        stream made no progress for stall_s (not running: stalled=True), or was still behind at the
        timeout."""
        st = state.get(self.state, self.cfg.name, table)
        if st is None or st.phase != "streaming" or st.resume_offsets is None or not self.kafka:
            return "", False
        time.sleep(self.s.settle_s)
        _earliest, latest = kafka_offsets.watermarks(self.kafka, self.cfg.topic(table))
        deadline = time.time() + self.s.catch_up_timeout_s
        seen, moved_at = st.resume_offsets, time.time()
        while True:
            st = state.get(self.state, self.cfg.name, table)
            behind = sum(max(0, end - (st.resume_offsets or {}).get(p, 0)) for p, end in latest.items())
            if behind == 0 or st.phase != "streaming":
                return "", False
            if st.resume_offsets != seen:
                seen, moved_at = st.resume_offsets, time.time()
            elif time.time() - moved_at > self.s.stall_s:
                return (f"the stream is {behind:,} event(s) behind and applied nothing for {self.s.stall_s:.0f}s "
                        f"(is the sync DAG running?)"), True
            if time.time() > deadline:
                return f"the stream was still {behind:,} event(s) behind after {self.s.catch_up_timeout_s:.0f}s", False
            time.sleep(0.5)

    def _current(self, keys: list[tuple]) -> tuple[dict, dict]:
        src, tgt = {}, {}
        for i in range(0, len(keys), 1000):
            s, t = self._both(VerifySide.rows, keys[i:i + 1000])
            src.update(s)
            tgt.update(t)
        return src, tgt

    def _recheck(self, candidates: list[Candidate], report: VerifyReport) -> None:
        pending = {c.key: c for c in candidates}
        confirmed: list[Candidate] = []
        for round_ in range(1, self.s.rechecks + 1):
            if not pending:
                break
            note, stalled = self._wait_for_stream(report.table)
            src, tgt = self._current(list(pending))
            still = {}
            for key, c in pending.items():
                s, t = src.get(key), tgt.get(key)
                kind = classify(s, t)
                if kind is None:
                    report.settled += 1
                elif s == c.source_hash and (not note or stalled or round_ == self.s.rechecks):
                    # the source row did not change since the last look and the stream caught up
                    # (or will not: then the report says so)
                    confirmed.append(Candidate(kind, key, s, t, c.range))
                else:
                    still[key] = Candidate(kind, key, s, t, c.range)
            pending = still
            if note:
                report.note = note + ": some differences may be changes it has not applied yet"
        report.unsettled = len(pending)
        ranges = {}
        for c in sorted(confirmed, key=lambda c: c.key):
            report.add(Finding(c.kind, c.key), self.s.sample_rows)
            ranges.setdefault(c.range, None)
        report.ranges = list(ranges)


def verify(cfg: PipelineConfig, source: Conn, target: Conn, tables: list[str], kafka: KafkaAccess | None = None,
           settings: VerifySettings | None = None) -> list[VerifyReport]:
    """Verifies each table and records the outcome, findings and ranges in the run history."""
    settings = settings or VerifySettings()
    engine = engines.able(engines.for_pipeline(cfg, source), engines.VerifiesSource)
    src = engine.verify_side("source")
    store = targets.able(targets.for_pipeline(cfg, target), targets.Verifies)
    tgt = store.verify_side("target")
    state_conn = state.of_pipeline(cfg, state.given(source, target))
    state_conn.autocommit = True
    reports = []
    try:
        state.migrate(state_conn)
        with ThreadPoolExecutor(2, thread_name_prefix="tideline-verify") as pool:
            verifier = TableVerifier(cfg, engine, src, tgt, state_conn, pool, settings, kafka)
            for table in tables:
                if cfg.table(table).mode != "cdc":
                    log.warning("%s.%s is a batch-mode table: it lags the source by design (rows land per "
                                "interval), so it is not verified", cfg.name, table)
                    continue
                st = state.get(state_conn, cfg.name, table)
                if st is not None and st.phase == "refused":   # found following the tutorial: a raw SQL error
                    log.warning("%s.%s is refused, not carried (%s): not verified", cfg.name, table,
                                (st.last_error or "").splitlines()[0][:300] if st.last_error else "see make status")
                    continue
                if not store.table_exists(state_conn, cfg.target_schema(table), cfg.target_table(table)):
                    report = missing_report(cfg, engine, src.conn, table, st)
                    record_verify(state_conn, cfg.name, report)
                    log.error("%s.%s", cfg.name, report.summary())
                    reports.append(report)
                    continue
                try:
                    report = verifier.run(table)
                except (*src.errors, *tgt.errors) as exc:
                    raise SourceError(f"{cfg.name}.{table}: verify failed: {str(exc).strip()}", table=table) from None
                record_verify(state_conn, cfg.name, report)
                (log.info if report.equal else log.error)("%s.%s (%.1fs)", cfg.name, report.summary(),
                                                           report.seconds)
                for line in report.sample_lines():
                    log.error("%s", line)
                reports.append(report)
    finally:
        src.close()
        tgt.close()
        state_conn.close()
    return reports


def verify_and_repair(cfg: PipelineConfig, source: Conn, target: Conn, tables: list[str], kafka: KafkaAccess | None,
                      notify, repair_found: bool = False) -> list[VerifyReport]:
    """Verify; alert on each differing table (notify(event, message)); with repair_found, repair
    exactly what differed and verify those tables again. Returns the final reports."""
    from tideline import alerts
    from tideline.verify.repair import repair_verified
    settings = VerifySettings(sample_rows=cfg.verify.sample_rows)
    reports = verify(cfg, source, target, tables, kafka, settings)
    different = [r for r in reports if not r.equal]
    for r in different:
        notify(alerts.VERIFY_DIFFERENCES, r.summary() + "".join(f"\n{line}" for line in r.sample_lines()[:10]))
    if not (different and repair_found):
        return reports
    repairable = [r for r in different if not r.no_table]   # a table the target lacks needs a full reload
    if not repairable:
        return reports
    for r in repairable:
        repair_verified(cfg, source, target, r.table)
    again = {r.table: r for r in verify(cfg, source, target, [r.table for r in repairable], kafka, settings)}
    for r in again.values():
        (log.info if r.equal else log.error)("after the repair: %s", r.summary())
    return [again.get(r.table, r) for r in reports]
