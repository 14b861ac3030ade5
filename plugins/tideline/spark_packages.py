"""The jars Tideline's Spark jobs need, as Maven coordinates: on a host where no jar files are named
(TIDELINE_SPARK_JARS, and a target's own variable such as TIDELINE_ICEBERG_JARS, unset) a job asks
Spark for them by `spark.jars.packages` (spark-submit --packages), which resolves them and what
they depend on from the local Maven repository or Maven Central at the job's start, once, into
Ivy's cache. An installed wheel needs nothing else; a host without Maven Central copies the jars
(`make setup` fetches them into stack/lib) and names them instead. The versions are the ones
stack/jvm/pom.xml fetches for the local stack (tests/unit/test_spark_packages.py holds them equal)."""
from __future__ import annotations

import os

SPARK = (
    "org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0",   # the stream reads Kafka
    "org.postgresql:postgresql:42.7.7",                   # JDBC to a PostgreSQL source or target
    "org.mariadb.jdbc:mariadb-java-client:3.5.6",         # JDBC to a MariaDB source
)
JARS_ENV = "TIDELINE_SPARK_JARS"


def jars_and_packages(target_jars_env: str, target_packages: tuple[str, ...], environ=None) -> tuple[str, str]:
    """(--jars, --packages) of a job writing into a target whose jars are named in
    `target_jars_env`: the jar files a host names, else the coordinates Spark fetches."""
    environ = os.environ if environ is None else environ
    jars, packages = [], []
    for env, coords in ((JARS_ENV, SPARK), (target_jars_env, target_packages)):
        named = [j for j in environ.get(env, "").split(",") if j] if env else []
        jars += named
        packages += [] if named else list(coords)
    return ",".join(jars), ",".join(packages)
