#!/usr/bin/env python3
"""Benchmark: the full load of a MariaDB table vs a plain dump pipe of the same table, same run.

    .venv/bin/python tests/bench/full_load_mariadb.py [--rows 1000000]

Source: 1,000,000 rows x 10 columns in the local stack's MariaDB (created once, reused).
Tideline: spark-submit of spark_jobs/full_load.py (Spark start-up included), into the target.
Baseline: `SELECT ... INTO OUTFILE` (tab-separated, MariaDB's \\N and backslash escapes, which
PostgreSQL's COPY text format reads) then `COPY ... FROM` into a table created without its key,
the key added afterwards — as Tideline does. Both results are checked equal (count + digest of
the rows as text) before anything is reported. Last line:
RESULT full_load_rows_per_s=<n> baseline_rows_per_s=<n> ratio=<n> peak_rss_mb=<n>
       pgloader_rows_per_s=<n> pgloader_ratio=<full_load/pgloader> pgloader_same_result=yes|no
       cpu_per_m=<CPU-s per million rows, Tideline's processes and the databases'> pgloader_cpu_per_m=<n>
       pgloader_cpu_ratio=<pgloader's CPU / Tideline's>
The peer a user would pick, pgloader (Debian's 3.6.9, installed by the bench when missing), moves
the same table's data into a table created as Tideline's type rules map it, then the key.
"""
from __future__ import annotations

import argparse
import os
import pwd
import subprocess
import tempfile
import time
from contextlib import closing
from pathlib import Path

import yaml

from peers import debian_tool
from benchlib import CpuMeter, checkpoint, db_url, ensure_topic, first_load, run_bench, pg, run_full_load, stackctl

TABLE = "bench_orders"
PIPELINE = "bench_mariadb"
SCHEMA = f"""CREATE TABLE {TABLE} (
    id bigint unsigned PRIMARY KEY, customer_id int unsigned NOT NULL,
    status enum('new','paid','shipped','cancelled') NOT NULL, total decimal(12,2) NOT NULL,
    currency char(3) NOT NULL, placed_at datetime(6) NOT NULL, delivery_on date, note varchar(200),
    attrs longtext, qty smallint NOT NULL) CHARACTER SET utf8mb4"""
FILL = f"""INSERT INTO {TABLE}
SELECT seq, (seq * 7919) % 100000, ELT(1 + seq % 4, 'new', 'paid', 'shipped', 'cancelled'),
       ROUND((seq % 100000) / 7.0, 2), 'EUR', TIMESTAMPADD(SECOND, seq * 13, '2024-01-01'),
       IF(seq % 5 = 0, NULL, DATE_ADD('2024-01-01', INTERVAL seq % 400 DAY)),
       IF(seq % 3 = 0, NULL, CONCAT('Lieferung an Zoë Müller, Straße ', seq)),
       JSON_OBJECT('src', 'web', 'n', seq % 10), seq % 1000
  FROM seq_1_to_{{rows}}"""
# the same table in the target, as Tideline's type rules map it (engines.mariadb.types)
TARGET_COLUMNS = ("id numeric(20,0) NOT NULL, customer_id bigint NOT NULL, status text NOT NULL, "
                  "total numeric(12,2) NOT NULL, currency character(3) NOT NULL, "
                  "placed_at timestamp(6) without time zone NOT NULL, delivery_on date, "
                  "note character varying(200), attrs text, qty smallint NOT NULL")


def ensure_source(rows: int) -> None:
    conn = stackctl.mariadb_connect(stackctl.MARIADB_DATABASE, autocommit=True)
    with closing(conn), conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                    (stackctl.MARIADB_DATABASE, TABLE))
        if cur.fetchone()[0]:
            cur.execute(f"SELECT COUNT(*) FROM {TABLE}")
            if cur.fetchone()[0] == rows:
                return
            cur.execute(f"DROP TABLE {TABLE}")
        print(f"[bench] creating MariaDB table {TABLE} with {rows:,} rows ...", flush=True)
        cur.execute(SCHEMA)
        cur.execute(FILL.format(rows=rows))


