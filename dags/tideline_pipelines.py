"""Every Tideline pipeline in pipelines/*.yaml becomes its DAGs (tideline.airflow.dags builds them,
anew at each parse; these two lines are all a team's own Airflow needs too: docs/install.md)."""
from tideline.airflow.dags import build_dags

globals().update(build_dags())
