"""The exactly-once guard of a batch: events below the committed offset of their partition are dropped."""
import pyarrow as pa

from tideline.core.batch_events import drop_applied


def test_events_below_the_committed_offsets_are_dropped():
    rows = pa.table({"topic": ["a", "a", "a", "b", "b", "c"], "partition": [0, 0, 1, 0, 1, 0],
                     "offset": pa.array([4, 5, 9, 2, 7, 0], pa.int64())})
    kept = drop_applied(rows, {"a": {0: 5, 1: 0}, "b": {1: 8}, "c": {}})
    assert list(zip(kept.column("topic").to_pylist(), kept.column("offset").to_pylist())) == \
        [("a", 5), ("a", 9), ("b", 2), ("c", 0)]
    assert drop_applied(rows, {"a": {}, "b": {}, "c": {}}).num_rows == 6
