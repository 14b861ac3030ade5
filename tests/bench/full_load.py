#!/usr/bin/env python3
"""Benchmark: the full load job end to end vs plain COPY pipes of the same table, same run.

    .venv/bin/python tests/bench/full_load.py [--rows 5000000] [--parallelism 4]

Source: 5,000,000 rows x 10 realistic columns (created once, reused). Tideline: spark-submit of
spark_jobs/full_load.py (Spark start-up included), as the sync DAG submits it. Baselines, each
into a table created without its key, the key added after the copy (as Tideline does): one `psql
COPY ... TO STDOUT | psql COPY ... FROM STDIN` pipe, `--parallelism` such pipes side by side (one
per id range), and — because Tideline pipes this table's built-in types in COPY's binary format —
one pipe with `(FORMAT binary)` on both ends, so the share of the gain that is the format alone
is visible; and the peer a user would pick, pgcopydb (Debian's, installed by the bench when
missing): `copy table-data` with `--parallelism` table jobs, then the key. Every result is checked equal to the source (row count and an order-independent
digest of `t::text`) before anything is reported. Last line:
RESULT full_load_rows_per_s=<n> copy_pipe_rows_per_s=<n> ratio=<full_load/copy_pipe> peak_rss_mb=<n>
       parallel_pipe_rows_per_s=<n> parallel_ratio=<full_load/parallel_pipe>
       binary_pipe_rows_per_s=<n> binary_ratio=<full_load/binary_pipe>
       pgcopydb_rows_per_s=<n> pgcopydb_ratio=<full_load/pgcopydb>
       cpu_per_m=<CPU-s per million rows, Tideline's processes and the databases'> pgcopydb_cpu_per_m=<n>
       pgcopydb_cpu_ratio=<pgcopydb's CPU / Tideline's> same_result=yes
(same_result: every result's row count and digest equal the source's; a difference stops the bench)
"""
from __future__ import annotations

import argparse
import subprocess
import tempfile
from contextlib import closing
import time
from pathlib import Path

import yaml

from peers import debian_tool
from benchlib import CpuMeter, checkpoint, db_url, ensure_topic, first_load, run_bench, pg, run_full_load, stackctl

TABLE = "bench_orders"
PIPELINE = "bench"
SCHEMA_SQL = f"""
CREATE TABLE {TABLE} (
    id bigint PRIMARY KEY, customer_id bigint NOT NULL, status text NOT NULL, total numeric(12,2) NOT NULL,
    currency char(3) NOT NULL, placed_at timestamptz NOT NULL, delivery_on date, note text,
    attrs jsonb, external_id uuid NOT NULL)"""
FILL_SQL = """
INSERT INTO bench_orders
SELECT g, (g * 7919) % 100000, (ARRAY['new','paid','shipped','cancelled'])[1 + g % 4],
       round((g % 100000) / 7.0, 2), 'EUR', timestamptz '2024-01-01' + g * interval '13 seconds',
       CASE WHEN g % 5 = 0 THEN NULL ELSE date '2024-01-01' + (g % 400)::int END,
       CASE WHEN g % 3 = 0 THEN NULL ELSE 'Lieferung an Zoë Müller, Straße ' || g END,
       jsonb_build_object('src', 'web', 'n', g % 10, 'tags', jsonb_build_array('a', g % 7)),
       md5(g::text)::uuid
  FROM generate_series(1::bigint, {rows}) g"""



def ensure_source(rows: int) -> None:
    with closing(pg(stackctl.DATABASES["source"])) as conn, conn.cursor() as cur:
        cur.execute("SELECT to_regclass(%s) IS NOT NULL", (TABLE,))
        if cur.fetchone()[0]:
            cur.execute(f"SELECT count(*) FROM {TABLE}")
            if cur.fetchone()[0] == rows:
                return
            cur.execute(f"DROP TABLE {TABLE}")
        print(f"[bench] creating source table {TABLE} with {rows:,} rows ...", flush=True)
        cur.execute(SCHEMA_SQL)
        cur.execute(FILL_SQL.format(rows=rows))
        cur.execute(f"VACUUM ANALYZE {TABLE}")


def table_digest(db: str, qualified: str) -> tuple[int, str]:
    """(rows, order-independent digest of every row's text) of a table."""
    with closing(pg(stackctl.DATABASES[db])) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT count(*), coalesce(sum(hashtextextended(t::text, 0)::numeric), 0)::text FROM {qualified} t")
        return cur.fetchone()


