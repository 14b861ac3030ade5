"""A change topic created again under its name: its offsets look valid once they pass the old
ones, and only the topic's id tells."""
from tideline.core.offsets import coverage_gaps


def test_a_topic_with_another_id_is_a_gap_even_when_its_offsets_cover_the_resume_position():
    gaps = coverage_gaps("p.public.t", {0: 100}, {0: 0}, {0: 500}, 1, "old-id", "new-id")
    assert len(gaps) == 1 and gaps[0].partition == -1
    assert "deleted and created again" in gaps[0].describe() and "old-id" in gaps[0].describe()


def test_the_same_topic_or_an_unknown_id_changes_nothing():
    assert coverage_gaps("t", {0: 100}, {0: 0}, {0: 500}, 1, "same", "same") == []
    assert coverage_gaps("t", {0: 100}, {0: 0}, {0: 500}, 1, None, "new-id") == []   # loaded before ids were kept
