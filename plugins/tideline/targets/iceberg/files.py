"""An Iceberg full load whose rows never pass through Spark: data files written from the source's
CSV by the load's pipes (pipes.lake_files), committed through Iceberg's own Java API without a
Spark job (spark_session.jvm_now; PyIceberg writes no format version 3 metadata).

A consistent load writes its snapshot's files and replaces the table with them in one commit
(commit_files). A chunked load appends each group of chunks' files to the staging table in a
commit that names them (targets.iceberg.load.staged_chunks reads those), and the live table is
replaced by the staging table's files in one commit (FileStaging): no row is read or written
twice. Spark keeps what only its writer does (files_refusal).

Measured against the plain Spark job a user would write (tests/bench/iceberg.py, 5M rows, 2 cores):
see docs/benchmarks.md.
"""
from __future__ import annotations

import json
import logging
import re
import uuid

from tideline.core import lake_types
from tideline.core.errors import LoadVerificationError, RefusedValue
from tideline.core.table_extras import TableExtras
from tideline.core.table_shape import TableShape
from tideline.targets.iceberg.reads import read_columns, read_query

log = logging.getLogger("tideline.full_load")
HOW = "COPY CSV -> Arrow -> Parquet -> Iceberg"


def files_refusal(engine, columns: list[lake_types.LakeColumn], extras: TableExtras,
                  partition_by: tuple[str, ...], keeping: bool) -> str | None:
    """Why a snapshot goes through Spark JDBC and Spark's writer rather than as data files written
    from Arrow; None: it need not. Spark keeps what it alone does: a source read with JDBC, the
    rows a soft-delete or history table carries over, the extra columns' values, partition
    transforms, and lists."""
    from tideline.pipes.lake_files import writes_type
    if not engine.reads_csv:
        return f"{engine.label} sources are read with Spark JDBC"
    if keeping or extras.columns:
        return "the table's extra columns (deletes, metadata, history) are Spark's to write"
    if partition_by:
        return "partitioned tables are written by Spark"
    lists = [c.name for c in columns if not writes_type(c.iceberg)]
    if lists:
        return f"columns {', '.join(lists)} are lists, which Spark writes"
    return None


def field_ids(current, names: list[str]) -> dict[str, int]:
    """The field id each column gets when the load's commit replaces the table, as Iceberg's
    replace transaction assigns them (the data files are written before it begins): a column the
    table has keeps its id, a new one takes the next after the table's last; 1, 2, ... for a new
    table. The commit checks them against the transaction's own."""
    if current is None:
        return {n: i + 1 for i, n in enumerate(names)}
    ids, last, out = {f.name: f.field_id for f in current.schema().fields}, current.metadata.last_column_id, {}
    for n in names:
        if n not in ids:
            last += 1
        out[n] = ids.get(n, last)
    return out


def schema_json(columns: list[lake_types.LakeColumn], ids: dict[str, int]) -> str:
    """The table's schema in Iceberg's JSON: every column optional (the stream's writes into it
    expect nothing else)."""
    return json.dumps({"type": "struct", "schema-id": 0, "fields": [
        {"id": ids[c.name], "name": c.name, "required": False, "type": c.iceberg.replace(",", ", ")} for c in columns]})


def new_table_location(store, schema: str, table: str) -> str:
    """Where a table the load creates keeps its files: its namespace's location, else the
    warehouse's (a location, not a REST catalog's warehouse name) — as Iceberg's catalogs place a
    new table by default."""
    location = None
    try:
        location = store.pyiceberg_catalog().load_namespace_properties((schema,)).get("location")
    except Exception:   # noqa: BLE001 — a namespace the load's commit creates: the warehouse's place
        log.debug("no location for namespace %s", schema, exc_info=True)
    if location:
        return f"{location.rstrip('/')}/{table}"
    warehouse = store.warehouse or ""
    if "://" not in warehouse:
        from tideline.core.errors import TargetError
        raise TargetError(f"catalog {store.catalog}: namespace {schema} has no location and the warehouse "
                          f"{warehouse or '(none)'} is not one, so the load cannot place table {table}'s files. "
                          f"Give the namespace a location in the catalog (CREATE NAMESPACE … LOCATION), or "
                          f"name the warehouse's location in the connection's extra.warehouse")
    return f"{warehouse.rstrip('/')}/{schema}/{table}"


