"""Builds each pipeline's DAGs from its validated config. No database or network at parse time."""
from __future__ import annotations

import os
from pathlib import Path

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Param

from tideline.core.config import PipelineConfig

HOME = Path(os.environ.get("TIDELINE_HOME", Path(__file__).resolve().parents[3]))


def spark_env() -> dict[str, str]:
    """The Spark job imports the same library package the DAGs use."""
    return {"PYTHONPATH": os.pathsep.join([str(HOME / "plugins"), str(HOME)])}


def build_sync_dag(cfg: PipelineConfig) -> DAG:
    table_names = [t.name for t in cfg.tables]
    with DAG(
        dag_id=f"sync_{cfg.name}",
        description=f"Tideline sync of pipeline {cfg.name}: full load, then change stream",
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        max_active_runs=1,
        tags=["tideline", cfg.name],
        params={
            "tables": Param(table_names, type="array", items={"type": "string", "enum": table_names},
                            description="Tables to load (default: all tables of the pipeline)"),
        },
    ) as dag:
        SparkSubmitOperator(
            task_id="full_load",
            application=str(HOME / "spark_jobs" / "full_load.py"),
            conn_id=cfg.spark.conn_id,
            jars=os.environ.get("TIDELINE_SPARK_JARS", ""),
            conf=dict(cfg.spark.conf),
            name=f"tideline-full-load-{cfg.name}",
            application_args=["--pipeline", cfg.name, "--tables", "{{ params.tables | join(',') }}"],
            env_vars=spark_env(),
        )
    return dag
