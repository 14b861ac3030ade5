"""Which source table shapes Tideline carries exactly, and which it refuses before any work.

Pure: the engine reads the catalog into a `Relation`; `refusal` judges it for the table's mode.
A refused table is left alone (state `refused`, with the reason and the fix) while the
pipeline's other tables load and stream — a table whose changes would never reach the stream
must never look like a quiet one.
"""
from __future__ import annotations

from dataclasses import dataclass

from tideline.core.errors import SourceError
from tideline.core.table_shape import TableShape, select_columns

KINDS = {"r": "table", "p": "partitioned table", "v": "view", "m": "materialized view", "f": "foreign table",
         "S": "sequence", "c": "composite type", "t": "TOAST table", "I": "partitioned index", "i": "index"}
IDENTITIES = {"d": "DEFAULT", "n": "NOTHING", "f": "FULL", "i": "USING INDEX"}


@dataclass(frozen=True)
class Relation:
    """The catalog's facts about one named source relation (PostgreSQL terms; MariaDB fills what
    it has: kind and key)."""
    schema: str
    name: str
    relkind: str = "r"                    # pg_class.relkind
    persistence: str = "p"                # p permanent, u unlogged, t temporary
    replica_identity: str = "d"           # pg_class.relreplident
    has_primary_key: bool = True
    identity_index_has_key: bool | None = None   # USING INDEX: the index holds every key column
    partition_root: str | None = None     # a partition: its root, quoted
    partition_root_key: tuple[str, str] | None = None   # ...as (schema, name)
    inherits_from: str | None = None      # a legacy inheritance child: its parents
    inheritance_children: str | None = None      # a legacy inheritance parent: its children
    unlogged_partitions: str | None = None
    foreign_partitions: str | None = None
    server_version: int = 150000

    @property
    def qualified(self) -> str:
        return f"{quote(self.schema)}.{quote(self.name)}"


@dataclass(frozen=True)
class Refusal:
    table: str
    reason: str
    fix: str    # "" when the reason already says what to do

    def message(self) -> str:
        return f"refused: {self.reason}." + (f" Fix: {self.fix}" if self.fix else "")


def quote(name: str) -> str:
    """PostgreSQL's quote_ident, for messages a person pastes into psql."""
    plain = name.isidentifier() and name == name.lower() and name.isascii()
    return name if plain else '"' + name.replace('"', '""') + '"'


def refusal(rel: Relation | None, schema: str, table: str, mode: str,
            pipeline_tables: frozenset[tuple[str, str]] = frozenset()) -> Refusal | None:
    """None when the table can be carried exactly in `mode` (cdc | batch), else why not and the fix.
    pipeline_tables: the pipeline's tables as (schema, name) (a partition
    named beside its own root would have its changes published as the root's)."""
    qualified = f"{quote(schema)}.{quote(table)}"
    if rel is None:
        return Refusal(table, f"{qualified} does not exist at the source",
                       "create it, or remove it from the pipeline config (names are written as the database "
                       "spells them: case and spaces count)")
    kind = KINDS.get(rel.relkind, f"relation of kind {rel.relkind!r}")
    if rel.relkind not in ("r", "p"):
        never = {"v": "a view holds no rows of its own: its changes are its base tables' changes",
                 "m": "a materialized view's refreshes are not decoded into row changes",
                 "f": "a foreign table's rows live in another server, whose changes never reach this log"}
        return Refusal(table, f"{qualified} is a {kind}; " + never.get(rel.relkind, "only tables can be synced"),
                       "sync the tables it reads from instead (name them in the pipeline config)")
    if rel.persistence == "t":
        return Refusal(table, f"{qualified} is a temporary table: other sessions cannot read it and its changes "
                              "are never logged", "sync a permanent table")
    if mode == "batch":
        return None   # a batch run reads rows by their cursor with SELECT: log and identity do not matter
    if rel.persistence == "u":
        return Refusal(table, f"{qualified} is UNLOGGED: its changes never reach the write-ahead log, so no change "
                              "stream can carry them (PostgreSQL refuses it in a publication)",
                       f"ALTER TABLE {qualified} SET LOGGED; (or sync it with mode: batch and a cursor_column)")
    if rel.unlogged_partitions:
        return Refusal(table, f"{qualified} has UNLOGGED partitions ({rel.unlogged_partitions}): their changes "
                              "never reach the write-ahead log",
                       "ALTER TABLE <partition> SET LOGGED; for each of them")
    if rel.foreign_partitions:
        return Refusal(table, f"{qualified} has foreign-table partitions ({rel.foreign_partitions}): their rows "
                              "live in another server, whose changes never reach this log",
                       "sync the partitions' own server separately, or detach them")
    if rel.relkind == "p" and rel.server_version < 130000:
        return Refusal(table, f"{qualified} is a partitioned table and PostgreSQL "
                              f"{rel.server_version // 10000} cannot publish a partition tree as one table "
                              "(publish_via_partition_root needs PostgreSQL 13)",
                       "upgrade the source to PostgreSQL 13 or later, or name each partition as its own table")
    if rel.partition_root_key and tuple(rel.partition_root_key) in pipeline_tables:
        return Refusal(table, f"{qualified} is a partition of {rel.partition_root}, which the pipeline also "
                              "syncs: its changes are published as the root's, so this table would never "
                              "receive one", f"remove {table!r} from the pipeline (its rows arrive in "
                                            f"{rel.partition_root}), or sync the partitions one by one without "
                                            "the root")
    if rel.inheritance_children:
        return Refusal(table, f"{qualified} has child tables by INHERITS ({rel.inheritance_children}): a full "
                              "load reads their rows with it, but their changes are published under their "
                              "own names, so the target would go stale",
                       "name each child table in the pipeline as a table of its own, or move the tree to "
                       "declarative partitioning (PARTITION BY), which is carried as one table")
    identity = IDENTITIES.get(rel.replica_identity, rel.replica_identity)
    if not rel.has_primary_key:
        return Refusal(table, f"{qualified} has no primary key (replica identity {identity}): the stream "
                              "applies changes by key",
                       f"ALTER TABLE {qualified} ADD PRIMARY KEY (<columns>); (batch mode upserts by key too)")
    if rel.replica_identity == "n":
        return Refusal(table, f"{qualified} has REPLICA IDENTITY NOTHING: its updates and deletes are logged "
                              "without any key (with the table in a publication, PostgreSQL then refuses "
                              "them)", f"ALTER TABLE {qualified} REPLICA IDENTITY DEFAULT;")
    if rel.replica_identity == "i" and not rel.identity_index_has_key:
        return Refusal(table, f"{qualified} has REPLICA IDENTITY USING INDEX on an index without every "
                              "primary-key column: a delete's event would not carry the key it is applied by",
                       f"ALTER TABLE {qualified} REPLICA IDENTITY DEFAULT;")
    return None


