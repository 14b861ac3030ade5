"""The state of chunked full loads (load.chunked): the plan of each load, and its chunks as they
commit. A chunk's record commits in the same target transaction as its rows (record_chunk_sql),
so the state never says a chunk is done whose rows are not in the shadow table, nor the reverse."""
from __future__ import annotations

import json

from tideline import sqlfiles
from tideline.core.chunked_load import OpenLoad


def open_load(conn, pipeline: str, table: str) -> OpenLoad | None:
    with conn.cursor() as cur:
        cur.execute(sqlfiles.load("state/open_chunked_load"), {"pipeline": pipeline, "table": table})
        row = cur.fetchone()
    if row is None:
        return None
    load_id, topic_id, offsets, ranges, shape, estimate, done = row
    return OpenLoad(load_id, topic_id, {int(p): int(o) for p, o in offsets.items()}, list(ranges), shape,
                    estimate, {int(c): int(n) for c, n in done.items()})


def start(cur, pipeline: str, table: str, epoch: int, topic: str, topic_id: str | None,
          offsets: dict[int, int], ranges: list[str], shape: str, rows_estimate: int | None) -> int:
    cur.execute("INSERT INTO tideline.chunked_loads (pipeline, table_name, epoch, topic, topic_id, offsets, ranges, "
                "shape, rows_estimate) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING load_id",
                (pipeline, table, epoch, topic, topic_id, json.dumps({str(p): o for p, o in offsets.items()}),
                 json.dumps(ranges), shape, rows_estimate))
    return cur.fetchone()[0]


def take_over(cur, load_id: int, epoch: int) -> None:
    """A resumed load belongs to the run that resumes it."""
    cur.execute("UPDATE tideline.chunked_loads SET epoch = %s WHERE load_id = %s", (epoch, load_id))


def end(cur, load_id: int, outcome: str, detail: str | None = None) -> None:
    """A load finished (succeeded: its shadow table went live) or given up (abandoned: why)."""
    cur.execute("UPDATE tideline.chunked_loads SET ended_at = now(), outcome = %s, detail = %s "
                "WHERE load_id = %s AND ended_at IS NULL", (outcome, detail, load_id))


def record_chunk_sql() -> str:
    """The statement a chunk's copier runs before it commits (params: load_id, chunk, rows,
    seconds, pipeline, table, epoch); it inserts one row, or none when the run was fenced."""
    return sqlfiles.load("state/record_chunk")


def abandon_open(conn, pipeline: str, table: str, why: str) -> bool:
    """Gives up the table's open chunked load, if any (its offsets are gone, a person asked for a
    fresh load): the next full load plans a new one. Returns whether one was open."""
    with conn, conn.cursor() as cur:
        cur.execute("UPDATE tideline.chunked_loads SET ended_at = now(), outcome = 'abandoned', detail = %s "
                    "WHERE pipeline = %s AND table_name = %s AND ended_at IS NULL", (why, pipeline, table))
        return cur.rowcount > 0


def record_staged(cur, load_id: int, staged: dict[int, int], epoch: int) -> None:
    """Chunks a target staged itself (an Iceberg staging table's commits), recorded after the
    fact in the transaction that fenced their commit; a chunk recorded already stays as it was."""
    for chunk, rows in sorted(staged.items()):
        cur.execute("INSERT INTO tideline.load_chunks (load_id, chunk, rows, epoch) VALUES (%s, %s, %s, %s) "
                    "ON CONFLICT DO NOTHING", (load_id, chunk, rows, epoch))


def rows_stored(cur, load_id: int) -> int:
    """Rows the load's committed chunks hold (its progress)."""
    cur.execute("SELECT coalesce(sum(rows), 0) FROM tideline.load_chunks WHERE load_id = %s", (load_id,))
    return cur.fetchone()[0]
