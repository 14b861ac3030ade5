"""The stack's judgement of a hung Airflow component (stack/services/airflow.py silent_parts):
alive, the metadata database answering, and no heartbeat for the grace period."""
from datetime import datetime, timezone

from services.airflow import silent_parts

NOW = datetime(2026, 11, 27, 18, 0, tzinfo=timezone.utc).timestamp()
LONG_AGO = NOW - 3600


def _health(scheduler_beat: float | None, db: str = "healthy") -> dict:
    def beat(t):
        return datetime.fromtimestamp(t, timezone.utc).isoformat() if t is not None else None
    return {"metadatabase": {"status": db},
            "scheduler": {"status": "unhealthy", "latest_scheduler_heartbeat": beat(scheduler_beat)},
            "triggerer": {"status": "healthy", "latest_triggerer_heartbeat": beat(NOW - 2)},
            "dag_processor": {"status": "healthy", "latest_dag_processor_heartbeat": beat(NOW - 3)}}


STARTED = {"airflow-scheduler": LONG_AGO, "airflow-triggerer": LONG_AGO, "airflow-dag-processor": LONG_AGO}


def test_a_part_silent_past_the_grace_while_it_lives_and_the_database_answers_is_hung():
    assert silent_parts(_health(NOW - 95), STARTED, LONG_AGO, NOW, grace=60) == {"airflow-scheduler": 95.0}
    assert silent_parts(_health(NOW - 30), STARTED, LONG_AGO, NOW, grace=60) == {}


def test_a_database_outage_or_a_part_still_starting_is_not_counted_as_silence():
    # the database came back 20 s ago: nobody could heartbeat before that
    assert silent_parts(_health(NOW - 300), STARTED, NOW - 20, NOW, grace=60) == {}
    assert silent_parts(_health(NOW - 300), STARTED, NOW - 61, NOW, grace=60) == {"airflow-scheduler": 61.0}
    # a scheduler started 10 s ago, its predecessor's heartbeat old
    assert silent_parts(_health(NOW - 300), {**STARTED, "airflow-scheduler": NOW - 10}, LONG_AGO, NOW, grace=60) == {}
    # never heartbeated at all, up for two minutes
    assert silent_parts(_health(None), {**STARTED, "airflow-scheduler": NOW - 120}, LONG_AGO, NOW,
                        grace=60) == {"airflow-scheduler": 120.0}


def test_nothing_is_judged_without_an_answer_or_with_the_database_down_or_without_a_process():
    assert silent_parts(None, STARTED, LONG_AGO, NOW) == {}
    assert silent_parts(_health(NOW - 300, db="unhealthy"), STARTED, LONG_AGO, NOW) == {}
    assert silent_parts(_health(NOW - 300), {}, LONG_AGO, NOW) == {}   # not running: supervisord's matter


def test_the_restart_log_says_the_watch_killed_that_very_process(tmp_path, monkeypatch):
    import services.supervisor as supervisor
    monkeypatch.setattr(supervisor, "RUN", tmp_path)
    supervisor.hung_file("airflow-scheduler").write_text("4242 no heartbeat for 47s while it lived (hung)")
    assert supervisor.hung_kill("airflow-scheduler", "4243") is None      # another process: not this reason
    assert not supervisor.hung_file("airflow-scheduler").exists()          # and said once only
    supervisor.hung_file("airflow-scheduler").write_text("4242 no heartbeat for 47s while it lived (hung)")
    assert supervisor.hung_kill("airflow-scheduler", "4242") == "no heartbeat for 47s while it lived (hung)"
    assert supervisor.hung_kill("airflow-scheduler", "4242") is None
