"""`python -m tideline.ops.status [--pipeline NAME] [--watch SECONDS]`: where every table of every
pipeline stands — phase, epoch, rows, last batch, lag per partition, retention headroom, last error."""
from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from tideline import engines, state, targets

from tideline.ops import in_target
from tideline.state import ledger
from tideline.capture import coverage
from tideline.core import capture_hold
from tideline.core.config import PipelineConfig, load_pipelines
from tideline.core.connections import get_connection
from tideline.core.errors import TidelineError, TransientError
from tideline.core.load_progress import LoadProgress
from tideline.core.phases import holds_load
from tideline.core.readable import ago, duration
from tideline.entrypoints import pipelines_dir

log = logging.getLogger("tideline.status")


@dataclass
class TableStatus:
    table: str
    phase: str
    epoch: int | None
    target_rows: int | None
    source_rows: int | None
    last_batch: str
    lag: dict[int, int]
    headroom: str
    error: str | None
    last_batch_age_s: float | None = None
    last_verify: str | None = None   # "3h ago: equal" / "12m ago: <what differed>"
    # the same figures as numbers, for the view and the metrics
    headroom_s: float | None = None  # None: nothing pending (or not streaming)
    covered: bool = True             # False: Kafka no longer holds an offset the stream needs
    lag_s: float | None = None       # 0 when nothing waits; else seconds since the newest applied source change
    last_batch_s: float | None = None
    events_applied: int = 0
    error_at: datetime | None = None
    error_event: dict | None = None
    verify_outcome: str | None = None
    verify_counts: dict | None = None
    rows_estimated: bool = False     # target_rows from statistics, not counted
    load_rows: int | None = None     # a load running now: rows stored so far...
    load_rows_per_s: float | None = None   # ...and its mean rate since it started copying
    load_expected: int | None = None       # ...what it expects to store (count or estimate)
    load_chunks: int | None = None         # a chunked load not finished: its chunks, and those done
    load_chunks_done: int | None = None
    capture_error: str | None = None  # the pipeline's connector failed: this table receives no change
    target_facts: dict | None = None  # the target's own (an Iceberg table's snapshot and files)
    last_maintenance: str | None = None   # "5h ago: data files 480 -> 2, ..." (targets that need it)
    stream_ended: str | None = None   # a streaming table no stream holds now: how the last one ended
    batch_line: str | None = None     # a batch-mode table: its schedule, last run and next run
    # the pipeline's, on each of its cdc tables (as capture_error)
    stream_waiting: str | None = None    # "waiting for <what> since <when> (try n)" (core.keep_alive)
    stream_waiting_s: float | None = None
    stream_tries: int | None = None
    source_error: str | None = None      # the source did not answer (its figures are missing)
    kafka_error: str | None = None       # Kafka did not answer (lag and headroom are missing)
    source_hold: str | None = None       # what capture holds on the source, in a line (core.capture_hold)
    source_hold_alerts: list[str] | None = None   # how it harms the source (the watch DAG's alerts)
    source_retained_bytes: int | None = None
    source_unread_s: float | None = None   # None: read (or no slot); seconds nobody has read the slot
    source_expires_in_s: float | None = None   # MariaDB: at most this long until binlog expiry purges the position
    source_oldest_xact_s: float | None = None   # while a load runs: the source role's oldest open transaction
    auto_reloads: int = 0                # times the table was found needing a reload (the DAG reloads it)
    target_missing: bool = False         # its state says it holds a load, and the target lacks the table (error says)
    holds_load: bool = False             # a committed load a stream goes on from (core.phases): Resume streams it

    @property
    def load_progress(self) -> LoadProgress | None:
        """The running load's progress (rows of its end, pace, ETA), None when none runs."""
        if self.load_rows is None:
            return None
        return LoadProgress(self.load_rows, self.load_expected, self.load_rows_per_s, self.load_chunks_done,
                            self.load_chunks, estimated=bool(self.load_chunks))
    last_reload: str | None = None       # "2h ago: <cause>"

    @property
    def lag_total(self) -> int:
        return sum(self.lag.values())


