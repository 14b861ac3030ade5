"""Offset arithmetic for the tideline: is every offset the stream must resume from still in Kafka?"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Gap:
    topic: str
    partition: int
    needed: int          # the next offset the stream must read
    earliest: int | None  # oldest offset Kafka still has (None: the partition is gone)
    latest: int | None    # log end offset
    reason: str

    def describe(self) -> str:
        if self.partition < 0:   # the topic as a whole
            return f"{self.topic}: {self.reason}"
        return (f"{self.topic} partition {self.partition}: needs offset {self.needed}, Kafka holds "
                f"{self.earliest}..{self.latest} ({self.reason})")


def coverage_gaps(topic: str, resume: dict[int, int], earliest: dict[int, int],
                  latest: dict[int, int], partitions_at_load: int | None = None,
                  id_at_load: str | None = None, id_now: str | None = None) -> list[Gap]:
    """Every partition whose resume position Kafka can no longer serve. Empty list = covered.

    A partition that appeared after the snapshot must still hold its offset 0 — and the topic must
    still have the partition count it had at the full load (partitions_at_load, when recorded):
    with more partitions, keys hash elsewhere, one key's events sit in two partitions, and "the
    highest offset is the latest event" no longer holds. And it must still be the same topic
    (id_at_load, when recorded): a topic created again under its name counts from 0, and once it
    holds as many events as the old one did, its offsets look valid but skip its first events."""
    if id_at_load and id_now and id_at_load != id_now:
        return [Gap(topic, -1, 0, None, None,
                    f"the topic was deleted and created again since the full load (topic id {id_at_load}, now "
                    f"{id_now}): the offsets the stream would resume from belong to the old topic")]
    gaps = []
    if partitions_at_load is not None and len(latest) != partitions_at_load:
        gaps.append(Gap(topic, -1, 0, None, None,
                        f"the topic has {len(latest)} partitions, it had {partitions_at_load} at the full load: keys "
                        f"now hash to other partitions, so one key's changes can no longer be put in order"))
    for p in sorted(set(resume) | set(latest)):
        needed = resume.get(p, 0)
        if p not in latest:
            gaps.append(Gap(topic, p, needed, None, None, "the partition no longer exists: topic recreated"))
        elif earliest[p] > needed:
            gaps.append(Gap(topic, p, needed, earliest[p], latest[p],
                            f"retention deleted offsets {needed}..{earliest[p] - 1}"))
        elif needed > latest[p]:
            gaps.append(Gap(topic, p, needed, earliest[p], latest[p],
                            "the log ends below the resume position: topic recreated or truncated"))
    return gaps


def starting_offsets(resume: dict[int, int], latest: dict[int, int]) -> dict[int, int]:
    """Resume positions for every current partition (new partitions from 0)."""
    return {p: resume.get(p, 0) for p in sorted(latest)}


def merge_committed(current: dict[int, int], batch_max: dict[int, int]) -> dict[int, int]:
    """The next offsets after a batch: one past the highest offset applied, never moving back."""
    out = dict(current)
    for p, last in batch_max.items():
        out[p] = max(out.get(p, 0), last + 1)
    return out