def parquet_options(properties: dict[str, str]) -> dict:
    """The Parquet writer's compression as the table's properties ask (Iceberg's defaults: zstd,
    at parquet-java's default level 3)."""
    codec = properties.get("write.parquet.compression-codec", "zstd").lower()
    level = properties.get("write.parquet.compression-level")
    if codec == "uncompressed":
        return {"compression": "none"}
    return {"compression": codec, **({"compression_level": int(level)} if level else
                                     {"compression_level": 3} if codec == "zstd" else {})}


class FileLoad:
    """One load's file writer: the columns with the field ids of `current` (the live table, or
    None), into `table`'s data directory (`current`'s, or where the catalog puts a new table's);
    `reads(predicates)` are the COPY statements of those key ranges."""

    def __init__(self, store, engine, shape: TableShape, schema: str, label: str, current, session_init: str | None,
                 where: str | None, table: str | None = None):
        from tideline.pipes.lake_files import FileColumn, LakeFiles
        self.engine, self.shape, self.label, self.where = engine, shape, label, where
        self.columns = read_columns(engine, shape)
        self.ids = field_ids(current, [c.name for c in self.columns])
        table = table or shape.name
        if current is not None and table == shape.name:
            data = current.properties.get("write.data.path") or f"{current.location().rstrip('/')}/data"
        else:
            data = f"{new_table_location(store, schema, table)}/data"
        self.files = LakeFiles(
            engine.csv_reader(session_init), label, shape.name,
            [FileColumn(c.name, c.iceberg, self.ids[c.name], bool(c.refuse),
                        lake_types.refused_value_message(label, c, "\x00") if c.refuse else None) for c in self.columns],
            list(shape.primary_key), data, uuid.uuid4().hex[:12],
            parquet_options(current.properties if current is not None else {}), store.settings.store)

    def reads(self, predicates: list[str]) -> list[str]:
        q, names = self.engine.quote, self.files.read_names()
        query = read_query(self.engine, self.shape, self.columns, self.where)
        return [f"COPY (SELECT {', '.join(q(n) for n in names)} FROM {query} WHERE {p}) TO STDOUT WITH (FORMAT csv)"
                for p in predicates]

    def write(self, spread, items: list[tuple[int, str]]) -> list[dict]:
        """The items' (partition or chunk, read) files, by the load's pipes (SnapshotLoad.spread);
        a refused value raises as the table's RefusedValue."""
        try:
            return spread(items, self.files.copier, in_threads=True)
        except Exception as exc:   # a refused value, in a Spark task: Spark wraps the message
            try:
                self.files.remove_written()
            except OSError as gone:   # the load's own error is the one to raise
                log.warning("%s: the failed load's data files could not all be removed (%s); they are in no "
                            "snapshot, and the table's orphan-file clean-up takes them", self.label, gone)
            refused = re.search(re.escape(self.label) + r": column .*?and reload", str(exc))
            if refused and not isinstance(exc, RefusedValue):
                raise RefusedValue(refused.group(0), table=self.shape.name) from None
            raise

    @property
    def schema_json(self) -> str:
        return schema_json(self.columns, self.ids)

    def describe(self) -> str:
        return ", ".join(f"{c.name} {c.iceberg}{' (exact text)' if c.as_text else ''}" for c in self.columns)


