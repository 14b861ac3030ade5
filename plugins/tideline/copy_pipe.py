"""A COPY TO STDOUT on one PostgreSQL connection streamed into a COPY FROM STDIN on another,
through an OS pipe: the rows never become Python values, so a full-load partition moves at the
speed of the two databases' bulk protocol (`psql -c "COPY … TO STDOUT" | psql -c "COPY … FROM
STDIN"`), inside the load's snapshot and transaction."""
from __future__ import annotations

import os
import threading

CHUNK = 1 << 20

# Both sessions print and parse values the same way whatever the servers' defaults: ISO dates,
# exact floats, UTC, intervals and bytea in their canonical text.
SESSION_OPTIONS = ("-c DateStyle=ISO,MDY -c IntervalStyle=postgres -c extra_float_digits=3 -c TimeZone=UTC "
                   "-c bytea_output=hex -c client_encoding=UTF8")


class PipeResult:
    def __init__(self, read: int, stored: int, nbytes: int):
        self.read, self.stored, self.bytes = read, stored, nbytes


class _CountingReader:
    """Counts the bytes the target's COPY reads (one call per chunk; psycopg2 writes the source's
    side one row per call, so that side gets the bare buffered pipe)."""

    def __init__(self, raw):
        self.raw, self.bytes = raw, 0

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.bytes += len(data)
        return data

    readline = read


def pipe_copy(source_cur, copy_out_sql: str, target_cur, copy_in_sql: str) -> PipeResult:
    """Runs copy_out_sql on source_cur in a thread and copy_in_sql on target_cur here, joined by a
    pipe. Neither side commits: the callers decide. When the source fails, its error is raised
    (not the target's view of a truncated stream), so a partial read can never look complete."""
    r, w = os.pipe()
    raw_reader, writer = os.fdopen(r, "rb", buffering=CHUNK), os.fdopen(w, "wb", buffering=CHUNK)
    reader = _CountingReader(raw_reader)
    out: dict = {}

    def produce() -> None:
        try:
            source_cur.copy_expert(copy_out_sql, writer, size=CHUNK)
            out["rows"] = source_cur.rowcount
        except BaseException as exc:  # noqa: BLE001 — handed to the calling thread, raised there
            out["error"] = exc
        finally:
            try:
                writer.close()       # EOF for the target's COPY
            except OSError:          # the target stopped reading: its error is the one to raise
                pass

    producer = threading.Thread(target=produce, name="tideline-copy-out", daemon=True)
    producer.start()
    try:
        try:
            target_cur.copy_expert(copy_in_sql, reader, size=CHUNK)
        finally:
            raw_reader.close()       # a producer still writing gets EPIPE instead of blocking
            producer.join()
    except BaseException:
        # The source's own failure explains a truncated stream; a broken pipe only echoes ours.
        if "error" in out and not isinstance(out["error"], BrokenPipeError):
            raise out["error"] from None
        raise
    if "error" in out:
        raise out["error"]
    return PipeResult(out["rows"], target_cur.rowcount, reader.bytes)
