"""Spark entrypoint: one batch-mode interval of a pipeline (thin: the work is in tideline.load.batch).

    spark-submit --jars "$TIDELINE_SPARK_JARS" spark_jobs/batch_sync.py --pipeline demo \
        --start 2026-11-20T00:00:00+00:00 --end 2026-11-21T00:00:00+00:00

Exit status: 0 landed; 2 config/source/target problem; 3 fenced by a newer run; 1 other.
"""
from __future__ import annotations

import logging
import sys
from datetime import datetime

from tideline.entrypoints import job_parser, run_job
from tideline.core.errors import EXIT_CONFIG


def main(argv: list[str] | None = None) -> int:
    ap = job_parser("Tideline batch sync of one data interval")
    ap.add_argument("--start", required=True, type=datetime.fromisoformat, help="data interval start (ISO 8601)")
    ap.add_argument("--end", required=True, type=datetime.fromisoformat, help="data interval end (ISO 8601)")
    args = ap.parse_args(argv)
    if args.end <= args.start:
        logging.getLogger("tideline.batch").error("--end %s is not after --start %s", args.end, args.start)
        return EXIT_CONFIG

    def sync(cfg, spark, tables, log) -> None:
        from tideline.load.batch import BatchSync
        for r in BatchSync(cfg, spark).run(args.start, args.end, tables):
            log.info("DONE %s: %s rows, cursor range [%s, %s), %.1fs", r.table, f"{r.rows:,}", r.lower, r.upper,
                     r.seconds)

    return run_job(args, "batch", sync)


if __name__ == "__main__":
    sys.exit(main())
