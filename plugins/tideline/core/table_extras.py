"""The columns a target table carries beside the source's, for the people who read it: a soft
delete's time, each version's validity (`history: true`, SCD type 2) and the change metadata
(`deletes: soft`, `metadata: [...]` per table). Pure: which columns, their logical types, what a
full load fills them with, and the collisions that refuse a config. Each target maps the logical
types to its own (PostgreSQL: timestamptz/text/boolean; Iceberg: timestamptz/string/boolean)."""
from __future__ import annotations

from dataclasses import dataclass

PREFIX = "_tideline_"
DELETED_AT = "_tideline_deleted_at"
VALID_FROM, VALID_TO, CURRENT = "_tideline_valid_from", "_tideline_valid_to", "_tideline_current"
# a MariaDB history table's order of versions: the GTID sequence number of the last source
# transaction a version holds (its binlog times are whole seconds and may run back; see
# core.apply_sql.history_statement)
SOURCE_ORDER = "_tideline_source_order"
METADATA = ("synced_at", "op", "source_ts", "source_position")
# op of a row a full load wrote: Debezium's own for a snapshot read
LOADED_OP = "r"


@dataclass(frozen=True)
class ExtraColumn:
    name: str
    kind: str        # "timestamptz" | "text" | "boolean"
    about: str       # what it holds, for the docs and the reference

    @property
    def pg_type(self) -> str:
        return {"timestamptz": "timestamp with time zone", "text": "text", "boolean": "boolean",
                "bigint": "bigint"}[self.kind]

    @property
    def iceberg_type(self) -> str:
        return {"timestamptz": "timestamptz", "text": "string", "boolean": "boolean", "bigint": "long"}[self.kind]


_ABOUT = {
    "synced_at": ("timestamptz", "when the target committed the row's last change (the load's time for a loaded row)"),
    "op": ("text", "the last change's operation: c insert, u update, d delete (soft deletes), r read by a full load"),
    "source_ts": ("timestamptz", "the source's commit time of the last change (NULL for a loaded row)"),
    "source_position": ("text", "where the last change was: the source's log position (PostgreSQL LSN, MariaDB "
                                "GTID or binlog file:position) and the Kafka partition:offset it travelled at"),
}


@dataclass(frozen=True)
class TableExtras:
    """One table's extra columns: soft deletes or history, and the metadata it asked for, in a
    fixed order."""
    soft_deletes: bool = False
    metadata: tuple[str, ...] = ()
    history: bool = False   # SCD type 2: one row per version, keyed by the source key and VALID_FROM
    changelog: bool = False   # every event in <table>__changes beside it (CHANGES_SUFFIX)
    source_order: bool = False   # history whose versions follow SOURCE_ORDER, not the commit times (MariaDB)

    @classmethod
    def of(cls, table_config, source_kind: str | None = None) -> "TableExtras":
        """The table's extras; `source_kind` (the pipeline's source.kind) says how a history
        table orders its versions: by commit time (PostgreSQL), or by its log position (MariaDB's
        GTID): core.support.SourceFacts.order_fields."""
        from tideline.core.support import source_facts
        history = getattr(table_config, "history", False)
        by_position = history and source_kind is not None and bool(source_facts(source_kind).order_fields)
        return cls(table_config.deletes == "soft", tuple(m for m in METADATA if m in table_config.metadata),
                   history, getattr(table_config, "changelog", False), by_position)

    @property
    def columns(self) -> list[ExtraColumn]:
        out = [ExtraColumn(DELETED_AT, "timestamptz", "when the source deleted the row; NULL while it exists")] \
            if self.soft_deletes else []
        if self.history:
            out += [ExtraColumn(VALID_FROM, "timestamptz", "the source's commit time of the change that made this "
                                                           "version (the snapshot's time for a loaded row)"),
                    ExtraColumn(VALID_TO, "timestamptz", "the commit time of the change that ended it; NULL while "
                                                         "it is the row's current version"),
                    ExtraColumn(CURRENT, "boolean", "whether this is the row's current version (false once the "
                                                    "row is deleted at the source)")]
            if self.source_order:
                out.append(ExtraColumn(SOURCE_ORDER, "bigint", "MariaDB sources: the GTID sequence number of the "
                                                               "last source transaction this version holds (the "
                                                               "snapshot's for a loaded row)"))
        return out + [ExtraColumn(PREFIX + m, *_ABOUT[m]) for m in self.metadata]

    @property
    def key_columns(self) -> list[str]:
        """What the target's key adds to the source's: a version's start, with history."""
        return [VALID_FROM] if self.history else []

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    def __bool__(self) -> bool:
        return self.soft_deletes or bool(self.metadata) or self.history or self.changelog

    def collisions(self, source_columns) -> list[str]:
        """Source columns named as one of these extra columns: the table cannot carry both."""
        return sorted((set(self.names) | ({SOURCE_ORDER} if self.history else set())) & set(source_columns))


