"""Pipeline files that fail validation, as this file's own import error in Airflow (naming each
file, field and line): kept apart from tideline_pipelines.py, so one user's broken YAML never
takes the other pipelines' DAGs down with it — an import error hides every DAG of its file."""
from tideline.airflow.pipelines import pipelines_dir
from tideline.core.config import load_pipelines
from tideline.core.errors import ConfigError

_, broken = load_pipelines(pipelines_dir())
if broken:
    raise ConfigError("Tideline pipeline config", [(path, str(err)) for path, err in broken.items()])
