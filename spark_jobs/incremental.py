"""Spark entrypoint: the change stream of a pipeline (thin: the work is in tideline.incremental).

    spark-submit --jars "$TIDELINE_SPARK_JARS" spark_jobs/incremental.py --pipeline demo [--mode available_now]

Modes: continuous (long-running, processing-time trigger) or available_now (apply what Kafka
holds now, then exit). Exit status: 0 stopped cleanly; 2 config/source problem; 3 fenced by a
newer run; 4 the table needs a re-snapshot (Kafka lost offsets, truncate, or an added column
with a rewriting default; the state says which) — the sync DAG reloads it by itself; 6 halted by
a schema change or a bad message (a person must act; the state says what); 1 other.
"""
from __future__ import annotations

import argparse
import logging
import sys

from tideline.core.config import load_pipeline
from tideline.core.errors import TidelineError, exit_code
from tideline.entrypoints import pipelines_dir, setup_logging


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Tideline change stream")
    ap.add_argument("--pipeline", required=True)
    ap.add_argument("--mode", choices=["continuous", "available_now"], default="continuous")
    ap.add_argument("--tables", default="", help="comma-separated tables (default: every cdc table)")
    ap.add_argument("--pipelines-dir", default=None)
    args = ap.parse_args(argv)
    setup_logging()
    log = logging.getLogger("tideline.incremental")
    try:
        cfg = load_pipeline(pipelines_dir(args.pipelines_dir) / f"{args.pipeline}.yaml")
        from tideline.incremental import IncrementalRun
        from tideline.spark_session import get_session
        spark = get_session(f"tideline-incremental-{cfg.name}", conf=dict(cfg.spark.conf))
        IncrementalRun(cfg, spark, args.mode, [t for t in args.tables.split(",") if t] or None).run()
        return 0
    except TidelineError as exc:
        code = exit_code(exc)
        log.error("%s (exit status %d)", exc, code)
        return code


if __name__ == "__main__":
    sys.exit(main())
