"""Registers the Tideline view with Airflow from a checkout's plugins folder (an installed wheel
registers it by its `airflow.plugins` entry point instead): tideline.view.plugin."""
from tideline.view.plugin import TidelineViewPlugin  # noqa: F401
