"""A MariaDB source's side of a load's pipe: MariaDB prints each row as a line PostgreSQL's COPY
reads (engines.mariadb.copy_line: every column's exact text as the full load reads it, in COPY's
CSV), and the lines stream into the target's COPY FROM STDIN — no Spark JDBC, no value decoded in
Python (tests/bench/full_load_mariadb.py).

pymysql costs ~4 µs of Python per row it parses, more than MariaDB spends printing it; so a
partition whose key is one column is read in key slices of a few MB, each slice one GROUP_CONCAT
row: MariaDB does the work, Python hands ~4 MB at a time to the target. An integer key is cut by
value; a string, bytes, decimal or date-time key by its own order (keyset: the slice ends at the
largest of its next n keys, found in the key's index, kept in a session variable so it compares
under the column's collation). Other partitions stream one row per line. Every read runs in the
partition's own consistent snapshot (`session_init`, engines.mariadb explains why that is exact).
Kept light: executors import it."""
from __future__ import annotations

from tideline.pipes.copy_pipe import CHUNK, PipeResult

SLICE_BYTES = 4 << 20        # a key slice's lines aim at this size
FIRST_SLICE_KEYS = 1024      # the first slice's width in key values (then sized from what it held)
FETCH_ROWS = 10_000          # lines per fetch when streaming row by row
SLICE_VALUE_MAX = 1 << 30    # group_concat_max_len at most (the server's max_allowed_packet bounds it too)


def client_ssl(mode: str, ca: str | None):
    """pymysql's SSL context for libpq's sslmode names: the server's certificate checked against
    the CA (and its name, verify-full); `require` encrypts without checking."""
    import ssl
    ctx = ssl.create_default_context(cafile=ca) if ca else ssl.create_default_context()
    ctx.check_hostname = mode == "verify-full"
    if mode == "require":
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


class _Lines:
    """File-like reader over (rows, bytes) chunks for psycopg2's copy_expert; counts what it
    served and keeps a read error (psycopg2 reports it only as a failed COPY)."""

    def __init__(self, chunks):
        self._chunks, self.rows, self.bytes = chunks, 0, 0
        self.error: BaseException | None = None

    def read(self, size: int = -1) -> bytes:  # noqa: ARG002 — psycopg2 accepts chunks of any length
        try:
            rows, data = next(self._chunks, (0, b""))
        except BaseException as exc:
            self.error = exc
            raise
        self.rows += rows
        self.bytes += len(data)
        return data

    readline = read


class SliceTooLarge(Exception):
    """One key's line is longer than the server lets a result value be (max_allowed_packet)."""


