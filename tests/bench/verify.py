#!/usr/bin/env python3
"""Benchmark: verify of a 2,000,000-row table against reladiff, side by side in the same run.

    .venv/bin/python tests/bench/verify.py [--rows 2000000]

Source: the full-load benchmark's table (2,000,000 rows x 10 columns, created once, reused);
target: an exact copy (COPY pipe). Tideline: tideline.verify.compare (fingerprints computed inside both
databases at once). Peer: reladiff 0.6.0 (installed by the bench, tests/bench/peers.py), the
maintained fork of data-diff, with its best settings here: `-k id -c '%' -j 2` (every column,
two threads), `--skip-sort-results` (sorting its output crashes on rows holding NULLs).
The clean copy `--repeat` times (default 3), the two tools taking turns, the median of each
counted: a clean verify takes 1.5-3 s, so one slow second of a shared machine moved its ratio by
a third. Then the copy with 1,000 rows updated and 100 deleted in the target, once — both tools
must find exactly the same keys. Also the naive compare (`t::text` of both tables in key order,
as strings) on the clean copy. Last line:
RESULT verify_rows_per_s=<n> reladiff_rows_per_s=<n> ratio=<n> diff_verify_s=<s> diff_reladiff_s=<s>
       diff_ratio=<n> same_keys=true naive_rows_per_s=<n> naive_ratio=<n> peak_rss_mb=<n>
       verify_runs_s=<s/s/s> reladiff_runs_s=<s/s/s>   (the clean copy's runs; the medians count)
"""
from __future__ import annotations

import argparse
import logging
import os
import time
from contextlib import closing

import json
import statistics
import subprocess

from benchlib import PeakRss, db_url, run_bench, pg, stackctl
from full_load import TABLE, ensure_source, run_copy_pipe
from peers import reladiff

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


