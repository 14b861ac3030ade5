"""Which side pipes a load's partitions while the job's Spark session starts (load.copy_rows.pipe_partitions):
the driver one range after another until the session is ready — on a cluster at most half of them,
Spark the others; with a local master of N cores it keeps the last 1/N of what is left then and
Spark pipes the rest in N-1 tasks."""
import threading
import time

import pytest

from tideline import spark_session
from tideline.load import copy_rows


class FakeContext:
    """Spark's side: runs the copier over the partitions it is given, in this process."""

    def __init__(self):
        self.given, self.tasks = [], []

    def parallelize(self, items, n):
        self.given.append(list(items))
        self.tasks.append(n)
        outer = self

        class Rdd:
            def mapPartitions(self, fn):
                return type("Job", (), {"collect": lambda _self: list(fn(outer.given[-1]))})()
        return Rdd()


def starting(monkeypatch, release: threading.Event, context: FakeContext, master: str = "spark://cluster:7077"):
    session = type("Session", (), {"sparkContext": context, "_jvm": None, "_jsparkSession": None})()
    monkeypatch.setattr(spark_session, "get_session", lambda app, **kw: release.wait(10) and session)
    monkeypatch.setattr(spark_session.SessionStarting, "session", lambda self: (self._ready.wait(), session)[1])
    return spark_session.SessionStarting("test", master=master)


def copier_for(log, after=None):
    def make(where):
        def copy(items):
            for part, _read in items:
                log.append((part, where or "spark"))
                if after is not None:
                    after()
                yield {"partition": part, "rows": 1, "copied": 1}
        return copy
    return make


def progress():
    return copy_rows.Progress(None, "t", 4, 0.0)


def test_a_ready_session_gets_every_partition(monkeypatch):
    release, context, log = threading.Event(), FakeContext(), []
    release.set()
    spark = starting(monkeypatch, release, context)
    spark.ready(10)
    items = [(i, f"read {i}") for i in range(4)]
    figures = copy_rows.pipe_partitions(spark, items, progress(), copier_for(log))
    assert [f["partition"] for f in figures] == [0, 1, 2, 3]
    assert context.given == [items] and {w for _, w in log} == {"spark"}


def test_the_driver_pipes_the_first_range_while_the_session_starts_and_spark_the_rest(monkeypatch):
    release, context, log = threading.Event(), FakeContext(), []
    spark = starting(monkeypatch, release, context)
    items = [(i, f"read {i}") for i in range(4)]
    figures = copy_rows.pipe_partitions(spark, items, progress(),
                                        copier_for(log, after=lambda: (release.set(), spark.ready(10))))
    assert [f["partition"] for f in figures] == [0, 1, 2, 3]    # each once, in key order
    assert log[0] == (0, "in the driver while Spark started")
    assert context.given == [items[1:]] and {w for _, w in log[1:]} == {"spark"}


@pytest.mark.parametrize("ranges,driver_takes", [(4, 2), (5, 2), (2, 1), (9, 4)])
def test_while_the_session_starts_the_driver_goes_on_but_leaves_spark_at_least_half(monkeypatch, ranges,
                                                                                      driver_takes):
    release, context, log = threading.Event(), FakeContext(), []
    spark = starting(monkeypatch, release, context)
    items = [(i, f"read {i}") for i in range(ranges)]
    by_driver = lambda: sum(1 for _, w in log if w != "spark")   # noqa: E731
    threading.Thread(target=lambda: (time_out(lambda: by_driver() == driver_takes), release.set()),
                     daemon=True).start()
    figures = copy_rows.pipe_partitions(spark, items, progress(), copier_for(log))
    assert [f["partition"] for f in figures] == list(range(ranges))
    assert [p for p, w in log if w != "spark"] == list(range(driver_takes))
    assert context.given == [items[driver_takes:]]


