"""Apache Iceberg tables as a target (README: "Targets", "Iceberg").

The rows live in Iceberg tables of a catalog, written by Spark; the catalog is Iceberg's JDBC
catalog in a PostgreSQL database (the Airflow connection's host/port/login/password/schema) with
the warehouse its `extra.warehouse` names (a file: path or an object store URI). A snapshot goes
live in one Iceberg commit whose summary carries the Kafka offsets the stream resumes from and the
run's fencing epoch, so the truth about a table's position is in the table itself.

Tideline's bookkeeping (phases, runs, halts) cannot live in a lake table: it goes to schema
`tideline` of the catalog's own PostgreSQL database (`connect`), beside the catalog's tables.
"""
from __future__ import annotations

import functools
import json
import os

import psycopg2

from tideline.core.errors import ConfigError, TargetError
from tideline.targets.base import Capabilities, Target
from tideline.targets.postgres import connect_postgres, lost_postgres_connection

SUMMARY_OFFSETS = "tideline.offsets"   # {"<partition>": next offset} of the table's change topic
SUMMARY_EPOCH = "tideline.epoch"
SUMMARY_PIPELINE = "tideline.pipeline"
# merge-on-read: a commit of changes writes delete files, not a rewrite of the data files it touches
TABLE_PROPERTIES = {"format-version": "2", "write.delete.mode": "merge-on-read",
                    "write.update.mode": "merge-on-read", "write.merge.mode": "merge-on-read"}


