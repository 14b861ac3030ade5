"""Spark entrypoint: full load of a pipeline's tables (thin: the work is in tideline.full_load).

    spark-submit --jars "$TIDELINE_SPARK_JARS" spark_jobs/full_load.py --pipeline demo [--tables a,b]

Exit status: 0 loaded; 2 config/source/target problem (the message says what to fix);
3 fenced by a newer run; 5 loaded rows did not match the snapshot (nothing swapped in); 1 other.
"""
from __future__ import annotations

import argparse
import logging
import sys

from tideline.core.config import load_pipeline
from tideline.core.errors import TidelineError, exit_code
from tideline.entrypoints import pipelines_dir, setup_logging


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Tideline full load")
    ap.add_argument("--pipeline", required=True, help="pipeline name (pipelines/<name>.yaml)")
    ap.add_argument("--tables", default="", help="comma-separated tables (default: all of the pipeline's)")
    ap.add_argument("--pipelines-dir", default=None, help="folder of pipeline configs")
    args = ap.parse_args(argv)
    setup_logging()
    log = logging.getLogger("tideline.full_load")
    try:
        cfg = load_pipeline(pipelines_dir(args.pipelines_dir) / f"{args.pipeline}.yaml")
        tables = [t for t in args.tables.split(",") if t] or [t.name for t in cfg.tables]
        from tideline.full_load import FullLoad
        from tideline.spark_session import get_session
        spark = get_session(f"tideline-full-load-{cfg.name}", conf=dict(cfg.spark.conf))
        results = FullLoad(cfg, spark).run(tables)
        for r in results:
            log.info("DONE %s: %s rows, %d partitions, %.1fs, %s rows/s, epoch %d, resume offsets %s",
                     r.table, f"{r.rows:,}", r.partitions, r.seconds, f"{r.rows_per_s:,.0f}", r.epoch, r.offsets)
        return 0
    except TidelineError as exc:
        log.error("%s", exc)
        return exit_code(exc)


if __name__ == "__main__":
    sys.exit(main())
