"""Where the stack's services are and what their clients need: URLs, the Kafka bootstrap and its
clients' security settings, the Spark jobs' jars. Pure functions of the stack's settings
(services.base): the environment (services.env) is built from them, and each service module uses
them too, so neither imports the other."""
from __future__ import annotations

from pathlib import Path
from urllib.parse import urlencode

from services.base import (HOST, KAFKA_BROKERS, KAFKA_PASS, KAFKA_USER, LIB, MARIADB_DATABASE, MARIADB_PASS,
                           MARIADB_USER, PG_PASS, PG_USER, PORTS, SECURE)
from services.tls import client_tls


def airflow_url() -> str:
    return f"http://{HOST}:{PORTS['airflow']}"


def pg_url(db: str, user: str = PG_USER, password: str = PG_PASS, scheme: str = "postgresql") -> str:
    tls = client_tls()
    return f"{scheme}://{user}:{password}@{HOST}:{PORTS['postgres']}/{db}" + (f"?{urlencode(tls)}" if tls else "")


def mariadb_url(db: str = MARIADB_DATABASE, user: str = MARIADB_USER, password: str = MARIADB_PASS) -> str:
    tls = client_tls()
    return f"mysql://{user}:{password}@{HOST}:{PORTS['mariadb']}/{db}" + (f"?{urlencode(tls)}" if tls else "")


# ------------------------------------------------------------------ Kafka
def kafka_node_ports(broker_port: int, controller_port: int, node: int) -> tuple[int, int]:
    """Node i of a cluster listens on the broker/controller ports + 2·(i-1)."""
    return broker_port + 2 * (node - 1), controller_port + 2 * (node - 1)


def kafka_bootstrap_of(broker_port: int, nodes: int) -> str:
    return ",".join(f"{HOST}:{kafka_node_ports(broker_port, 0, i)[0]}" for i in range(1, nodes + 1))


def kafka_bootstrap() -> str:
    """The stack's own Kafka."""
    return kafka_bootstrap_of(PORTS["kafka"], KAFKA_BROKERS)


def kafka_client_security(secure: bool = SECURE, user: str = KAFKA_USER, password: str = KAFKA_PASS) -> dict[str, str]:
    """The librdkafka security settings of a client (the Airflow Kafka connection's extra)."""
    if not secure:
        return {}
    from services.tls import certificates
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
            "sasl.password": password, "ssl.ca.location": str(certificates().ca)}


# ------------------------------------------------------------------ Spark
CLASS_ARCHIVE = LIB / "spark-driver-classes.jsa"


def spark_master_url() -> str:
    return f"spark://{HOST}:{PORTS['spark_master']}"


def driver_classpath() -> list[Path]:
    """Tideline's jars for the drivers' class path (stack/jvm/hadoop-nio; see
    tideline.spark_session.driver_conf)."""
    return sorted((LIB / "driver").glob("*.jar"))


def spark_jars() -> list[str]:
    """The jobs' --jars: the Kafka connector and JDBC drivers, and Tideline's driver jar too — the
    driver has it on its class path (driver_conf), and with it here the executors can load the
    local file system class `spark.hadoop.fs.file.impl` names, should one ever open a file: path."""
    return sorted(str(p) for p in (LIB / "spark").glob("*.jar")) + [str(p) for p in driver_classpath()]


def iceberg_jars() -> list[str]:
    """Iceberg's Spark runtime (stack/jvm/iceberg), for the jobs of pipelines with an Iceberg target."""
    return sorted(str(p) for p in (LIB / "iceberg").glob("*.jar"))
