"""Every phase x action x resume_halted the sync DAG's plan can meet: the docs' table is the
code's, and no plan streams a table whose target holds no committed load (found from outside: a
table halted at its load was 'resumed' as streaming with none of its rows in the target)."""
from pathlib import Path

from hypothesis import given, settings, strategies as st

from tideline.core.config import parse_pipeline
from tideline.core.params import ACTIONS, plan_tables, resumed_phase
from tideline.core.phases import PARKED, TablePhase, holds_load
from tideline.core.transitions import markdown

PAGE = Path(__file__).resolve().parents[2] / "docs" / "how-it-works.md"
NAMES = ["a", "b", "c", "d"]
CFG = parse_pipeline({"name": "p", "source": {"conn_id": "s"}, "target": {"conn_id": "t"},
                      "kafka": {"topic_prefix": "p"}, "tables": [{"name": n} for n in NAMES]}, "x")
PHASES = ("new", "loading", "streaming", "needs_resnapshot", "halted", "batch", "refused", "paused", "removed")
BEFORE = (None, "new", "loading", "streaming", "needs_resnapshot", "batch")


def test_the_docs_table_is_the_codes():
    page = PAGE.read_text()
    block = page.split("<!-- transitions:begin -->\n", 1)[1].split("<!-- transitions:end -->", 1)[0]
    assert block == markdown(), "docs/how-it-works.md drifted: run `python -m tideline.core.transitions`"


table_state = st.builds(TablePhase, st.sampled_from(PHASES), st.none(), st.sampled_from(BEFORE))


@settings(max_examples=3000, deadline=None)
@given(phases=st.dictionaries(st.sampled_from(NAMES), table_state), action=st.sampled_from(ACTIONS),
       named=st.lists(st.sampled_from(NAMES), unique=True), resume_halted=st.booleans())
def test_a_table_is_streamed_only_if_its_target_holds_a_committed_load(phases, action, named, resume_halted):
    plan = plan_tables(CFG, action, named, phases, resume_halted)
    state = {n: phases.get(n, TablePhase("new")) for n in NAMES}
    for name in plan["stream"]:
        assert holds_load(state[name].phase, state[name].before), (name, state[name], action, plan["reasons"])
    # every table lands in exactly one place, and a resumed one takes the phase its plan needs
    groups = [plan[k] for k in ("full_load", "stream", "halted", "refused", "paused")]
    for name in NAMES:
        assert sum(name in g for g in groups) == 1, (name, state[name], action, plan)
    for name in plan["resumed"] + plan["unpause"]:
        assert state[name].phase in PARKED
        assert resumed_phase(plan, name) == ("streaming" if name in plan["stream"] else "new")
    # a table that never committed a load is loaded (or waits, refused, halted or paused), never streamed
    for name in NAMES:
        if state[name].phase in ("new", "loading", "needs_resnapshot", "removed", "batch"):
            assert name not in plan["stream"]
