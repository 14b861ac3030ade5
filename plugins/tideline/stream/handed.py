"""A table one full load took over while this stream runs (a re-snapshot or a backfill of that
table alone): the stream leaves it to the load and goes on with the pipeline's other tables,
instead of stopping them all for as long as the load takes. The reload's own DAG run then starts
a stream that takes every table over (this one is fenced by it and stops), so the reloaded table
streams again from the offsets its load recorded."""
from __future__ import annotations

import logging

log = logging.getLogger("tideline.incremental")

LOAD_OWNER = "full_load "   # how a full load's claim names its owner (load.full_load.run_owner)


def hand_over(pipeline: str, tables, halted, handed: dict[str, str], name: str, owner: str | None) -> bool:
    """Leaves `name` to the full load `owner` when that is who took it and another table of this
    stream is left to stream; returns whether it did (else the caller stops, as for any newer run)."""
    if not owner or not owner.startswith(LOAD_OWNER) or name not in tables:
        return False
    if not [n for n in tables if n != name and n not in halted and n not in handed]:
        return False
    if name not in handed:
        handed[name] = owner
        log.warning("%s.%s: a full load took this table over (%s); this stream leaves it to the load and goes on "
                    "with the others; the reload's run streams it again", pipeline, name, owner)
    return True
