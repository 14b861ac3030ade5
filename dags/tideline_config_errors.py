"""Pipeline files that fail validation, as this file's own import error in Airflow (naming each
file, field and line), apart from tideline_pipelines.py: one broken YAML never hides the other
pipelines' DAGs (tideline.airflow.dags.raise_broken_pipelines)."""
from tideline.airflow.dags import raise_broken_pipelines

raise_broken_pipelines()