def _figures(conn, pipeline: str, table: str) -> dict:
    return ledger.table_figures(conn, pipeline, table)


def _verify_line(f: dict) -> str | None:
    if f.get("verify_outcome") is None:
        return None
    detail = f["verify_detail"] or ""
    return f"{ago(f['verify_age_s'])}: {detail.split('; ', 1)[1] if '; ' in detail else detail}"


def pipeline_status(cfg: PipelineConfig, environ=None, connection=None, connect_timeout: int | None = None,
                    exact_counts: bool = True) -> list[TableStatus]:
    """Every table of the pipeline. `connection` resolves a connection id (default: the
    AIRFLOW_CONN_* variables of `environ`; the Airflow view passes Airflow's own lookup). Without
    `exact_counts` (the view, the metrics) target rows come from statistics and source rows are not
    counted: a count(*) of both sides on every refresh would scan big tables all day."""
    resolve = connection or (lambda conn_id: get_connection(conn_id, environ))
    target_conn = resolve(cfg.target.conn_id)
    store = targets.for_pipeline(cfg, target_conn)
    target = state.of_pipeline(cfg, resolve, connect_timeout)
    source, source_error = None, None
    try:
        engine = engines.for_pipeline(cfg, resolve(cfg.source.conn_id))
        try:   # a source that is away leaves its figures out: the rest (and why) still shows
            source = engine.connect(autocommit=True, connect_timeout=connect_timeout)
        except engine.errors as exc:
            source_error = f"the source ({cfg.source.conn_id}) does not answer: {_first_line(exc)}"
    except BaseException:
        target.close()
        raise
    kafka = resolve(cfg.kafka.conn_id).kafka_access
    out = []
    try:
        state.migrate(target)
        try:   # Kafka away (an outage the stream waits out): its figures left out, the rest still shows
            cov = {c.table: c for c in coverage.check(cfg, target, kafka, [t.name for t in cfg.tables],
                                                               strict=False)}
            kafka_error = None
        except TransientError as exc:
            target.rollback()
            cov, kafka_error = {}, f"Kafka ({cfg.kafka.conn_id}) does not answer: {_first_line(exc)}"
        streams = state.latest_streams(target, cfg.name)
        wait = state.stream_wait(target, cfg.name)
        for t in cfg.tables:
            st = state.get(target, cfg.name, t.name)
            target.rollback()
            f = _figures(target, cfg.name, t.name)
            c = cov.get(t.name)  # streaming tables: lag and headroom from one look at Kafka
            lag = c.lag if c else {}
            headroom = ("NOT COVERED: " + "; ".join(g.describe() for g in c.gaps)) if c and c.gaps else \
                (coverage.describe_headroom(c.headroom_s) if c else "unknown (Kafka away)" if kafka_error else "-")
            now = datetime.now(timezone.utc)
            at = st.raw["last_batch_at"] if st else None
            age = (now - at).total_seconds() if at else None
            last = f"#{st.last_batch_id} {ago(age)}" if st and st.last_batch_id else "-"
            lag_s = None
            if c is not None:
                applied = f.get("source_ts_max")
                lag_s = 0.0 if not sum(lag.values()) else ((now - applied).total_seconds() if applied else None)
            if t.mode == "batch":   # a batch table's last is its last batch run, not a stream batch
                last = f"run #{f['batch_run_id']} {ago(f['batch_run_age_s'])}" if f.get("batch_run_id") else "none yet"
            out.append(TableStatus(
                t.name, st.phase if st else "batch" if t.mode == "batch" else "new", st.epoch if st else None,
                store.row_count(target, cfg.target_schema(t.name), cfg.target_table(t.name), exact_counts),
                engine.row_count(source, cfg.source_schema(t.name), t.name) if exact_counts and source else None,
                last, lag, headroom, st.last_error if st else None, age, _verify_line(f),
                headroom_s=c.headroom_s if c else None, covered=not (c and c.gaps), lag_s=lag_s,
                last_batch_s=f.get("last_batch_s"), events_applied=f.get("events_applied") or 0,
                error_at=f.get("last_error_at"), error_event=f.get("last_error_event"),
                verify_outcome=f.get("verify_outcome"), verify_counts=f.get("verify_counts"),
                rows_estimated=not exact_counts, load_rows=f.get("load_rows"),
                load_rows_per_s=float(f["load_rows_per_s"]) if f.get("load_rows_per_s") is not None else None,
                load_expected=f.get("load_expected"), load_chunks=f.get("load_chunks"),
                load_chunks_done=f.get("load_chunks_done"),
                target_facts=store.table_facts(cfg.target_schema(t.name), cfg.target_table(t.name)),
                last_maintenance=(f"{ago(f['maintain_age_s'])}: {f['maintain_outcome']}, {f['maintain_detail']}"
                                  if f.get("maintain_outcome") else None),
                stream_ended=_stream_ended(cfg, st.phase if st else "new", streams.get(t.name), wait is not None),
                batch_line=_batch_line(cfg, f, now) if t.mode == "batch" else None,
                auto_reloads=st.raw.get("auto_reloads") or 0 if st else 0,
                last_reload=_reload_line(st, now) if st else None))
            out[-1].holds_load = st is not None and holds_load(st.phase, st.raw.get("phase_before"))
            _check_in_target(cfg, store, target, st, out[-1])
        capture = None if source_error else _capture_error(cfg, resolve, out)   # (it asks the source)
        hold = _source_hold(cfg, engine, source, target, resolve) if source is not None else None
        oldest = engine.oldest_transaction_s(source) if source is not None and any(
            r.load_rows is not None for r in out) else None
        for row in out:
            row.source_error, row.kafka_error = source_error, kafka_error
            if row.load_rows is not None:
                row.source_oldest_xact_s = oldest
            if cfg.table(row.table).mode == "cdc" and row.phase == "streaming":
                row.capture_error = capture
            if cfg.table(row.table).mode == "cdc" and hold is not None:
                found, now = hold
                row.source_hold, row.source_retained_bytes = found.line(now), found.retained_bytes
                row.source_unread_s, row.source_expires_in_s = found.inactive_for_s(now), found.expires_in_s
                row.source_hold_alerts = [m for _, m in capture_hold.judge(cfg.name, found, now,
                                                                           cfg.alerts.max_retained_wal_mb,
                                                                           cfg.alerts.slot_inactive_minutes)]
            if cfg.table(row.table).mode == "cdc" and wait is not None:
                row.stream_waiting, row.stream_waiting_s, row.stream_tries = wait.describe(), wait.waiting_s, wait.tries
    finally:
        target.close()
        if source is not None:
            source.close()
    return out


