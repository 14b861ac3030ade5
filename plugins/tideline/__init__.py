"""Tideline: keeps a target database in sync with a source — full load, then change stream.

Layout: `tideline.core` is the pure core (config model, offsets, SQL rendering, errors) and
imports neither Airflow nor PySpark; I/O lives in the modules beside it.
"""
__version__ = "0.1.0"