def run_dump_pipe(schema: str) -> float:
    """Seconds for SELECT ... INTO OUTFILE + COPY FROM + ADD PRIMARY KEY into <schema>.bench_orders."""
    out_dir = stackctl.VAR / "mariadb" / "outfile"
    out_dir.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        pw = pwd.getpwnam("mysql")
        os.chown(out_dir, pw.pw_uid, pw.pw_gid)
    dump = out_dir / f"{TABLE}.tsv"
    dump.unlink(missing_ok=True)
    with closing(pg(stackctl.DATABASES["target"])) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        cur.execute(f"DROP TABLE IF EXISTS {schema}.{TABLE}")
        cur.execute(f"CREATE TABLE {schema}.{TABLE} ({TARGET_COLUMNS})")
    started = time.monotonic()
    conn = stackctl.mariadb_connect(stackctl.MARIADB_DATABASE, autocommit=True)
    with closing(conn), conn.cursor() as cur:
        cur.execute(f"SELECT * INTO OUTFILE '{dump}' FIELDS TERMINATED BY '\\t' ESCAPED BY '\\\\' "
                    f"LINES TERMINATED BY '\\n' FROM {TABLE}")
    with closing(pg(stackctl.DATABASES["target"])) as conn, conn.cursor() as cur, open(dump, "rb") as f:
        cur.copy_expert(f"COPY {schema}.{TABLE} FROM STDIN", f, size=1 << 20)
        cur.execute(f"ALTER TABLE {schema}.{TABLE} ADD PRIMARY KEY (id)")
    secs = time.monotonic() - started
    dump.unlink(missing_ok=True)
    return secs


def run_pgloader(schema: str, workers: int) -> float:
    """Seconds for pgloader (Debian's, installed by the bench when missing) moving the table's
    data (`data only`, into <schema>.bench_orders created as Tideline's type rules map it, without
    its key), then the key — as a user would move one MySQL/MariaDB table with pgloader."""
    from peers import debian_tool
    exe = debian_tool("pgloader")
    with closing(pg(stackctl.DATABASES["target"])) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        cur.execute(f"DROP TABLE IF EXISTS {schema}.{TABLE}")
        cur.execute(f"CREATE TABLE {schema}.{TABLE} ({TARGET_COLUMNS})")
    db = stackctl.MARIADB_DATABASE
    with tempfile.TemporaryDirectory() as work:
        command = Path(work) / "bench.load"
        command.write_text(
            f"LOAD DATABASE\n"
            f"  FROM mysql://{stackctl.MARIADB_USER}:{stackctl.MARIADB_PASS}@{stackctl.HOST}:"
            f"{stackctl.PORTS['mariadb']}/{db}\n"
            f"  INTO {db_url(stackctl.DATABASES['target'])}\n"
            f"WITH data only, workers = {workers}, concurrency = 1, prefetch rows = 25000, batch rows = 25000\n"
            f"INCLUDING ONLY TABLE NAMES MATCHING '{TABLE}'\n"
            f"ALTER SCHEMA '{db}' RENAME TO '{schema}';\n")
        started = time.monotonic()
        res = subprocess.run([exe, "--no-ssl-cert-verification", str(command)], capture_output=True, text=True,
                             cwd=work)
        if res.returncode != 0:
            print(res.stdout[-3000:], res.stderr[-3000:])
            raise SystemExit(f"[bench] pgloader failed with exit status {res.returncode}")
        with closing(pg(stackctl.DATABASES["target"])) as conn, conn.cursor() as cur:
            cur.execute(f"ALTER TABLE {schema}.{TABLE} ADD PRIMARY KEY (id)")
        return time.monotonic() - started


