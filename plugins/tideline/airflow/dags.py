"""Every Tideline pipeline in the pipelines folder becomes its DAGs here (thin: the factory does
the work). A DAG file imports this module's DAGs — the checkout's dags/tideline_pipelines.py, or
in a team's own Airflow the one line docs/install.md gives:

    from tideline.airflow.dags import *  # noqa: F401,F403 — Tideline's DAGs (one per pipeline and kind)


A pipeline gets the DAGs its (source, target) pair supports (core.support): no DAG is built that
cannot work. A pipeline file that fails validation is left out here and shows up as the import
error of tideline_config_errors.py (naming the file, field and line); the others keep their DAGs.
"""
from tideline.airflow.dag_factory import (build_batch_dag, build_maintenance_dag, build_sync_dag, build_verify_dag,
                                         build_watch_dag)
from tideline.airflow.pipelines import pipelines_dir
from tideline.core.config import load_pipelines

pipelines, _broken = load_pipelines(pipelines_dir())
for _name, _cfg in pipelines.items():
    if any(t.mode == "cdc" for t in _cfg.tables):
        globals()[f"sync_{_name}"] = build_sync_dag(_cfg)
        if _cfg.supports("verify"):
            globals()[f"verify_{_name}"] = build_verify_dag(_cfg)
        globals()[f"watch_{_name}"] = build_watch_dag(_cfg)
    if any(t.mode == "batch" for t in _cfg.tables):
        globals()[f"batch_{_name}"] = build_batch_dag(_cfg)
    if _cfg.supports("maintenance"):
        globals()[f"maintain_{_name}"] = build_maintenance_dag(_cfg)
