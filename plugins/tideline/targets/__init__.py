"""Targets: everything that differs between the stores Tideline writes into, behind one registry.

Each kind of target is a package here (`postgres/`, `iceberg/`) whose `__init__` declares a
`TARGET = TargetSpec(...)`: its kind, the Airflow connection types that name it, its
capabilities and its implementation ("module:Class"). The registry finds the packages by
themselves and reads those declarations without importing any target's client (psycopg2 apart,
which the state room needs anyway): the config's allowed kinds, the DAG factory and the support
matrix (core.support) ask the registry; only `target_class` imports a target's code, and refuses
a class that does not implement the interface of each capability it declares (interfaces.PROMISES),
naming what is missing. A target implements only the interfaces of what it declares.

The kind is the pipeline's `target.kind` (the one truth: it is known when DAGs are parsed); the
connection is checked against it wherever a pipeline's target is made (`for_pipeline`).
Adding a target is a new package here and its rows in core.support; nothing else changes.
"""
from __future__ import annotations

from tideline.core.connections import Conn, check_kind
from tideline.core.errors import ConfigError
from tideline.kinds import KindRegistry, unkept_promises
from tideline.targets.base import Capabilities, Published, SnapshotLoad, Target, TargetSpec
from tideline.targets.interfaces import (PROMISES, ApplyRefused, CommitStamp, KeepsChangeLog, Maintains, MergesBatches,
                                         RepairsByCopy, StagedTable, StreamsChanges, TakesCopy, Verifies)

_KINDS = KindRegistry(__name__, __path__, "TARGET", TargetSpec, "target", lambda: check_support())
_REGISTRY, _CLASSES = _KINDS.specs, _KINDS.classes
register, unregister, kinds = _KINDS.register, _KINDS.unregister, _KINDS.kinds   # register: a plugin or a test adds one


def spec(kind: str) -> TargetSpec:
    return _KINDS.spec(kind)


def capabilities(kind: str) -> Capabilities:
    """A kind's capabilities, read without importing its implementation."""
    return spec(kind).capabilities


def missing_methods(cls: type[Target], caps: Capabilities) -> dict[str, list[str]]:
    """Per capability `caps` promise, what `cls` lacks to keep it (targets.interfaces.PROMISES)."""
    return unkept_promises(cls, caps.promised(), PROMISES)


def able(target: Target, interface: type):
    """`target` as the capability `interface` (targets.interfaces), or the TargetError that says
    it cannot do that: a caller asks for what it needs, never a kind."""
    if isinstance(target, interface):
        return target
    raise target.not_built(interface.what)


def target_class(kind: str) -> type[Target]:
    """The implementation of a kind of target, imported on first use and checked against its
    capabilities: a promise it does not keep is refused here, before any work starts."""
    cls = _KINDS.implementation(kind, PROMISES)
    cls.spec = spec(kind)   # its declaration: capabilities(), spark_jars()
    return cls


# a support mode (core.support) and the capability that must promise it
MODE_NEEDS = {"cdc": "stream", "batch": "batch", "verify": "verifies", "maintenance": "maintenance",
              "extras": "table_extras", "partitioning": "partitioning", "history": "history"}


def check_support() -> None:
    """The support table (core.support) names only registered targets, and only modes their
    capabilities promise; else a ConfigError says which row and what is missing."""
    from tideline.core import support
    problems = [(kind, "is a registered target that the support table gives no (source, target) row: add its "
                       "rows, or nothing can use it") for kind in kinds() if kind not in support.target_kinds()]
    for (source, kind), modes in sorted(support.SUPPORT.items()):
        if kind not in kinds():
            problems.append((f"{source} -> {kind}", f"names no registered target (registered: {', '.join(kinds())})"))
            continue
        caps = capabilities(kind)
        lacking = [m for m in sorted(modes) if m in MODE_NEEDS and not getattr(caps, MODE_NEEDS[m])]
        if lacking:
            problems.append((f"{source} -> {kind}", "lists " + ", ".join(lacking) + f" but the {kind} target's "
                             "capabilities do not promise " + ", ".join(MODE_NEEDS[m] for m in lacking)))
    if problems:
        raise ConfigError("the support table (tideline.core.support)", problems)


def kind_of_connection(conn: Conn) -> str:
    """The kind of target an Airflow connection names, by its connection type."""
    return _KINDS.kind_of_connection(conn)


def for_pipeline(cfg, target: Conn, state: Conn | None = None) -> Target:
    """The pipeline's target: the kind its config says (target.kind), the connection checked to be
    one, its state in the database `state.conn_id` names (resolved here unless given), else the
    target's own — refused, naming the fix, where that cannot hold it."""
    check_kind(cfg.name, "target", cfg.target.kind, target, kind_of_connection(target))
    if state is None and cfg.state is not None:
        from tideline.core.connections import get_connection
        state = get_connection(cfg.state.conn_id)
    lacks = spec(cfg.target.kind).refuses_state(target) if state is None else None
    if lacks:
        raise ConfigError(f"pipeline {cfg.name}", [("state", f"is missing: {lacks}. Name a PostgreSQL database "
                                                             f"for Tideline's state: `state: {{conn_id: ...}}`")])
    return target_class(cfg.target.kind)(target, state)


def for_connection(target: Conn, state: Conn | None = None) -> Target:
    """A target known only by its connection (a CLI or test given a connection id, no pipeline),
    its state in `state`'s database where given."""
    return target_class(kind_of_connection(target))(target, state)


__all__ = ["ApplyRefused", "Capabilities", "CommitStamp", "KeepsChangeLog", "Maintains", "MergesBatches",
           "Published", "RepairsByCopy", "SnapshotLoad", "StagedTable", "StreamsChanges", "TakesCopy", "Target",
           "TargetSpec", "Verifies", "able", "capabilities", "check_support", "for_connection", "for_pipeline",
           "kind_of_connection", "kinds", "missing_methods", "register", "spec", "target_class", "unregister"]
