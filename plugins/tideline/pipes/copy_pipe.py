"""The executor side of a load: a partition's rows read from the source as PostgreSQL COPY text
(or binary) and streamed into a COPY FROM STDIN of the target — the rows never become Python
values, so a full-load partition moves at the speed of the two databases' bulk protocol (`psql -c
"COPY … TO STDOUT" | psql -c "COPY … FROM STDIN"`), inside the load's snapshot and transaction.
The source side is the engine's (`Pipe.source`): a PostgreSQL COPY TO STDOUT here, MariaDB's
lines in pipes.mariadb_pipe. Also the per-partition functions Spark runs (this pipe, or COPY of
the rows Spark JDBC read). Kept light: every executor's Python worker imports it before its
first partition (tideline.load.full_load would add ~130 ms of imports to each)."""
from __future__ import annotations

import os
import sys
import threading
import time

from tideline.core.pg_session import SESSION_OPTIONS

CHUNK = 1 << 20


class PipeResult:
    def __init__(self, read: int, stored: int, nbytes: int):
        self.read, self.stored, self.bytes = read, stored, nbytes


class Pipe:
    """How a load's partitions reach the target without Spark JDBC (an engine's `pipe`): each
    partition's read statement, run by `source` (picklable: it travels to the executors), in
    PostgreSQL COPY's `copy_format`."""

    def __init__(self, source, reads: list[str], copy_format: str):
        self.source, self.reads, self.copy_format = source, reads, copy_format


class Sessions:
    """PostgreSQL sessions a process's pipes hand on from one partition (or chunk) to the next,
    by DSN and the statements that open the read: a chunked load's 80 chunks of a 20M-row table
    opened 160 sessions, and each new backend's start, login and first look-ups of the table's
    catalog cost the databases more CPU than the load's 4 partitions did all together
    (tests/bench/chunked_load.py). A session is given back only after its work ended cleanly
    (committed or rolled back), and checked with one round trip before it is used again (the
    server may have restarted since); a process keeps a few per key."""

    KEEP = 4

    def __init__(self):
        self._idle: dict[tuple, list] = {}
        self._lock = threading.Lock()

    def take(self, dsn: str, opened_by: str | None = None):
        """A kept session that still answers, else a new one."""
        import psycopg2
        key = (dsn, opened_by)
        while True:
            with self._lock:
                conn = self._idle[key].pop() if self._idle.get(key) else None
            if conn is None:
                return psycopg2.connect(dsn, options=SESSION_OPTIONS)
            try:
                with conn.cursor() as cur:
                    cur.execute("SELECT 1")
                conn.rollback()
                return conn
            except psycopg2.Error:
                conn.close()

    def give_back(self, conn, dsn: str, opened_by: str | None = None) -> None:
        """Keeps a session whose transaction has ended (closes it when enough are kept)."""
        from psycopg2.extensions import TRANSACTION_STATUS_IDLE
        if conn.closed or conn.get_transaction_status() != TRANSACTION_STATUS_IDLE:
            conn.close()
            return
        with self._lock:
            idle = self._idle.setdefault((dsn, opened_by), [])
            if len(idle) < self.KEEP:
                idle.append(conn)
                return
        conn.close()

    def __reduce__(self):
        # a pipe copier shipped to Spark's workers names the pool; each process keeps its own
        return sessions, ()


def sessions() -> Sessions:
    """This process's pool."""
    return SESSIONS


SESSIONS = Sessions()


class PostgresPipeSource:
    """A PostgreSQL source's side: the partition's `COPY … TO STDOUT` in its own session, which
    joins the load's snapshot first (`session_init`), or on the session holding it (`conn`)."""

    def __init__(self, dsn: str, session_init: str | None):
        self.dsn, self.session_init = dsn, session_init

    def pipe_into(self, read_sql: str, target_cur, copy_in_sql: str, conn=None) -> PipeResult:
        if conn is not None:
            with conn.cursor() as scur:
                return pipe_copy(scur, read_sql, target_cur, copy_in_sql)
        return self.reading(lambda scur: pipe_copy(scur, read_sql, target_cur, copy_in_sql))

    def copy_out(self, read_sql: str, sink) -> int:
        """Runs `read_sql` (a COPY … TO STDOUT) into `sink.write` (one call per row); the rows read."""
        def read(scur):
            scur.copy_expert(read_sql, sink)
            return scur.rowcount
        return self.reading(read)

    def reading(self, work):
        """`work(cursor)` on a session of the pool that ran `session_init` first, in the one read
        transaction that ends (its snapshot released) when `work` returns."""
        src = SESSIONS.take(self.dsn, self.session_init)
        try:
            with src.cursor() as scur:
                if self.session_init:
                    scur.execute(self.session_init)
                done = work(scur)
            src.rollback()   # the read's transaction (its snapshot) ends here
        except BaseException:
            src.close()
            raise
        SESSIONS.give_back(src, self.dsn, self.session_init)
        return done


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


