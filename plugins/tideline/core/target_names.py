"""What the target calls a table and its columns: `target_name` and `rename` in a table's config.

A pipeline knows its tables by their source names — its state, params, alerts, topics and every
option in the YAML (columns, primary_key, hash_columns, row_filter, partition_by) name the source's
table and columns. Only the target table is named otherwise. So the seam is one translation: a
target is handed the *target's shape* (TargetNames.shape: the same columns in the same order and
types under the target's names, each keeping its source name in Column.source, and the source's
shape in TableShape.origin), and works on it alone; a source engine is handed the source's shape.
Code that stands between the two (the load reading the source for the target, the stream
reading events that carry the source's field names) asks a target column for its `source_name`.
Pure.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from tideline.core.errors import SourceError
from tideline.core.names import identifier
from tideline.core.table_extras import PREFIX
from tideline.core.table_shape import TableShape


def check_rename(rename: dict[str, str]) -> dict[str, str]:
    """A table's `rename` alone: names a target can hold, not Tideline's own, two columns never to one."""
    out = {}
    for source, target in rename.items():
        identifier(source, "rename: source column")
        identifier(target, f"rename: the target name of {source!r}")
        if target.startswith(PREFIX):
            raise ValueError(f"rename gives {source!r} the name {target!r}; names starting {PREFIX} are Tideline's "
                             f"own columns (soft deletes, history, metadata): choose another")
        out[source] = target
    names = list(out.values())
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"rename gives two columns the name {', '.join(map(repr, twice))}: a target column "
                         f"holds one source column")
    return out


def check_renamed_columns(tcfg) -> None:
    """A table's `rename` against its column selection: a renamed column must be one it syncs."""
    for source in tcfg.rename:
        if source in tcfg.exclude_columns or (tcfg.columns is not None and source not in tcfg.columns
                                              and source not in (tcfg.primary_key or [])):
            raise ValueError(f"table {tcfg.name!r}: rename names column {source!r}, which the table does not sync "
                             f"(columns / exclude_columns)")
        if tcfg.rename[source] != source and tcfg.rename[source] in (tcfg.columns or []) \
                and tcfg.rename[source] not in tcfg.rename:
            raise ValueError(f"table {tcfg.name!r}: rename gives {source!r} the name {tcfg.rename[source]!r}, which "
                             f"another synced column keeps: rename that one too, or choose another name")


@dataclass(frozen=True)
class TargetNames:
    """One table's names in the target: the table's, and each renamed column's (source -> target)."""
    table: str
    columns: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, tcfg) -> "TargetNames":
        return cls(tcfg.target_name or tcfg.name, {s: t for s, t in tcfg.rename.items() if s != t})

    def column(self, source: str) -> str:
        """The target's name of a source column."""
        return self.columns.get(source, source)

    def source_column(self, target: str) -> str:
        """The source's name of a target column (one Tideline added keeps its own)."""
        for s, t in self.columns.items():
            if t == target:
                return s
        return target

    def partition_by(self, transforms) -> tuple[str, ...]:
        """A table's partition_by (core.lake_partition, over the source's columns) over the target's."""
        from tideline.core.lake_partition import parse
        return tuple(replace(f, column=self.column(f.column)).text for f in map(parse, transforms))

    def check(self, shape: TableShape, label: str) -> None:
        """Against the source's columns (when it is described): a renamed column it has; a target
        name no other column keeps (swapping two names is fine); no generated column computed
        from a renamed one (its expression names the source's columns)."""
        have = shape.column_names
        missing = [s for s in self.columns if s not in have]
        if missing:
            raise SourceError(f"{label}: rename names {', '.join(missing)}, which the source table does not have "
                              f"(it has {', '.join(have)})", table=shape.name)
        targets = [self.column(c) for c in have]
        twice = sorted({t for t in targets if targets.count(t) > 1})
        if twice:
            raise SourceError(f"{label}: rename gives a column the name {', '.join(twice)}, which another synced "
                              f"column keeps: rename that one too, or choose another name", table=shape.name)
        for c in shape.columns:
            used = [s for s in self.columns if c.generated and _names(c.generated, s)]
            if used:
                raise SourceError(f"{label}: generated column {c.name} is computed from {', '.join(used)}, which "
                                  f"rename renames; the target computes it with the source's expression. Leave "
                                  f"{', '.join(used)} its name, or leave {c.name} out (exclude_columns)",
                                  table=shape.name)

    def recorded(self, schema: str) -> dict:
        """What the full load records in the state: where the table landed, under which names."""
        return {"schema": schema, "table": self.table, "columns": dict(sorted(self.columns.items()))}

    def changed_since_load(self, schema: str, source_table: str, loaded: dict | None, label: str) -> str | None:
        """Why the table must reload because the config puts or names it otherwise than its load
        did, or None. A load recorded before names were recorded (None) landed under the source's
        names, in a schema not recorded."""
        then = {"schema": schema, "table": source_table, "columns": {}, **(loaded or {})}
        now = self.recorded(schema)
        if now == then:
            return None
        what = []
        if now["schema"] != then["schema"]:
            what.append(f"target_schema {then['schema']} -> {now['schema']}")
        if now["table"] != then["table"]:
            what.append(f"target_name {then['table']} -> {now['table']}")
        old, new = then["columns"] or {}, now["columns"]
        moved = [f"{c}: {old.get(c, c)} -> {new.get(c, c)}" for c in sorted(set(old) | set(new))
                 if old.get(c, c) != new.get(c, c)]
        if moved:
            what.append("rename " + ", ".join(moved))
        return (f"{label}: the config puts or names it otherwise in the target since its load ({'; '.join(what)}), so "
                f"the target holds it elsewhere or under the old names: it is reloaded by itself (a table left under "
                f"an old schema or target_name stays, as a removed table's does: drop it when no one reads it)")

    def shape(self, source: TableShape) -> TableShape:
        """The target's shape of a source shape (see the module docstring); the same shape when
        nothing is renamed."""
        if self.table == source.name and not self.columns:
            return source
        cols = tuple(replace(c, name=self.column(c.name), source=c.name) if c.name in self.columns else c
                     for c in source.columns)
        return replace(source, name=self.table, columns=cols,
                       primary_key=tuple(self.column(k) for k in source.primary_key), origin=source)


def _names(expression: str, column: str) -> bool:
    """The SQL expression mentions the column (as a word, or quoted)."""
    import re
    return f'"{column}"' in expression or re.search(rf"(?<![\w$]){re.escape(column)}(?![\w$])", expression) is not None
