#!/usr/bin/env python3
"""Benchmark: one pipeline loading a database shaped like a real application, 200 tables, vs pgcopydb.

    .venv/bin/python tests/bench/many_tables.py [--scale 1.0] [--peer-jobs 2,4,8] [--tables-at-once 4]

Source schema `bench_many` (created once, reused): 3 tables of 1,000,000 rows, 30 of 50,000, and a
long tail of 167 tables of 100 to 5,000 rows — 200 tables, about 4.9M rows, each the 10 columns of
tests/bench/full_load.py (numbers, text with umlauts, money, time, date, jsonb, uuid, NULLs).
`--scale` multiplies every table's rows.

Tideline: spark-submit of spark_jobs/full_load.py for a pipeline of the 200 tables (Spark start-up
included), as the sync DAG submits it: `spark.tables_at_once` loads side by side in one Spark
application. The peer a user would pick: pgcopydb (Debian's, installed by the bench when missing)
`copy table-data --table-jobs J` of the same 200 tables into tables created without their keys,
then the keys built J at a time — for each J of --peer-jobs, the best counted. Both results are
checked equal to the source, table by table (row count and an order-independent digest of
`t::text`), before anything is reported. Last line:
RESULT tables=200 rows=<n> tideline_s=<s> tideline_rows_per_s=<n> per_table_s=<tideline_s/tables>
       pgcopydb_best_s=<s> pgcopydb_jobs=<J> pgcopydb_rows_per_s=<n> ratio=<pgcopydb_s/tideline_s>
       peak_rss_mb=<n> same_result=yes
"""
from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path

import yaml

from benchlib import checkpoint, db_url, digests, first_load, run_bench, pg, run_full_load, stackctl

SCHEMA, PIPELINE = "bench_many", "bench_many"
COLUMNS = """id bigint PRIMARY KEY, customer_id bigint NOT NULL, status text NOT NULL, total numeric(12,2) NOT NULL,
    currency char(3) NOT NULL, placed_at timestamptz NOT NULL, delivery_on date, note text, attrs jsonb,
    external_id uuid NOT NULL"""
FILL = """
INSERT INTO {table}
SELECT g, (g * 7919) % 100000, (ARRAY['new','paid','shipped','cancelled'])[1 + g % 4],
       round((g % 100000) / 7.0, 2), 'EUR', timestamptz '2024-01-01' + g * interval '13 seconds',
       CASE WHEN g % 5 = 0 THEN NULL ELSE date '2024-01-01' + (g % 400)::int END,
       CASE WHEN g % 3 = 0 THEN NULL ELSE 'Lieferung an Zoë Müller, Straße ' || g END,
       jsonb_build_object('src', 'web', 'n', g % 10, 'tags', jsonb_build_array('a', g % 7)),
       md5({seed} || '-' || g)::uuid
  FROM generate_series(1::bigint, {rows}) g"""


def table_sizes(scale: float) -> dict[str, int]:
    """200 tables: 3 big, 30 middling, a long tail of small ones (sizes fixed, so runs compare)."""
    sizes = {f"big_{i:02d}": 1_000_000 for i in range(3)}
    sizes |= {f"mid_{i:02d}": 50_000 for i in range(30)}
    sizes |= {f"tail_{i:03d}": 100 + (i * 2953) % 4901 for i in range(167)}
    return {t: max(1, int(n * scale)) for t, n in sizes.items()}


def ensure_source(sizes: dict[str, int]) -> None:
    with closing(pg(stackctl.DATABASES["source"])) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        made = 0
        for i, (table, rows) in enumerate(sizes.items()):
            cur.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{SCHEMA}.{table}",))
            if cur.fetchone()[0]:
                cur.execute(f"SELECT count(*) FROM {SCHEMA}.{table}")
                if cur.fetchone()[0] == rows:
                    continue
                cur.execute(f"DROP TABLE {SCHEMA}.{table}")
            if made == 0:
                print(f"[bench] creating the source tables of schema {SCHEMA} ...", flush=True)
            cur.execute(f"CREATE TABLE {SCHEMA}.{table} ({COLUMNS})")
            cur.execute(FILL.format(table=f"{SCHEMA}.{table}", seed=i, rows=rows))
            cur.execute(f"VACUUM ANALYZE {SCHEMA}.{table}")
            made += 1


def ensure_topics(tables: list[str]) -> None:
    """The change topics a full load records its offsets from (one partition each), once."""
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": stackctl.kafka_bootstrap()})
    wanted = [f"bench_many.{SCHEMA}.{t}" for t in tables]
    have = set(admin.list_topics(timeout=15).topics)
    missing = [NewTopic(t, 1, 1) for t in wanted if t not in have]
    for fut in (admin.create_topics(missing).values() if missing else []):
        fut.result(60)


def check_equal(what: str, schema: str, source: dict[str, tuple]) -> None:
    got = digests("target", schema, list(source))
    wrong = [t for t in source if got[t] != source[t]]
    if wrong:
        raise SystemExit(f"[bench] {what}: {len(wrong)} tables differ from the source, e.g. {wrong[:5]}")
    print(f"[bench] {what}: {len(got)} tables, {sum(n for n, _d in got.values()):,} rows, every digest equal",
          flush=True)


