"""stream.handed: a table a full load took over is left to it while another table is left to
stream; a newer stream's claim, or the last table, still stops the stream."""
from tideline.stream.handed import hand_over

LOAD = "full_load pid 7 on host at 2026-11-29T04:00:00 (dag run manual__x, try 1)"
TABLES = {"orders": 1, "customers": 1, "items": 1}


def test_a_table_a_full_load_took_is_left_to_it_and_the_others_stream_on():
    handed = {}
    assert hand_over("shop", TABLES, {}, handed, "orders", LOAD)
    assert handed == {"orders": LOAD}
    assert hand_over("shop", TABLES, {}, handed, "orders", LOAD)   # seen again: still left to it


def test_a_newer_stream_or_the_last_table_left_stops_the_stream():
    assert not hand_over("shop", TABLES, {}, {}, "orders", "continuous stream by incremental pid 9")
    assert not hand_over("shop", TABLES, {}, {}, "orders", None)
    assert not hand_over("shop", {"orders": 1}, {}, {}, "orders", LOAD)
    assert not hand_over("shop", TABLES, {"items": "halted"}, {"customers": LOAD}, "orders", LOAD)
    assert not hand_over("shop", TABLES, {}, {}, "unknown", LOAD)
