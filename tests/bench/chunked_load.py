#!/usr/bin/env python3
"""Benchmark: a big table's chunked full load vs its consistent load and pgcopydb, same run; a
chunked load killed at ~60% and resumed; and the age of the oldest transaction each holds on the
source all along.

    .venv/bin/python tests/bench/chunked_load.py [--rows 20000000] [--parallelism 4] [--chunk-rows 250000]

The source table is full_load.py's (bench_orders, 10 realistic columns; created once at --rows,
reused). Each Tideline load is spark-submit of spark_jobs/full_load.py as the sync DAG submits it
(Spark start-up included), a first load into a fresh schema: `snapshot: consistent` (one exported
snapshot held for the whole read), `snapshot: chunked` (key ranges of --chunk-rows rows, each its
own source transaction), and `chunked` again, kill -9'd (the job's whole process tree) once 60% of
its chunks are recorded and then run again, which resumes at the first chunk not done. The peer:
pgcopydb copy table-data with --parallelism table jobs, then the key. Every result is checked
equal to the source (count and an order-independent digest of `t::text`) before it is reported.
A sampler reads pg_stat_activity on the source every 0.2 s: the oldest open transaction of any
session but Debezium's and its own. Each run's CPU-seconds per million rows are summed over the
tool's processes and the database servers (benchlib.CpuMeter). Last line:
RESULT chunked_rows_per_s=<n> consistent_rows_per_s=<n> chunked_vs_consistent=<ratio>
       pgcopydb_rows_per_s=<n> chunked_vs_pgcopydb=<ratio> resumed_total_vs_uninterrupted=<ratio>
       oldest_xact_chunked_s=<s> oldest_xact_consistent_s=<s> oldest_xact_pgcopydb_s=<s>
       cpu_per_m_chunked=<s> cpu_per_m_consistent=<s> cpu_per_m_pgcopydb=<s>
       cpu_chunked_vs_consistent=<ratio> cpu_chunked_vs_pgcopydb=<ratio> peak_rss_mb=<n> same_result=yes
(a ratio above 1 is Tideline's chunked load ahead, except resumed_total_vs_uninterrupted: the
killed and resumed load's time over an uninterrupted one's, lower is better)
"""
from __future__ import annotations

import argparse
import os
import signal
import tempfile
import threading
import time
from contextlib import closing
from pathlib import Path

import psutil
import psycopg2
import yaml

import full_load as fl
from peers import debian_tool
from benchlib import (CpuMeter, checkpoint, ensure_topic, first_load, pg, run_bench, run_full_load, stackctl,
                      start_full_load)

PIPELINE = "bench_chunked"


class OldestTransaction(threading.Thread):
    """The oldest open transaction's age on the source, sampled until stopped (Debezium's sessions
    and the sampler's own left out)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stopped, self.oldest = threading.Event(), 0.0

    def run(self):
        # as the superuser: pg_stat_activity hides another role's xact_start (the load's role is not
        # the bench's), so a role of its own would see no transaction at all, held or not
        url = stackctl.pg_url(stackctl.DATABASES["source"], stackctl.PG_SUPERUSER, stackctl.PG_SUPERPASS)
        with closing(psycopg2.connect(url)) as conn, conn.cursor() as cur:
            conn.autocommit = True
            while not self.stopped.wait(0.2):
                cur.execute("SELECT coalesce(max(extract(epoch FROM clock_timestamp() - xact_start)), 0) "
                            "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
                            "AND backend_type = 'client backend' AND xact_start IS NOT NULL "
                            "AND application_name NOT LIKE 'Debezium%%'")
                self.oldest = max(self.oldest, float(cur.fetchone()[0]))

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stopped.set()
        self.join(10)
        return False


def write_pipeline(folder: Path, parallelism: int, snapshot: str, chunk_rows: int) -> None:
    (folder / f"{PIPELINE}.yaml").write_text(yaml.safe_dump({
        "name": PIPELINE, "source": {"conn_id": "tideline_source"},
        "target": {"conn_id": "tideline_target", "schema": PIPELINE},
        "kafka": {"topic_prefix": "bench"}, "spark": {"parallelism": parallelism},
        "tables": [{"name": fl.TABLE, "snapshot": snapshot, "chunk_rows": chunk_rows}]}))


def chunks_done() -> tuple[int, int]:
    """(chunks recorded, chunks planned) of the bench table's open chunked load; (0, 0) before one."""
    with closing(pg(stackctl.DATABASES["target"])) as conn, conn.cursor() as cur:
        cur.execute("SELECT to_regclass('tideline.chunked_loads') IS NOT NULL")
        if not cur.fetchone()[0]:
            return 0, 0
        cur.execute("SELECT (SELECT count(*) FROM tideline.load_chunks c WHERE c.load_id = l.load_id), "
                    "jsonb_array_length(l.ranges) FROM tideline.chunked_loads l WHERE l.pipeline = %s AND "
                    "l.ended_at IS NULL", (PIPELINE,))
        row = cur.fetchone()
    return row if row else (0, 0)