def run_pgcopydb(tables: list[str], jobs: int) -> float:
    """Seconds for `pgcopydb copy table-data --table-jobs jobs` of the tables (into tables made
    without their keys) and then the keys, `jobs` at a time — as a user would move the schema's
    data with pgcopydb. Checked equal by the caller."""
    from peers import debian_tool
    exe = debian_tool("pgcopydb")
    with closing(pg(stackctl.DATABASES["target"])) as conn, conn.cursor() as cur:
        cur.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        cur.execute(f"CREATE SCHEMA {SCHEMA}")
        for t in tables:
            cur.execute(f"CREATE TABLE {SCHEMA}.{t} ({COLUMNS.replace('id bigint PRIMARY KEY', 'id bigint NOT NULL')})")
    checkpoint()
    with tempfile.TemporaryDirectory() as work:
        filters = Path(work) / "filters.ini"
        filters.write_text("[include-only-table]\n" + "".join(f"{SCHEMA}.{t}\n" for t in tables))
        started = time.monotonic()
        res = subprocess.run([exe, "copy", "table-data", "--source", stackctl.pg_url(stackctl.DATABASES["source"]),
                              "--target", db_url(stackctl.DATABASES["target"]), "--dir", f"{work}/run",
                              "--table-jobs", str(jobs), "--split-tables-larger-than", "220MB",
                              "--filters", str(filters), "--notice"], capture_output=True, text=True)
        if res.returncode != 0:
            print(res.stdout[-3000:], res.stderr[-3000:])
            raise SystemExit(f"[bench] pgcopydb failed with exit status {res.returncode}")

        def key(table: str) -> None:
            with closing(pg(stackctl.DATABASES["target"])) as conn, conn.cursor() as cur:
                cur.execute("SET maintenance_work_mem = '256MB'")
                cur.execute(f"ALTER TABLE {SCHEMA}.{table} ADD PRIMARY KEY (id)")
        with ThreadPoolExecutor(jobs) as pool:
            list(pool.map(key, tables))
        return time.monotonic() - started


def write_pipeline(folder: Path, tables: list[str], parallelism: int, at_once: int) -> None:
    (folder / f"{PIPELINE}.yaml").write_text(yaml.safe_dump({
        "name": PIPELINE, "source": {"conn_id": "tideline_source", "schema": SCHEMA},
        "target": {"conn_id": "tideline_target", "schema": SCHEMA},
        "kafka": {"topic_prefix": "bench_many"},
        "spark": {"parallelism": parallelism, "tables_at_once": at_once},
        "tables": [{"name": t} for t in tables]}))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--parallelism", type=int, default=4)
    ap.add_argument("--tables-at-once", type=int, default=4)
    ap.add_argument("--peer-jobs", default="2,4,8")
    args = ap.parse_args()
    sizes = table_sizes(args.scale)
    tables, rows = list(sizes), sum(sizes.values())
    ensure_source(sizes)
    ensure_topics(tables)
    source = digests("source", SCHEMA, tables)
    first_load(PIPELINE, SCHEMA)
    with tempfile.TemporaryDirectory() as tmp:
        write_pipeline(Path(tmp), tables, args.parallelism, args.tables_at_once)
        checkpoint()
        print(f"[bench] Tideline: full load of {len(tables)} tables, {rows:,} rows (spark-submit, local[2], "
              f"{args.tables_at_once} tables at once, {args.parallelism} partitions each)", flush=True)
        tl_secs, peak_mb = run_full_load(PIPELINE, Path(tmp), stackctl.full_env())
    print(f"[bench] Tideline: {tl_secs:.1f}s end to end ({tl_secs / len(tables):.2f}s per table), "
          f"peak RSS {peak_mb:.0f} MB", flush=True)
    check_equal("Tideline", SCHEMA, source)
    best = None
    for jobs in (int(j) for j in args.peer_jobs.split(",")):
        print(f"[bench] pgcopydb copy table-data --table-jobs {jobs}, then the keys {jobs} at a time", flush=True)
        secs = run_pgcopydb(tables, jobs)
        print(f"[bench] pgcopydb ({jobs} jobs): {secs:.1f}s", flush=True)
        check_equal(f"pgcopydb ({jobs} jobs)", SCHEMA, source)
        if best is None or secs < best[0]:
            best = (secs, jobs)
    with closing(pg(stackctl.DATABASES["target"])) as conn, conn.cursor() as cur:
        cur.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    print(f"RESULT tables={len(tables)} rows={rows} tideline_s={tl_secs:.1f} tideline_rows_per_s={rows / tl_secs:.0f} "
          f"per_table_s={tl_secs / len(tables):.3f} pgcopydb_best_s={best[0]:.1f} pgcopydb_jobs={best[1]} "
          f"pgcopydb_rows_per_s={rows / best[0]:.0f} ratio={best[0] / tl_secs:.2f} peak_rss_mb={peak_mb:.0f} "
          f"same_result=yes")
    return 0


if __name__ == "__main__":
    run_bench(main)
