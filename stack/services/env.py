"""The stack's environment: every variable the services, the Spark jobs and the tests need — the
Airflow connections (the only place credentials come from), Airflow's own settings, Spark's."""
from __future__ import annotations

import json
import os
import secrets
import sys

from services.addresses import (CLASS_ARCHIVE, airflow_url, driver_classpath, iceberg_jars, kafka_bootstrap,
                                kafka_client_security, mariadb_url, pg_url, spark_jars, spark_master_url)
from services.base import (AIRFLOW_USERS, DATABASES, HOST, LOGS, PG_CDC_PASS, PG_CDC_USER, PG_SYNC_PASS, PG_SYNC_USER,
                           LAKE_CLIENT_ID, LAKE_CLIENT_SECRET, PORTS, ROOT, S3_ACCESS_KEY, S3_BUCKET, S3_REGION,
                           S3_SECRET_KEY, SPARK_CLUSTER, VAR,
                           VENV_BIN)
from services.tls import client_tls


def _jwt_secret() -> str:
    return _secret("jwt_secret")


def _secret(name: str) -> str:
    """A random secret made once per stack (stack/var/airflow/<name>, mode 0600)."""
    path = VAR / "airflow" / name
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(32))
        path.chmod(0o600)
    return path.read_text().strip()


def environment() -> dict[str, str]:
    """Every variable the services, the Spark jobs and the tests need, in one place."""
    airflow_home = VAR / "airflow"
    env = {
        "TIDELINE_HOME": str(ROOT),
        "TIDELINE_SPARK_JARS": ",".join(spark_jars()),
        "TIDELINE_ICEBERG_JARS": ",".join(iceberg_jars()),   # added to the jobs of Iceberg pipelines
        "TIDELINE_SPARK_CLASS_ARCHIVE": str(CLASS_ARCHIVE),
        # Hadoop's local file system without a forked chmod per file (stack/jvm/hadoop-nio)
        "TIDELINE_SPARK_DRIVER_CLASSPATH": ":".join(map(str, driver_classpath())),
        # connector passwords: files the sync DAG writes here (0600) and Connect resolves (services.connect)
        "TIDELINE_CONNECT_SECRETS_DIR": str(VAR / "connect-secrets"),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "plugins"), str(ROOT)]),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": HOST,  # Spark binds to loopback only
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        # Airflow connections (the only place credentials come from).
        # Tideline's own least-privileged roles (services.postgres._grant_roles), as a DBA gives them
        "AIRFLOW_CONN_TIDELINE_SOURCE": pg_url(DATABASES["source"], PG_CDC_USER, PG_CDC_PASS),
        "AIRFLOW_CONN_TIDELINE_TARGET": pg_url(DATABASES["target"], PG_SYNC_USER, PG_SYNC_PASS),
        "AIRFLOW_CONN_TIDELINE_MARIADB_SOURCE": mariadb_url(),
        # the Iceberg catalog: JDBC catalog tables in its own database, files under the warehouse
        "AIRFLOW_CONN_TIDELINE_LAKE": json.dumps(
            {"conn_type": "iceberg", "host": HOST, "port": PORTS["postgres"], "login": PG_SYNC_USER,
             "password": PG_SYNC_PASS, "schema": DATABASES["lake"],
             "extra": {"warehouse": (VAR / "lake").as_uri(), **client_tls()}}),
        # the lake as teams run it (services.lake): Iceberg tables on the object store's bucket behind
        # the REST catalog, the store's keys in an Airflow `aws` connection (its conventions: login and
        # password the access key and secret, the endpoint and region in extra, botocore's config_kwargs
        # for path-style addressing and the checksums this store takes), Tideline's state in the
        # PostgreSQL database `state.conn_id` names (tideline_lake: the JDBC catalog's, beside its own)
        "AIRFLOW_CONN_TIDELINE_LAKE_REST": json.dumps(
            {"conn_type": "iceberg", "host": f"http://{HOST}:{PORTS['lake_catalog']}",
             "login": LAKE_CLIENT_ID, "password": LAKE_CLIENT_SECRET,   # OAuth2 client credentials
             "extra": {"catalog_type": "rest", "scope": "catalog", "warehouse": f"s3://{S3_BUCKET}/", "aws_conn_id": "tideline_s3"}}),
        "AIRFLOW_CONN_TIDELINE_S3": json.dumps(
            {"conn_type": "aws", "login": S3_ACCESS_KEY, "password": S3_SECRET_KEY,
             "extra": {"endpoint_url": f"http://{HOST}:{PORTS['s3']}", "region_name": S3_REGION,
                       "config_kwargs": {"s3": {"addressing_style": "path"},
                                         "request_checksum_calculation": "when_required",
                                         "response_checksum_validation": "when_required"}}}),
        "AIRFLOW_CONN_TIDELINE_STATE": pg_url(DATABASES["lake"], PG_SYNC_USER, PG_SYNC_PASS),
        # secure mode: SASL_SSL with the stack's SCRAM user and CA (services.kafka)
        "AIRFLOW_CONN_TIDELINE_KAFKA": json.dumps(
            {"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap(), **kafka_client_security()}}),
        "AIRFLOW_CONN_TIDELINE_CONNECT": json.dumps(
            {"conn_type": "http", "host": HOST, "port": PORTS["connect"], "schema": "http"}),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(
            {"conn_type": "spark", "host": spark_master_url() if SPARK_CLUSTER else "local[2]",
             "extra": {"spark-binary": "spark-submit", "deploy-mode": "client"}}),
        **({"TIDELINE_SPARK_MASTER": spark_master_url()} if SPARK_CLUSTER else {}),
        # Airflow itself.
        "AIRFLOW_HOME": str(airflow_home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "8",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{airflow_url()}/execution/",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{u}:{role}" for u, (role, _p) in AIRFLOW_USERS.items()),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(airflow_home / "passwords.json"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": pg_url(DATABASES["airflow"], scheme="postgresql+psycopg2"),
        # Riding out a metadata database restart: pooled connections are tested before use and
        # operations hit by an OperationalError are retried; a component that still dies is
        # restarted by supervisord.
        "AIRFLOW__DATABASE__SQL_ALCHEMY_POOL_PRE_PING": "True",
        "AIRFLOW__DATABASE__MAX_DB_RETRIES": "10",
        "AIRFLOW__API__HOST": HOST,
        "AIRFLOW__API__PORT": str(PORTS["airflow"]),
        "AIRFLOW__API__BASE_URL": airflow_url(),
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
        # a task whose worker died (kill -9, OOM) is found and retried after 90 s without a
        # heartbeat, not the default 300 s (heartbeats go every 5 s; 18 missed is not a slow machine)
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "90",
        # a scheduler that died leaves its running tasks orphaned; its successor resets them for a
        # retry at the first orphan check after the dead one missed its heartbeats for
        # scheduler_health_check_threshold (30 s): checks every 10 s (a query), not the default
        # 300 s, so that comes 30-40 s after the death rather than 30-60 s
        "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "10",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(LOGS / "airflow-tasks"),
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    if (airflow_home / "jwt_secret").exists() or VAR.exists():
        env["AIRFLOW__API_AUTH__JWT_SECRET"] = _jwt_secret()
        # Prometheus scrapes /tideline/metrics with this bearer token, without an Airflow session
        env["TIDELINE_METRICS_TOKEN"] = _secret("metrics_token")
    return env


def full_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(environment())
    return env
