"""The executor side of an Iceberg full load whose rows never pass through Spark's JVM.

A partition's rows are read from a PostgreSQL source as CSV: `COPY … TO STDOUT` of the same exact
read Spark JDBC would run (targets.iceberg.load.read_query: each value as core.lake_types says it
travels, a refusal flag beside each column that has one). Arrow's CSV reader parses them into the
Iceberg type each column has, and they are written as Parquet data files that carry the table's
field ids. The driver then commits every partition's files in one Iceberg commit through Iceberg's
own API (targets.iceberg.load.commit_files); until then no reader sees them.

Why not Spark: in a profile of Spark's JDBC load (tests/bench/iceberg.py), ~46% of the JVM's CPU
went on turning JDBC rows into Spark's rows and ~16% on the PostgreSQL driver's ResultSet. Arrow's
CSV reader and Parquet writer are C++ and release the GIL; Python's part is psycopg2 handing over
one row per call.

Kept light, like pipes.copy_pipe: every executor's Python worker imports it before its first
partition.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from tideline.pipes.copy_pipe import report_partition

# CSV bytes parsed at once, and rows per Parquet row group: a process's memory is ~6x the text it
# parses at once (the text, Arrow's columns, the writer's pages); a row group of fewer rows
# compresses worse (8 MB of text each: files 10% larger)
TEXT_BLOCK = 8 << 20
ROW_GROUP_ROWS = 128 * 1024
FILE_BYTES = 512 << 20     # a data file is rolled over past this (Iceberg's write.target-file-size-bytes)
FILE_PREFIX = "tl-load-"   # the files of one load: tl-load-<load id>-<partition>-<n>.parquet


@dataclass(frozen=True)
class FileColumn:
    """One column of the data files: its Iceberg type and field id, whether a refusal flag is read
    just before it, and the refusal's message (NUL where the key's text goes)."""
    name: str
    iceberg: str
    field_id: int
    flagged: bool = False
    refused: str | None = None


def arrow_type(iceberg: str):
    """The Arrow type Arrow's CSV reader parses a column's text as (dates travel as days since
    1970, timestamps as microseconds: core.lake_types), and the type it is written as."""
    import pyarrow as pa
    if iceberg.startswith("decimal("):
        precision, scale = (int(x) for x in iceberg[8:-1].split(","))
        return pa.decimal128(precision, scale), pa.decimal128(precision, scale)
    return {"int": (pa.int32(), pa.int32()), "long": (pa.int64(), pa.int64()),
            "float": (pa.float32(), pa.float32()), "double": (pa.float64(), pa.float64()),
            "boolean": (pa.bool_(), pa.bool_()), "string": (pa.string(), pa.string()),
            "binary": (pa.string(), pa.binary()), "date": (pa.int32(), pa.date32()),
            "timestamp": (pa.int64(), pa.timestamp("us")),
            "timestamptz": (pa.int64(), pa.timestamp("us", tz="UTC"))}[iceberg]


FILE_TYPES = ("int", "long", "float", "double", "boolean", "string", "binary", "date", "timestamp", "timestamptz")


def writes_type(iceberg: str) -> bool:
    """Whether data files of this Iceberg type are written here (lists are Spark's)."""
    return iceberg in FILE_TYPES or iceberg.startswith("decimal(")


def flag_name(i: int) -> str:
    return f"__tl_bad_{i}"


class LakeFiles:
    """Picklable: `copier(where)` is the per-partition function of pipes' pipe_partitions, over
    (partition, COPY statement) items; each yields the partition's figures with its files
    ([path, rows, bytes]). `source` is a pipes.copy_pipe.PostgresPipeSource; `data_dir` the
    table's data location (a file: or object store URI), `store` the object store it is on
    (targets.iceberg.catalog.ObjectStore: endpoint, region, keys; None: a file system, or S3 as the
    environment configures it); `parquet`: the writer's compression and level."""

    def __init__(self, source, label: str, table: str, columns: list[FileColumn], keys: list[str],
                 data_dir: str, load_id: str, parquet: dict, store=None):
        self.source, self.label, self.table, self.columns, self.keys = source, label, table, columns, keys
        self.data_dir, self.load_id, self.parquet, self.store = data_dir.rstrip("/"), load_id, parquet, store

    def filesystem(self):
        """(pyarrow file system, path) of the data location: S3 with the store's settings (and the
        checksum settings its SDK reads from the environment), else what the URI names."""
        import os
        from urllib.parse import urlsplit

        from pyarrow import fs
        parts = urlsplit(self.data_dir)
        if parts.scheme in ("s3", "s3a", "s3n"):
            opts = self.store.arrow_options() if self.store is not None else {}
            if self.store is not None:
                os.environ.update(self.store.environment())
            return fs.S3FileSystem(**opts), f"{parts.netloc}{parts.path}"
        return fs.FileSystem.from_uri(self.data_dir)

    def read_names(self) -> list[str]:
        """The read's columns in order: each column's flag (if any) just before it."""
        out = []
        for i, c in enumerate(self.columns):
            if c.flagged:
                out.append(flag_name(i))
            out.append(c.name)
        return out

    def copier(self, where: str = ""):
        def copy(items):
            for part, read_sql in items:
                started = time.monotonic()
                out = _PartitionFiles(self, part)
                try:
                    sink = _Blocks(lambda data: out.write(self.table_of(data)))
                    read = self.source.copy_out(read_sql, sink)
                    sink.flush()
                    out.close()
                except BaseException:
                    out.discard()
                    raise
                secs = time.monotonic() - started
                how = "COPY CSV -> Arrow -> Parquet"
                report_partition(self.label, part, read, sink.total, secs, f"{how}, {where}" if where else how)
                if out.rows != read:
                    raise RuntimeError(f"{self.label}: partition {part} read {read:,} rows but its data files hold "
                                       f"{out.rows:,}; nothing was committed. Rerun the full load.")
                yield {"partition": part, "rows": read, "copied": out.rows, "seconds": secs, "how": how,
                       "files": out.files}
        return copy

    def remove_written(self) -> int:
        """Removes every data file this load wrote (a load that fails commits none of them: the
        partitions that did succeed leave theirs too); the files removed."""
        from pyarrow import fs
        files, where = self.filesystem()
        try:
            found = files.get_file_info(fs.FileSelector(where, allow_not_found=True))
        except OSError:
            return 0
        mine = [f.path for f in found if f.base_name.startswith(f"{FILE_PREFIX}{self.load_id}-")]
        for path in mine:
            files.delete_file(path)
        return len(mine)

    def table_of(self, data: bytes):
        """One block of CSV rows as a table of the data files' schema; a value a column's type
        cannot hold raises, naming the table, column and key."""
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.csv as pcsv
        names = self.read_names()
        types = {}
        for i, c in enumerate(self.columns):
            if c.flagged:
                types[flag_name(i)] = pa.bool_()
            types[c.name] = arrow_type(c.iceberg)[0]
        parsed = pcsv.read_csv(
            pa.BufferReader(data),
            read_options=pcsv.ReadOptions(column_names=names, block_size=max(data.size, 1 << 20) + 1,
                                          use_threads=False),
            parse_options=pcsv.ParseOptions(newlines_in_values=True),
            # COPY's CSV: NULL is an empty unquoted field, an empty string a quoted one; no other
            # text is NULL (a string "NULL" or "NaN" stays that string)
            convert_options=pcsv.ConvertOptions(column_types=types, null_values=[""], strings_can_be_null=True,
                                                quoted_strings_can_be_null=False, true_values=["t"],
                                                false_values=["f"]))
        arrays = []
        for i, c in enumerate(self.columns):
            if c.flagged and pc.any(parsed.column(flag_name(i))).as_py():
                at = pc.index(parsed.column(flag_name(i)), True).as_py()
                key = ", ".join(f"{k}={parsed.column(k)[at].as_py()}" for k in self.keys) or "(no key)"
                from tideline.core.errors import RefusedValue
                raise RefusedValue(c.refused.replace("\x00", key), table=self.table)
            arrays.append(_written(parsed.column(c.name), c.iceberg))
        return pa.Table.from_arrays(arrays, schema=self.schema())

    def schema(self):
        import pyarrow as pa
        return pa.schema([pa.field(c.name, arrow_type(c.iceberg)[1], nullable=True,
                                   metadata={b"PARQUET:field_id": str(c.field_id).encode()}) for c in self.columns])


def _written(column, iceberg: str):
    """A parsed column in the type it is written as."""
    import pyarrow as pa
    _, written = arrow_type(iceberg)
    if iceberg == "binary":   # bytea's text is \x and hex digits (the session's bytea_output)
        return pa.array([None if v is None else bytes.fromhex(v[2:]) for v in column.to_pylist()], pa.binary())
    return column if column.type == written else column.cast(written)


class _Blocks:
    """The sink psycopg2's COPY TO writes into, one row per call: rows are gathered into blocks
    of TEXT_BLOCK bytes, each handed on whole (a block never splits a row)."""

    def __init__(self, handle):
        self.handle, self.buf, self.total = handle, bytearray(), 0

    def write(self, row: bytes) -> None:
        self.buf += row
        self.total += len(row)
        if len(self.buf) >= TEXT_BLOCK:
            self.flush()

    def flush(self) -> None:
        if self.buf:
            import pyarrow as pa
            data, self.buf = self.buf, bytearray()
            self.handle(pa.py_buffer(data))


class _PartitionFiles:
    """A partition's data files: written one after another, each rolled over past FILE_BYTES."""

    def __init__(self, lake: LakeFiles, part: int):
        self.lake, self.part = lake, part
        self.fs, self.dir = lake.filesystem()
        self.files: list[list] = []   # [uri, rows, bytes]
        self.rows = 0
        self._writer = self._stream = None
        self._written: list[str] = []
        self._pending: list = []   # parsed blocks not written yet: one row group together

    def write(self, table) -> None:
        """Takes a parsed block; writes a row group once ROW_GROUP_ROWS have gathered."""
        self._pending.append(table)
        if sum(t.num_rows for t in self._pending) >= ROW_GROUP_ROWS:
            self._write_group()

    def _write_group(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq
        table, self._pending = pa.concat_tables(self._pending), []
        if self._writer is None:
            name = f"{FILE_PREFIX}{self.lake.load_id}-{self.part:05d}-{len(self.files):03d}.parquet"
            if not self._written:
                self.fs.create_dir(self.dir, recursive=True)
            path = f"{self.dir}/{name}"
            self._written.append(path)
            self._stream = self.fs.open_output_stream(path)
            # decimals as Parquet's INT32/INT64 where they fit, as Iceberg's spec asks
            self._writer = pq.ParquetWriter(self._stream, table.schema, store_decimal_as_integer=True,
                                            **self.lake.parquet)
            self.files.append([f"{self.lake.data_dir}/{name}", 0, 0])
        self._writer.write_table(table, row_group_size=table.num_rows)
        self.files[-1][1] += table.num_rows
        self.rows += table.num_rows
        if self._stream.tell() >= FILE_BYTES:
            self._close_file()

    def _close_file(self) -> None:
        self._writer.close()
        self.files[-1][2] = self._stream.tell()
        self._stream.close()
        self._writer = self._stream = None

    def close(self) -> None:
        if self._pending:
            self._write_group()
        if self._writer is not None:
            self._close_file()

    def discard(self) -> None:
        """Removes what this partition wrote (a failed partition's files are never committed)."""
        try:
            if self._stream is not None:
                self._stream.close()
            for path in self._written:
                self.fs.delete_file(path)
        except Exception as exc:   # noqa: BLE001 — the partition's own error is the one raised
            print(f"[tideline] {self.lake.label} partition {self.part}: could not remove its uncommitted data files "
                  f"({exc}); they are not part of the table", file=sys.stderr, flush=True)
