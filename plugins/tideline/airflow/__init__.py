"""Airflow layer of Tideline: DAG factory, operators and sensors. Imports Airflow; the core does not."""
