"""Every Tideline pipeline in the pipelines folder becomes its DAGs, built anew each time a DAG file
asks: the checkout's dags/ files, or in a team's own Airflow the two lines docs/install.md gives:

    from tideline.airflow.dags import build_dags; globals().update(build_dags())
    from tideline.airflow.dags import raise_broken_pipelines; raise_broken_pipelines()

Functions, not module-level work: a process that parses the DAG files more than once (a test,
`airflow dags test`, a DAG processor that keeps modules) would otherwise keep the DAGs of the
first parse, the module cached by Python's import.

A pipeline gets the DAGs its (source, target) pair supports (core.support): no DAG is built that
cannot work. A pipeline file that fails validation is left out of build_dags and is the import
error of the file that calls raise_broken_pipelines (naming the file, field and line), so one
user's broken YAML never takes the other pipelines' DAGs down with it — an import error hides
every DAG of its file.
"""
from __future__ import annotations

from tideline.airflow.pipelines import pipelines_dir
from tideline.core.config import load_pipelines
from tideline.core.errors import ConfigError


def build_dags() -> dict:
    """{dag_id: DAG} for every valid pipeline file, as its pair supports them."""
    from tideline.airflow.dag_factory import (build_batch_dag, build_maintenance_dag, build_sync_dag,
                                             build_verify_dag, build_watch_dag)
    pipelines, _broken = load_pipelines(pipelines_dir())
    dags = {}
    for name, cfg in pipelines.items():
        if any(t.mode == "cdc" for t in cfg.tables):
            dags[f"sync_{name}"] = build_sync_dag(cfg)
            if cfg.supports("verify"):
                dags[f"verify_{name}"] = build_verify_dag(cfg)
            dags[f"watch_{name}"] = build_watch_dag(cfg)
        if any(t.mode == "batch" for t in cfg.tables):
            dags[f"batch_{name}"] = build_batch_dag(cfg)
        if cfg.supports("maintenance"):
            dags[f"maintain_{name}"] = build_maintenance_dag(cfg)
    return dags


def raise_broken_pipelines() -> None:
    """The pipeline files that fail validation, as one ConfigError naming each (none: nothing)."""
    _, broken = load_pipelines(pipelines_dir())
    if broken:
        raise ConfigError("Tideline pipeline config", [(path, str(err)) for path, err in broken.items()])
