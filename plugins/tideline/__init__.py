"""Tideline: keeps a target database in sync with a source — full load, then change stream.

Layout: `tideline.core` is the pure core (config model, offsets, SQL rendering, errors) and
imports neither Airflow nor PySpark; I/O lives in the modules beside it.
"""
import os
from pathlib import Path

__version__ = "0.2.0"

PACKAGE = Path(__file__).resolve().parent
# The checkout a job is submitted from: TIDELINE_HOME, else the one holding this package.
HOME = Path(os.environ.get("TIDELINE_HOME", PACKAGE.parents[1]))
# The Spark entrypoints and their log4j config: the checkout's spark_jobs/, or, installed from the
# wheel, the copy packed inside the package (pyproject.toml).
JOBS = HOME / "spark_jobs" if (HOME / "spark_jobs").is_dir() else PACKAGE / "_jobs"
# What puts `tideline` on a Spark job's sys.path: the checkout's plugins/, or site-packages.
LIBRARY_PATH = PACKAGE.parent
