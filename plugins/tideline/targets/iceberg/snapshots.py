"""What an Iceberg table's snapshots say about its position: the summary keys a Tideline commit
carries, and the walk back through a snapshot's ancestry to the newest such commit (a
compaction's commit carries none)."""
from __future__ import annotations

SUMMARY_OFFSETS = "tideline.offsets"   # {"<partition>": next offset} of the table's change topic
SUMMARY_EPOCH = "tideline.epoch"
SUMMARY_PIPELINE = "tideline.pipeline"


def summary_of(snap) -> dict[str, str]:
    return dict(snap.summary.additional_properties) if snap is not None and snap.summary else {}


def newest_stamped_snapshot(t, snap=None):
    """The newest snapshot in the ancestry of `snap` (default: the current one) that a Tideline
    write made (a compaction's commit carries no offsets); None when there is none."""
    snap = t.current_snapshot() if snap is None and t is not None else snap
    while snap is not None:
        if SUMMARY_OFFSETS in summary_of(snap):
            return snap
        snap = t.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id else None
    return None


def newest_stamped(t, snap) -> dict[str, str] | None:
    found = newest_stamped_snapshot(t, snap) if snap is not None else None
    return summary_of(found) if found is not None else None


def stamped_since(t, snap, seen: int | None) -> list[dict[str, str]]:
    """Summaries of Tideline's commits from `snap` back to (not including) snapshot `seen`."""
    out = []
    while snap is not None and snap.snapshot_id != seen:
        summary = summary_of(snap)
        if SUMMARY_OFFSETS in summary:
            out.append(summary)
        snap = t.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id else None
    return out
