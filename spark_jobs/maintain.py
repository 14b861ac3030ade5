"""Spark entrypoint: table maintenance of a pipeline whose target needs it (thin: the work is in
tideline.ops.maintenance) — compaction, snapshot expiry, orphan files.

    spark-submit --jars "$TIDELINE_SPARK_JARS,$TIDELINE_ICEBERG_JARS" spark_jobs/maintain.py --pipeline lake

Exit status: 0 done; 2 config problem (or a target that needs none); 1 other.
"""
from __future__ import annotations

import sys

from tideline.entrypoints import job_parser, run_job


def main(argv: list[str] | None = None) -> int:
    args = job_parser("Tideline table maintenance").parse_args(argv)

    def maintain(cfg, spark, tables, log) -> None:
        from tideline.ops.maintenance import maintain as run
        for table, figures in run(cfg, spark, tables).items():
            log.info("DONE %s: %s", table, figures if figures is not None else "no table yet")

    return run_job(args, "maintenance", maintain)


if __name__ == "__main__":
    sys.exit(main())
