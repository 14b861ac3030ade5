"""Where tasks find their pipeline's config at run time (the DAG file only parses it)."""
from __future__ import annotations

from tideline.core.config import PipelineConfig, load_pipeline
from tideline.entrypoints import pipelines_dir

__all__ = ["get_pipeline", "pipelines_dir"]


def get_pipeline(name: str) -> PipelineConfig:
    return load_pipeline(pipelines_dir() / f"{name}.yaml")
