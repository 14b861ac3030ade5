"""One way to get a SparkSession, for the Spark jobs and the tests alike.

Under spark-submit the session already exists and carries --jars; run in-process (tests, the
demo) it is built in local mode with the Kafka connector and JDBC jars from TIDELINE_SPARK_JARS.
"""
from __future__ import annotations

import os

from pyspark.sql import SparkSession


def get_session(app_name: str, master: str | None = None, conf: dict[str, str] | None = None) -> SparkSession:
    builder = SparkSession.builder.appName(app_name)
    under_submit = bool(os.environ.get("SPARK_ENV_LOADED"))  # set by spark-submit's launcher
    if master or not under_submit:
        builder = builder.master(master or os.environ.get("TIDELINE_SPARK_MASTER", "local[2]"))
    jars = os.environ.get("TIDELINE_SPARK_JARS", "")
    if jars and not under_submit:
        builder = builder.config("spark.jars", jars)
    defaults = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.enabled": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.memory": "2g",
        "spark.sql.ansi.enabled": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "50000",
    }
    for key, value in {**defaults, **(conf or {})}.items():
        if under_submit and key.startswith("spark.driver.") and key != "spark.driver.host":
            continue  # fixed by spark-submit before the JVM started
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(os.environ.get("TIDELINE_SPARK_LOG_LEVEL", "WARN"))
    return session
