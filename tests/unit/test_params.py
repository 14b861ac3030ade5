"""Trigger params: validated before any work; the per-table plan follows the phases."""
import pytest

from tideline.core.config import parse_pipeline
from tideline.core.params import ParamError, check_sync_params, hands_back, plan_tables, resumed_phase

CFG = parse_pipeline({"name": "shop", "source": {"conn_id": "s"}, "target": {"conn_id": "t"},
                      "kafka": {"topic_prefix": "p"}, "tables": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}, "x")


def test_defaults():
    assert check_sync_params(CFG, {}) == {"action": "auto", "tables": ["a", "b", "c"], "stream_mode": "continuous",
                                          "resume_halted": True}


@pytest.mark.parametrize("params,message", [
    ({"resume_halted": "yes"}, "resume_halted must be true or false"),
    ({"action": "drop"}, "action=.drop. is not one of auto, full_reload, repair, validate, pause, resume, remove, decommission"),
    ({"action": "repair", "tables": ["a", "b"], "repair_key_from": "1", "repair_key_to": "2"}, "works on one table"),
    ({"action": "repair", "tables": ["a"], "repair_key_from": "1"}, "needs both repair_key_from and repair_key_to"),
    ({"action": "repair", "tables": ["a"], "repair_time_column": "u"}, "needs all of repair_time_column"),
    ({"action": "repair", "tables": ["a"], "repair_key_from": "1", "repair_key_to": "2",
      "repair_time_column": "u"}, "not both"),
    ({"action": "repair", "tables": ["a"], "repair_time_column": 'u"x', "repair_time_from": "2026-01-01",
      "repair_time_to": "2026-01-02"}, "contains"),
    ({"action": "repair", "tables": ["a"], "repair_time_column": "u", "repair_time_from": "2026-01-02",
      "repair_time_to": "2026-01-01"}, "inverted"),
    ({"tables": ["a", "zz"]}, "has no table 'zz'; it has a, b, c"),
    ({"tables": ["a; DROP TABLE b"]}, "has no table 'a; DROP TABLE b'"),
    ({"stream_mode": "fast"}, "stream_mode='fast'"),
    ({"tables": [1]}, "must be a list of table names"),
])
def test_bad_params(params, message):
    with pytest.raises(ParamError, match=message):
        check_sync_params(CFG, params)


def test_plan_by_phase_and_action():
    phases = {"a": ("streaming", None), "b": ("needs_resnapshot", "lost"), "c": ("halted", "schema")}
    plan = plan_tables(CFG, "auto", ["a", "b", "c"], phases)
    assert (plan["full_load"], plan["stream"], plan["halted"]) == (["b"], ["a"], ["c"])
    assert plan["resnapshot"] == ["b"]  # reloaded by itself: the DAG alerts when it starts and finishes
    plan = plan_tables(CFG, "full_reload", ["a", "c"], phases)
    assert plan["full_load"] == ["a", "b", "c"] and plan["stream"] == []
    assert plan_tables(CFG, "auto", [], {})["full_load"] == ["a", "b", "c"]


def test_a_person_resumes_halted_tables_the_automatic_restart_does_not():
    phases = {"a": ("streaming", None), "b": ("halted", "refused", "streaming"), "c": ("halted", "refused", "streaming")}
    plan = plan_tables(CFG, "auto", ["a", "b"], phases, resume_halted=True)
    assert (plan["stream"], plan["resumed"], plan["halted"]) == (["a", "b"], ["b"], ["c"])
    plan = plan_tables(CFG, "auto", ["a", "b", "c"], phases, resume_halted=False)
    assert (plan["stream"], plan["resumed"], plan["halted"]) == (["a"], [], ["b", "c"])


def test_a_table_halted_during_its_load_is_loaded_again_never_streamed_onto_no_rows():
    """Found from outside: a table refused at its first load (a value its target cannot hold),
    fixed at the source, then `auto` (resume_halted true by default) was streamed from offsets with
    no load under them: no row of it ever reached the target, and status said streaming."""
    phases = {"a": ("streaming", None), "b": ("halted", "full load: column ts holds infinity", "loading"),
              "c": ("halted", "an old halt, from before phase_before was kept")}
    plan = plan_tables(CFG, "auto", ["a", "b", "c"], phases, resume_halted=True)
    assert (plan["full_load"], plan["stream"], plan["resumed"]) == (["b", "c"], ["a"], ["b", "c"])
    assert "nothing of it committed" in plan["reasons"]["b"]
    assert resumed_phase(plan, "b") == "new" and resumed_phase(plan, "a") == "streaming"
    plan = plan_tables(CFG, "resume", ["b"], phases, resume_halted=True)   # the view's Resume button
    assert plan["full_load"] == ["b"] and "b" not in plan["stream"]
    assert plan_tables(CFG, "auto", ["a", "b"], phases)["halted"] == ["b", "c"]   # the automatic restart waits


