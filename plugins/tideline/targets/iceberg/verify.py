"""An Iceberg table as the target side of a verify: its key ranges fingerprinted in Spark SQL.

Spark reads the table (its data files with their deletes applied) and hashes each row's
canonical text as the source does (core.verify_lake), so the table is compared where it lives,
by the engine that wrote it, without copying it anywhere.
"""
from __future__ import annotations

from py4j.protocol import Py4JError
from pyspark.errors import PySparkException

from tideline.core.table_shape import TableShape
from tideline.core.verify_lake import SparkLakeDialect
from tideline.core.verify_side import VerifySide


class SparkSqlError(Exception):
    """A Spark SQL statement failed: its first line (Spark's message carries the whole plan)."""


def spark_message(exc: BaseException) -> str:
    """The cause Spark gives, in a line (a py4j error's own text names only the call)."""
    java = getattr(exc, "java_exception", None)
    while java is not None and java.getCause() is not None:
        java = java.getCause()
    text = str(java.toString()) if java is not None else str(exc)
    return (text.strip().splitlines() or [type(exc).__name__])[0][:1000]


class IcebergSide(VerifySide):
    fingerprints = ("lake",)

    def __init__(self, target, label: str):
        super().__init__(None, label, (SparkSqlError,))
        self.target = target
        self.spark = target.session()

    def all(self, query, params=None) -> list[tuple]:
        try:
            return [tuple(r) for r in self.spark.sql(query).collect()]
        except (PySparkException, Py4JError) as exc:
            raise SparkSqlError(spark_message(exc)) from None

    def close(self) -> None:
        """The session stays: a task's process ends with it, and a test shares it."""

    def column_types(self, schema: str, table: str) -> dict[str, str]:
        try:
            fields = self.spark.table(self.target.table_id(schema, table)).schema
        except (PySparkException, Py4JError) as exc:
            raise SparkSqlError(spark_message(exc)) from None
        return {f.name: f.dataType.simpleString() for f in fields}

    def lake_dialect(self, shape: TableShape, schema: str) -> SparkLakeDialect:
        return SparkLakeDialect(shape, self.target.table_id(schema, shape.name))