class JavaCatalog:
    """The catalog in Iceberg's Java API for a load's commits, opened once (a JDBC catalog's pool),
    closed with the block."""

    def __init__(self, spark, store, schema: str, label: str):
        from tideline.spark_session import jvm_now
        self.jvm, hadoop_conf = jvm_now(spark)
        self.ice = self.jvm.org.apache.iceberg
        self.catalog = store.java_catalog(self.jvm, hadoop_conf)
        self.schema, self.label = schema, label

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.catalog.close()

    def ident(self, table: str):
        return self.ice.catalog.TableIdentifierParser.fromJson(json.dumps({"namespace": [self.schema], "name": table}))

    def _map(self, values: dict[str, str]):
        out = self.jvm.java.util.HashMap()
        for key, value in values.items():
            out.put(key, value)
        return out

    def _replacing(self, table: str, table_schema: str, ids: dict[str, int], properties: dict[str, str]):
        """A transaction that replaces (or creates) `table` with `table_schema`, unpartitioned,
        whose field ids must be the data files' `ids`."""
        ice, namespace = self.ice, self.ident(table).namespace()
        if not self.catalog.namespaceExists(namespace):
            try:
                self.catalog.createNamespace(namespace)
            except Exception:   # noqa: BLE001 — py4j wraps it: only another load creating it at once is fine
                if not self.catalog.namespaceExists(namespace):
                    raise
        txn = self.catalog.newReplaceTableTransaction(self.ident(table), ice.SchemaParser.fromJson(table_schema),
                                                      ice.PartitionSpec.unpartitioned(), self._map(properties), True)
        got = {f.name(): f.fieldId() for f in txn.table().schema().columns()}
        if got != ids:
            raise LoadVerificationError(
                f"{self.label}: the table's replacement gives its columns the field ids {got}, but the load's data "
                f"files were written with {ids}; nothing was committed. Rerun the full load; if this repeats, "
                f"report it (the files stay in the table's data directory, uncommitted)")
        return txn

    def _appended(self, append, t, files: list, summary: dict[str, str]) -> None:
        ice = self.ice
        metrics = ice.MetricsConfig.forTable(t)
        for uri, _rows, _size in files:
            found = t.io().newInputFile(uri)
            append.appendFile(ice.DataFiles.builder(t.spec()).withInputFile(found).withFormat(ice.FileFormat.PARQUET)
                              .withMetrics(ice.parquet.ParquetUtil.fileMetrics(found, metrics)).build())
        for key, value in summary.items():
            append.set(key, value)
        append.commit()

    def replace_with_files(self, table: str, table_schema: str, ids: dict[str, int], files: list,
                           summary: dict[str, str], properties: dict[str, str]) -> None:
        """One commit: `table` replaced (or created) with `table_schema` and `properties`, its
        rows the data `files` ([uri, rows, bytes]; metrics read from their footers), `summary`
        in the snapshot's summary."""
        txn = self._replacing(table, table_schema, ids, properties)
        self._appended(txn.newAppend(), txn.table(), files, summary)
        txn.commitTransaction()

    def create_empty(self, table: str, table_schema: str, properties: dict[str, str]) -> None:
        """`table` dropped (its files kept: a dropped staging table's may be live elsewhere) and
        created empty."""
        self.catalog.dropTable(self.ident(table), False)
        ids = {f["name"]: f["id"] for f in json.loads(table_schema)["fields"]}
        self._replacing(table, table_schema, ids, properties).commitTransaction()

    def append_files(self, table: str, files: list, summary: dict[str, str]) -> None:
        t = self.catalog.loadTable(self.ident(table))
        self._appended(t.newAppend(), t, files, summary)

    def replace_with_table(self, table: str, source: str, table_schema: str, ids: dict[str, int],
                           summary: dict[str, str], properties: dict[str, str]) -> None:
        """One commit: `table` replaced with `table_schema` and `properties`, its rows the data
        files of `source`'s current snapshot (each file's metrics as `source` recorded them)."""
        ice = self.ice
        src = self.catalog.loadTable(self.ident(source))
        if {f.name(): f.fieldId() for f in src.schema().columns()} != ids:
            raise LoadVerificationError(f"{self.label}: the staging table {source}'s field ids are not the ones the "
                                        f"table's replacement takes; nothing was committed. Rerun the full load.")
        txn = self._replacing(table, table_schema, ids, properties)
        t, append = txn.table(), txn.newAppend()
        tasks = src.newScan().planFiles()
        try:
            for task in tasks.iterator():
                append.appendFile(ice.DataFiles.builder(t.spec()).copy(task.file()).build())
        finally:
            tasks.close()
        for key, value in summary.items():
            append.set(key, value)
        append.commit()
        txn.commitTransaction()

    def drop(self, table: str) -> None:
        """Drops `table` from the catalog, its files kept (they may be another table's now)."""
        self.catalog.dropTable(self.ident(table), False)


