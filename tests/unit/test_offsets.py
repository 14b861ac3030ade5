"""Coverage: the stream's resume offsets against what Kafka still retains."""
from tideline.core.offsets import coverage_gaps, merge_committed, starting_offsets


def test_covered_when_earliest_at_or_below_resume_and_resume_at_or_below_end():
    assert coverage_gaps("t", {0: 10, 1: 0}, {0: 10, 1: 0}, {0: 15, 1: 0}) == []


def test_retention_gap_names_partition_and_range():
    [gap] = coverage_gaps("orders", {0: 10, 1: 5}, {0: 3, 1: 9}, {0: 20, 1: 30})
    assert (gap.partition, gap.needed, gap.earliest) == (1, 5, 9)
    assert "retention deleted offsets 5..8" in gap.describe()


def test_recreated_topic_log_end_below_resume():
    [gap] = coverage_gaps("t", {0: 100}, {0: 0}, {0: 4})
    assert "recreated" in gap.reason


def test_vanished_and_new_partitions():
    gaps = coverage_gaps("t", {0: 1, 1: 1}, {0: 0, 2: 3}, {0: 5, 2: 9})
    assert [(g.partition, g.earliest) for g in gaps] == [(1, None), (2, 3)]
    assert starting_offsets({0: 4}, {0: 10, 1: 2}) == {0: 4, 1: 0}


def test_merge_committed_never_moves_back():
    assert merge_committed({0: 10, 1: 3}, {0: 14, 2: 0}) == {0: 15, 1: 3, 2: 1}
    assert merge_committed({0: 10}, {0: 5}) == {0: 10}


def test_a_partition_count_other_than_at_the_full_load_is_a_gap():
    assert coverage_gaps("t", {0: 5}, {0: 0}, {0: 9}, partitions_at_load=1) == []
    [gap] = coverage_gaps("t", {0: 5}, {0: 0, 1: 0, 2: 0}, {0: 9, 1: 3, 2: 0}, partitions_at_load=1)
    assert "has 3 partitions, it had 1 at the full load" in gap.describe() and gap.describe().startswith("t: ")
    assert coverage_gaps("t", {0: 5}, {0: 0, 1: 0}, {0: 9, 1: 3}) == []   # not recorded (loaded before 007)
