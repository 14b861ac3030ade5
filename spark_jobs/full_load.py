"""Spark entrypoint: full load of a pipeline's tables (thin: the work is in tideline.load.full_load).

    spark-submit --jars "$TIDELINE_SPARK_JARS" spark_jobs/full_load.py --pipeline demo [--tables a,b]

Exit status: 0 loaded; 2 config/source/target problem (the message says what to fix);
3 fenced by a newer run; 5 loaded rows did not match the snapshot (nothing swapped in); 1 other.
"""
from __future__ import annotations

import sys

from tideline.entrypoints import job_parser, run_job


def load(cfg, spark, tables, log) -> None:
    from tideline.load.full_load import FullLoad
    for r in FullLoad(cfg, spark).run(tables or [t.name for t in cfg.tables]):
        log.info("DONE %s: %s rows, %d partitions, %.1fs, %s rows/s, epoch %d, resume offsets %s",
                 r.table, f"{r.rows:,}", r.partitions, r.seconds, f"{r.rows_per_s:,.0f}", r.epoch, r.offsets)


def main(argv: list[str] | None = None) -> int:
    from tideline.load.full_load import session_needed
    return run_job(job_parser("Tideline full load").parse_args(argv), "full_load", load, session_needed)


if __name__ == "__main__":
    sys.exit(main())
