"""What works, per (source, target, mode): the one table that says it.

Config validation refuses a pipeline that asks for what is not here (naming the pair and what
it can do instead), the DAG factory builds only the DAGs a pipeline's pair supports, and the
docs' support matrix is generated from it (`python -m tideline.core.support`). A target's
capabilities (targets.<kind>.TARGET) say what the target can do at all; this table says what is
built and tested from each source into it. A row whose mode the target's capabilities do not
promise is refused when the registry checks the table (targets.check_support).

Modes:
  cdc          full load, then the change stream (cdc tables)
  batch        batch mode: a cursor column's new rows on a schedule (batch tables, batch_<name>)
  verify       verify_<name> and the sync DAG's validate and repair actions
  maintenance  maintain_<name>: compaction and expiry of a target whose commits add files
  extras       soft deletes and change-metadata columns (a table's `deletes: soft`, `metadata`)
  partitioning a table's `partition_by` (the target's own partitioning: Iceberg's transforms)
  history      a table's `history: true` (SCD type 2: a row per version)
"""
from __future__ import annotations

from dataclasses import dataclass

MODES = ("cdc", "batch", "verify", "maintenance", "extras", "partitioning", "history")

# (source kind, target kind) -> the modes built and tested for the pair
SUPPORT: dict[tuple[str, str], frozenset[str]] = {
    ("postgres", "postgres"): frozenset({"cdc", "batch", "verify", "extras", "history"}),
    # history from MariaDB orders versions by GTID (core.apply_sql.history_statement)
    ("mariadb", "postgres"): frozenset({"cdc", "batch", "verify", "extras", "history"}),
    ("postgres", "iceberg"): frozenset({"cdc", "verify", "maintenance", "extras", "partitioning", "history"}),
    ("mariadb", "iceberg"): frozenset({"cdc", "maintenance", "extras", "partitioning", "history"}),   # verify: no MariaDB side in Iceberg's order yet
}


@dataclass(frozen=True)
class SourceFacts:
    """What the pure core must know of a kind of source before any of its code is imported (config
    validation, row filters, the extras of a history table): one line per kind in SOURCES, which
    the engines' registry checks against the packages it finds (engines.check_support). Everything
    else about a source is its package's (engines.<kind>)."""
    position_fields: tuple[str, ...]   # the Debezium source block's fields a row's source_position is made of
    order_fields: tuple[str, ...]      # ...and those a history table orders its versions by ((): commit time)
    filter_dialect: str                # sqlglot's name of its SQL: a row_filter is written in it
    folds_unquoted_names: bool         # an unquoted name in its SQL is lower case (PostgreSQL), or as written


SOURCES: dict[str, SourceFacts] = {
    "postgres": SourceFacts(("lsn",), (), "postgres", True),
    "mariadb": SourceFacts(("gtid", "file", "pos"), ("gtid",), "mysql", False),
}


def source_facts(kind: str) -> SourceFacts:
    return SOURCES[kind]


def source_kinds() -> list[str]:
    return sorted({s for s, _t in SUPPORT})


def target_kinds() -> list[str]:
    """The kinds of target a pipeline may name (targets.check_support: exactly the registered ones)."""
    return sorted({t for _s, t in SUPPORT})


def modes(source: str, target: str) -> frozenset[str]:
    """The modes a pair supports (empty for a pair not in the table)."""
    return SUPPORT.get((source, target), frozenset())


def supports(source: str, target: str, mode: str) -> bool:
    return mode in modes(source, target)


def refusal(source: str, target: str, mode: str) -> str | None:
    """Why a pipeline from `source` into `target` cannot use `mode`, in words a person can act on;
    None when it can."""
    if supports(source, target, mode):
        return None
    have = modes(source, target)
    into = sorted(t for s, t in SUPPORT if s == source and mode in SUPPORT[(s, t)])
    return (f"{mode} is not supported from {source} into {target}"
            + (f" (this pair supports: {', '.join(sorted(have)) or 'nothing yet'})" if (source, target) in SUPPORT
               else " (this pair is not supported at all)")
            + (f"; from {source}, {mode} works into: {', '.join(into)}" if into else ""))


def matrix_markdown() -> str:
    """The support matrix as a Markdown table (the docs' page is generated from it)."""
    lines = ["| source | target | " + " | ".join(MODES) + " |", "| --- | --- | " + " | ".join("---" for _ in MODES) + " |"]
    for (source, target), have in sorted(SUPPORT.items()):
        lines.append(f"| {source} | {target} | " + " | ".join("yes" if m in have else "—" for m in MODES) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(matrix_markdown(), end="")