def report_partition(label: str, part: int, rows: int, nbytes: int, secs: float, how: str) -> None:
    """One partition's figures on the executor's stderr (in the task log), with where the library
    was imported from (the shipped zip on a cluster)."""
    print(f"[tideline] {time.strftime('%H:%M:%S')} {label} partition {part}: {rows:,} rows, {nbytes / 1e6:.1f} MB "
          f"in {secs:.1f}s ({rows / secs if secs else 0:,.0f} rows/s, {how}; library "
          f"{os.path.abspath(sys.modules['tideline'].__file__)})", file=sys.stderr, flush=True)


def make_copy_writer(target_dsn: str, copy_sql: str, escape: list[bool], label: str):
    """The per-partition function for mapInArrow: streams the partition's rows into the shadow
    table with COPY and yields one row of figures (partition, rows, seconds)."""

    def write(batches):
        import psycopg2
        import pyarrow as pa
        from pyspark import TaskContext

        from tideline.core.copy_text import CopyStream

        part = TaskContext.get().partitionId()
        started = time.monotonic()
        stream = CopyStream(batches, escape)
        conn = psycopg2.connect(target_dsn)
        try:
            with conn, conn.cursor() as cur:
                # Durable anyway: the swap commits synchronously after every partition's WAL.
                cur.execute("SET synchronous_commit = off")
                try:
                    cur.copy_expert(copy_sql, stream, size=1 << 20)
                except psycopg2.Error:
                    if stream.error is not None:  # reading the source failed, not the COPY
                        raise stream.error
                    raise
                copied = cur.rowcount  # PostgreSQL's own count of the rows COPY stored
        finally:
            conn.close()
        secs = time.monotonic() - started
        report_partition(label, part, stream.rows, stream.bytes, secs, "JDBC")
        yield pa.RecordBatch.from_arrays(
            [pa.array([part], pa.int32()), pa.array([stream.rows], pa.int64()), pa.array([copied], pa.int64()),
             pa.array([secs], pa.float64())],
            names=["partition", "rows", "copied", "seconds"])

    return write


def make_pipe_copier(source, target_dsn: str, copy_sql: str, label: str, copy_format: str, where: str = "",
                     record: tuple[str, dict] | None = None):
    """The per-partition function of a piped load: each (partition, read) item's rows from
    `source` (a Pipe's) into the staging table's `COPY … FROM STDIN`, committed. `where` (e.g.
    "in the driver") goes into each partition's line of figures. `record` (a chunked load's:
    statement, params) runs in the same transaction before its commit, with the partition as
    `chunk`, its `rows` and `seconds`; it must insert one row, or the run was fenced and the
    partition's rows roll back."""

    def copy(items):
        import psycopg2

        for part, read_sql in items:
            started = time.monotonic()
            tgt, kept = SESSIONS.take(target_dsn), False
            try:
                with tgt.cursor() as tcur:
                    # Durable anyway: the swap commits synchronously after every partition's WAL
                    # (a chunk's record commits with its rows: a crash loses both or neither).
                    tcur.execute("SET synchronous_commit = off")
                    moved = source.pipe_into(read_sql, tcur, copy_sql)
                    if record is not None:
                        statement, params = record
                        try:
                            tcur.execute(statement, {**params, "chunk": part, "rows": moved.stored,
                                                     "seconds": time.monotonic() - started})
                        except psycopg2.errors.UniqueViolation:   # an earlier attempt of this task committed it
                            tgt.rollback()
                            print(f"[tideline] {label} chunk {part} was committed by an earlier attempt of its "
                                  f"task; this copy of it rolled back", file=sys.stderr, flush=True)
                            yield {"partition": part, "rows": 0, "copied": 0, "seconds": 0.0, "how": "already done"}
                            continue
                        if tcur.rowcount != 1:
                            raise RuntimeError(f"{label}: chunk {part} was not committed: another run took the "
                                               f"table over (its fencing epoch is no longer "
                                               f"{params.get('epoch')}); this run stops")
                tgt.commit()
                kept = True
            finally:
                if kept:
                    SESSIONS.give_back(tgt, target_dsn)
                else:
                    tgt.close()
            secs = time.monotonic() - started
            how = f"COPY pipe, {copy_format}"
            report_partition(label, part, moved.read, moved.bytes, secs, f"{how}, {where}" if where else how)
            yield {"partition": part, "rows": moved.read, "copied": moved.stored, "seconds": secs, "how": how}

    return copy
