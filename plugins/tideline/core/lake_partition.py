"""A table's `partition_by` for an Iceberg target: Iceberg's partition transforms, written as
Iceberg's own docs and Spark SQL write them — `day(ts)`, `bucket(16, id)`, `truncate(4, name)`,
`year`/`month`/`hour`, or a column alone (identity). Pure: parsed and checked when the config is
read (the syntax, and the column against `columns` when the table lists them) and, once the
source's types are known, against the column's Iceberg type; rendered as the Spark SQL of a
`PARTITIONED BY` clause."""
from __future__ import annotations

import re
from dataclasses import dataclass

from tideline.core.names import identifier

_FORM = re.compile(r"^\s*(?:(?P<fn>year|month|day|hour|bucket|truncate)\s*\(\s*(?:(?P<n>\d+)\s*,\s*)?"
                   r"(?P<col>[^(),\s]+)\s*\)|(?P<bare>[^(),\s]+))\s*$")
FORMS = "a column (identity), year(c), month(c), day(c), hour(c), bucket(N, c), truncate(N, c)"
# what each transform takes, by Iceberg type (the Iceberg spec's "Partition Transforms")
_FITS = {
    "year": ("date", "timestamp", "timestamptz"), "month": ("date", "timestamp", "timestamptz"),
    "day": ("date", "timestamp", "timestamptz"), "hour": ("timestamp", "timestamptz"),
    "bucket": ("int", "long", "decimal", "date", "time", "timestamp", "timestamptz", "string", "binary", "uuid"),
    "truncate": ("int", "long", "decimal", "string", "binary"),
    None: ("boolean", "int", "long", "float", "double", "decimal", "date", "time", "timestamp", "timestamptz",
           "string", "binary", "uuid"),
}


@dataclass(frozen=True)
class PartitionField:
    transform: str | None   # None: identity
    column: str
    n: int | None = None    # bucket count, truncate width

    @property
    def text(self) -> str:
        """As the config writes it."""
        if self.transform is None:
            return self.column
        return f"{self.transform}({self.n}, {self.column})" if self.n is not None else f"{self.transform}({self.column})"

    def spark_sql(self) -> str:
        col = "`" + self.column.replace("`", "``") + "`"
        if self.transform is None:
            return col
        if self.transform in ("bucket", "truncate"):
            return f"{self.transform}({self.n}, {col})"
        return f"{self.transform}s({col})"   # Spark's names: years, months, days, hours

    def misfit(self, iceberg_type: str) -> str | None:
        """Why this transform cannot apply to a column of `iceberg_type`; None when it can."""
        base = iceberg_type.split("(")[0].split("<")[0]
        if base in _FITS[self.transform]:
            return None
        takes = ", ".join(_FITS[self.transform])
        return (f"partition_by {self.text}: column {self.column} is {iceberg_type} in Iceberg, and "
                f"{self.transform or 'identity'} takes {takes}")


def parse(text: str) -> PartitionField:
    """One transform; ValueError naming the forms Iceberg takes."""
    m = _FORM.match(text or "")
    if not m:
        raise ValueError(f"{text!r} is not a partition transform: give {FORMS}")
    fn, n, col = m.group("fn"), m.group("n"), m.group("col") or m.group("bare")
    if fn in ("bucket", "truncate"):
        if n is None or int(n) < 1:
            raise ValueError(f"{text!r}: {fn} takes a width first, e.g. {fn}(16, {col})")
    elif n is not None:
        raise ValueError(f"{text!r}: {fn} takes the column alone, e.g. {fn}({col})")
    return PartitionField(fn, identifier(col, "partition column"), int(n) if n else None)


def check(fields: list[PartitionField]) -> None:
    """A column partitioned twice by the same transform is refused (Iceberg would too, later)."""
    seen = set()
    for f in fields:
        if (f.transform, f.column) in seen:
            raise ValueError(f"partition_by names {f.text} twice")
        seen.add((f.transform, f.column))
