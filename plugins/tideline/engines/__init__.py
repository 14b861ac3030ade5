"""Source engines: everything that differs between the databases Tideline reads from, behind one
registry — the same shape as the targets' (tideline.targets).

Each kind of source is a package here (`postgres/`, `mariadb/`) whose `__init__` declares a
`SOURCE = SourceSpec(...)`: its kind, the Airflow connection types that name it, and its
implementation ("module:Class"). The registry finds the packages by themselves and reads those
declarations without importing any driver; only `engine_class` imports a source's code. What the
pure core must know of a kind of source before that (its SQL dialect for row filters, the fields
of its log position) is its line in core.support.SOURCES, which `check_support` holds to the
packages. Each declares its capabilities too (base.SourceCapabilities), and `engine_class` holds
the class to the interfaces of what it declares (engines.interfaces). Full load, stream, batch,
verify, repair and doctor call those interfaces and never ask which engine they hold.

The kind is the pipeline's `source.kind` (known when DAGs are parsed); the source connection's type
is checked against it wherever a pipeline's engine is made (`for_pipeline`). Adding a source is a
new package here and its lines in core.support; nothing else changes.
"""
from __future__ import annotations

from tideline.core.connections import Conn, check_kind
from tideline.core.errors import ConfigError, SourceError
from tideline.kinds import KindRegistry
from tideline.engines.base import SourceCapabilities, SourceEngine, SourceSpec
from tideline.engines.interfaces import (PROMISES, Captures, HoldsPosition, LoadsInChunks, PipesRows, ReadsIntervals,
                                         ReadsSnapshots, Snapshot, VerifiesSource)

_KINDS = KindRegistry(__name__, __path__, "SOURCE", SourceSpec, "source", lambda: check_support())
_REGISTRY, _CLASSES = _KINDS.specs, _KINDS.classes
register, unregister, kinds = _KINDS.register, _KINDS.unregister, _KINDS.kinds   # register: a plugin or a test adds one


def spec(kind: str) -> SourceSpec:
    return _KINDS.spec(kind)


def check_support() -> None:
    """Every registered source has its facts in core.support.SOURCES and every source the support
    table names is registered; else a ConfigError says which and what to add."""
    from tideline.core import support
    problems = [(kind, "is a registered source with no line in core.support.SOURCES (its SQL dialect, its log "
                       "position's fields): add one") for kind in sorted(_REGISTRY) if kind not in support.SOURCES]
    problems += [(kind, f"is named by core.support but no package registers it (registered: "
                        f"{', '.join(sorted(_REGISTRY))})")
                 for kind in sorted(set(support.SOURCES) | set(support.source_kinds())) if kind not in _REGISTRY]
    for (source, target), modes in sorted(support.SUPPORT.items()):
        caps = _REGISTRY[source].capabilities if source in _REGISTRY else None
        lacking = [m for m in sorted(modes) if caps and m in MODE_NEEDS and not getattr(caps, MODE_NEEDS[m])]
        if lacking:
            problems.append((f"{source} -> {target}", "lists " + ", ".join(lacking) + f" but the {source} source's "
                             "capabilities do not promise " + ", ".join(MODE_NEEDS[m] for m in lacking)))
    if problems:
        raise ConfigError("the sources (tideline.engines, tideline.core.support)", problems)


# a support mode (core.support) and the source capability that must promise it
MODE_NEEDS = {"cdc": "capture", "batch": "batch", "verify": "verifies"}


def kind_of_connection(conn: Conn) -> str:
    """The kind of source an Airflow connection names, by its connection type."""
    return _KINDS.kind_of_connection(conn)


def engine_class(kind: str) -> type[SourceEngine]:
    """The implementation of a kind of source, imported on first use and checked against its
    declared capabilities: a promise it does not keep is refused here, before any work starts."""
    return _KINDS.implementation(kind, PROMISES)


def able(engine: SourceEngine, interface: type):
    """`engine` as the capability `interface` (engines.interfaces), or the SourceError that says it
    cannot do that: a caller asks for what it needs, never a kind."""
    if isinstance(engine, interface):
        return engine
    raise SourceError(f"a {engine.label or engine.kind} source (connection {engine.source.conn_id!r}) cannot do "
                      f"{interface.what} in this version of Tideline; see the support matrix "
                      f"(docs/reference/support.md)")


def for_source(source: Conn) -> SourceEngine:
    """The engine of a source connection known only by its connection (no pipeline)."""
    return engine_class(kind_of_connection(source))(source)


def for_pipeline(cfg, source: Conn) -> SourceEngine:
    """The pipeline's engine: the kind its config says (source.kind), the connection checked to be one."""
    check_kind(cfg.name, "source", cfg.source.kind, source, kind_of_connection(source))
    return engine_class(cfg.source.kind)(source)


__all__ = ["Captures", "HoldsPosition", "LoadsInChunks", "PipesRows", "ReadsIntervals", "ReadsSnapshots", "Snapshot",
           "SourceCapabilities", "SourceEngine", "SourceSpec", "VerifiesSource", "able", "check_support",
           "engine_class", "for_pipeline", "for_source", "kind_of_connection", "kinds", "register", "spec",
           "unregister"]
