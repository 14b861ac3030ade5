"""`python -m tideline.verify --pipeline NAME [--tables a,b] [--repair]`: verify a pipeline's tables
against the source from a shell, with the stack's connections (and repair what differs)."""
from __future__ import annotations

import logging

from tideline.core.errors import TidelineError
from tideline.verify.compare import verify_and_repair

log = logging.getLogger("tideline.verify")


def main(argv: list[str] | None = None) -> int:
    """`python -m tideline.verify --pipeline NAME [--tables a,b] [--repair]`"""
    import argparse

    from tideline import alerts
    from tideline.core.config import load_pipeline
    from tideline.core.connections import get_connection
    from tideline.entrypoints import pipelines_dir, setup_logging
    ap = argparse.ArgumentParser(description="Verify a pipeline's tables against the source (and repair)")
    ap.add_argument("--pipeline", required=True)
    ap.add_argument("--tables", default="", help="comma-separated (default: every cdc table)")
    ap.add_argument("--repair", action="store_true", help="repair what differs, then verify again")
    ap.add_argument("--pipelines-dir", default=None)
    args = ap.parse_args(argv)
    setup_logging()
    from tideline.commands import for_commands
    for_commands()
    try:
        cfg = load_pipeline(pipelines_dir(args.pipelines_dir) / f"{args.pipeline}.yaml")
        tables = [t for t in args.tables.split(",") if t] or [t.name for t in cfg.tables if t.mode == "cdc"]
        for t in tables:
            cfg.table(t)   # names the pipeline's tables when one is unknown
        reports = verify_and_repair(cfg, get_connection(cfg.source.conn_id), get_connection(cfg.target.conn_id),
                                    tables, get_connection(cfg.kafka.conn_id).kafka_access,
                                    lambda event, message, subject="": alerts.notify(cfg, event, message),
                                    args.repair)
    except TidelineError as exc:
        log.error("%s", exc)
        return 2
    for report in reports:   # the answer on stdout: Airflow's logging, once configured, keeps INFO from a terminal
        print("\n".join([report.summary(), *report.sample_lines()]))
    return 0 if all(r.equal for r in reports) else 1
