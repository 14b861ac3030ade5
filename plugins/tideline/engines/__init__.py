"""Source engines: everything that differs between the databases Tideline reads from.

One module per engine (postgres, mariadb), one interface (`base.SourceEngine`); full load, stream,
batch, verify, repair and doctor call the interface and never ask which engine they hold. The
engine is the pipeline's `source.kind` (known when DAGs are parsed); the source connection's type
is checked against it wherever a pipeline's engine is made (`for_pipeline`).
"""
from __future__ import annotations

from tideline.core.connections import Conn, check_kind
from tideline.core.errors import ConfigError
from tideline.engines.base import Snapshot, SourceEngine

KINDS = {"postgres": "postgres", "postgresql": "postgres", "mysql": "mariadb", "mariadb": "mariadb"}


def kind_of_connection(source: Conn) -> str:
    """The engine an Airflow connection names, by its connection type."""
    kind = KINDS.get((source.conn_type or "").lower())
    if kind is None:
        raise ConfigError(f"connection {source.conn_id!r}", [(
            "conn_type", f"is {source.conn_type!r}; a Tideline source is a postgres, mysql or mariadb connection")])
    return kind


def engine_class(kind: str) -> type[SourceEngine]:
    if kind == "postgres":
        from tideline.engines.postgres import PostgresEngine
        return PostgresEngine
    from tideline.engines.mariadb import MariaDbEngine
    return MariaDbEngine


def for_source(source: Conn) -> SourceEngine:
    """The engine of a source connection known only by its connection (no pipeline)."""
    return engine_class(kind_of_connection(source))(source)


def for_pipeline(cfg, source: Conn) -> SourceEngine:
    """The pipeline's engine: the kind its config says (source.kind), the connection checked to be one."""
    check_kind(cfg.name, "source", cfg.source.kind, source, kind_of_connection(source))
    return engine_class(cfg.source.kind)(source)


__all__ = ["KINDS", "Snapshot", "SourceEngine", "engine_class", "for_pipeline", "for_source", "kind_of_connection"]
