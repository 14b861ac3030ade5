"""A table's `row_filter`: an SQL predicate over the source's columns, written in the source's own
SQL (PostgreSQL, or MariaDB's), that the full load reads by and the stream applies alike — a row
updated out of it leaves the target, a row updated into it arrives. Parsed with sqlglot (a
well-kept SQL parser and transpiler: it finds the columns a predicate names, refuses what is not a
plain predicate, and writes a MariaDB predicate as PostgreSQL, where the stream evaluates it on
each change event's row). Pure."""
from __future__ import annotations

from dataclasses import dataclass

import sqlglot
from sqlglot import exp

from tideline.core.support import source_facts   # a source kind's SQL dialect and its case of names

_REFUSED = (exp.Select, exp.Subquery, exp.AggFunc, exp.Window, exp.Placeholder, exp.Parameter)
# a predicate over the clock or chance holds differently at the snapshot and at each event, and a
# row drifts out of it with no event to say so: refused (filter on the row's own values)
_VOLATILE = (exp.CurrentTimestamp, exp.CurrentDate, exp.CurrentTime, exp.Rand)
_VOLATILE_NAMES = {"now", "sysdate", "localtime", "localtimestamp", "random", "rand", "uuid", "gen_random_uuid",
                   "clock_timestamp", "statement_timestamp", "transaction_timestamp", "unix_timestamp", "curdate",
                   "curtime", "utc_timestamp"}


@dataclass(frozen=True)
class RowFilter:
    text: str
    source_kind: str

    @property
    def _tree(self) -> exp.Expression:
        return sqlglot.parse_one(self.text, read=source_facts(self.source_kind).filter_dialect)

    @property
    def columns(self) -> list[str]:
        """The columns it names, as written, in order of first mention."""
        return list(dict.fromkeys(c.name for c in self._tree.find_all(exp.Column)))

    def unknown(self, have: list[str]) -> list[str]:
        """Columns it names that `have` lacks (MariaDB's names compare without case)."""
        return [c for c in self.columns if _resolve(c, have, self.source_kind) is None]

    def source_sql(self) -> str:
        """The predicate as the source runs it (snapshot reads, verify's source side, repair)."""
        return self._tree.sql(dialect=source_facts(self.source_kind).filter_dialect)

    def target_sql(self, have: list[str], alias: str, renamed: dict[str, str] | None = None) -> str:
        """The predicate in PostgreSQL, each column read from `alias` (a row of the decoded
        change event), quoted as the source's catalog spells it (`have`) — or as the target names
        it, where `renamed` (source -> target, core.target_names) says."""
        def qualify(node: exp.Expression) -> exp.Expression:
            if isinstance(node, exp.Column):
                name = _resolve(node.name, have, self.source_kind)
                name = (renamed or {}).get(name, name)
                return exp.Column(this=exp.Identifier(this=name, quoted=True), table=exp.Identifier(this=alias))
            return node
        return self._tree.transform(qualify).sql(dialect="postgres")


def _resolve(name: str, have: list[str], source_kind: str) -> str | None:
    if name in have:
        return name
    if not source_facts(source_kind).folds_unquoted_names or name == name.lower():   # unquoted: folded
        found = [h for h in have if h.lower() == name.lower()]
        return found[0] if len(found) == 1 else None
    return None


def parse(text: str, source_kind: str) -> RowFilter:
    """A checked predicate; ValueError saying what is wrong with it."""
    try:
        tree = sqlglot.parse_one(text, read=source_facts(source_kind).filter_dialect)
    except sqlglot.errors.ParseError as exc:
        raise ValueError(f"{text!r} does not parse as a {source_kind} predicate: "
                         f"{str(exc).splitlines()[0]}") from None
    if isinstance(tree, (exp.Select, exp.Command)) or not tree.find(exp.Column):
        raise ValueError(f"{text!r} is not a predicate over the table's columns (e.g. status <> 'test')")
    refused = next((n for n in tree.walk() if isinstance(n, _REFUSED)), None)
    if refused is not None:
        raise ValueError(f"{text!r}: {type(refused).__name__.lower()} is not allowed in a row filter; it is "
                         f"evaluated on one row at a time (its columns, literals, operators and functions)")
    volatile = next((n for n in tree.walk() if isinstance(n, _VOLATILE) or (
        isinstance(n, exp.Func) and (n.sql_name() or "").lower() in _VOLATILE_NAMES)), None)
    if volatile is not None:
        raise ValueError(f"{text!r}: {volatile.sql()} changes by itself, so a row would leave or enter the filter with "
                         f"no change event to carry it; filter on the row's own values")
    qualified = [c.sql() for c in tree.find_all(exp.Column) if c.table]
    if qualified:
        raise ValueError(f"{text!r}: name the table's columns alone, not {', '.join(qualified)}")
    return RowFilter(text, source_kind)