def digest(schema: str) -> tuple[int, str]:
    with closing(pg(stackctl.DATABASES["target"])) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT count(*), md5(string_agg(t::text, E'\\n' ORDER BY id)) FROM {schema}.{TABLE} t")
        return cur.fetchone()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--parallelism", type=int, default=4)
    args = ap.parse_args()
    env = stackctl.full_env()
    debian_tool("pgloader")   # installed before anything is timed or metered (apt's CPU is not the peer's)
    ensure_source(args.rows)
    ensure_topic(f"bench_mariadb.{stackctl.MARIADB_DATABASE}.{TABLE}")
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / f"{PIPELINE}.yaml").write_text(yaml.safe_dump({
            "name": PIPELINE, "source": {"kind": "mariadb", "conn_id": "tideline_mariadb_source", "schema": stackctl.MARIADB_DATABASE},
            "target": {"conn_id": "tideline_target", "schema": PIPELINE},
            "kafka": {"topic_prefix": "bench_mariadb"}, "spark": {"parallelism": args.parallelism},
            "tables": [{"name": TABLE}]}))
        first_load(PIPELINE, PIPELINE)
        checkpoint()
        print(f"[bench] full load job of {args.rows:,} MariaDB rows (spark-submit, local[2], "
              f"{args.parallelism} partitions)", flush=True)
        with CpuMeter("Tideline's load", args.rows) as fl_cpu:
            fl_secs, peak_mb = run_full_load(PIPELINE, Path(tmp), env)
    print(f"[bench] full load: {fl_secs:.1f}s end to end, peak RSS {peak_mb:.0f} MB", flush=True)
    print("[bench] baseline: SELECT ... INTO OUTFILE, COPY FROM, ADD PRIMARY KEY", flush=True)
    checkpoint()
    pipe_secs = run_dump_pipe("bench_mariadb_pipe")
    print(f"[bench] dump pipe: {pipe_secs:.1f}s", flush=True)
    print(f"[bench] peer: pgloader (data only, {args.parallelism} workers), then the key", flush=True)
    checkpoint()
    with CpuMeter("pgloader", args.rows) as peer_cpu:
        peer_secs = run_pgloader("bench_mariadb_pgloader", args.parallelism)
    print(f"[bench] pgloader: {peer_secs:.1f}s", flush=True)
    loaded, piped, peer = digest(PIPELINE), digest("bench_mariadb_pipe"), digest("bench_mariadb_pgloader")
    with closing(pg(stackctl.DATABASES["target"])) as conn, conn.cursor() as cur:
        cur.execute("DROP SCHEMA bench_mariadb_pipe CASCADE")
    if loaded != piped or loaded[0] != args.rows:
        print(f"[bench] MISMATCH: full load {loaded}, dump pipe {piped}, source {args.rows:,} rows")
        return 1
    if peer != loaded:   # reported, not fatal: the peer's own value forms are its business
        print(f"[bench] pgloader's rows differ from the source's text: {peer} vs {loaded}; first differences:")
        with closing(pg(stackctl.DATABASES["target"])) as conn, conn.cursor() as cur:
            cur.execute(f"SELECT a::text, b::text FROM {PIPELINE}.{TABLE} a JOIN bench_mariadb_pgloader.{TABLE} b "
                        f"USING (id) WHERE a::text <> b::text ORDER BY id LIMIT 3")
            for row in cur.fetchall():
                print("   ", row)
    fl_rate, pipe_rate, peer_rate = args.rows / fl_secs, args.rows / pipe_secs, args.rows / peer_secs
    print(f"RESULT full_load_rows_per_s={fl_rate:.0f} baseline_rows_per_s={pipe_rate:.0f} "
          f"ratio={fl_rate / pipe_rate:.2f} peak_rss_mb={peak_mb:.0f} pgloader_rows_per_s={peer_rate:.0f} "
          f"pgloader_ratio={fl_rate / peer_rate:.2f} pgloader_same_result={'yes' if peer == loaded else 'no'} "
          f"cpu_per_m={fl_cpu.total_per_m:.2f} pgloader_cpu_per_m={peer_cpu.total_per_m:.2f} "
          f"pgloader_cpu_ratio={peer_cpu.total_per_m / fl_cpu.total_per_m:.2f}")
    return 0


if __name__ == "__main__":
    run_bench(main)
