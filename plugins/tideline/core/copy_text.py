"""Arrow record batches -> PostgreSQL COPY text format, vectorized (no per-row Python).

The full load reads every column as its PostgreSQL text form (`col::text`), which is exact for
every type (numeric of any precision, arrays, time zones, intervals, bytea as hex), and COPY
parses that text back into the same type. Only the four COPY metacharacters need escaping, and
only in columns whose text form can contain them.
"""
from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Types whose text output never contains backslash, tab, newline or carriage return.
_PLAIN_TYPES = ("smallint", "integer", "bigint", "numeric", "real", "double precision", "boolean",
                "date", "time", "timestamp", "uuid", "interval", "oid", "money", "pg_lsn", "inet", "cidr",
                "macaddr")
_METACHARS = r"[\\\n\r\t]"
_ESCAPES = (("\\", "\\\\"), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t"))


def needs_escaping(pg_type: str) -> bool:
    """True when the type's text form may hold a COPY metacharacter (text, json, arrays, bytea...)."""
    if pg_type.endswith("]"):
        return True
    return not pg_type.startswith(_PLAIN_TYPES)


def batch_to_copy_text(batch: pa.RecordBatch, escape: list[bool]) -> pa.Buffer:
    """One COPY text chunk (rows joined by tab, ended by newline, NULL as \\N) for a batch of text columns."""
    if batch.num_columns != len(escape):
        raise ValueError(f"batch has {batch.num_columns} columns, escape flags for {len(escape)}")
    if batch.num_rows == 0:
        return pa.py_buffer(b"")
    columns = []
    for array, esc in zip(batch.columns, escape):
        if not pa.types.is_string(array.type) and not pa.types.is_large_string(array.type):
            array = array.cast(pa.string())
        if esc and pc.any(pc.match_substring_regex(array, _METACHARS)).as_py():
            for old, new in _ESCAPES:
                array = pc.replace_substring(array, old, new)
        columns.append(pc.fill_null(array, "\\N"))
    lines = pc.binary_join_element_wise(*columns, "\t")
    lines = pc.binary_join_element_wise(lines, "", "\n")  # append the row terminator
    # The joined rows sit back to back in the array's data buffer: hand that out without copying.
    width = 8 if pa.types.is_large_string(lines.type) else 4
    _, offsets_buf, data_buf = lines.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64 if width == 8 else np.int32,
                            count=len(lines) + 1, offset=lines.offset * width)
    return data_buf[int(offsets[0]):int(offsets[-1])]


class CopyStream:
    """File-like reader over COPY chunks, for psycopg2's copy_expert; counts the rows it served."""

    def __init__(self, batches: Iterable[pa.RecordBatch], escape: list[bool]):
        self._chunks = self._generate(batches, escape)
        self.rows = 0
        self.bytes = 0
        self.error: BaseException | None = None  # psycopg2 hides read() errors; keep the real one

    def _generate(self, batches: Iterable[pa.RecordBatch], escape: list[bool]) -> Iterator[bytes]:
        for batch in batches:
            chunk = batch_to_copy_text(batch, escape)
            self.rows += batch.num_rows
            self.bytes += chunk.size
            if chunk.size:
                yield chunk.to_pybytes()

    def read(self, size: int = -1):  # noqa: ARG002 — psycopg2 accepts chunks of any length
        try:
            return next(self._chunks, b"")
        except BaseException as exc:
            self.error = exc
            raise

    readline = read
