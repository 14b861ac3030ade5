#!/usr/bin/env python3
"""Benchmark: the full load of the benchmark table in local[2] vs on the local stack's Spark
standalone cluster (a master and two one-core workers), same run, same table, same parallelism.

    .venv/bin/python tests/bench/cluster.py [--rows 2000000]

Both are spark-submit of spark_jobs/full_load.py, Spark start-up included; on the cluster the
library travels as --py-files (as the operator submits it) and executors are separate JVMs and
Python workers under the workers. On one 2-core machine the cluster cannot be faster: the figure
is the overhead a user pays for executors on other hosts (task shipping, executor start-up,
results over the network). The cluster is started for the run if the stack does not run one, and
stopped again. Last line:
RESULT local_rows_per_s=<n> cluster_rows_per_s=<n> ratio=<cluster/local> executors=<n>
"""
from __future__ import annotations

import argparse
import tempfile
from contextlib import closing
from pathlib import Path

from benchlib import ensure_topic, run_bench, pg, run_full_load, stackctl
from full_load import PIPELINE, TABLE, ensure_source, write_pipeline


def loaded_rows() -> int:
    with closing(pg(stackctl.DATABASES["target"])) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM bench.{TABLE}")
        return cur.fetchone()[0]


def executors(app_name: str) -> int:
    """Executors the cluster ran for the newest application of that name (their work dirs)."""
    state = stackctl.spark_master_json()
    apps = sorted((a for a in state.get("completedapps", []) + state.get("activeapps", []) if a["name"] == app_name),
                  key=lambda a: a["starttime"])
    if not apps:
        raise SystemExit(f"the master lists no application {app_name}")
    app = apps[-1]["id"]
    return sum(1 for i in range(1, stackctl.SPARK_WORKERS + 1)
               for _ in (stackctl.VAR / "spark" / f"worker-{i}" / app).glob("*"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--parallelism", type=int, default=4)
    args = ap.parse_args()
    env = stackctl.full_env()
    ensure_source(args.rows)
    ensure_topic(f"bench.public.{TABLE}")
    started_cluster = not stackctl.spark_cluster_healthy()
    if started_cluster:
        print("[bench] starting the standalone cluster (master + 2 one-core workers)", flush=True)
        stackctl.start_spark_cluster()
    try:
        from tideline.packaging import library_zip
        with tempfile.TemporaryDirectory() as tmp:
            write_pipeline(Path(tmp), args.parallelism)
            print(f"[bench] local[2]: full load of {args.rows:,} rows, {args.parallelism} partitions", flush=True)
            local_secs, _ = run_full_load(PIPELINE, Path(tmp), env)
            assert loaded_rows() == args.rows
            print(f"[bench] local[2]: {local_secs:.1f}s", flush=True)
            print(f"[bench] cluster {stackctl.spark_master_url()}: the same load", flush=True)
            cluster_secs, _ = run_full_load(PIPELINE, Path(tmp), env, master=stackctl.spark_master_url(),
                                            submit_args=("--py-files", str(library_zip()),
                                                         "--conf", "spark.executor.memory=1g"))
            assert loaded_rows() == args.rows
            print(f"[bench] cluster: {cluster_secs:.1f}s", flush=True)
        n = executors(f"tideline-full-load-{PIPELINE}")
    finally:
        if started_cluster:
            stackctl.stop_spark_cluster()
    local_rate, cluster_rate = args.rows / local_secs, args.rows / cluster_secs
    print(f"RESULT local_rows_per_s={local_rate:.0f} cluster_rows_per_s={cluster_rate:.0f} "
          f"ratio={cluster_rate / local_rate:.2f} executors={n}")
    return 0


if __name__ == "__main__":
    run_bench(main)
