"""The target contract's fixtures: the stack's PostgreSQL (the source, a PostgreSQL target, the
Iceberg catalog's database) and a local Spark session with Iceberg's runtime — no Kafka, Connect
or Airflow, so a change to the target seam is checked in minutes (`pytest tests/contract`)."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid

import psycopg2
import pytest

os.environ.setdefault("TIDELINE_STACK_LEAN_JVM", "1")   # as the integration suite's stack (stack/services/base.py)
import stackctl  # noqa: E402

logging.getLogger("py4j.clientserver").setLevel(logging.WARNING)


@pytest.fixture(scope="session")
def databases():
    """PostgreSQL up (and Spark's jars checked), the stack's connections in the environment."""
    res = subprocess.run([sys.executable, str(stackctl.STACK / "stackctl.py"), "up", "postgres", "lake", "spark"],
                         capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        pytest.fail(f"PostgreSQL did not come up:\n{res.stdout}\n{res.stderr}", pytrace=False)
    os.environ.update(stackctl.environment())
    return stackctl


@pytest.fixture(scope="session")
def spark(databases):
    from tideline.core.settings import CLIENT_COMPILER_ONLY
    from tideline.spark_session import get_session
    from tideline.targets import spec
    session = get_session("tideline-contract", conf={"spark.driver.extraJavaOptions": CLIENT_COMPILER_ONLY},
                          extra_jars=spec("iceberg").spark_jars())
    yield session
    session.stop()


@pytest.fixture
def source_db(databases):
    conn = psycopg2.connect(stackctl.pg_url(stackctl.DATABASES["source"]))
    conn.autocommit = True
    yield conn
    conn.close()


@pytest.fixture
def unique_name():
    return f"c_{uuid.uuid4().hex[:10]}"
