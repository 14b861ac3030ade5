"""Pipeline files that fail validation, as this file's own import error in Airflow (naming each
file, field and line), apart from tideline_pipelines.py: tideline.airflow.config_errors raises it."""
import tideline.airflow.config_errors  # noqa: F401 — an Airflow DAG file: its import error is the broken YAMLs'
