#!/usr/bin/env python3
"""`make demo`: the local stack up, the demo shop loaded into the source and a workload running.

Prints where to look: the Airflow UI and its login, the databases, the logs.
"""
from __future__ import annotations

import sys

import psycopg2

import stackctl


def main() -> int:
    stackctl.cmd_up([])
    with psycopg2.connect(stackctl.pg_url(stackctl.DATABASES["source"])) as conn, conn.cursor() as cur:
        cur.execute("SELECT to_regclass('public.customers') IS NOT NULL")
        seeded = cur.fetchone()[0]
    py = sys.executable
    if not seeded:
        print("[demo] loading the demo shop schema and seed rows into the source ...", flush=True)
        stackctl.subprocess.run([py, str(stackctl.STACK / "workload.py"), "--seed-customers", "2000",
                                 "--seed-orders", "10000", "--seed", "42"], check=True, env=stackctl.full_env())
    if not stackctl.running_pid("workload"):
        stackctl.spawn("workload", [py, str(stackctl.STACK / "workload.py"), "--rate", "5"])
    print(f"""
[demo] running.
  Airflow UI : {stackctl.airflow_url()}   login {stackctl.AIRFLOW_ADMIN} / {stackctl.AIRFLOW_ADMIN_PASS}
  source DB  : {stackctl.pg_url(stackctl.DATABASES['source'])}
  target DB  : {stackctl.pg_url(stackctl.DATABASES['target'])}
  workload   : ~5 transactions/s on customers, orders, order_items (log: {stackctl.log_file('workload')})
  stack      : `make status`, logs in {stackctl.LOGS}, `make down` stops everything
""", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
