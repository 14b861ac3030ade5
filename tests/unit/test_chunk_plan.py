"""core.chunked_load and core.load_progress: which loads go in chunks, when a cut-off load may
resume (and why not, in words), and a running load's progress line."""
from tideline.core.chunked_load import CHUNKED_FROM_ROWS, OpenLoad, chunk_count, may_resume, use_chunks
from tideline.core.load_progress import LoadProgress


def test_the_mode_follows_the_setting_and_for_auto_the_size():
    assert use_chunks("consistent", 10**9, True)[0] is False
    assert use_chunks("chunked", 10, True) == (True, "snapshot: chunked")
    assert use_chunks("auto", CHUNKED_FROM_ROWS, True)[0] is True
    chunked, why = use_chunks("auto", CHUNKED_FROM_ROWS - 1, True)
    assert chunked is False and "chunked from 10,000,000" in why
    assert use_chunks("auto", None, True)[0] is False   # no estimate: a small table's consistent read
    chunked, why = use_chunks("chunked", 10**9, False)
    assert chunked is False and "cannot load in chunks" in why and "one consistent snapshot" in why


def test_chunks_cover_the_estimate():
    assert chunk_count(None, 250_000) == 1
    assert chunk_count(0, 250_000) == 1
    assert chunk_count(250_000, 250_000) == 1
    assert chunk_count(250_001, 250_000) == 2
    assert chunk_count(20_000_000, 250_000) == 80


LOAD = OpenLoad(7, "topic-id-1", {0: 100, 1: 50}, ["k < 10", "k >= 10"], "shape-a", 1000, {0: 500})


def test_a_cut_off_load_resumes_while_kafka_keeps_its_offsets():
    assert may_resume(LOAD, "shape-a", "topic-id-1", {0: 100, 1: 0}) is None
    assert may_resume(LOAD, "shape-a", None, {}) is None   # nothing deleted yet


def test_a_cut_off_load_starts_over_saying_why():
    why = may_resume(LOAD, "shape-a", "topic-id-1", {0: 101, 1: 0})
    assert "partition 0: offset 100 needed, 101 is the oldest kept" in why and "retention" in why
    assert "columns changed" in may_resume(LOAD, "shape-b", "topic-id-1", {})
    assert "recreated" in may_resume(LOAD, "shape-a", "topic-id-2", {})


def test_progress_reads_rows_of_the_end_pace_and_eta():
    p = LoadProgress(5_000_000, 20_000_000, 250_000.0, 20, 80, estimated=True)
    assert p.fraction == 0.25 and p.eta_s == 60.0
    assert p.line() == "5,000,000 of ~20,000,000 rows stored (25%), chunk 20/80, 250,000 rows/s, ETA 60s"
    assert LoadProgress(10, None, None).line() == "10 rows stored"
    assert LoadProgress(10, None, None).eta_s is None
    assert LoadProgress(30, 20, 5.0).fraction == 1.0   # writers added rows meanwhile: never past the end
