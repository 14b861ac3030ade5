"""The one mechanism behind both registries (tideline.engines for sources, tideline.targets for
targets): the kinds a package's subpackages declare (a SOURCE or TARGET spec with `kind` and
`conn_types`), found on first use without importing any implementation, the kind an Airflow
connection's type names, and the check that a class implements the interface of every
capability its declaration promises (`unkept_promises`)."""
from __future__ import annotations

import importlib
import pkgutil
from typing import Callable

from tideline.core.connections import Conn
from tideline.core.errors import ConfigError


class KindRegistry:
    def __init__(self, package: str, path, attr: str, spec_type: type, noun: str,
                 on_discovered: Callable[[], None] = lambda: None):
        self.package, self.path, self.attr, self.spec_type, self.noun = package, path, attr, spec_type, noun
        self.on_discovered, self.specs, self.classes, self.discovered = on_discovered, {}, {}, False

    def register(self, spec) -> None:
        self.specs[spec.kind] = spec
        self.classes.pop(spec.kind, None)

    def unregister(self, kind: str) -> None:
        self.specs.pop(kind, None)
        self.classes.pop(kind, None)

    def discover(self) -> None:
        if self.discovered:
            return
        for info in pkgutil.iter_modules(self.path):
            if info.ispkg:
                spec = getattr(importlib.import_module(f"{self.package}.{info.name}"), self.attr, None)
                if isinstance(spec, self.spec_type) and spec.kind not in self.specs:
                    self.register(spec)
        self.discovered = True
        self.on_discovered()   # the support table and the registry agree, or nothing starts

    def kinds(self) -> list[str]:
        self.discover()
        return sorted(self.specs)

    def spec(self, kind: str):
        self.discover()
        try:
            return self.specs[kind]
        except KeyError:
            raise ConfigError(self.noun, [("kind", f"is {kind!r}; the kinds of {self.noun} are: "
                                                   f"{', '.join(self.kinds())}")]) from None

    def implementation(self, kind: str, promises: dict[str, tuple[type, ...]]) -> type:
        """The class of a kind, imported on first use and held to its declaration: a capability it
        promises (spec.capabilities.promised()) whose interface it does not implement, or an
        abstract method every one needs, is refused here, naming them, before any work starts."""
        if kind not in self.classes:
            s = self.spec(kind)
            module, _, name = s.implementation.partition(":")
            cls = getattr(importlib.import_module(module), name)
            missing = unkept_promises(cls, s.capabilities.promised(), promises)
            abstract = sorted(getattr(cls, "__abstractmethods__", ()))
            if missing or abstract:
                said = [f"{promise} needs {', '.join(methods)}" for promise, methods in missing.items()]
                if abstract:
                    said.append(f"every {self.noun} needs {', '.join(abstract)}")
                raise ConfigError(f"{self.noun} kind {kind!r} ({s.implementation})", [(
                    "capabilities", "promise what the class does not implement: " + "; ".join(said)
                    + f". Implement them, or declare the capability false in its {type(s).__name__}")])
            self.classes[kind] = cls
        return self.classes[kind]

    def kind_of_connection(self, conn: Conn) -> str:
        """The kind an Airflow connection names, by its connection type."""
        conn_type = (conn.conn_type or "").lower()
        for kind in self.kinds():
            if conn_type in self.specs[kind].conn_types:
                return kind
        types = sorted({t for k in self.kinds() for t in self.specs[k].conn_types})
        raise ConfigError(f"connection {conn.conn_id!r}", [(
            "conn_type", f"is {conn.conn_type!r}; a Tideline {self.noun} is a connection of type {', '.join(types)}")])


def unkept_promises(cls: type, promised: list[str], promises: dict[str, tuple[type, ...]]) -> dict[str, list[str]]:
    """Per capability promised, what `cls` lacks to keep it: an interface it does not implement
    (named with its methods), or that interface's methods it leaves abstract."""
    out = {}
    for promise in promised:
        lacking = []
        for interface in promises[promise]:
            if not issubclass(cls, interface):
                lacking.append(f"{interface.__name__} ({', '.join(sorted(interface.__abstractmethods__))})")
            else:
                lacking += sorted(m for m in interface.__abstractmethods__
                                  if getattr(getattr(cls, m), "__isabstractmethod__", False))
        if lacking:
            out[promise] = lacking
    return out
