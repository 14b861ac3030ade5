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
# the demo's pipelines (pipelines/<name>.yaml) and the DAGs `make demo` starts
PIPELINES = ("demo", "shop_mariadb", "shop_lake")
DAGS = tuple(f"sync_{name}" for name in PIPELINES)


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
    seed_mariadb()
    start_workload()
    for dag_id in DAGS:
        trigger(dag_id)
    print(f"""
[demo] Airflow UI : {stackctl.airflow_url()}/dags/sync_demo   login {stackctl.AIRFLOW_ADMIN} / {stackctl.AIRFLOW_ADMIN_PASS}
[demo]              {stackctl.airflow_url()}/dags/sync_shop_mariadb   (the MariaDB shop)
[demo]              {stackctl.airflow_url()}/dags/sync_shop_lake   (the shop into Apache Iceberg tables)
[demo] workload   : ~5 transactions/s on customers, orders, order_items, and ~1/s on the MariaDB shop
                     (supervised like every part; log {stackctl.log_file('workload')})
[demo] waiting for the target to catch up with the sources ...
""", flush=True)
    if wait_until_caught_up(demo_pipelines(), timeout=CATCH_UP_S):
        print("\n[demo] caught up: every table streams live, less than 100 events behind. It keeps running:\n"
              "       `make status` for this table, the Airflow UI for the DAG, `make down` to stop all.",
              flush=True)
        print(view_address(), flush=True)
        return 0
    print(f"[demo] the target did not catch up within {CATCH_UP_S // 60} minutes; look at the "
          f"{', '.join(DAGS)} runs in the Airflow UI and at {stackctl.LOGS}", flush=True)
    print(view_address(), flush=True)
    return 1


CATCH_UP_S = 600


def start_workload(rate: float = 5, mariadb_share: float = 0.2) -> None:
    """The demo's writes, under the stack's supervisor: a database restart kills its connection,
    and supervisord starts it again like every other part. `make down` stops it, and a later
    `make up` does not start it again (only `make demo` does): nobody's source keeps changing
    because a demo once ran."""
    stackctl.stop("workload")   # one started by an older demo, outside the supervisor
    stackctl.supervise("workload", stackctl.shlex.join([sys.executable, str(stackctl.STACK / "workload.py"),
                                                        "--rate", str(rate), "--mariadb-share", str(mariadb_share)]),
                       autostart=False)


def demo_pipelines():
    from tideline.core.config import load_pipeline
    return [load_pipeline(ROOT / "pipelines" / f"{name}.yaml") for name in PIPELINES]


def wait_until_caught_up(cfgs, timeout: float, every: float = 5, quiet: bool = False) -> bool:
    """Prints each pipeline's tables until every one has caught up (tideline.ops.status.not_caught_up),
    saying what still waits; False when `timeout` passes first."""
    from tideline.ops.status import not_caught_up, pipeline_status, render
    deadline = time.time() + timeout
    while True:
        waiting = []
        for cfg in cfgs:
            rows = pipeline_status(cfg)
            if not quiet:
                print(render(cfg, rows), flush=True)
            waiting += [f"{cfg.name}: {w}" for w in not_caught_up(cfg, rows)]
        if not waiting:
            return True
        if time.time() > deadline:
            print("[demo] still waiting for: " + "; ".join(waiting), flush=True)
            return False
        if not quiet:
            print("[demo] waiting for: " + "; ".join(waiting), flush=True)
        time.sleep(every)


def view_address() -> str:
    return (f"[demo] Tideline view: {stackctl.airflow_url()}/plugin/tideline  (in the Airflow UI's navigation; "
            f"login {stackctl.AIRFLOW_ADMIN} / {stackctl.AIRFLOW_ADMIN_PASS}); metrics: {stackctl.airflow_url()}/tideline/metrics")


if __name__ == "__main__":
    sys.exit(main())