def describe_carried(rel: Relation) -> str:
    """How a carried table travels, in words (the doctor's pass line)."""
    if rel.relkind == "p":
        return "partitioned table: carried as one table (published via its root)"
    if rel.partition_root:
        return f"partition of {rel.partition_root}: carried as a table of its own"
    if rel.inherits_from:
        return f"inheritance child of {rel.inherits_from}: carried with its own rows"
    return f"table, replica identity {IDENTITIES.get(rel.replica_identity, rel.replica_identity)}"


def partition_tree_change(known: dict[str, dict], now: dict[str, dict]) -> str | None:
    """Why a partitioned table must be reloaded, given its partitions as last seen and now
    ({oid: {"name", "created_as_partition"}}), or None. A partition created as one (CREATE TABLE
    … PARTITION OF) starts empty, and every row it gets is a change event; one attached later
    may bring rows no event carried, and one detached or dropped takes rows away without delete
    events."""
    gone = [known[o]["name"] for o in known if o not in now]
    attached = [now[o]["name"] for o in now if o not in known and not now[o]["created_as_partition"]]
    parts = []
    if attached:
        parts.append(f"partition(s) {', '.join(attached)} attached (their rows were never change events)")
    if gone:
        parts.append(f"partition(s) {', '.join(gone)} detached or dropped (their rows left without delete events)")
    return "; ".join(parts) or None


def finish_shape(label: str, shape: TableShape, configured_pk, tcfg) -> TableShape:
    """Checks the configured key against the source's and applies the column selection (every engine)."""
    if not shape.columns:
        raise SourceError(f"{label} has no columns.")
    if configured_pk is not None:
        if not shape.primary_key:
            raise SourceError(
                f"{label}: the pipeline config says primary_key {configured_pk} but the source table has no "
                f"primary key. Add it at the source (ALTER TABLE {shape.schema}.{shape.name} ADD PRIMARY KEY "
                f"(...)): changes are applied by key.")
        if list(shape.primary_key) != list(configured_pk):
            raise SourceError(f"{label}: the pipeline config says primary_key {configured_pk} but the source's "
                              f"primary key is {list(shape.primary_key)}. Make the config match the source.")
    if tcfg is not None and (tcfg.columns is not None or tcfg.exclude_columns):
        shape = select_columns(shape, tcfg.columns, tcfg.exclude_columns, label)
    if tcfg is not None and tcfg.rename:   # the names the target gives its columns (core.target_names)
        from tideline.core.target_names import TargetNames
        TargetNames.of(tcfg).check(shape, label)
    if tcfg is not None and tcfg.hash_columns:   # held as salted hashes (core.column_hash)
        from tideline.core import column_hash
        salt = column_hash.salt_of(tcfg._hash_salt_conn) if tcfg._hash_salt_conn else None
        shape = column_hash.hashed_shape(shape, tcfg.hash_columns, salt, label)
    return shape