def commit_files(spark, engine, store, shape: TableShape, snap, schema: str, label: str, summary: dict[str, str],
                 current, where: str | None, spread, properties: dict[str, str]) -> int:
    """The snapshot as data files, then one commit that replaces the table (created, or given the
    load's schema, as Spark's createOrReplace would) and carries `summary`; returns the rows the
    commit holds. A partition that fails removes its files; none are committed."""
    load = FileLoad(store, engine, shape, schema, label, current, snap.session_init, where)
    reads = load.reads(snap.predicates)
    log.info("%s: writing %d partitions as data files into %s (Arrow, one Iceberg commit): %s", label, len(reads),
             store.table_id(schema, shape.name), load.describe())
    figures = load.write(spread, list(enumerate(reads)))
    with JavaCatalog(spark, store, schema, label) as java:
        java.replace_with_files(shape.name, load.schema_json, load.ids,
                                [f for figure in figures for f in figure["files"]], summary, properties)
    return int((store.current_summary(schema, shape.name) or {}).get("total-records", -1))


class FileStaging:
    """A chunked load's groups of chunks as data files appended to the staging table (each commit
    naming its load and chunks: load.staged_chunks), then the staging table's files made the live
    table's in one commit. Only when the live table's replacement gives the columns the ids a new
    table has (1, 2, ...: a table Tideline created, columns added at its end since): the staging
    table has those, and its files become the live table's as they are (`fits`)."""

    def __init__(self, store, load, current, staging: str):
        self.store, self.load, self.staging = store, load, staging
        # written in the staging table's directory: the live table's orphan-file clean-up
        # (maintenance) must not take the files of a load that has not gone live yet
        self.files = FileLoad(store, load.engine, load.shape, load.schema, load.label, current,
                              load.engine.chunk_session_init, load.where, table=staging)
        self.java = None

    @staticmethod
    def fits(engine, shape: TableShape, current) -> bool:
        names = [c.name for c in read_columns(engine, shape)]
        return field_ids(current, names) == field_ids(None, names)

    def __enter__(self):
        self.java = JavaCatalog(self.load.spark, self.store, self.load.schema, self.load.label)
        return self

    def __exit__(self, *exc) -> None:
        self.java.__exit__(*exc)

    def create(self, properties: dict[str, str]) -> None:
        self.java.create_empty(self.staging, self.files.schema_json, properties)

    def append(self, chunked, group: list[int], summary: dict[str, str]) -> dict[int, int]:
        """The group's chunks as files, appended in one commit; chunk -> rows."""
        items = list(zip(group, self.files.reads([chunked.ranges[c] for c in group])))
        figures = self.files.write(self.load.spread, items)
        self.java.append_files(self.staging, [f for figure in figures for f in figure["files"]], summary)
        return {f["partition"]: f["copied"] for f in figures}

    def publish(self, summary: dict[str, str], properties: dict[str, str]) -> int:
        """The staging table's files become the live table's; no row carried over (0)."""
        self.java.replace_with_table(self.load.shape.name, self.staging, self.files.schema_json, self.files.ids,
                                     summary, properties)
        return 0

    def drop(self) -> None:
        self.java.drop(self.staging)
