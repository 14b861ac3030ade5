"""Targets: everything that differs between the stores Tideline writes into.

One module per target (postgres today; a lakehouse table next), one interface (`base.Target`)
with its `capabilities()`; the full load, the stream's commit, batch mode and verify call the
interface and ask its capabilities instead of asking which target they hold. The target follows
from the target's Airflow connection type, as the source engine does from the source's.
"""
from __future__ import annotations

from tideline.core.connections import Conn
from tideline.core.errors import ConfigError
from tideline.targets.base import ApplyRefused, Capabilities, Target

KINDS = {"postgres": "postgres", "postgresql": "postgres"}


def for_target(target: Conn) -> Target:
    """The target of a connection, from its Airflow connection type."""
    kind = KINDS.get((target.conn_type or "").lower())
    if kind == "postgres":
        from tideline.targets.postgres import PostgresTarget
        return PostgresTarget(target)
    raise ConfigError(f"connection {target.conn_id!r}", [(
        "conn_type", f"is {target.conn_type!r}; a Tideline target is a postgres connection")])


__all__ = ["KINDS", "ApplyRefused", "Capabilities", "Target", "for_target"]
