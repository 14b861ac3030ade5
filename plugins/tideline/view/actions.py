"""What a person can do to a table from the view, and doing it: each action is a run of the
pipeline's own DAG (sync_<p> with the trigger params a person would type in Airflow's form, or
batch_<p>), triggered through Airflow's REST API with the caller's own token. So the view can do
nothing the user could not do in Airflow, its checks are the DAG's checks (core.params), and every
action shows in Airflow's audit log under the user's name."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from tideline.core.config import PipelineConfig
from tideline.core.params import REPAIR_FIELDS, ParamError, check_sync_params


@dataclass(frozen=True)
class Action:
    action: str              # a sync DAG action (core.params.ACTIONS), or "batch_now"
    label: str               # the button
    why: str                 # its tooltip: what it does
    confirm: str | None = None   # asked before it runs (an action that replaces or stops something)
    asks: str | None = None      # what the page asks for first ("key_range": a repair's optional range)


def offered(cfg: PipelineConfig, table: str, phase: str, stream_ended: bool = False,
            loaded: bool = True) -> list[Action]:
    """The actions that make sense for a table in `phase` (its pipeline's pair decides repair and
    validate), most useful first; `loaded`: a halted or paused table left 'streaming' (its Resume
    streams it; else Resume loads it: core.params.plan_tables). A batch-mode table has one: run its
    batch now."""
    if cfg.table(table).mode == "batch":
        return [Action("batch_now", "Run batch now", f"trigger batch_{cfg.name}: every batch-mode table lands "
                                                     f"the rows of the latest interval")]
    out: list[Action] = []
    verify = cfg.supports("verify")
    reload = Action("full_reload", "Re-snapshot", f"reload {table} from a new snapshot, then stream it; the other "
                                                  f"tables stream on",
                    confirm=f"Reload {cfg.name}.{table} from a new snapshot? Readers keep the current table until "
                            f"the new one replaces it in one step.")
    if phase in ("halted", "paused") and not loaded:
        out.append(Action("resume", "Resume", f"load {table} from a new snapshot, then stream it: it was {phase} "
                                              f"before any load of it committed (do this once what its error "
                                              f"names is fixed)"))
    elif phase == "halted":
        out.append(Action("resume", "Resume", f"stream {table} again from its own offsets: do this once what its "
                                              f"error names is fixed (if not, it halts again on the same event)"))
    elif phase == "paused":
        out.append(Action("resume", "Resume", f"stream {table} again from the position it was paused at"))
    elif phase in ("new", "needs_resnapshot") or (phase == "streaming" and stream_ended):
        out.append(Action("auto", "Start", "load what needs loading, then stream (the sync DAG's action=auto)"))
    if phase == "refused":
        return out   # its shape cannot be carried: the error says what to change at the source
    if phase in ("streaming", "loading", "new", "needs_resnapshot", "halted"):
        out.append(Action("pause", "Pause", f"stop applying {table}; it keeps its position and the other tables "
                                            f"stream on", confirm=f"Pause {cfg.name}.{table}? Its changes wait in "
                                                                  f"Kafka (mind the retention headroom)."))
    if phase != "new":
        out.append(reload)
    if verify and phase in ("streaming", "paused", "halted"):
        out.append(Action("validate", "Validate", f"compare {table} with the source by key ranges, down to the "
                                                  f"rows that differ"))
        out.append(Action("repair", "Repair", f"re-read rows of {table} from the source: a key range you give, or what "
                                              f"the last validate found different; the stream keeps its position",
                          asks="key_range"))
    return out


def trigger_request(cfg: PipelineConfig, table: str, action: str, given: dict | None = None) -> tuple[str, dict]:
    """(the DAG to trigger, its conf) for an action on one table, checked as the DAG checks its
    params (core.params.ParamError when it would refuse them). A repair may name a key or
    update-time range in `given` (the DAG's repair_* params); without one it re-reads what the
    last validate found."""
    if action == "batch_now":
        if given:
            raise ParamError(f"action=batch_now takes nothing more; got {', '.join(sorted(given))}")
        if cfg.table(table).mode != "batch":
            raise ParamError(f"{cfg.name}.{table} is not a batch-mode table: batch_{cfg.name} does not sync it")
        return f"batch_{cfg.name}", {}
    # resume: a paused table's action=resume; a halted one resumes by resume_halted in the same run
    conf = {"action": action, "tables": [table], "resume_halted": action == "resume"}
    extra = {k: v for k, v in (given or {}).items() if v not in (None, "")}
    unknown = sorted(set(extra) - set(REPAIR_FIELDS)) if action == "repair" else sorted(extra)
    if unknown:
        raise ParamError(f"action={action} takes no {', '.join(unknown)}"
                         + (f" (a repair takes {', '.join(REPAIR_FIELDS)})" if action == "repair" else ""))
    conf.update(extra)
    check_sync_params(cfg, conf)
    return f"sync_{cfg.name}", conf


class TriggerRefused(Exception):
    """Airflow did not trigger the run: `status` (an HTTP status) and Airflow's words."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _request(dag_id: str, conf: dict, note: str) -> tuple[str, str, dict]:
    return f"/dags/{dag_id}", f"/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf, "note": note}


def _outcome(airflow_url: str, dag_id: str, conf: dict, dag, made) -> dict:
    """What a trigger did, from Airflow's answers (the DAG, then the run made), or TriggerRefused."""
    from urllib.parse import quote
    answer = made if dag.is_success else dag
    if not answer.is_success:
        detail = answer.json().get("detail") if answer.headers.get("content-type", "").startswith(
            "application/json") else answer.text[:300]
        raise TriggerRefused(answer.status_code, f"Airflow refused to trigger {dag_id}: {detail}")
    run_id, paused = made.json()["dag_run_id"], bool(dag.json().get("is_paused"))
    message = (f"{dag_id} triggered ({described(conf)}): run {run_id}" +
               (f". The DAG is PAUSED in Airflow: the run waits until you unpause {dag_id}" if paused else ""))
    return {"dag_id": dag_id, "dag_run_id": run_id, "conf": conf, "paused": paused, "message": message,
            "link": f"dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"}


def _unanswered(airflow_url: str, dag_id: str, exc: BaseException) -> TriggerRefused:
    return TriggerRefused(502, f"Airflow's REST API at {airflow_url} did not answer the trigger of {dag_id}: "
                               f"{type(exc).__name__}: {exc}")


async def trigger(airflow_url: str, token: str, dag_id: str, conf: dict) -> dict:
    """Triggers dag_id with conf through Airflow's REST API as the token's user. Airflow's refusal
    (no right to trigger, the DAG not parsed) comes back as an HTTPException with its words."""
    import httpx
    from fastapi import HTTPException
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    get, post, body = _request(dag_id, conf, "triggered from the Tideline view")
    try:
        async with httpx.AsyncClient(base_url=f"{airflow_url}/api/v2", headers=headers, timeout=30) as client:
            try:
                dag = await client.get(get)
                made = await client.post(post, json=body) if dag.is_success else None
            except httpx.HTTPError as exc:
                raise _unanswered(airflow_url, dag_id, exc) from None
            return _outcome(airflow_url, dag_id, conf, dag, made)
    except TriggerRefused as exc:
        raise HTTPException(exc.status, str(exc)) from None


def trigger_now(airflow_url: str, token: str, dag_id: str, conf: dict, note: str) -> dict:
    """trigger(), for a command line: blocking, and TriggerRefused with Airflow's words."""
    import httpx
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    get, post, body = _request(dag_id, conf, note)
    with httpx.Client(base_url=f"{airflow_url}/api/v2", headers=headers, timeout=30) as client:
        try:
            dag = client.get(get)
            made = client.post(post, json=body) if dag.is_success else None
        except httpx.HTTPError as exc:
            raise _unanswered(airflow_url, dag_id, exc) from None
        return _outcome(airflow_url, dag_id, conf, dag, made)


def described(conf: dict) -> str:
    """What a triggered run does, in words: "validate of orders", or "a run" (a batch DAG's)."""
    tables = ", ".join(conf.get("tables") or [])
    return f"{conf.get('action', 'a run')} of {tables}" if tables else conf.get("action", "a run")


def as_json(actions: list[Action]) -> list[dict]:
    return [asdict(a) for a in actions]
