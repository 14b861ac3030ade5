"""view.actions: what the view offers a person per table and phase, and the DAG run each action
becomes — checked as the sync DAG checks its params, so the view can ask for nothing the DAG refuses."""
from pathlib import Path

import pytest

from tideline.core.config import load_pipeline
from tideline.core.params import ParamError, check_sync_params, plan_tables
from tideline.view.actions import offered, trigger_request

PIPELINES = Path(__file__).resolve().parents[2] / "pipelines"
DEMO = load_pipeline(PIPELINES / "demo.yaml")                  # postgres -> postgres, a batch table
LAKE = load_pipeline(PIPELINES / "shop_lake.yaml")
MARIADB_LAKE = LAKE.model_copy(update={"source": LAKE.source.model_copy(update={"kind": "mariadb"})})


def labels(cfg, table, phase, **kw):
    return [a.action for a in offered(cfg, table, phase, **kw)]


def test_each_phase_offers_what_moves_it_on_first():
    assert labels(DEMO, "customers", "streaming") == ["pause", "full_reload", "validate", "repair"]
    assert labels(DEMO, "customers", "streaming", stream_ended=True)[0] == "auto"   # nothing streams it: start
    assert labels(DEMO, "customers", "halted")[0] == "resume"
    assert labels(DEMO, "customers", "paused") == ["resume", "full_reload", "validate", "repair"]
    assert labels(DEMO, "customers", "new") == ["auto", "pause"]
    assert labels(DEMO, "customers", "needs_resnapshot")[0] == "auto"
    assert labels(DEMO, "customers", "refused") == []            # the error says what to change at the source
    assert labels(DEMO, "audit_log", "batch") == ["batch_now"]


def test_what_replaces_or_stops_something_asks_first():
    by = {a.action: a for a in offered(DEMO, "customers", "streaming")}
    assert "new snapshot" in by["full_reload"].confirm and "retention" in by["pause"].confirm
    assert by["validate"].confirm is None and by["repair"].why


def test_a_pair_without_verify_offers_no_validate_or_repair():
    assert not MARIADB_LAKE.supports("verify") and LAKE.supports("verify")
    assert "validate" in labels(LAKE, LAKE.tables[0].name, "streaming")
    table = MARIADB_LAKE.tables[0].name
    assert not {"validate", "repair"} & set(labels(MARIADB_LAKE, table, "streaming"))


@pytest.mark.parametrize("phase", ["streaming", "halted", "paused", "new", "needs_resnapshot"])
def test_every_offered_action_is_a_run_the_dag_accepts(phase):
    for a in offered(DEMO, "customers", phase):
        dag_id, conf = trigger_request(DEMO, "customers", a.action)
        assert dag_id == "sync_demo" and conf["tables"] == ["customers"]
        assert check_sync_params(DEMO, conf)["action"] == a.action


def test_resume_streams_a_paused_and_a_halted_table_in_the_dags_own_plan():
    _dag, conf = trigger_request(DEMO, "customers", "resume")
    checked = check_sync_params(DEMO, conf)
    for phase in ("paused", "halted"):
        plan = plan_tables(DEMO, checked["action"], checked["tables"], {"customers": (phase, None, "streaming")},
                           checked["resume_halted"])
        assert "customers" in plan["stream"], (phase, plan)
        # halted or paused before any load of it committed: the same button loads it
        plan = plan_tables(DEMO, checked["action"], checked["tables"], {"customers": (phase, None, "loading")},
                           checked["resume_halted"])
        assert "customers" in plan["full_load"] and "customers" not in plan["stream"], (phase, plan)


def test_the_batch_table_runs_its_batch_dag_and_nothing_else_is_let_through():
    assert trigger_request(DEMO, "audit_log", "batch_now") == ("batch_demo", {})
    with pytest.raises(ParamError, match="not a batch-mode table"):
        trigger_request(DEMO, "customers", "batch_now")
    with pytest.raises(ParamError, match="applies to change-stream tables"):
        trigger_request(DEMO, "audit_log", "pause")
    with pytest.raises(ParamError, match="is not one of"):
        trigger_request(DEMO, "customers", "drop_everything")


def test_a_batch_table_says_its_schedule_its_last_run_and_when_the_next_comes():
    from datetime import datetime, timezone

    from tideline.core.settings import next_run
    from tideline.ops.status import _batch_line
    now = datetime(2026, 11, 29, 6, 40, tzinfo=timezone.utc)
    assert next_run("@daily", now) == datetime(2026, 11, 30, tzinfo=timezone.utc)
    assert next_run("15 */6 * * *", now) == datetime(2026, 11, 29, 12, 15, tzinfo=timezone.utc)
    assert next_run(None, now) is None and next_run("@once", now) is None
    never = _batch_line(DEMO, {}, now)
    assert never.startswith(f"batch_demo on {DEMO.batch_schedule}: no batch has run yet; next at 2026-11-30 00:00 UTC")
    ran = _batch_line(DEMO, {"batch_run_id": 7, "batch_run_age_s": 3600, "batch_run_outcome": "succeeded",
                             "batch_run_rows": 12345}, now)
    assert "last run 60m ago: succeeded, 12,345 rows; next at" in ran and "trigger batch_demo" in ran


def test_a_repair_from_the_view_takes_a_key_range_as_the_dags_form_does_and_nothing_else():
    _dag, conf = trigger_request(DEMO, "customers", "repair", {"repair_key_from": "10", "repair_key_to": "20"})
    assert check_sync_params(DEMO, conf)["repair"] == {"table": "customers", "key_from": "10", "key_to": "20"}
    _dag, conf = trigger_request(DEMO, "customers", "repair", {"repair_key_from": "", "repair_key_to": None})
    assert check_sync_params(DEMO, conf)["repair"]["from_verify"] is True   # empty: what the last validate found
    with pytest.raises(ParamError, match="needs both repair_key_from and repair_key_to"):
        trigger_request(DEMO, "customers", "repair", {"repair_key_from": "10"})
    with pytest.raises(ParamError, match="action=pause takes no repair_key_from"):
        trigger_request(DEMO, "customers", "pause", {"repair_key_from": "10"})
    with pytest.raises(ParamError, match="takes no tables"):
        trigger_request(DEMO, "customers", "repair", {"tables": ["orders"]})   # one table: the one clicked


def test_the_answer_says_what_was_triggered_whatever_the_table_is_called():
    from tideline.view.actions import described
    # (a table ending in o or f lost its name to str.rstrip(" of") before)
    assert described({"action": "validate", "tables": ["info"]}) == "validate of info"
    assert described({"action": "pause", "tables": ["foo", "of"]}) == "pause of foo, of"
    assert described({}) == "a run"
