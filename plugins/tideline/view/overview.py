"""Every pipeline's tables as the view and the metrics show them. Each pipeline is read in its own
thread with a deadline, so a target that is down or hangs shows as such for that pipeline and
the page still answers for the others."""
from __future__ import annotations

import concurrent.futures
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from tideline.core.config import PipelineConfig, load_pipelines
from tideline.core.connections import Conn
from tideline.ops.status import TableStatus, pipeline_status
from tideline.view.actions import as_json, offered

# Threads of pipelines that overran stay behind until their driver gives up; a bounded pool keeps
# a hanging target from piling them up request after request.
_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="tideline-view")


@dataclass
class PipelineOverview:
    name: str
    state: str                 # ok | capture failed | error | timeout | invalid
    error: str | None = None   # what went wrong reading it, and what to do
    took_s: float | None = None
    dag_id: str | None = None
    headroom_alert_s: float | None = None   # headroom under this raises an alert (alerts.headroom_below_hours)
    target: str | None = None               # the target connection id and schema the figures come from
    waiting: str | None = None              # the stream waits: "waiting for <what> since <when> (try n)"
    waiting_s: float | None = None
    notices: list[str] = field(default_factory=list)   # what else a person should know (a source away)
    source_hold: str | None = None          # what capture holds on the source (a slot's retained WAL)
    source_hold_alerts: list[str] = field(default_factory=list)   # ... and how it harms the source
    tables: list[TableStatus] = field(default_factory=list)
    actions: dict[str, list[dict]] = field(default_factory=dict)   # per table: what a person can do (view.actions)

    def as_json(self) -> dict:
        out = asdict(self)
        actions = out.pop("actions")
        for t, status in zip(out["tables"], self.tables):
            t["actions"] = actions.get(status.table, [])
            t["lag_total"] = status.lag_total
            t["lag"] = {str(p): n for p, n in sorted(status.lag.items())}
            t["error_at"] = status.error_at.isoformat() if status.error_at else None
            load = status.load_progress   # a running load: its bar, line and ETA
            t["load"] = None if load is None else {"line": load.line(), "fraction": load.fraction,
                                                   "eta_s": load.eta_s, "chunks": load.chunks,
                                                   "chunks_done": load.chunks_done}
        return out


def overview(pipelines_dir: Path, connection: Callable[[str], Conn], timeout_s: float = 8.0,
             only: str | None = None) -> list[PipelineOverview]:
    """All pipelines of the directory (or `only` that one), valid or not, in name order."""
    good, bad = load_pipelines(pipelines_dir)
    out = [PipelineOverview(Path(path).stem, "invalid", error=str(err)) for path, err in bad.items()]
    cfgs = [c for c in good.values() if only is None or c.name == only]
    started = time.monotonic()
    futures = {cfg.name: _POOL.submit(_one, cfg, connection, timeout_s) for cfg in cfgs}
    for cfg in cfgs:
        left = max(0.1, timeout_s - (time.monotonic() - started))
        try:
            out.append(futures[cfg.name].result(timeout=left))
        except concurrent.futures.TimeoutError:
            out.append(_shell(cfg, "timeout", f"no answer within {timeout_s:g}s from the target "
                                              f"({cfg.target.conn_id}), the source or Kafka: check that they "
                                              f"are up and reachable from the Airflow api-server"))
    out = [o for o in out if only is None or o.name == only]
    return sorted(out, key=lambda o: o.name)


def _shell(cfg: PipelineConfig, state: str, error: str | None = None) -> PipelineOverview:
    return PipelineOverview(cfg.name, state, error, dag_id=f"sync_{cfg.name}",
                            headroom_alert_s=cfg.alerts.headroom_below_hours * 3600,
                            target=f"{cfg.target.conn_id} schema {cfg.target.schema_}")


def _one(cfg: PipelineConfig, connection: Callable[[str], Conn], timeout_s: float) -> PipelineOverview:
    started = time.monotonic()
    try:
        tables = pipeline_status(cfg, connection=connection, connect_timeout=max(1, int(timeout_s / 2)),
                                 exact_counts=False)
    except Exception as exc:   # shown on the page for this pipeline, with what to do
        first = (str(exc).strip() or type(exc).__name__).splitlines()[0]
        return _shell(cfg, "error", f"{type(exc).__name__}: {first}")
    capture = next((t.capture_error for t in tables if t.capture_error), None)
    view = _shell(cfg, "capture failed", f"no table receives changes: {capture}") if capture else _shell(cfg, "ok")
    view.tables, view.took_s = tables, round(time.monotonic() - started, 3)
    view.actions = {t.table: as_json(offered(cfg, t.table, t.phase, stream_ended=bool(t.stream_ended),
                                                       loaded=t.holds_load))
                    for t in tables}
    waiting = next((t for t in tables if t.stream_waiting), None)
    if waiting is not None:
        view.waiting, view.waiting_s = waiting.stream_waiting, waiting.stream_waiting_s
    view.notices = sorted({e for t in tables for e in (t.source_error, t.kafka_error) if e})
    held = next((t for t in tables if t.source_hold), None)
    if held is not None:
        view.source_hold, view.source_hold_alerts = held.source_hold, list(held.source_hold_alerts or [])
    return view
