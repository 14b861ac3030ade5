"""Every Tideline pipeline in pipelines/*.yaml becomes its DAGs (tideline.airflow.dags builds them;
this file is what Airflow's DAG processor reads, and all a team's own Airflow needs: docs/install.md)."""
from tideline.airflow.dags import *  # noqa: F401,F403