def check_equal(what: str, qualified: str, source: tuple[int, str]) -> None:
    got = table_digest("target", qualified)
    if got != source:
        raise SystemExit(f"[bench] {what} is NOT equal to the source: {got} rows/digest vs {source}")
    print(f"[bench] {what}: {got[0]:,} rows, digest equal to the source", flush=True)


def run_copy_pipe(schema: str = "bench_pipe", keep: bool = False, parts: int = 1, binary: bool = False) -> float:
    """Seconds for `psql COPY TO STDOUT | psql COPY FROM STDIN` of the table into <schema> of the
    target — `parts` pipes side by side, one per id range; COPY's binary format if `binary` — then
    its primary key (the table is created without it, as Tideline's shadow is). Dropped afterwards
    unless keep."""
    with closing(pg(stackctl.DATABASES["target"])) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        cur.execute(f"DROP TABLE IF EXISTS {schema}.{TABLE}")
        cur.execute(SCHEMA_SQL.replace(f"CREATE TABLE {TABLE}", f"CREATE TABLE {schema}.{TABLE}")
                    .replace("id bigint PRIMARY KEY", "id bigint NOT NULL"))
    with closing(pg(stackctl.DATABASES["source"])) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT min(id), max(id) FROM {TABLE}")
        lo, hi = cur.fetchone()
    step = -(-(hi - lo + 1) // parts)
    checkpoint()
    ranges = [f"WHERE id >= {lo + i * step} AND id < {lo + (i + 1) * step}" for i in range(parts)] if parts > 1 else [""]
    src = stackctl.pg_url(stackctl.DATABASES["source"])
    tgt = db_url(stackctl.DATABASES["target"])
    fmt = " (FORMAT binary)" if binary else ""
    started = time.monotonic()
    pipes = [subprocess.Popen(f'psql "{src}" -qc "COPY (SELECT * FROM {TABLE} {where}) TO STDOUT{fmt}" | '
                              f'psql "{tgt}" -qc "COPY {schema}.{TABLE} FROM STDIN{fmt}"', shell=True)
             for where in ranges]
    if any(p.wait() for p in pipes):
        raise SystemExit("[bench] a baseline COPY pipe failed")
    with closing(pg(stackctl.DATABASES["target"])) as conn, conn.cursor() as cur:
        cur.execute("SET maintenance_work_mem = '512MB'")
        cur.execute(f"ALTER TABLE {schema}.{TABLE} ADD PRIMARY KEY (id)")
    secs = time.monotonic() - started
    if not keep:
        check_equal(f"baseline ({parts} {'binary ' if binary else ''}pipe{'s' if parts > 1 else ''})",
                    f"{schema}.{TABLE}",
                    table_digest("source", TABLE))
        with closing(pg(stackctl.DATABASES["target"])) as conn, conn.cursor() as cur:
            cur.execute(f"DROP SCHEMA {schema} CASCADE")
    return secs


def run_pgcopydb(jobs: int) -> float:
    """Seconds for `pgcopydb copy table-data` of the table (into public.<table> of the target,
    created without its key; `jobs` table jobs, the table split into parts above 220 MB) and then
    its primary key, as a user would move one table with pgcopydb. Checked equal, then dropped."""
    from peers import debian_tool
    exe = debian_tool("pgcopydb")
    with closing(pg(stackctl.DATABASES["target"])) as conn, conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS public.{TABLE}")
        cur.execute(SCHEMA_SQL.replace(f"CREATE TABLE {TABLE}", f"CREATE TABLE public.{TABLE}")
                    .replace("id bigint PRIMARY KEY", "id bigint NOT NULL"))
    checkpoint()
    with tempfile.TemporaryDirectory() as work:
        filters = Path(work) / "filters.ini"
        filters.write_text(f"[include-only-table]\npublic.{TABLE}\n")
        started = time.monotonic()
        res = subprocess.run([exe, "copy", "table-data", "--source", stackctl.pg_url(stackctl.DATABASES["source"]),
                              "--target", db_url(stackctl.DATABASES["target"]), "--dir", f"{work}/run",
                              "--table-jobs", str(jobs), "--split-tables-larger-than", "220MB",
                              "--filters", str(filters), "--notice"],
                             capture_output=True, text=True)
        if res.returncode != 0:
            print(res.stdout[-3000:], res.stderr[-3000:])
            raise SystemExit(f"[bench] pgcopydb failed with exit status {res.returncode}")
        with closing(pg(stackctl.DATABASES["target"])) as conn, conn.cursor() as cur:
            cur.execute("SET maintenance_work_mem = '512MB'")
            cur.execute(f"ALTER TABLE public.{TABLE} ADD PRIMARY KEY (id)")
        secs = time.monotonic() - started
    check_equal(f"pgcopydb ({jobs} table jobs)", f"public.{TABLE}", table_digest("source", TABLE))
    with closing(pg(stackctl.DATABASES["target"])) as conn, conn.cursor() as cur:
        cur.execute(f"DROP TABLE public.{TABLE}")
    return secs


def write_pipeline(folder: Path, parallelism: int) -> None:
    """The benchmark pipeline's config (PIPELINE over TABLE into schema bench) in folder."""
    (folder / f"{PIPELINE}.yaml").write_text(yaml.safe_dump({
        "name": PIPELINE, "source": {"conn_id": "tideline_source"},
        "target": {"conn_id": "tideline_target", "schema": "bench"},
        "kafka": {"topic_prefix": "bench"}, "spark": {"parallelism": parallelism},
        "tables": [{"name": TABLE}]}))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--parallelism", type=int, default=4)
    args = ap.parse_args()
    env = stackctl.full_env()
    debian_tool("pgcopydb")   # installed before anything is timed or metered (apt's CPU is not the peer's)
    ensure_source(args.rows)
    ensure_topic(f"bench.public.{TABLE}")
    with tempfile.TemporaryDirectory() as tmp:
        write_pipeline(Path(tmp), args.parallelism)
        first_load(PIPELINE, "bench")
        checkpoint()
        print(f"[bench] full load job of {args.rows:,} rows (spark-submit, local[2], {args.parallelism} partitions)",
              flush=True)
        with CpuMeter("Tideline's load", args.rows) as fl_cpu:
            fl_secs, peak_mb = run_full_load(PIPELINE, Path(tmp), env)
    print(f"[bench] full load: {fl_secs:.1f}s end to end, peak RSS {peak_mb:.0f} MB", flush=True)
    check_equal("Tideline's load", f"bench.{TABLE}", table_digest("source", TABLE))
    print("[bench] baseline: psql COPY TO STDOUT | psql COPY FROM STDIN, then the primary key", flush=True)
    pipe_secs = run_copy_pipe()
    print(f"[bench] copy pipe: {pipe_secs:.1f}s", flush=True)
    print(f"[bench] parallel baseline: {args.parallelism} such pipes side by side (one per id range), then the key",
          flush=True)
    par_secs = run_copy_pipe(parts=args.parallelism)
    print(f"[bench] parallel copy pipes: {par_secs:.1f}s", flush=True)
    print("[bench] binary baseline: one pipe, COPY (FORMAT binary) on both ends, then the key", flush=True)
    bin_secs = run_copy_pipe(binary=True)
    print(f"[bench] binary copy pipe: {bin_secs:.1f}s", flush=True)
    print(f"[bench] peer: pgcopydb copy table-data --table-jobs {args.parallelism} --split-tables-larger-than "
          f"220MB, then the key", flush=True)
    with CpuMeter("pgcopydb", args.rows) as peer_cpu:
        peer_secs = run_pgcopydb(args.parallelism)
    print(f"[bench] pgcopydb: {peer_secs:.1f}s", flush=True)
    fl_rate, pipe_rate, par_rate, bin_rate, peer_rate = (args.rows / s for s in (fl_secs, pipe_secs, par_secs,
                                                                                 bin_secs, peer_secs))
    print(f"RESULT full_load_rows_per_s={fl_rate:.0f} copy_pipe_rows_per_s={pipe_rate:.0f} "
          f"ratio={fl_rate / pipe_rate:.2f} peak_rss_mb={peak_mb:.0f} parallel_pipe_rows_per_s={par_rate:.0f} "
          f"parallel_ratio={fl_rate / par_rate:.2f} binary_pipe_rows_per_s={bin_rate:.0f} "
          f"binary_ratio={fl_rate / bin_rate:.2f} pgcopydb_rows_per_s={peer_rate:.0f} "
          f"pgcopydb_ratio={fl_rate / peer_rate:.2f} cpu_per_m={fl_cpu.total_per_m:.2f} "
          f"pgcopydb_cpu_per_m={peer_cpu.total_per_m:.2f} pgcopydb_cpu_ratio={peer_cpu.total_per_m / fl_cpu.total_per_m:.2f} "
          f"same_result=yes")
    return 0


if __name__ == "__main__":
    run_bench(main)