def _source_hold(cfg: PipelineConfig, engine, source, target, resolve):
    """(what capture holds on the source, when looked) — None without capture, or when it cannot
    be looked at (Connect away, for a source whose position Connect keeps): said in the log."""
    from tideline.capture import hold
    if not any(t.mode == "cdc" for t in cfg.tables):
        return None
    try:
        return hold.look(cfg, engine, source, target, resolve(cfg.connect.conn_id)), datetime.now(timezone.utc)
    except (TidelineError, *engine.errors, *state.ERRORS, OSError) as exc:
        target.rollback()
        log.warning("%s: what capture holds on the source was not looked at: %s", cfg.name, _first_line(exc))
        return None


def _check_in_target(cfg: PipelineConfig, store, conn, st: state.TableState | None, row: TableStatus) -> None:
    """ops.in_target's check, asked only where no rows were counted (a table with rows exists)."""
    missing = None if row.target_rows else in_target.not_in_target(cfg, store, conn, st)
    if missing:
        row.target_missing = True
        row.error = missing + (f" Before: {row.error}" if row.error else "")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _reload_line(st: state.TableState, now: datetime) -> str | None:
    at, cause = st.raw.get("last_reload_at"), st.raw.get("last_reload_cause")
    if at is None:
        return None
    return f"{ago((now - at).total_seconds())}: {(cause or 'no cause recorded')[:300]}"


