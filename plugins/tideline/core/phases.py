"""A table's phases, and the one fact every decision about it rests on: whether the target holds a
committed load of it that a stream can go on from (pure; core.params plans by it, the stream,
status, the watch DAG and verify check it against the target).

new: never loaded. streaming: loaded, its stream applies changes. needs_resnapshot: its position
is lost (retention, a lost slot, a divergence): reloaded by itself. halted: stopped on an error a
person must fix. paused: a person paused it. removed: it left the YAML; its capture stopped.
refused: its shape cannot be carried. batch: a batch-mode table. 'halted', 'paused' and 'removed'
keep the phase they left (state column phase_before): 'streaming', or 'loading' for a table halted
during its load — nothing of which committed.
"""
from __future__ import annotations

from typing import NamedTuple

PARKED = ("halted", "paused", "removed")   # phases that keep the phase they left (phase_before)


class TablePhase(NamedTuple):
    """What a plan reads of one table's state."""
    phase: str
    error: str | None = None
    before: str | None = None   # halted, paused, removed: the phase it left


def holds_load(phase: str, before: str | None = None) -> bool:
    """Whether the target holds a committed load of the table and the state a position the stream
    goes on from: a table that is streaming, or halted or paused while it was streaming. The one
    rule no plan may break (tests/unit/test_plan_property.py): a table is streamed only if this
    holds. A removed table does not: its capture stopped while it was out of the YAML."""
    return phase == "streaming" or (phase in ("halted", "paused") and before == "streaming")


def missing_target(pipeline: str, table: str, where: str, phase: str, snapshot_at=None,
                   snapshot_rows: int | None = None, fix: str = "it is reloaded by itself") -> str:
    """The error of a table whose state says it holds a load that the target lacks: the stream
    (which reloads it), status, the view and the watch DAG say it in these words."""
    loaded = (f" (its load of {snapshot_rows:,} rows committed {snapshot_at:%Y-%m-%d %H:%M:%S %Z})"
              if snapshot_at is not None and snapshot_rows is not None else "")
    return (f"{pipeline}.{table}: NOT IN THE TARGET: the state says {phase}{loaded}, but the target table {where} "
            f"does not exist, so none of its rows is there. {fix[0].upper() + fix[1:]}.")
