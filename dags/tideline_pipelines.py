"""Every Tideline pipeline in pipelines/*.yaml becomes its DAGs here (thin: the factory does the work)."""
import os
from pathlib import Path

from tideline.airflow.dag_factory import build_sync_dag
from tideline.core.config import load_pipelines

PIPELINES = Path(os.environ.get("TIDELINE_PIPELINES", Path(__file__).resolve().parent.parent / "pipelines"))

pipelines, broken = load_pipelines(PIPELINES)
for _name, _cfg in pipelines.items():
    globals()[f"sync_{_name}"] = build_sync_dag(_cfg)
