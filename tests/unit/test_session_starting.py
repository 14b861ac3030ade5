"""The Spark session a job starts beside its driver's first steps: it is the session once ready,
and a failure to start is raised where the job first uses it, not lost in the thread."""
import threading

import pytest

from tideline import spark_session


def test_first_use_waits_for_the_session_and_then_passes_through(monkeypatch):
    release = threading.Event()

    active = []   # (Python thread, session) each time a thread made the session its active one

    class Session:
        version = "4.0.0"
        _jsparkSession = "the JVM session"

        class _jvm:
            class org:
                class apache:
                    class spark:
                        class sql:
                            class SparkSession:
                                @staticmethod
                                def setActiveSession(jsession):
                                    active.append((threading.current_thread().name, jsession))

    def slow_start(app_name, **kwargs):
        release.wait(5)
        return Session()

    monkeypatch.setattr(spark_session, "get_session", slow_start)
    spark = spark_session.SessionStarting("job")
    assert not spark._ready.is_set()          # the driver goes on meanwhile
    release.set()
    assert spark.version == "4.0.0"
    assert isinstance(spark.session(), Session)
    # made active once in each thread that uses it (Spark SQL settings are read from the thread's
    # active session; getOrCreate set it only in the starting thread)
    other = threading.Thread(target=spark.session, name="other")
    other.start()
    other.join()
    assert active == [(threading.current_thread().name, "the JVM session"), ("other", "the JVM session")]


def test_a_session_that_cannot_start_fails_the_job_where_it_is_first_used(monkeypatch):
    def broken(app_name, **kwargs):
        raise RuntimeError("Java gateway process exited before sending its port number")

    monkeypatch.setattr(spark_session, "get_session", broken)
    spark = spark_session.SessionStarting("job")
    with pytest.raises(RuntimeError, match="Java gateway"):
        spark.read


def test_a_session_not_asked_for_starts_at_its_first_use_only(monkeypatch):
    started = []

    class Session:
        version = "4.0.0"
        _jsparkSession = "the JVM session"
        _jvm = type("jvm", (), {"org": type("org", (), {"apache": type("a", (), {"spark": type("s", (), {
            "sql": type("q", (), {"SparkSession": type("S", (), {"setActiveSession": staticmethod(lambda j: None)})})
        })})})})

    monkeypatch.setattr(spark_session, "get_session", lambda app_name, **kw: started.append(app_name) or Session())
    spark = spark_session.SessionStarting("job", start=False, master="local[2]")
    assert not spark.ready(0.2) and started == []      # asking whether it is ready does not start it
    assert spark_session.driver_streams(spark) == 2
    assert spark.version == "4.0.0" and started == ["job"]
    assert spark_session.driver_streams(spark) is None  # started: Spark's tasks pipe now