def run_reladiff(exe: str) -> tuple[float, set[int]]:
    """reladiff across the two databases; (seconds, the keys it reports as differing)."""
    started = time.monotonic()
    out = subprocess.run([exe, stackctl.pg_url(stackctl.DATABASES["source"]), f"public.{TABLE}",
                          db_url(stackctl.DATABASES["target"]), f"{SCHEMA}.{TABLE}",
                          "-k", "id", "-c", "%", "-j", "2", "--skip-sort-results", "--json"],
                         capture_output=True, text=True, check=True)
    keys, decoder, text, at = set(), json.JSONDecoder(strict=False), out.stdout, 0
    while True:   # one JSON array per difference; a value may hold a newline, so not line by line
        at = text.find("[", at)
        if at < 0:
            return time.monotonic() - started, keys
        (_sign, row), at = decoder.raw_decode(text, at)
        keys.add(int(row[0]))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=3, help="clean-copy compares per tool (the median counts)")
    args = ap.parse_args()
    os.environ.update(stackctl.environment())
    logging.basicConfig(level=logging.INFO, format="[bench] %(name)s: %(message)s")
    from tideline.core.config import parse_pipeline
    from tideline.core.connections import get_connection
    from tideline.verify.compare import VerifySettings, verify

    peer = reladiff()
    ensure_source(args.rows)
    print("[bench] copying the table to the target (the clean copy both compares read) ...", flush=True)
    run_copy_pipe(SCHEMA, keep=True)
    with closing(pg(stackctl.DATABASES["target"])) as conn, conn.cursor() as cur:
        cur.execute(f"VACUUM ANALYZE {SCHEMA}.{TABLE}")
    cfg = parse_pipeline({"name": "bench_verify", "source": {"conn_id": "tideline_source"},
                          "target": {"conn_id": "tideline_target", "schema": SCHEMA},
                          "kafka": {"topic_prefix": "bench.verify"}, "tables": [{"name": TABLE}]}, "bench")
    try:
        verify_runs, reladiff_runs, peak_mb = [], [], 0.0
        for _ in range(args.repeat):   # interleaved: a slow minute of a shared machine hits both
            peak = PeakRss(os.getpid())   # this process only while verify runs (reladiff is a child)
            peak.start()
            started = time.monotonic()
            [report] = verify(cfg, get_connection("tideline_source"), get_connection("tideline_target"), [TABLE])
            verify_runs.append(time.monotonic() - started)
            peak.done.set()
            peak_mb = max(peak_mb, peak.peak / 1024 / 1024)
            assert report.equal and report.source_rows == args.rows, report.summary()
            print(f"[bench] verify: {verify_runs[-1]:.2f}s ({report.summary()})", flush=True)
            secs, keys = run_reladiff(peer)
            assert not keys, f"reladiff found {len(keys)} differences in a clean copy"
            reladiff_runs.append(secs)
            print(f"[bench] reladiff: {reladiff_runs[-1]:.2f}s", flush=True)
        verify_s, reladiff_s = statistics.median(verify_runs), statistics.median(reladiff_runs)
        print(f"[bench] clean copy, median of {args.repeat}: verify {verify_s:.2f}s, reladiff {reladiff_s:.2f}s",
              flush=True)
        naive_s, differ = naive_compare(args.rows)
        assert differ == 0, f"the naive compare found {differ} differences in a clean copy"
        print(f"[bench] naive compare: {naive_s:.2f}s", flush=True)
        # 1,000 rows updated and 100 deleted in the target: both must find exactly these keys
        with closing(pg(stackctl.DATABASES["target"])) as conn, conn.cursor() as cur:
            cur.execute(f"UPDATE {SCHEMA}.{TABLE} SET note = 'tampered' WHERE id % 2000 = 7")
            cur.execute(f"DELETE FROM {SCHEMA}.{TABLE} WHERE id % 20000 = 11")
        with closing(pg(stackctl.DATABASES["source"])) as conn, conn.cursor() as cur:
            cur.execute(f"SELECT id FROM public.{TABLE} WHERE id % 2000 = 7 OR id % 20000 = 11")
            tampered = {r[0] for r in cur.fetchall()}
        started = time.monotonic()
        [report] = verify(cfg, get_connection("tideline_source"), get_connection("tideline_target"), [TABLE],
                          settings=VerifySettings(sample_rows=10_000))
        diff_verify_s = time.monotonic() - started
        print(f"[bench] verify with differences: {diff_verify_s:.2f}s ({report.summary()})", flush=True)
        found = {int(f.key[0]) for f in report.samples}
        deleted = sum(1 for k in tampered if k % 20000 == 11)
        assert report.counts == {"missing": deleted, "extra": 0, "different": len(tampered) - deleted}, \
            report.summary()
        diff_reladiff_s, peer_keys = run_reladiff(peer)
        print(f"[bench] reladiff with differences: {diff_reladiff_s:.2f}s ({len(peer_keys)} keys)", flush=True)
        same = found == peer_keys == tampered
        assert same, (f"the tools disagree: Tideline {len(found)} keys, reladiff {len(peer_keys)}, tampered "
                      f"{len(tampered)}; only Tideline: {sorted(found - peer_keys)[:5]}, only reladiff: "
                      f"{sorted(peer_keys - found)[:5]}")
    finally:
        with closing(pg(stackctl.DATABASES["target"])) as conn, conn.cursor() as cur:
            cur.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
            cur.execute("DELETE FROM tideline.runs WHERE pipeline = 'bench_verify'")
    v, r, n = args.rows / verify_s, args.rows / reladiff_s, args.rows / naive_s
    print(f"RESULT verify_rows_per_s={v:.0f} reladiff_rows_per_s={r:.0f} ratio={v / r:.2f} "
          f"diff_verify_s={diff_verify_s:.2f} diff_reladiff_s={diff_reladiff_s:.2f} "
          f"diff_ratio={diff_reladiff_s / diff_verify_s:.2f} same_keys={str(same).lower()} "
          f"naive_rows_per_s={n:.0f} naive_ratio={v / n:.2f} peak_rss_mb={peak_mb:.0f} "
          f"verify_runs_s={'/'.join(f'{x:.2f}' for x in verify_runs)} "
          f"reladiff_runs_s={'/'.join(f'{x:.2f}' for x in reladiff_runs)}")
    return 0


if __name__ == "__main__":
    run_bench(main)
