"""The Spark session a job starts beside its driver's first steps: it is the session once ready,
and a failure to start is raised where the job first uses it, not lost in the thread."""
import threading

import pytest

from tideline import spark_session


def test_first_use_waits_for_the_session_and_then_passes_through(monkeypatch):
    release = threading.Event()

    class Session:
        version = "4.0.0"

    def slow_start(app_name, **kwargs):
        release.wait(5)
        return Session()

    monkeypatch.setattr(spark_session, "get_session", slow_start)
    spark = spark_session.SessionStarting("job")
    assert not spark._ready.is_set()          # the driver goes on meanwhile
    release.set()
    assert spark.version == "4.0.0"
    assert isinstance(spark.session(), Session)


def test_a_session_that_cannot_start_fails_the_job_where_it_is_first_used(monkeypatch):
    def broken(app_name, **kwargs):
        raise RuntimeError("Java gateway process exited before sending its port number")

    monkeypatch.setattr(spark_session, "get_session", broken)
    spark = spark_session.SessionStarting("job")
    with pytest.raises(RuntimeError, match="Java gateway"):
        spark.read
