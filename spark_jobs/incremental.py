"""Spark entrypoint: the change stream of a pipeline (thin: the work is in tideline.stream.run).

    spark-submit --jars "$TIDELINE_SPARK_JARS" spark_jobs/incremental.py --pipeline demo [--mode available_now]

Modes: continuous (long-running, processing-time trigger) or available_now (apply what Kafka
holds now, then exit). Exit status: 0 stopped cleanly; 2 config/source problem; 3 fenced by a
newer run; 4 the table needs a re-snapshot (Kafka lost offsets, truncate, or an added column
with a rewriting default; the state says which) — the sync DAG reloads it by itself; 6 halted by
a schema change or a bad message (a person must act; the state says what); 1 other.
"""
from __future__ import annotations

import sys

from tideline.entrypoints import job_parser, run_job


def main(argv: list[str] | None = None) -> int:
    ap = job_parser("Tideline change stream")
    ap.add_argument("--mode", choices=["continuous", "available_now"], default="continuous")
    args = ap.parse_args(argv)

    def stream(cfg, spark, tables, _log) -> None:
        from tideline.stream.run import IncrementalRun
        IncrementalRun(cfg, spark, args.mode, tables).run()

    return run_job(args, "incremental", stream)


if __name__ == "__main__":
    sys.exit(main())