def _batch_line(cfg: PipelineConfig, f: dict, now: datetime) -> str:
    """A batch-mode table's schedule, its last run and when the next comes (its DAG runs each
    interval when the interval closes)."""
    from tideline.core.settings import next_run
    nxt = next_run(cfg.batch_schedule, now)
    last = (f"last run {ago(f['batch_run_age_s'])}: {f['batch_run_outcome']}"
            + (f", {f['batch_run_rows']:,} rows" if f.get("batch_run_rows") is not None else "")
            if f.get("batch_run_id") else "no batch has run yet")
    then = (f"next at {nxt:%Y-%m-%d %H:%M} UTC (in {duration((nxt - now).total_seconds())})" if nxt else "no next run")
    return f"batch_{cfg.name} on {cfg.batch_schedule}: {last}; {then} — or trigger batch_{cfg.name} to run one now"


def _stream_ended(cfg: PipelineConfig, phase: str, run: state.StreamRun | None, waiting: bool = False) -> str | None:
    """For a table in phase streaming that no stream holds now (an available_now run ended, or
    the stream stopped): how its last stream ended — its phase alone would read as if one ran.
    While its task waits to submit it again (`waiting`), nobody needs to trigger anything."""
    if phase != "streaming" or run is None or run.holds:
        return None
    then = ("its task submits it again by itself (see STREAM above)" if waiting else
            f"trigger sync_{cfg.name} to stream on")
    return (f"no stream is running: the last ({run.mode}) ended {ago(run.ended_s)}, {run.outcome} — "
            f"{run.detail[:200]}; {then}")


def _capture_error(cfg: PipelineConfig, resolve, rows: list[TableStatus]) -> str | None:
    """What is wrong with the pipeline's capture while any of its tables streams (before the
    first load the connector may not exist yet), or None."""
    from tideline.capture.connector import capture_failure
    if not any(r.phase == "streaming" for r in rows):
        return None
    try:
        return capture_failure(cfg, resolve(cfg.connect.conn_id))
    except TidelineError as exc:
        return str(exc)


def not_caught_up(cfg: PipelineConfig, rows: list[TableStatus], max_lag: int = 100,
                  stale_after_s: float = 30) -> list[str]:
    """Why the target has not caught up with the source, per cdc table (empty: it has): streaming,
    fewer than `max_lag` events behind, and a batch within `stale_after_s` whenever events wait —
    a table nobody writes to is caught up once nothing waits — with capture running (a failed
    connector makes every table look quiet)."""
    capture_error = next((r.capture_error for r in rows if r.capture_error), None)
    if capture_error:
        return [f"capture: {capture_error}"]
    out = []
    for r in rows:
        if cfg.table(r.table).mode != "cdc":   # batch tables land on their schedule
            continue
        if r.phase != "streaming" or r.target_missing:   # streaming onto no table is not caught up
            out.append(f"{r.table}: {r.phase}" + (f" ({r.error[:200]})" if r.error else ""))
        elif r.lag_total >= max_lag:
            out.append(f"{r.table}: {r.lag_total:,} events behind")
        elif r.lag_total and (r.last_batch_age_s is None or r.last_batch_age_s > stale_after_s):
            out.append(f"{r.table}: {r.lag_total:,} events wait and no batch for "
                       f"{'ever' if r.last_batch_age_s is None else f'{r.last_batch_age_s:.0f}s'}")
    return out


