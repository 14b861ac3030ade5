"""`python -m tideline.status [--pipeline NAME] [--watch SECONDS]`: where every table of every
pipeline stands — phase, epoch, rows, last batch, lag per partition, retention headroom, last error."""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone

import psycopg2
from psycopg2 import sql

from tideline import coverage, engines, state
from tideline.core.config import PipelineConfig, load_pipelines
from tideline.core.connections import get_connection
from tideline.core.errors import TidelineError
from tideline.entrypoints import pipelines_dir


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

    @property
    def lag_total(self) -> int:
        return sum(self.lag.values())


def _count(conn, schema: str, table: str) -> int | None:
    try:
        with conn.cursor() as cur:
            cur.execute(sql.SQL("SELECT count(*) FROM {}.{}").format(sql.Identifier(schema), sql.Identifier(table)))
            return cur.fetchone()[0]
    except psycopg2.Error:
        conn.rollback()
        return None


def _ago(secs: float | None) -> str:
    if secs is None:
        return "-"
    if secs < 120:
        return f"{secs:.0f}s ago"
    return f"{secs / 60:.0f}m ago" if secs < 7200 else f"{secs / 3600:.0f}h ago"


def _last_verify(conn, pipeline: str, table: str) -> str | None:
    with conn.cursor() as cur:
        cur.execute("SELECT now() - ended_at, detail FROM tideline.runs WHERE pipeline = %s AND table_name = %s "
                    "AND kind = 'verify' AND outcome <> 'running' ORDER BY run_id DESC LIMIT 1", (pipeline, table))
        row = cur.fetchone()
    conn.rollback()
    if row is None:
        return None
    detail = row[1].split("; ", 1)[1] if "; " in (row[1] or "") else row[1]
    return f"{_ago(row[0].total_seconds())}: {detail}"


def pipeline_status(cfg: PipelineConfig, environ=None) -> list[TableStatus]:
    target = psycopg2.connect(get_connection(cfg.target.conn_id, environ).postgres_dsn())
    engine = engines.for_source(get_connection(cfg.source.conn_id, environ))
    source = engine.connect(autocommit=True)
    bootstrap = get_connection(cfg.kafka.conn_id, environ).kafka_bootstrap
    out = []
    try:
        state.migrate(target)
        cov = {c.table: c for c in coverage.check(cfg, target, bootstrap, [t.name for t in cfg.tables])}
        for t in cfg.tables:
            st = state.get(target, cfg.name, t.name)
            target.rollback()
            c = cov.get(t.name)  # streaming tables: lag and headroom from one look at Kafka
            lag = c.lag if c else {}
            headroom = ("NOT COVERED: " + "; ".join(g.describe() for g in c.gaps)) if c and c.gaps else \
                (coverage.describe_headroom(c.headroom_s) if c else "-")
            at = st.raw["last_batch_at"] if st else None
            age = (datetime.now(timezone.utc) - at).total_seconds() if at else None
            last = f"#{st.last_batch_id} {_ago(age)}" if st and st.last_batch_id else "-"
            out.append(TableStatus(t.name, st.phase if st else "new", st.epoch if st else None,
                                   _count(target, cfg.target.schema_, t.name),
                                   engine.row_count(source, cfg.source.schema_, t.name),
                                   last, lag, headroom, st.last_error if st else None, age,
                                   _last_verify(target, cfg.name, t.name)))
    finally:
        target.close()
        source.close()
    return out


def render(cfg: PipelineConfig, rows: list[TableStatus]) -> str:
    lines = [f"pipeline {cfg.name}  ({datetime.now().strftime('%H:%M:%S')})",
             f"  {'table':22s} {'phase':17s} {'epoch':>5s} {'target rows':>12s} {'source rows':>12s} "
             f"{'last batch':>14s} {'lag':>7s}  headroom"]
    for r in rows:
        lines.append(f"  {r.table:22s} {r.phase:17s} {str(r.epoch or '-'):>5s} "
                     f"{'-' if r.target_rows is None else f'{r.target_rows:,}':>12s} "
                     f"{'-' if r.source_rows is None else f'{r.source_rows:,}':>12s} {r.last_batch:>14s} "
                     f"{r.lag_total:>7,}  {r.headroom}")
        if len(r.lag) > 1 and r.lag_total:
            lines.append(f"  {'':22s} lag per partition: {dict(sorted(r.lag.items()))}")
        if r.error:
            lines.append(f"  {'':22s} last error: {r.error[:1500 if r.phase == 'halted' else 300]}")
        if r.last_verify:
            lines.append(f"  {'':22s} last verify {r.last_verify[:300]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pipeline", help="one pipeline (default: all)")
    ap.add_argument("--watch", type=float, default=0, help="refresh every N seconds")
    args = ap.parse_args(argv)
    good, bad = load_pipelines(pipelines_dir())
    for path, err in bad.items():
        print(f"{err}\n", file=sys.stderr)
    cfgs = [good[args.pipeline]] if args.pipeline else list(good.values())
    while True:
        for cfg in cfgs:
            try:
                print(render(cfg, pipeline_status(cfg)), flush=True)
            except (TidelineError, psycopg2.Error) as exc:
                print(f"pipeline {cfg.name}: status unavailable: {exc}", flush=True)
        if not args.watch:
            return 1 if bad else 0
        time.sleep(args.watch)


if __name__ == "__main__":
    sys.exit(main())