class IcebergTarget(Target):
    kind = "iceberg"
    errors = (psycopg2.Error,)   # the catalog's (and the state's) database

    @classmethod
    def capabilities(cls) -> Capabilities:
        return Capabilities(holds_state=False, snapshot_publish="commit", copy_in=False)

    @property
    def catalog(self) -> str:
        """The catalog's name in Spark SQL: the connection id."""
        return self.conn.conn_id

    @property
    def warehouse(self) -> str:
        where = (self.conn.extra or {}).get("warehouse")
        if not where:
            raise ConfigError(f"connection {self.conn.conn_id}", [(
                "extra.warehouse", "is missing: where the Iceberg tables' files go (file:///… or s3://…)")])
        return where

    # ---------------------------------------------------------------- connections
    def connect(self, autocommit: bool = False, connect_timeout: int | None = None):
        """The catalog's PostgreSQL database: Tideline's state lives there (schema tideline)."""
        return connect_postgres(self.conn, autocommit, connect_timeout)

    def lost_connection(self, exc: BaseException) -> bool:
        return lost_postgres_connection(exc)

    def dsn(self) -> str:
        return self.conn.postgres_dsn()

    def spark_conf(self) -> dict[str, str]:
        """The session settings that make the catalog a Spark SQL catalog (read when it is first
        named, so they can be set on a running session). Spark redacts the password in its UI and
        logs (spark.redaction.regex)."""
        c, k = self.conn, f"spark.sql.catalog.{self.catalog}"
        return {k: "org.apache.iceberg.spark.SparkCatalog", f"{k}.type": "jdbc", f"{k}.uri": c.jdbc_url(),
                f"{k}.jdbc.user": c.login or "", f"{k}.jdbc.password": c.password or "",
                f"{k}.warehouse": self.warehouse, f"{k}.jdbc.schema-version": "V1"}

    @staticmethod
    def spark_jars() -> list[str]:
        """Iceberg's Spark runtime (TIDELINE_ICEBERG_JARS, fetched by `make setup`)."""
        return [j for j in os.environ.get("TIDELINE_ICEBERG_JARS", "").split(",") if j]

    def use(self, spark) -> None:
        """Registers the catalog in a running Spark session; says so when the session lacks the jar."""
        for key, value in self.spark_conf().items():
            spark.conf.set(key, value)
        try:
            spark.sparkContext._jvm.java.lang.Class.forName("org.apache.iceberg.spark.SparkCatalog", True,
                                                            spark.sparkContext._jvm.Thread.currentThread()
                                                            .getContextClassLoader())
        except Exception:   # noqa: BLE001 — py4j wraps the ClassNotFoundException
            raise TargetError(f"the Spark session has no Iceberg runtime jar (catalog {self.catalog}): submit the "
                              f"job with --jars $TIDELINE_ICEBERG_JARS (make setup fetches it)") from None

    def table_id(self, schema: str, table: str) -> str:
        return f"{self.catalog}.`{schema}`.`{table}`"

    # ---------------------------------------------------------------- tables
    def prepare_schema(self, conn, schema: str, label: str) -> None:
        """Namespaces are made by the Spark write (write_snapshot): nothing to do in the catalog's database."""

    def can_create(self, conn, schema: str) -> bool:
        """The role may write the catalog's tables (or create them, on a new catalog database)."""
        with conn.cursor() as cur:
            cur.execute("SELECT CASE WHEN to_regclass('iceberg_tables') IS NULL THEN has_database_privilege("
                        "current_database(), 'CREATE') ELSE has_table_privilege('iceberg_tables', "
                        "'INSERT, UPDATE, DELETE') END")
            return cur.fetchone()[0]

    def row_count(self, conn, schema: str, table: str, exact: bool = True) -> int | None:
        """Rows of the current snapshot, from its summary (Iceberg keeps the total): no scan."""
        summary = self.current_summary(schema, table)
        return int(summary["total-records"]) if summary and "total-records" in summary else None

    def stored_so_far(self, state_conn, schema: str, table: str) -> tuple[int, int] | None:
        return None   # a snapshot's files are invisible until its commit; the load logs its tasks

    # ---------------------------------------------------------------- snapshots
    def write_snapshot(self, spark, df, schema: str, table: str, summary: dict[str, str]) -> None:
        """The DataFrame's rows become the table's rows in one commit (created, or replaced with
        the new schema), whose snapshot summary carries `summary`."""
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {self.catalog}.`{schema}`")
        writer = df.writeTo(self.table_id(schema, table)).using("iceberg")
        for key, value in TABLE_PROPERTIES.items():
            writer = writer.tableProperty(key, value)
        for key, value in summary.items():
            writer = writer.option(f"snapshot-property.{key}", value)
        writer.createOrReplace()

    def current_summary(self, schema: str, table: str) -> dict[str, str] | None:
        """The current snapshot's summary, read from the catalog and the table's metadata file
        without Spark (PyIceberg); None when the table does not exist yet."""
        catalog = self.pyiceberg_catalog()
        from pyiceberg.exceptions import NoSuchTableError
        try:
            t = catalog.load_table((schema, table))
        except NoSuchTableError:
            return None
        snap = t.current_snapshot()
        if snap is None:
            return None
        return dict(snap.summary.additional_properties) if snap.summary else {}

    def resume_offsets(self, schema: str, table: str) -> tuple[dict[int, int], int] | None:
        """The offsets and epoch in the table's current snapshot (what a stream resumes from)."""
        summary = self.current_summary(schema, table)
        if not summary or SUMMARY_OFFSETS not in summary:
            return None
        return ({int(p): int(o) for p, o in json.loads(summary[SUMMARY_OFFSETS]).items()},
                int(summary.get(SUMMARY_EPOCH, 0)))

    @functools.cached_property
    def _pyiceberg(self):
        return self._open_pyiceberg()

    def pyiceberg_catalog(self):
        """The same catalog through PyIceberg (no Spark): status, tests, and any reader; opened
        once per target object (status asks it for every table)."""
        return self._pyiceberg

    def _open_pyiceberg(self):
        from urllib.parse import quote

        from pyiceberg.catalog.sql import SqlCatalog
        c = self.conn
        uri = (f"postgresql+psycopg2://{quote(c.login or '', safe='')}:{quote(c.password or '', safe='')}@"
               f"{c.host or 'localhost'}:{c.port or 5432}/{c.schema}")
        return SqlCatalog(self.catalog, uri=uri, warehouse=self.warehouse)
