"""What every Spark entrypoint shares: its common arguments, logging a person can read, where
pipelines live, and one mapping from Tideline's errors to the documented exit statuses."""
from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Callable


def setup_logging() -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("py4j").setLevel(logging.WARNING)


def pipelines_dir(explicit: str | None = None) -> Path:
    if explicit:
        return Path(explicit)
    if os.environ.get("TIDELINE_PIPELINES"):
        return Path(os.environ["TIDELINE_PIPELINES"])
    checkout = Path(__file__).resolve().parents[2] / "pipelines"
    if checkout.is_dir():
        return checkout
    # installed from the wheel, with no TIDELINE_PIPELINES: beside Airflow's own folders
    return Path(os.environ.get("AIRFLOW_HOME", Path.home() / "airflow")) / "pipelines"


def job_parser(description: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--pipeline", required=True, help="pipeline name (pipelines/<name>.yaml)")
    ap.add_argument("--tables", default="", help="comma-separated tables (default: the pipeline's own)")
    ap.add_argument("--pipelines-dir", default=None, help="folder of pipeline configs")
    return ap


def run_job(args: argparse.Namespace, kind: str, body: Callable,
            session_needed: Callable | None = None) -> int:
    """Loads the pipeline, starts Spark, runs body(cfg, spark, tables or None, log); returns the
    exit status (0, or the one exit_code() gives the TidelineError that stopped it).
    `session_needed(cfg)` False: the session is started only if the body uses it."""
    from tideline.core.config import load_pipeline
    from tideline.core.errors import TidelineError, exit_code
    setup_logging()
    log = logging.getLogger(f"tideline.{kind}")
    try:
        cfg = load_pipeline(pipelines_dir(args.pipelines_dir) / f"{args.pipeline}.yaml")
        from tideline import targets
        from tideline.spark_session import SessionStarting
        spark = SessionStarting(f"tideline-{kind.replace('_', '-')}-{cfg.name}", conf=dict(cfg.spark.conf),
                                start=session_needed is None or session_needed(cfg),
                                extra_jars=targets.spec(cfg.target.kind).spark_jars())
        body(cfg, spark, [t for t in args.tables.split(",") if t] or None, log)
        return 0
    except TidelineError as exc:
        code = exit_code(exc)
        log.error("%s (exit status %d)", exc, code)
        report_error(str(exc))
        return code
    except Exception as exc:
        report_error(f"{type(exc).__name__}: {str(exc)[:2000]}")
        raise


ERROR_FILE_ENV = "TIDELINE_ERROR_FILE"
ERROR_FILES = "tideline-errors-{uid}"   # under the temp folder: each Spark task's handoff of the error that ended it
STALE_ERROR_FILE_S = 86_400


def error_file_dir(tmp: str | None = None, now: float | None = None) -> Path:
    """Where a task's error file is made. A task killed -9 (its scheduler, its host) leaves its
    file behind (260 of them after two days of soaks): files older than a day are removed first."""
    import tempfile
    import time
    folder = Path(tmp or tempfile.gettempdir()) / ERROR_FILES.format(uid=os.getuid())
    folder.mkdir(mode=0o700, exist_ok=True)
    cutoff = (now if now is not None else time.time()) - STALE_ERROR_FILE_S
    for old in folder.glob("*.txt"):
        try:
            if old.stat().st_mtime < cutoff:
                old.unlink()
        except FileNotFoundError:   # another task removed it
            pass
    return folder


def report_error(message: str) -> None:
    """Hands the error that ended the job to whoever started it (the Airflow operator puts it in
    the task's failure, hence the alert), beside the log."""
    path = os.environ.get(ERROR_FILE_ENV)
    if path:
        Path(path).write_text(message)
