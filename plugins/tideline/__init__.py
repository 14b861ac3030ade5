"""Tideline: keeps a target database in sync with a source — full load, then change stream.

Layout: `tideline.core` is the pure core (config model, offsets, SQL rendering, errors) and
imports neither Airflow nor PySpark; I/O lives in the modules beside it.
"""
import os
from pathlib import Path

__version__ = "0.1.0"

# The checkout a job is submitted from (spark_jobs/, its log4j config): TIDELINE_HOME, else the
# one holding this package.
HOME = Path(os.environ.get("TIDELINE_HOME", Path(__file__).resolve().parents[2]))