CHANGES_SUFFIX = "__changes"
# a change log's columns (besides Tideline's): what each event was, where it came from, when it landed
CHANGE_LOG = (("_tideline_op", "text"), ("_tideline_source_ts", "timestamptz"), ("_tideline_source_position", "text"),
              ("_tideline_synced_at", "timestamptz"), ("_tideline_topic", "text"), ("_tideline_partition", "int"),
              ("_tideline_offset", "bigint"), ("key", "json"), ("before", "json"), ("after", "json"))


def changes_table(table: str) -> str:
    """The change log beside `table`."""
    return table + CHANGES_SUFFIX


def position_text(log_position: str | None, partition: int, offset: int) -> str:
    """`_tideline_source_position`: the source's log position, then the Kafka partition:offset."""
    return f"{log_position or '-'} kafka {partition}:{offset}"


# Spark SQL (an Iceberg target): the values of a row written by a load or a repair, and of a row
# a change event writes (`s.` the MERGE's source view, with the event's op, time and position)
_SPARK_LOADED = {DELETED_AT: "CAST(NULL AS TIMESTAMP)", PREFIX + "synced_at": "current_timestamp()",
                 PREFIX + "op": f"'{LOADED_OP}'", PREFIX + "source_ts": "CAST(NULL AS TIMESTAMP)",
                 PREFIX + "source_position": "CAST(NULL AS STRING)", SOURCE_ORDER: "CAST(NULL AS BIGINT)"}


def spark_loaded(extras: TableExtras, seeded_at=None, order: str | None = None) -> list[tuple[str, str]]:
    """(column, Spark SQL value) of a row a load or a repair writes: with history, a current version
    from `seeded_at` (the snapshot's time; now without one), in the source's order at `order`
    (a Spark SQL value: SOURCE_ORDER)."""
    start = "current_timestamp()" if seeded_at is None else \
        f"timestamp_micros({int(seeded_at.timestamp() * 1_000_000)})"
    values = {**_SPARK_LOADED, VALID_FROM: start, VALID_TO: "CAST(NULL AS TIMESTAMP)", CURRENT: "true",
              **({SOURCE_ORDER: order} if order else {})}
    return [(c.name, values[c.name]) for c in extras.columns]


def spark_event(extras: TableExtras, deleting: bool | None, op: str, ts_us: str, pos: str, part: str, off: str
                ) -> list[tuple[str, str]]:
    """(column, Spark SQL value) of a row a change event writes, from the view's columns named
    op, ts_us (the source's commit time in µs), pos, part and off: as the PostgreSQL target's
    apply (core.apply_sql.extra_values; `deleting` None: by the event's op)."""
    source_ts = f"timestamp_micros({ts_us})"
    deleted = f"coalesce({source_ts}, current_timestamp())"
    if deleting is None:
        deleted = f"CASE WHEN {op} = 'd' THEN {deleted} ELSE CAST(NULL AS TIMESTAMP) END"
    values = {DELETED_AT: deleted if deleting is not False else "CAST(NULL AS TIMESTAMP)",
              PREFIX + "synced_at": "current_timestamp()", PREFIX + "op": op, PREFIX + "source_ts": source_ts,
              PREFIX + "source_position": f"concat(coalesce({pos}, '-'), ' kafka ', CAST({part} AS STRING), ':', "
                                          f"CAST({off} AS STRING))"}
    return [(c.name, values[c.name]) for c in extras.columns]