def time_out(condition, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_one_range_is_piped_by_the_driver_without_waiting_for_the_session(monkeypatch):
    release, context, log = threading.Event(), FakeContext(), []
    spark = starting(monkeypatch, release, context)
    figures = copy_rows.pipe_partitions(spark, [(0, "a")], progress(), copier_for(log))
    assert [f["partition"] for f in figures] == [0] and context.given == []
    assert not spark.ready()
    release.set()


def test_ranges_the_driver_pipes_before_the_session_is_ready_end_the_load_without_waiting_for_it(monkeypatch):
    release, context, log = threading.Event(), FakeContext(), []
    spark = starting(monkeypatch, release, context, master="local[2]")
    items = [(i, f"read {i}") for i in range(2)]
    figures = copy_rows.pipe_partitions(spark, items, progress(), copier_for(log))
    assert [f["partition"] for f in figures] == [0, 1] and context.given == []
    assert {w for _, w in log} == {"in the driver while Spark started"}
    assert not spark.ready(), "the load did not wait for the session"
    release.set()


def test_the_drivers_failure_is_raised_after_spark_is_done(monkeypatch):
    release, context, log = threading.Event(), FakeContext(), []
    spark = starting(monkeypatch, release, context)

    def make(where):
        def copy(items):
            for part, _read in items:
                if where:
                    release.set()
                    raise RuntimeError(f"partition {part}: the source went away")
                log.append(part)
                yield {"partition": part}
        return copy
    with pytest.raises(RuntimeError, match="partition 0: the source went away"):
        copy_rows.pipe_partitions(spark, [(i, "r") for i in range(3)], progress(), make)
    assert context.given == [[(1, "r"), (2, "r")]] and log == [1, 2]


@pytest.mark.parametrize("ranges,ready_during,driver_gets", [
    (4, 0, [0, 3]),            # ready while the driver pipes range 0: of 1-3 it keeps the last one
    (4, 1, [0, 1, 3]),         # ready during range 1: of 2-3, the last one
    (5, 0, [0, 3, 4]),
    (2, 0, [0]),               # ready during range 0: range 1 is Spark's
])
def test_with_a_local_master_the_driver_keeps_its_share_of_what_is_left_when_the_session_is_ready(
        monkeypatch, ranges, ready_during, driver_gets):
    release, context, log = threading.Event(), FakeContext(), []
    spark = starting(monkeypatch, release, context, master="local[2]")
    items = [(i, f"read {i}") for i in range(ranges)]

    def make(where):
        def copy(batch):
            for part, _read in batch:
                if where and sum(1 for _, w in log if w != "spark") == ready_during:
                    release.set()                        # ready now; the split is made before the
                    time_out(lambda: context.given)      # driver asks for its next range
                log.append((part, where or "spark"))
                yield {"partition": part}
        return copy
    figures = copy_rows.pipe_partitions(spark, items, progress(), make)
    assert [f["partition"] for f in figures] == list(range(ranges))
    assert [p for p, w in log if w != "spark"] == driver_gets
    assert context.given == [[item for item in items if item[0] not in driver_gets]]
    assert context.tasks == [1]     # local[2]: the driver's pipe and one Spark task, two streams


@pytest.mark.parametrize("master,cores", [("local[2]", 2), ("local", 1), ("local[3,4]", 3),
                                          ("spark://h:7077", None), ("yarn", None)])
def test_local_cores_of_a_master(master, cores):
    session = spark_session.SessionStarting.__new__(spark_session.SessionStarting)
    session.__dict__["master"] = master
    assert spark_session.local_cores(session) == cores


def never_started(monkeypatch, master: str = "local[2]"):
    """A job's session that was not asked for (SessionStarting(start=False)); starting it fails the test."""
    monkeypatch.setattr(spark_session, "get_session",
                        lambda app, **kw: pytest.fail("the session was started"))
    return spark_session.SessionStarting("test", start=False, master=master)


class AtOnce:
    """A copier that logs (partition, where) and counts how many of its copies ran at once."""

    def __init__(self):
        self.log, self.running, self.most, self.lock = [], 0, 0, threading.Lock()

    def __call__(self, where):
        def copy(items):
            for part, _read in items:
                with self.lock:
                    self.running += 1
                    self.most = max(self.most, self.running)
                time.sleep(0.02)
                with self.lock:
                    self.running -= 1
                self.log.append((part, where))
                yield {"partition": part}
        return copy


def test_a_session_never_started_on_a_local_master_leaves_every_range_to_the_drivers_streams(monkeypatch):
    spark, make = never_started(monkeypatch), AtOnce()
    items = [(i, f"read {i}") for i in range(7)]
    figures = copy_rows.pipe_partitions(spark, items, progress(), make)
    assert [f["partition"] for f in figures] == list(range(7))    # each once, in key order
    assert {w for _, w in make.log} == {"in the driver"}
    assert make.most == 2                                         # local[2]: two streams at once
    assert not spark.started and not spark.ready()


def test_the_drivers_streams_of_tables_loading_at_once_share_the_masters_cores(monkeypatch):
    spark, make = never_started(monkeypatch), AtOnce()
    tables = [threading.Thread(target=copy_rows.pipe_partitions,
                               args=(spark, [(i, "r") for i in range(4)], progress(), make)) for _ in range(3)]
    for t in tables:
        t.start()
    for t in tables:
        t.join()
    assert make.most == 2


def test_a_failed_range_stops_the_drivers_streams_and_is_raised(monkeypatch):
    spark, log = never_started(monkeypatch), []

    def make(where):
        def copy(items):
            for part, _read in items:
                if part == 1:
                    raise RuntimeError("partition 1: the source went away")
                time.sleep(0.05)
                log.append(part)
                yield {"partition": part}
        return copy
    with pytest.raises(RuntimeError, match="partition 1: the source went away"):
        copy_rows.pipe_partitions(spark, [(i, "r") for i in range(8)], progress(), make)
    assert log == [0]   # the other stream ended its range; nothing more was taken


def test_on_a_cluster_a_session_not_asked_for_starts_for_spark_to_pipe(monkeypatch):
    release, context, log = threading.Event(), FakeContext(), []
    release.set()
    session = type("Session", (), {"sparkContext": context, "_jvm": None, "_jsparkSession": None})()
    monkeypatch.setattr(spark_session, "get_session", lambda app, **kw: session)
    monkeypatch.setattr(spark_session.SessionStarting, "session",
                        lambda self: (self.start(), self._ready.wait(), session)[2])
    spark = spark_session.SessionStarting("test", start=False, master="spark://cluster:7077")
    assert spark_session.driver_streams(spark) is None
    spark.start()
    spark.ready(10)
    figures = copy_rows.pipe_partitions(spark, [(i, "r") for i in range(3)], progress(), copier_for(log))
    assert [f["partition"] for f in figures] == [0, 1, 2] and {w for _, w in log} == {"spark"}
