"""The Tideline view in the Airflow UI: the page, its JSON API and /tideline/metrics.

overview: every pipeline's tables, each pipeline read on its own with a deadline; history: a
table's batches, runs and load progress over a window; metrics: the same figures for Prometheus;
app: the FastAPI app Airflow's api-server mounts at /tideline (tideline_view.py registers it).
"""
