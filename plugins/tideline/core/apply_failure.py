"""When the target refuses a change: which refusals are the data's (deterministic, found down to
the event and halted for that table alone) and which are the moment's (retried), and what a
person reads about it. Pure: tideline.targets.postgres.apply finds the event, this says what it means."""
from __future__ import annotations

from dataclasses import asdict, dataclass

# SQLSTATE classes that fail the same way however often the batch is retried: data exceptions
# (22: bad value, out of range, ...), integrity (23: NOT NULL, CHECK, unique, foreign key),
# syntax/access (42: a column dropped or a privilege revoked on the target), program limits (54),
# feature not supported (0A), and errors raised by the target's own triggers (P0).
DETERMINISTIC_CLASSES = ("22", "23", "42", "54", "0A", "P0")
VALUE_CHARS = 200


def is_deterministic(sqlstate: str | None) -> bool:
    return bool(sqlstate) and sqlstate[:2] in DETERMINISTIC_CLASSES


@dataclass(frozen=True)
class FailedEvent:
    """The first change event of a table's batch that the target refuses."""
    table: str
    topic: str
    partition: int
    offset: int
    key: str | None
    op: str
    column: str | None
    value: str | None
    sqlstate: str | None
    error: str
    constraint: str | None = None
    hint: str | None = None   # what to do, when the target knows better than the SQLSTATE says

    def as_state(self) -> dict:
        return asdict(self)


def truncate(value: str | None, limit: int = VALUE_CHARS) -> str | None:
    if value is None or len(value) <= limit:
        return value
    return value[:limit] + f"… ({len(value):,} chars)"


def advice(ev: FailedEvent) -> str:
    """What to change so the event applies."""
    if ev.hint:
        return ev.hint
    cls = (ev.sqlstate or "")[:2]
    where = f"column {ev.column} of " if ev.column else ""
    if cls == "23":
        what = f"constraint {ev.constraint}" if ev.constraint else "a constraint"
        return (f"the target enforces {what} on {where}{ev.table} that the source does not: drop or relax it on "
                f"the target (the target must accept every row the source holds)")
    if cls == "22":
        return (f"the target's {where}{ev.table} cannot hold this value: change the target column's type to the "
                f"source's, or leave the column out of the sync (exclude_columns) and run action=full_reload")
    if cls == "42":
        return (f"the target table {ev.table} no longer matches what the stream writes (a column or privilege "
                f"changed on the target by hand): restore it, or run action=full_reload for the table")
    return "fix the cause named in the error on the target"


def describe(pipeline: str, ev: FailedEvent, dead_lettered: bool = False) -> str:
    """The message for the table's state, status, the log and the alert."""
    at = f"{ev.topic} partition {ev.partition} offset {ev.offset}"
    col = f", column {ev.column} = {ev.value!r}" if ev.column else ""
    head = (f"{pipeline}.{ev.table}: the target refused the change at {at} (key {ev.key}, op {ev.op}{col}): "
            f"{ev.error}" + (f" [SQLSTATE {ev.sqlstate}]" if ev.sqlstate else ""))
    if dead_lettered:
        return head + ". Recorded in tideline.dead_letters (stream.on_bad_message: dead_letter); the stream went on."
    return (head + f". The table is HALTED at its last committed batch: none of its changes from this batch on "
            f"were applied, its offsets stay where they are, and the pipeline's other tables keep streaming. "
            f"To resume: {advice(ev)}; then trigger the sync DAG — it resumes the table from its own offsets. "
            f"Or set stream.on_bad_message: dead_letter to record refused changes in tideline.dead_letters "
            f"and go on.")