def render(cfg: PipelineConfig, rows: list[TableStatus]) -> str:
    capture = next((r.capture_error for r in rows if r.capture_error), None)
    waiting = next((r.stream_waiting for r in rows if r.stream_waiting), None)
    source_error = next((r.source_error for r in rows if r.source_error), None)
    kafka_error = next((r.kafka_error for r in rows if r.kafka_error), None)
    lines = [f"pipeline {cfg.name}  ({datetime.now().strftime('%H:%M:%S')})"
             + (f"\n  CAPTURE FAILED — no table receives changes: {capture}" if capture else "")
             + (f"\n  STREAM {waiting}" if waiting else "")
             + (f"\n  SOURCE: {source_error}" if source_error else "")
             + (f"\n  KAFKA: {kafka_error}" if kafka_error else "")
             + "".join(f"\n  source {line}" for line in sorted({r.source_hold for r in rows if r.source_hold}))
             + "".join(f"\n  ALERT {m}" for m in next((r.source_hold_alerts for r in rows if r.source_hold_alerts),
                                                        [])),
             f"  {'table':22s} {'phase':17s} {'epoch':>5s} {'target rows':>12s} {'source rows':>12s} "
             f"{'last batch':>14s} {'lag':>7s}  headroom"]
    for r in rows:
        lines.append(f"  {r.table:22s} {r.phase:17s} {str(r.epoch or '-'):>5s} "
                     f"{'-' if r.target_rows is None else f'{r.target_rows:,}':>12s} "
                     f"{'-' if r.source_rows is None else f'{r.source_rows:,}':>12s} {r.last_batch:>14s} "
                     f"{'?' if r.kafka_error else f'{r.lag_total:,}':>7s}  {r.headroom}")
        if len(r.lag) > 1 and r.lag_total:
            lines.append(f"  {'':22s} lag per partition: {dict(sorted(r.lag.items()))}")
        if r.target_facts and r.target_facts.get("line"):   # the target's own words (Target.table_facts)
            lines.append(f"  {'':22s} {r.target_facts['line']}")
        for line in (r.stream_ended, r.batch_line):
            if line:
                lines.append(f"  {'':22s} {line}")
        if r.last_maintenance:
            lines.append(f"  {'':22s} last maintenance {r.last_maintenance[:300]}")
        if r.error:
            lines.append(f"  {'':22s} last error: {r.error[:1500 if r.phase == 'halted' or r.target_missing else 300]}")
        if r.last_verify:
            lines.append(f"  {'':22s} last verify {r.last_verify[:300]}")
        if r.load_rows is not None:
            lines.append(f"  {'':22s} loading: {r.load_progress.line()}"
                         + (f"; the oldest transaction it holds on the source is {duration(r.source_oldest_xact_s)} old"
                            if r.source_oldest_xact_s is not None else ""))
        elif r.load_chunks:
            lines.append(f"  {'':22s} chunked load cut off at chunk {r.load_chunks_done}/{r.load_chunks}: the "
                         f"next full load resumes it")
        if r.auto_reloads:
            lines.append(f"  {'':22s} reloaded by itself {r.auto_reloads}× (last {r.last_reload})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pipeline", help="one pipeline (default: all)")
    ap.add_argument("--watch", type=float, default=0, help="refresh every N seconds")
    args = ap.parse_args(argv)
    from tideline.commands import for_commands
    for_commands()
    good, bad = load_pipelines(pipelines_dir())
    for path, err in bad.items():
        print(f"{err}\n", file=sys.stderr)
    cfgs = [good[args.pipeline]] if args.pipeline else list(good.values())
    while True:
        for cfg in cfgs:
            try:
                print(render(cfg, pipeline_status(cfg)), flush=True)
            except (TidelineError, *state.ERRORS) as exc:
                print(f"pipeline {cfg.name}: status unavailable: {exc}", flush=True)
        if not args.pipeline:
            from tideline.ops.lifecycle import orphan_lines
            for line in orphan_lines(pipelines_dir()):
                print(line, flush=True)
        if not args.watch:
            return 1 if bad else 0
        time.sleep(args.watch)


if __name__ == "__main__":
    sys.exit(main())
