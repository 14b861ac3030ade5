"""What every Spark entrypoint shares: logging a person can read and where pipelines live."""
from __future__ import annotations

import logging
import os
import sys
from pathlib import Path


def setup_logging() -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("py4j").setLevel(logging.WARNING)


def pipelines_dir(explicit: str | None = None) -> Path:
    if explicit:
        return Path(explicit)
    if os.environ.get("TIDELINE_PIPELINES"):
        return Path(os.environ["TIDELINE_PIPELINES"])
    return Path(__file__).resolve().parents[2] / "pipelines"
