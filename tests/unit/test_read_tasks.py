"""How a stream batch's Kafka offset ranges are read: in how many Spark tasks (read_tasks), and
with generated or interpreted record projections (interpreted)."""
from tideline.stream.handover import INTERPRETED_BELOW, TASK_EVENTS, interpreted, read_tasks


def test_many_small_ranges_are_read_in_a_few_tasks():
    # 100 tables with ~100 events each: adjacent ranges merged, never fewer tasks than slots
    assert read_tasks([100] * 100, 2, TASK_EVENTS) == 2
    assert read_tasks([250] * 100, 2, TASK_EVENTS) == 4   # 25 ranges of 250 = one task's 6,250
    assert read_tasks([100] * 100, 8, TASK_EVENTS) == 8


def test_full_ranges_keep_a_task_each():
    # one big table's batch: Spark already split it into ranges of TASK_EVENTS
    assert read_tasks([TASK_EVENTS] * 32, 2, TASK_EVENTS) == 32


def test_a_task_stays_within_task_events_whatever_ranges_it_merges():
    # one hot table among small ones: every task may get the biggest range's share
    ranges = [TASK_EVENTS // 2] * 4 + [10] * 96
    tasks = read_tasks(ranges, 2, TASK_EVENTS)
    per_task = -(-len(ranges) // tasks)
    assert per_task * max(ranges) <= TASK_EVENTS
    assert tasks == 50


def test_fewer_ranges_than_slots_and_empty_batches():
    assert read_tasks([5, 7], 4, TASK_EVENTS) == 2
    assert read_tasks([], 2, TASK_EVENTS) == 0


def test_interpreted_projections_for_many_small_ranges_only():
    assert interpreted([100] * 100)                       # 100 tables, a light batch each
    assert not interpreted([TASK_EVENTS] * 32)            # one big table's backlog
    assert not interpreted([INTERPRETED_BELOW] * 4)
    assert interpreted([INTERPRETED_BELOW - 1] * 4)
    assert not interpreted([])
