#!/usr/bin/env python3
"""Benchmark: verify of a clean 2,000,000-row table vs a naive compare, same run.

    .venv/bin/python tests/bench/verify.py [--rows 2000000]

Source: the full-load benchmark's table (2,000,000 rows x 10 columns, created once, reused);
target: an exact copy (COPY pipe). Tideline: tideline.verify.compare (fingerprints computed inside both
databases at once). Baseline, the fair naive compare: each table's rows as `t::text` in key order
through server-side cursors, compared as strings (no Python decoding of values). Last line:
RESULT verify_rows_per_s=<n> naive_rows_per_s=<n> ratio=<verify/naive> peak_rss_mb=<n>
"""
from __future__ import annotations

import argparse
import logging
import os
import time
from contextlib import closing

from benchlib import PeakRss, pg, stackctl
from full_load import TABLE, ensure_source, run_copy_pipe

SCHEMA = "bench_verify"


def naive_compare(rows: int) -> tuple[float, int]:
    """Both tables' `t::text` in key order, 10,000 rows per fetch, merged and compared as strings."""
    started = time.monotonic()
    with closing(pg(stackctl.DATABASES["source"])) as s, closing(pg(stackctl.DATABASES["target"])) as t:
        s.autocommit = t.autocommit = False
        cs, ct = s.cursor(name="naive_s"), t.cursor(name="naive_t")
        cs.itersize = ct.itersize = 10_000
        cs.execute(f"SELECT id, t::text FROM {TABLE} t ORDER BY id")
        ct.execute(f"SELECT id, t::text FROM {SCHEMA}.{TABLE} t ORDER BY id")
        differ, it_t = 0, iter(ct)
        row_t = next(it_t, None)
        for row_s in cs:
            while row_t is not None and row_t[0] < row_s[0]:
                differ, row_t = differ + 1, next(it_t, None)
            if row_t is None or row_t[0] != row_s[0]:
                differ += 1
                continue
            differ += row_s != row_t
            row_t = next(it_t, None)
        while row_t is not None:
            differ, row_t = differ + 1, next(it_t, None)
    return time.monotonic() - started, differ


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    args = ap.parse_args()
    os.environ.update(stackctl.environment())
    logging.basicConfig(level=logging.INFO, format="[bench] %(name)s: %(message)s")
    from tideline.core.config import parse_pipeline
    from tideline.core.connections import get_connection
    from tideline.verify.compare import verify

    ensure_source(args.rows)
    print("[bench] copying the table to the target (the clean copy both compares read) ...", flush=True)
    run_copy_pipe(SCHEMA, keep=True)
    with closing(pg(stackctl.DATABASES["target"])) as conn, conn.cursor() as cur:
        cur.execute(f"VACUUM ANALYZE {SCHEMA}.{TABLE}")
    cfg = parse_pipeline({"name": "bench_verify", "source": {"conn_id": "tideline_source"},
                          "target": {"conn_id": "tideline_target", "schema": SCHEMA},
                          "kafka": {"topic_prefix": "bench.verify"}, "tables": [{"name": TABLE}]}, "bench")
    try:
        peak = PeakRss(os.getpid())
        peak.start()
        started = time.monotonic()
        [report] = verify(cfg, get_connection("tideline_source"), get_connection("tideline_target"), [TABLE])
        verify_s = time.monotonic() - started
        peak.done.set()
        assert report.equal and report.source_rows == args.rows, report.summary()
        print(f"[bench] verify: {verify_s:.2f}s ({report.summary()})", flush=True)
        naive_s, differ = naive_compare(args.rows)
        assert differ == 0, f"the naive compare found {differ} differences in a clean copy"
        print(f"[bench] naive compare: {naive_s:.2f}s", flush=True)
        # not part of the RESULT: how long narrowing down takes when rows do differ
        with closing(pg(stackctl.DATABASES["target"])) as conn, conn.cursor() as cur:
            cur.execute(f"UPDATE {SCHEMA}.{TABLE} SET note = 'tampered' WHERE id % 200000 = 7")
            cur.execute(f"DELETE FROM {SCHEMA}.{TABLE} WHERE id % 400000 = 11")
        started = time.monotonic()
        [report] = verify(cfg, get_connection("tideline_source"), get_connection("tideline_target"), [TABLE])
        print(f"[bench] verify with differences: {time.monotonic() - started:.2f}s ({report.summary()})", flush=True)
        assert report.counts == {"missing": 5, "extra": 0, "different": 10}, report.summary()
    finally:
        with closing(pg(stackctl.DATABASES["target"])) as conn, conn.cursor() as cur:
            cur.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
            cur.execute("DELETE FROM tideline.runs WHERE pipeline = 'bench_verify'")
    v, n = args.rows / verify_s, args.rows / naive_s
    print(f"RESULT verify_rows_per_s={v:.0f} naive_rows_per_s={n:.0f} ratio={v / n:.2f} "
          f"peak_rss_mb={peak.peak / 1024 / 1024:.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
