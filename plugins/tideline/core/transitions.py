"""What the sync DAG does with a table in each phase for each action: the table in
docs/how-it-works.md ("Phases and actions"), generated from core.params.plan_tables itself, so the
page cannot say what the code does not (tests/unit/test_transitions.py). Run
`python -m tideline.core.transitions` to print it."""
from __future__ import annotations

from tideline.core.config import parse_pipeline
from tideline.core.params import plan_tables, resumed_phase
from tideline.core.phases import TablePhase

# (what the row is called, the table's state as the plan reads it)
STATES = (
    ("new (never loaded)", TablePhase("new")),
    ("streaming", TablePhase("streaming")),
    ("needs_resnapshot", TablePhase("needs_resnapshot", "lost its position")),
    ("halted while streaming", TablePhase("halted", "a refused change", "streaming")),
    ("halted during its load", TablePhase("halted", "full load: a refused value", "loading")),
    ("paused while streaming", TablePhase("paused", "paused by a person", "streaming")),
    ("paused before a load committed", TablePhase("paused", "paused by a person", "new")),
    ("removed, back in the YAML", TablePhase("removed", "removed from the YAML", "streaming")),
    ("batch, now a change stream", TablePhase("batch")),
    ("refused", TablePhase("refused", "no primary key")),
)
# (the column's heading, action, resume_halted)
ACTIONS = (
    ("`auto` (a person's trigger)", "auto", True),
    ("`auto` (scheduled or automatic restart)", "auto", False),
    ("`full_reload`", "full_reload", True),
    ("`resume`", "resume", True),
    ("`pause`", "pause", True),
    ("`remove`", "remove", True),
)
_CFG = parse_pipeline({"name": "p", "source": {"conn_id": "s"}, "target": {"conn_id": "t"},
                       "kafka": {"topic_prefix": "p"}, "tables": [{"name": "t"}]}, "transitions")


def outcome(state: TablePhase, action: str, resume_halted: bool) -> str:
    """What a run does with table t, in a few words, from the plan."""
    plan = plan_tables(_CFG, action, ["t"], {"t": state}, resume_halted)
    if "t" in plan["refused"]:
        return "nothing (refused until its cause is fixed)"
    if "t" in plan["pause"]:
        return "paused (its stream fenced)"
    if "t" in plan["paused"]:
        return "stays paused"
    if "t" in plan["halted"]:
        return "stays halted"
    resumed = " (resumed: phase " + resumed_phase(plan, "t") + ")" if "t" in plan["resumed"] + plan["unpause"] else ""
    if "t" in plan["stream"]:
        return "**stream** from its own offsets" + resumed
    if "t" in plan["resnapshot"]:
        return "full load (re-snapshot, alerted)"
    return "full load" + resumed


def markdown() -> str:
    lines = ["| phase \\ action | " + " | ".join(h for h, _a, _r in ACTIONS) + " |",
             "| --- | " + " | ".join("---" for _ in ACTIONS) + " |"]
    for name, state in STATES:
        lines.append(f"| {name} | " + " | ".join(outcome(state, a, r) for _h, a, r in ACTIONS) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
