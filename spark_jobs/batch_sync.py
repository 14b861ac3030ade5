"""Spark entrypoint: one batch-mode interval of a pipeline (thin: the work is in tideline.batch_sync).

    spark-submit --jars "$TIDELINE_SPARK_JARS" spark_jobs/batch_sync.py --pipeline demo \
        --start 2026-11-20T00:00:00+00:00 --end 2026-11-21T00:00:00+00:00

Exit status: 0 landed; 2 config/source/target problem; 3 fenced by a newer run; 1 other.
"""
from __future__ import annotations

import argparse
import logging
import sys
from datetime import datetime

from tideline.core.config import load_pipeline
from tideline.core.errors import TidelineError, exit_code
from tideline.entrypoints import pipelines_dir, setup_logging


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Tideline batch sync of one data interval")
    ap.add_argument("--pipeline", required=True)
    ap.add_argument("--start", required=True, type=datetime.fromisoformat, help="data interval start (ISO 8601)")
    ap.add_argument("--end", required=True, type=datetime.fromisoformat, help="data interval end (ISO 8601)")
    ap.add_argument("--tables", default="")
    ap.add_argument("--pipelines-dir", default=None)
    args = ap.parse_args(argv)
    setup_logging()
    log = logging.getLogger("tideline.batch")
    if args.end <= args.start:
        log.error("--end %s is not after --start %s", args.end, args.start)
        return 2
    try:
        cfg = load_pipeline(pipelines_dir(args.pipelines_dir) / f"{args.pipeline}.yaml")
        from tideline.batch_sync import BatchSync
        from tideline.spark_session import get_session
        spark = get_session(f"tideline-batch-{cfg.name}", conf=dict(cfg.spark.conf))
        for r in BatchSync(cfg, spark).run(args.start, args.end, [t for t in args.tables.split(",") if t] or None):
            log.info("DONE %s: %s rows, cursor range [%s, %s), %.1fs", r.table, f"{r.rows:,}", r.lower, r.upper,
                     r.seconds)
        return 0
    except TidelineError as exc:
        code = exit_code(exc)
        log.error("%s (exit status %d)", exc, code)
        return code


if __name__ == "__main__":
    sys.exit(main())