@pytest.mark.parametrize("phase,before,why", [
    ("paused", "new", "paused before any load of it committed"),
    ("paused", "loading", "paused before any load of it committed"),
    ("removed", "streaming", "back in the YAML after it was removed"),
    ("batch", None, "was a batch-mode table"),
])
def test_siblings_a_table_without_a_committed_load_or_a_continuous_position_is_loaded(phase, before, why):
    phases = {"a": (phase, None, before)}
    plan = plan_tables(CFG, "resume" if phase == "paused" else "auto", ["a"], phases, resume_halted=True)
    assert "a" in plan["full_load"] and "a" not in plan["stream"] and why in plan["reasons"]["a"]


def test_repair_params_normalized():
    assert check_sync_params(CFG, {"action": "repair", "tables": ["b"], "repair_key_from": 10,
                                   "repair_key_to": "20"})["repair"] == {"table": "b", "key_from": "10",
                                                                         "key_to": "20"}
    r = check_sync_params(CFG, {"action": "repair", "tables": ["a"], "repair_time_column": "updated_at",
                                "repair_time_from": "2026-01-01T00:00:00+00:00",
                                "repair_time_to": "2026-01-02T00:00:00+00:00"})["repair"]
    assert r["time_column"] == "updated_at"


def test_repair_without_a_range_repairs_what_the_last_verify_found():
    assert check_sync_params(CFG, {"action": "repair", "tables": ["a", "b"]})["repair"] == \
        {"from_verify": True, "tables": ["a", "b"]}


def test_repair_from_verify_leaves_out_batch_tables_which_validate_does_not_compare():
    cfg = parse_pipeline({"name": "shop", "source": {"conn_id": "s"}, "target": {"conn_id": "t"},
                          "kafka": {"topic_prefix": "p"},
                          "tables": [{"name": "a"}, {"name": "log", "mode": "batch", "cursor_column": "at"}]}, "x")
    assert check_sync_params(cfg, {"action": "repair"})["repair"] == \
        {"from_verify": True, "tables": ["a"], "not_verified": ["log"]}
    with pytest.raises(ParamError, match="validate does not compare batch-mode tables .log.: give a key range"):
        check_sync_params(cfg, {"action": "repair", "tables": ["log"]})


def test_an_available_now_run_hands_back_what_a_continuous_stream_held():
    held = {"orders", "customers"}
    assert hands_back("available_now", ["orders", "items"], held) == ["orders"]
    assert hands_back("continuous", ["orders"], held) == []   # it streams on itself
    assert hands_back("available_now", ["items"], held) == []  # nothing was streamed continuously


def test_a_paused_table_keeps_out_of_every_run_until_a_person_resumes_it():
    phases = {"a": ("streaming", None), "b": ("streaming", None), "c": ("needs_resnapshot", "lost")}
    plan = plan_tables(CFG, "pause", ["b"], phases)
    assert (plan["paused"], plan["pause"], plan["stream"], plan["full_load"]) == (["b"], ["b"], ["a"], ["c"])
    phases["b"] = ("paused", "paused by a person", "streaming")
    for action, tables in (("auto", ["a", "b", "c"]), ("full_reload", ["b"]), ("resume", ["a"])):
        plan = plan_tables(CFG, action, tables, phases)
        assert plan["paused"] == ["b"] and "b" not in plan["stream"] + plan["full_load"], action
    plan = plan_tables(CFG, "resume", ["b"], phases)
    assert (plan["unpause"], plan["paused"], plan["stream"]) == (["b"], [], ["a", "b"])
    assert plan_tables(CFG, "pause", ["b"], phases)["pause"] == []   # already paused: nothing to fence


def test_pause_applies_to_change_stream_tables_only():
    cfg = parse_pipeline({"name": "shop", "source": {"conn_id": "s"}, "target": {"conn_id": "t"},
                          "kafka": {"topic_prefix": "p"},
                          "tables": [{"name": "a"}, {"name": "log", "mode": "batch", "cursor_column": "u"}]}, "x")
    with pytest.raises(ParamError, match="log is a batch-mode table .pause the batch_shop DAG"):
        check_sync_params(cfg, {"action": "pause", "tables": ["log"]})


def test_decommission_needs_the_pipelines_name_typed():
    for confirm in (None, "", "sho", "yes"):
        with pytest.raises(ParamError, match="type the pipeline's name .shop. in param confirm"):
            check_sync_params(CFG, {"action": "decommission", "confirm": confirm})
    assert check_sync_params(CFG, {"action": "decommission", "confirm": "shop"})["action"] == "decommission"
