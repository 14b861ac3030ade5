"""A full load's driver JVM is sized by where its rows go: the client compiler only when no row
passes through it (a PostgreSQL source's COPY, or MariaDB's COPY-text lines, piped into a
PostgreSQL target)."""
import pytest

from tideline.core.connections import get_connection
from tideline.load.full_load import PIPED_LOAD_JAVA_OPTIONS, piped_load_conf

SOURCES = {"postgres": "postgresql://u:p@db:5432/shop", "mariadb": "mysql://u:p@db:3306/shop"}


@pytest.mark.parametrize("source,target,lean", [
    ("postgres", "postgres", True),     # COPY piped by Python workers
    ("mariadb", "postgres", True),      # MariaDB's COPY-text lines piped by Python workers
    ("postgres", "iceberg", False),     # Spark writes the Iceberg files
    ("mariadb", "iceberg", False),
])
def test_the_driver_jvm_is_lean_only_when_no_row_passes_through_it(source, target, lean):
    conn = get_connection("src", {"AIRFLOW_CONN_SRC": SOURCES[source]})
    conf = piped_load_conf(conn, target)
    assert conf == ({"spark.driver.extraJavaOptions": PIPED_LOAD_JAVA_OPTIONS} if lean else {})
