"""Source engines: everything that differs between the databases Tideline reads from.

One module per engine (postgres, mariadb), one interface (`base.SourceEngine`); full load, stream,
batch, verify, repair and doctor call the interface and never ask which engine they hold. The
engine follows from the source's Airflow connection type.
"""
from __future__ import annotations

from tideline.core.connections import Conn
from tideline.core.errors import ConfigError
from tideline.engines.base import Snapshot, SourceEngine

KINDS = {"postgres": "postgres", "postgresql": "postgres", "mysql": "mariadb", "mariadb": "mariadb"}


def for_source(source: Conn) -> SourceEngine:
    """The engine of a source connection, from its Airflow connection type."""
    kind = KINDS.get((source.conn_type or "").lower())
    if kind == "postgres":
        from tideline.engines.postgres import PostgresEngine
        return PostgresEngine(source)
    if kind == "mariadb":
        from tideline.engines.mariadb import MariaDbEngine
        return MariaDbEngine(source)
    raise ConfigError(f"connection {source.conn_id!r}", [(
        "conn_type", f"is {source.conn_type!r}; a Tideline source is a postgres, mysql or mariadb connection")])


__all__ = ["KINDS", "Snapshot", "SourceEngine", "for_source"]