class MariaDbPipeSource:
    """`connect`: pymysql's connection arguments; `tls`: (sslmode, CA file) or None;
    `session_init`: statements opening the partition's snapshot; `slice_key`: the quoted key
    alias to read in slices (a one-column integer key), else None (stream the rows). A partition's
    read statement selects `tideline_line` (and the slice key) over the rows of its key range."""

    def __init__(self, connect: dict, tls: tuple[str, str | None] | None, session_init: str | None,
                 slice_key: str | None, slicing: str | None = "value"):
        self.connect, self.tls, self.session_init, self.slice_key = connect, tls, session_init, slice_key
        # with a slice key: "value" (an integer key) or "keyset" (any key with an order)
        self.slicing = slicing if slice_key else None

    def pipe_into(self, read_sql: str, target_cur, copy_in_sql: str) -> PipeResult:
        import psycopg2
        import pymysql
        from pymysql.constants import CLIENT
        conn = pymysql.connect(**self.connect, use_unicode=False, client_flag=CLIENT.MULTI_STATEMENTS,
                               **({"ssl": client_ssl(*self.tls)} if self.tls else {}))
        try:
            if self.session_init:
                with conn.cursor() as cur:
                    cur.execute(self.session_init)
                    while cur.nextset():
                        pass
            read = {"value": self._slices, "keyset": self._keyset, None: self._rows}[self.slicing]
            lines = _Lines(read(conn, read_sql))
            try:
                target_cur.copy_expert(copy_in_sql, lines, size=CHUNK)
            except psycopg2.Error:
                if lines.error is not None:   # reading the source failed, not the COPY
                    raise lines.error from None
                raise
            return PipeResult(lines.rows, target_cur.rowcount, lines.bytes)
        finally:
            if conn.open:   # a session the server killed is closed already
                conn.close()

    def _rows(self, conn, read_sql: str):
        import pymysql
        # not a `with`: closing a streaming cursor reads the rest of its rows, and on a session the
        # server killed that would replace MariaDB's error with pymysql's own (the socket gone)
        cur = conn.cursor(pymysql.cursors.SSCursor)
        cur.execute(read_sql)
        while rows := cur.fetchmany(FETCH_ROWS):
            yield len(rows), b"\n".join(r[0] for r in rows) + b"\n"
        cur.close()

    @staticmethod
    def _slice_limits(cur, packet: int) -> tuple[int, int]:
        """(the longest value a slice may be, the size slices aim at), group_concat_max_len set."""
        limit = min(int(packet) - 4096, SLICE_VALUE_MAX)
        cur.execute(f"SET SESSION group_concat_max_len = {limit}")
        return limit, max(1, min(SLICE_BYTES, limit // 4))

    @staticmethod
    def _too_large(key, limit: int, packet: int) -> SliceTooLarge:
        key = key.decode(errors="replace") if isinstance(key, bytes) else key
        return SliceTooLarge(f"the row of key {key} is longer as COPY text than one value MariaDB sends "
                             f"({limit:,} bytes, from max_allowed_packet {packet:,}); raise max_allowed_packet "
                             f"on the source")

    def _keyset(self, conn, read_sql: str):
        """The partition's lines in slices of its next n keys in the key's order, each one
        GROUP_CONCAT value of about SLICE_BYTES; a slice cut short is read again with fewer keys."""
        key = self.slice_key
        part = f"({read_sql}) AS tideline_part"
        with conn.cursor() as cur:
            cur.execute("SELECT @@max_allowed_packet")
            packet = cur.fetchone()[0]
            limit, target = self._slice_limits(cur, packet)
            after, n = "", FIRST_SLICE_KEYS
            while True:
                cur.execute(f"SET @tideline_hi = (SELECT MAX({key}) FROM (SELECT {key} FROM {part}{after} "
                            f"ORDER BY {key} LIMIT {n}) AS tideline_keys)")
                cur.execute(f"SELECT GROUP_CONCAT(tideline_line SEPARATOR '\\n'), COUNT(*), @tideline_hi IS NULL "
                            f"FROM {part}{after or ' WHERE TRUE'} AND {key} <= @tideline_hi")
                data, rows, done = cur.fetchone()
                if done:
                    return
                if rows and len(data) > limit - 4:   # cut short (see _slices)
                    if n == 1:
                        cur.execute("SELECT CAST(@tideline_hi AS CHAR)")   # bytes: pymysql converts no type here
                        raise self._too_large(cur.fetchone()[0], limit, packet)
                    n = max(1, min(n // 2, n * target // limit))
                    continue
                yield rows, data + b"\n"
                cur.execute("SET @tideline_lo = @tideline_hi")
                after = f" WHERE {key} > @tideline_lo"
                n = max(1, min(n * 8, int(n * target / len(data))))

    def _slices(self, conn, read_sql: str):
        """The partition's lines in key slices, each one GROUP_CONCAT value of about SLICE_BYTES;
        a slice cut short by group_concat_max_len is read again narrower — never passed on."""
        key = self.slice_key
        part = f"({read_sql}) AS tideline_part"
        with conn.cursor() as cur:
            cur.execute(f"SELECT MIN({key}), MAX({key}), @@max_allowed_packet FROM {part}")
            lo, hi, packet = cur.fetchone()
            if lo is None:
                return
            limit, target = self._slice_limits(cur, packet)
            at, hi, width = int(lo), int(hi), FIRST_SLICE_KEYS
            while at <= hi:
                end = at + width
                cur.execute(f"SELECT GROUP_CONCAT(tideline_line SEPARATOR '\\n'), COUNT(*) FROM {part} "
                            f"WHERE {key} >= {at} AND {key} < {end}")
                data, rows = cur.fetchone()
                # cut short: the value reaches the limit (less up to 3 bytes: MariaDB cuts it at a
                # character's start; a line may hold newlines, so they cannot be counted)
                if rows and len(data) > limit - 4:
                    if width == 1:
                        raise self._too_large(at, limit, packet)
                    width = max(1, min(width // 2, width * target // limit))   # it held at least `limit`
                    continue
                if rows:
                    yield rows, data + b"\n"
                at = end
                per_key = len(data) / width if rows else 0
                width = max(1, min(width * 8, int(target / per_key))) if per_key else width * 8
