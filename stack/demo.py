#!/usr/bin/env python3
"""`make demo`: the whole product on the local stack.

Starts the stack, loads the demo shop into the source, keeps a workload running, triggers the
`sync_demo` DAG in Airflow (full load, then a continuous change stream), and shows a live status
line per table until the target has caught up with the source. Everything keeps running after
it returns: watch it in the Airflow UI, with `make status`, and stop it with `make down`.
"""
from __future__ import annotations

import os
import sys
import time

import psycopg2

import stackctl

ROOT = stackctl.ROOT


def wait_for_dag(dag_id: str, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        errors = stackctl.airflow_api("GET", "importErrors")
        if errors["total_entries"]:
            raise SystemExit(f"[demo] Airflow cannot import the DAGs:\n{errors['import_errors'][0]['stack_trace']}")
        if dag_id in [d["dag_id"] for d in stackctl.airflow_api("GET", "dags")["dags"]]:
            return
        time.sleep(2)
    raise SystemExit(f"[demo] Airflow did not list {dag_id} within {timeout}s; see {stackctl.log_file('airflow-dag-processor')}")


def trigger(dag_id: str) -> None:
    """Unpauses the pipeline's sync DAG and starts a continuous run, unless one is running."""
    wait_for_dag(dag_id)
    stackctl.airflow_api("PATCH", f"dags/{dag_id}", {"is_paused": False})
    active = stackctl.airflow_api("GET", f"dags/{dag_id}/dagRuns?state=running&state=queued")["dag_runs"]
    if active:
        print(f"[demo] {dag_id} is already running ({active[0]['dag_run_id']})", flush=True)
        return
    run = stackctl.airflow_api("POST", f"dags/{dag_id}/dagRuns", {"logical_date": None,
                                                                "conf": {"action": "auto", "stream_mode": "continuous"}})
    print(f"[demo] triggered {dag_id}: {run['dag_run_id']}", flush=True)


def seed_mariadb() -> None:
    """The MariaDB demo shop (sql/demo/mariadb_shop.sql), once."""
    conn = stackctl.mariadb_connect(stackctl.MARIADB_DATABASE, autocommit=True)
    try:
        with conn.cursor() as cur:
            for statement in (ROOT / "sql" / "demo" / "mariadb_shop.sql").read_text().split(";\n"):
                if statement.strip() and not all(line.startswith("--") for line in statement.strip().splitlines()):
                    cur.execute(statement)
    finally:
        conn.close()


def main() -> int:
    stackctl.cmd_up([])
    os.environ.update(stackctl.environment())
    sys.path.insert(0, str(ROOT / "plugins"))
    py = sys.executable
    with psycopg2.connect(stackctl.pg_url(stackctl.DATABASES["source"])) as conn, conn.cursor() as cur:
        cur.execute("SELECT to_regclass('public.customers') IS NOT NULL")
        seeded = cur.fetchone()[0]
    if not seeded:
        print("[demo] loading the demo shop (2,000 customers, 10,000 orders) into the source ...", flush=True)
        stackctl.subprocess.run([py, str(stackctl.STACK / "workload.py"), "--seed-customers", "2000",
                                 "--seed-orders", "10000", "--seed", "42"], check=True, env=stackctl.full_env())
    if not stackctl.running_pid("workload"):
        stackctl.spawn("workload", [py, str(stackctl.STACK / "workload.py"), "--rate", "5"])
    seed_mariadb()
    for dag_id in ("sync_demo", "sync_shop_mariadb"):
        trigger(dag_id)
    print(f"""
[demo] Airflow UI : {stackctl.airflow_url()}/dags/sync_demo   login {stackctl.AIRFLOW_ADMIN} / {stackctl.AIRFLOW_ADMIN_PASS}
[demo]              {stackctl.airflow_url()}/dags/sync_shop_mariadb   (the MariaDB shop)
[demo] workload   : ~5 transactions/s on customers, orders, order_items (log {stackctl.log_file('workload')})
[demo] waiting for the target to catch up with the sources ...
""", flush=True)
    from tideline.core.config import load_pipeline
    from tideline.status import pipeline_status, render
    cfgs = [load_pipeline(ROOT / "pipelines" / f) for f in ("demo.yaml", "shop_mariadb.yaml")]
    deadline = time.time() + 900
    while time.time() < deadline:
        caught_up = True
        for cfg in cfgs:
            rows = pipeline_status(cfg)
            print(render(cfg, rows), flush=True)
            streamed = [r for r in rows if cfg.table(r.table).mode == "cdc"]   # batch tables land nightly
            caught_up &= all(r.phase == "streaming" and r.last_batch_age_s is not None and r.last_batch_age_s < 30
                             and r.lag_total < 100 for r in streamed)
        if caught_up:
            print("\n[demo] caught up: every table streams live, less than 100 events behind. It keeps running:\n"
                  "       `make status` for this table, the Airflow UI for the DAG, `make down` to stop all.",
                  flush=True)
            print(view_address(), flush=True)
            return 0
        time.sleep(5)
    print("[demo] the target did not catch up within 15 minutes; look at the sync_demo and sync_shop_mariadb runs "
          "in the Airflow UI "
          f"and at {stackctl.LOGS}", flush=True)
    print(view_address(), flush=True)
    return 1


def view_address() -> str:
    return (f"[demo] Tideline view: {stackctl.airflow_url()}/plugin/tideline  (in the Airflow UI's navigation; "
            f"login {stackctl.AIRFLOW_ADMIN} / {stackctl.AIRFLOW_ADMIN_PASS}); metrics: {stackctl.airflow_url()}/tideline/metrics")


if __name__ == "__main__":
    sys.exit(main())