def load(tmp: Path, env: dict, rows: int, what: str) -> tuple[float, float, float, CpuMeter]:
    """One first load: (seconds, peak RSS MB, oldest source transaction s, CPU)."""
    first_load(PIPELINE, PIPELINE)
    checkpoint()
    with OldestTransaction() as oldest, CpuMeter(what, rows) as cpu:
        secs, peak = run_full_load(PIPELINE, tmp, env)
    fl.check_equal(what, f"{PIPELINE}.{fl.TABLE}", fl.table_digest("source", fl.TABLE))
    print(f"[bench] {what}: {secs:.1f}s, oldest source transaction {oldest.oldest:.1f}s", flush=True)
    return secs, peak, oldest.oldest, cpu


def killed_and_resumed(tmp: Path, env: dict, at: float = 0.6) -> float:
    """A chunked first load kill -9'd once `at` of its chunks are recorded, then run again: the
    seconds of both runs together."""
    first_load(PIPELINE, PIPELINE)
    checkpoint()
    started = time.monotonic()
    proc = start_full_load(PIPELINE, tmp, env)
    threading.Thread(target=proc.communicate, daemon=True).start()   # its output drained
    while proc.poll() is None:
        done, planned = chunks_done()
        if planned and done >= at * planned:
            break
        time.sleep(0.2)
    if proc.poll() is not None:
        raise SystemExit(f"[bench] the chunked load ended (status {proc.returncode}) before {at:.0%} of its chunks")
    tree = [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    for pid in tree:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(30)
    first = time.monotonic() - started
    print(f"[bench] chunked load kill -9'd after {first:.1f}s at {done} of {planned} chunks; resuming", flush=True)
    secs, _peak = run_full_load(PIPELINE, tmp, env)
    fl.check_equal("chunked load, killed and resumed", f"{PIPELINE}.{fl.TABLE}", fl.table_digest("source", fl.TABLE))
    return first + secs


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=20_000_000)
    ap.add_argument("--parallelism", type=int, default=4)
    ap.add_argument("--chunk-rows", type=int, default=250_000)
    args = ap.parse_args()
    env = stackctl.full_env()
    debian_tool("pgcopydb")   # installed before anything is timed or metered (apt's CPU is not the peer's)
    fl.ensure_source(args.rows)
    ensure_topic(f"bench.public.{fl.TABLE}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        write_pipeline(tmp, args.parallelism, "consistent", args.chunk_rows)
        con_secs, _, con_oldest, con_cpu = load(tmp, env, args.rows, "consistent load")
        write_pipeline(tmp, args.parallelism, "chunked", args.chunk_rows)
        chk_secs, peak, chk_oldest, chk_cpu = load(tmp, env, args.rows, "chunked load")
        resumed_secs = killed_and_resumed(tmp, env)
    first_load(PIPELINE, PIPELINE)
    with OldestTransaction() as oldest, CpuMeter("pgcopydb", args.rows) as peer_cpu:
        peer_secs = fl.run_pgcopydb(args.parallelism)
    print(f"[bench] pgcopydb: {peer_secs:.1f}s, oldest source transaction {oldest.oldest:.1f}s", flush=True)
    chk, con, peer = (args.rows / s for s in (chk_secs, con_secs, peer_secs))
    print(f"RESULT chunked_rows_per_s={chk:.0f} consistent_rows_per_s={con:.0f} chunked_vs_consistent={chk / con:.2f} "
          f"pgcopydb_rows_per_s={peer:.0f} chunked_vs_pgcopydb={chk / peer:.2f} "
          f"resumed_total_vs_uninterrupted={resumed_secs / chk_secs:.2f} oldest_xact_chunked_s={chk_oldest:.1f} "
          f"oldest_xact_consistent_s={con_oldest:.1f} oldest_xact_pgcopydb_s={oldest.oldest:.1f} "
          f"cpu_per_m_chunked={chk_cpu.total_per_m:.2f} cpu_per_m_consistent={con_cpu.total_per_m:.2f} "
          f"cpu_per_m_pgcopydb={peer_cpu.total_per_m:.2f} "
          f"cpu_chunked_vs_consistent={con_cpu.total_per_m / chk_cpu.total_per_m:.2f} "
          f"cpu_chunked_vs_pgcopydb={peer_cpu.total_per_m / chk_cpu.total_per_m:.2f} peak_rss_mb={peak:.0f} "
          f"same_result=yes")
    return 0


if __name__ == "__main__":
    run_bench(main)
