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


@pytest.mark.parametrize("master,source,target,needed", [
    ("local[2]", "mariadb", "postgres", False),   # the driver's streams pipe MariaDB's slices
    ("local[2]", "postgres", "postgres", True),   # a row per Python call: Spark's workers, one per pipe
    ("local[2]", "mariadb", "iceberg", True),     # Spark reads MariaDB with JDBC and writes the Iceberg files
    ("local[2]", "postgres", "iceberg", False),   # the driver's threads write the data files from COPY's CSV
    ("local[2]", "postgres", "iceberg+soft", True),   # Spark's writer fills the extra columns
    ("spark://h:7077", "mariadb", "postgres", True),   # the executors pipe, elsewhere
])
def test_a_full_load_starts_its_spark_session_unless_the_driver_can_pipe_every_row_itself(
        monkeypatch, master, source, target, needed):
    from tideline.core.config import parse_pipeline
    from tideline.load.full_load import session_needed
    monkeypatch.setenv("TIDELINE_SPARK_MASTER", master)
    monkeypatch.delenv("SPARK_ENV_LOADED", raising=False)
    target_block = ({"kind": "iceberg", "catalog": "lake", "namespace": "n"} if target.startswith("iceberg")
                    else {"conn_id": "tgt", "schema": "s"})
    table = {"name": "t", **({"deletes": "soft"} if target.endswith("+soft") else {})}
    cfg = parse_pipeline({"name": "p", "source": {"kind": source, "conn_id": "src", **({"schema": "shop"} if source == "mariadb" else {})},
                          "target": target_block, "kafka": {"topic_prefix": "p"}, "tables": [table]}, "p.yaml")
    assert session_needed(cfg) is needed
