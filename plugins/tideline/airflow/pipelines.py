"""Where tasks find their pipeline's config at run time (the DAG file only parses it)."""
from __future__ import annotations

import os
from pathlib import Path

from tideline.core.config import PipelineConfig, load_pipeline


def pipelines_dir() -> Path:
    return Path(os.environ.get("TIDELINE_PIPELINES", Path(__file__).resolve().parents[3] / "pipelines"))


def get_pipeline(name: str) -> PipelineConfig:
    return load_pipeline(pipelines_dir() / f"{name}.yaml")
