"""Integration tests run against the real local stack; the session fixture starts it or reuses it."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid

import psycopg2
import pytest

import stackctl


@pytest.fixture(scope="session")
def stack():
    """Brings every part of the local stack up (idempotent) and exports its environment."""
    res = subprocess.run([sys.executable, str(stackctl.STACK / "stackctl.py"), "up"],
                         capture_output=True, text=True, timeout=900)
    if res.returncode != 0:
        pytest.fail(f"the local stack did not come up:\n{res.stdout}\n{res.stderr}", pytrace=False)
    os.environ.update(stackctl.environment())
    return stackctl


@pytest.fixture(scope="session")
def spark(stack):
    from tideline.spark_session import get_session
    session = get_session("tideline-tests")
    yield session
    session.stop()


@pytest.fixture
def source_db(stack):
    conn = psycopg2.connect(stackctl.pg_url(stackctl.DATABASES["source"]))
    conn.autocommit = True
    yield conn
    conn.close()


@pytest.fixture
def target_db(stack):
    conn = psycopg2.connect(stackctl.pg_url(stackctl.DATABASES["target"]))
    conn.autocommit = True
    yield conn
    conn.close()


@pytest.fixture
def unique_name():
    """A fresh lowercase name per test, so tests never see each other's tables or topics."""
    return f"t_{uuid.uuid4().hex[:10]}"
