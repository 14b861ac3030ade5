"""Targets: everything that differs between the stores Tideline writes into.

One module per target (postgres; iceberg, the lakehouse table), one interface (`base.Target`)
with its `capabilities()`; the full load, the stream's commit, batch mode and verify call the
interface and ask its capabilities instead of asking which target they hold. The target follows
from the target's Airflow connection type, as the source engine does from the source's.
"""
from __future__ import annotations

from tideline.core.connections import Conn
from tideline.core.errors import ConfigError
from tideline.targets.base import ApplyRefused, Capabilities, Target

KINDS = {"postgres": "postgres", "postgresql": "postgres", "iceberg": "iceberg"}


def target_class(kind: str) -> type[Target]:
    """The implementation of a kind of target (a pipeline's target.kind)."""
    if kind == "postgres":
        from tideline.targets.postgres import PostgresTarget
        return PostgresTarget
    if kind == "iceberg":
        from tideline.targets.iceberg import IcebergTarget
        return IcebergTarget
    raise ValueError(f"no target kind {kind!r}")


def for_target(target: Conn) -> Target:
    """The target of a connection, from its Airflow connection type."""
    kind = KINDS.get((target.conn_type or "").lower())
    if kind is None:
        raise ConfigError(f"connection {target.conn_id!r}", [(
            "conn_type", f"is {target.conn_type!r}; a Tideline target is a postgres or iceberg connection")])
    return target_class(kind)(target)


def for_pipeline(cfg, target: Conn) -> Target:
    """The pipeline's target, checked against the kind its config says (target.kind)."""
    store = for_target(target)
    if store.kind != cfg.target.kind:
        raise ConfigError(f"pipeline {cfg.name}", [("target.kind", (
            f"is {cfg.target.kind!r}, but connection {target.conn_id!r} is a {store.kind} connection: set "
            f"target.kind: {store.kind}, or name a {cfg.target.kind} connection"))])
    return store


__all__ = ["KINDS", "ApplyRefused", "Capabilities", "Target", "for_pipeline", "for_target", "target_class"]
