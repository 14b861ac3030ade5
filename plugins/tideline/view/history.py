"""A table's history over a window, for the view's charts: the stream in time buckets (events/s,
lag, batch duration), its runs as a timeline with the Airflow task behind each, and the rows a
load stored so far. Read from the target's tideline.batches, tideline.runs, tideline.load_progress."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from urllib.parse import quote

from tideline import state
from tideline.state import ledger

# window -> (its length, the bucket one chart point covers): ~60-170 points per chart
WINDOWS = {"1h": (3600, 60), "24h": (86400, 600), "7d": (7 * 86400, 3600)}


def window(name: str) -> tuple[int, int]:
    """(window seconds, bucket seconds) of a window name, or ValueError naming the allowed ones."""
    if name not in WINDOWS:
        raise ValueError(f"window {name!r} is not one of {', '.join(WINDOWS)}")
    return WINDOWS[name]


def airflow_links(ctx: dict | None) -> dict | None:
    """Paths in the Airflow UI (relative to its base URL) of the DAG run and the task log of a run
    started by an Airflow task."""
    if not ctx or not ctx.get("dag_id") or not ctx.get("dag_run_id"):
        return None
    run = f"dags/{quote(ctx['dag_id'], safe='')}/runs/{quote(ctx['dag_run_id'], safe='')}"
    links = {"dag_run": run}
    if ctx.get("task_id"):
        links["task_log"] = f"{run}/tasks/{quote(ctx['task_id'], safe='')}" + (
            f"?try_number={quote(str(ctx['try_number']), safe='')}" if ctx.get("try_number") else "")
    return links


def table_history(cfg, resolve, table: str, window_name: str, connect_timeout: int = 5) -> dict:
    seconds, bucket = window(window_name)
    since = datetime.now(timezone.utc) - timedelta(seconds=seconds)
    conn = state.of_pipeline(cfg, resolve, connect_timeout)
    try:
        conn.set_session(readonly=True, autocommit=True)
        if not ledger.exists(conn):   # state not migrated yet: nothing has run
            return {"window": window_name, "since": since.isoformat(), "bucket_s": bucket,
                    "series": [], "runs": [], "progress": []}
        series_rows, run_rows, progress_rows = ledger.table_history(conn, cfg.name, table, since, bucket)
    finally:
        conn.close()
    series = [{"at": r["at"].isoformat(), "events": int(r["events"] or 0),
               "events_per_s": round(float(r["events"] or 0) / bucket, 3),
               "lag_s": _num(r["lag_s"]), "batch_s": _num(r["batch_s"]), "batch_max_s": _num(r["batch_max_s"]),
               "batches": r["batches"], "first_batch": r["first_batch"], "last_batch": r["last_batch"]}
              for r in series_rows]
    runs = [{"run_id": r["run_id"], "kind": "re-snapshot" if r["resnapshot"] else r["kind"],
             "epoch": r["epoch"], "started_at": r["started_at"].isoformat(),
             "ended_at": r["ended_at"].isoformat() if r["ended_at"] else None, "outcome": r["outcome"],
             "rows": r["rows"], "detail": r["detail"], "counts": r["counts"],
             "airflow": r["airflow"], "links": airflow_links(r["airflow"])} for r in run_rows]
    progress = [{"run_id": r["run_id"], "at": r["at"].isoformat(), "rows": r["rows"]} for r in progress_rows]
    return {"window": window_name, "since": since.isoformat(), "bucket_s": bucket, "series": series,
            "runs": runs, "progress": load_rates(progress)}


def load_rates(samples: list[dict]) -> list[dict]:
    """Each progress sample with rows/s since the run's previous sample (None for its first)."""
    out, prev = [], None
    for s in samples:
        rate = None
        if prev is not None and prev["run_id"] == s["run_id"]:
            secs = (datetime.fromisoformat(s["at"]) - datetime.fromisoformat(prev["at"])).total_seconds()
            rate = round((s["rows"] - prev["rows"]) / secs, 1) if secs > 0 else None
        out.append({**s, "rows_per_s": rate})
        prev = s
    return out


def _num(v) -> float | None:
    return None if v is None else round(float(v), 3)
