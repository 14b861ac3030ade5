#!/usr/bin/env python3
"""Local stack of real services for Tideline, run as plain processes on loopback.

`stackctl.py up|down|status|env|psql|mariadb` — PostgreSQL (own cluster, wal_level=logical),
MariaDB (Debian's server, row-based binlog with GTIDs), Kafka (single KRaft node), Kafka Connect (distributed, Debezium plugin), Airflow 3
(LocalExecutor, PostgreSQL metadata DB) and Spark in local mode (pyspark + jars).
Everything lives under stack/var (data, logs, pids); ports come from TIDELINE_*_PORT.
`up` is idempotent: a part that is already healthy is left alone.

Every long-running part runs under supervisord (the `supervisor` package from PyPI: the standard,
long-maintained process supervisor for Python hosts, no daemon of the OS needed): a part that
exits unexpectedly is started again, with supervisord's backoff while it keeps failing, and each
restart is counted and logged (stack/var/log/restarts.log, `make status`). `down` stops them in
order and supervisord with them.

Each service is one module of stack/services (a common base and supervisor under them); this file
is the command line over them, and the one name scripts and tests import (`stackctl.<name>`).
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from services.addresses import (CLASS_ARCHIVE, airflow_url, mariadb_url, pg_url,
                                spark_master_url)
from services.airflow import (AIRFLOW_PARTS, airflow_api, airflow_healthy, exec_part,
                              leftover_spark_jobs, orphaned_airflow_workers, reap_orphaned_airflow_workers,
                              up_airflow, watch_airflow_liveness)
from services.base import (AIRFLOW_ADMIN, AIRFLOW_ADMIN_PASS, AIRFLOW_USERS, DATABASES, DEBEZIUM_CLASS, HOST, KAFKA_PASS,
                           KAFKA_USER, LOGS, MARIADB_ADMIN, MARIADB_ADMIN_PASS,
                           MARIADB_DATABASE, MARIADB_PASS, MARIADB_USER, PG_CDC_PASS, PG_CDC_USER, PG_PASS, S3_SECRET_KEY, LAKE_CLIENT_SECRET,
                           PG_SUPERPASS, PG_SUPERUSER, PG_SYNC_PASS, PG_SYNC_USER,
                           PG_USER, PORTS, ROOT, SECURE_TEST_PORTS, SIDE_CONNECT_OFFSET, SIDE_KAFKA_OFFSET,
                           SPARK_CLUSTER, SPARK_WORKERS, STACK, VAR, VENV_BIN, StackError,
                           http_json, kill_all, log_file, parent_pid, pid_alive, stop, wait_until)
from services.connect import connect_healthy, connect_url, start_connect_worker, up_connect
from services.env import environment, full_env
from services.kafka import KAFKA_PARTS, KafkaCluster, kafka_bootstrap, kafka_healthy, up_kafka
from services.lake import lake_catalog_url, lake_healthy, s3_url, up_lake
from services.mariadb import mariadb_connect, mariadb_healthy, up_mariadb
from services.ports import reserve_ports
from services.postgres import down_postgres, pg_connect, postgres_healthy, postgres_pid, up_postgres
from services.spark import (SPARK_PARTS, build_class_archive, spark_check,
                            spark_cluster_healthy, spark_master_json, start_spark_cluster,
                            stop_spark_cluster, up_spark)
from services.supervisor import (SUPERVISED, supervisorctl, stop_in_order, unsupervise, restart_listener, restarts,
                                 supervise, supervised_pid, supervised_state, supervisord_running)


# What scripts and tests use as stackctl.<name>, from the service modules.
__all__ = [
    "AIRFLOW_ADMIN",
    "AIRFLOW_ADMIN_PASS",
    "AIRFLOW_USERS",
    "AIRFLOW_PARTS",
    "CLASS_ARCHIVE",
    "DATABASES",
    "DEBEZIUM_CLASS",
    "HOST",
    "KAFKA_PARTS",
    "KafkaCluster",
    "LOGS",
    "MARIADB_DATABASE",
    "KAFKA_PASS",
    "KAFKA_USER",
    "MARIADB_ADMIN",
    "MARIADB_ADMIN_PASS",
    "MARIADB_PASS",
    "MARIADB_USER",
    "PG_CDC_PASS",
    "PG_CDC_USER",
    "PG_PASS",
    "S3_SECRET_KEY",
    "LAKE_CLIENT_SECRET",
    "PG_SYNC_PASS",
    "PG_SYNC_USER",
    "PG_SUPERPASS",
    "PG_SUPERUSER",
    "PG_USER",
    "PORTS",
    "ROOT",
    "SECURE_TEST_PORTS",
    "SIDE_CONNECT_OFFSET",
    "SIDE_KAFKA_OFFSET",
    "SPARK_CLUSTER",
    "SPARK_PARTS",
    "SPARK_WORKERS",
    "STACK",
    "SUPERVISED",
    "StackError",
    "VAR",
    "VENV_BIN",
    "supervisorctl",
    "unsupervise",
    "airflow_api",
    "airflow_healthy",
    "airflow_url",
    "build_class_archive",
    "connect_healthy",
    "connect_url",
    "down_postgres",
    "environment",
    "exec_part",
    "full_env",
    "http_json",
    "kafka_bootstrap",
    "kafka_healthy",
    "lake_catalog_url",
    "lake_healthy",
    "s3_url",
    "kill_all",
    "log_file",
    "mariadb_connect",
    "mariadb_healthy",
    "mariadb_url",
    "orphaned_airflow_workers",
    "parent_pid",
    "pg_connect",
    "pg_url",
    "pid_alive",
    "postgres_healthy",
    "postgres_pid",
    "reap_orphaned_airflow_workers",
    "restart_listener",
    "restarts",
    "shlex",
    "spark_check",
    "spark_cluster_healthy",
    "spark_master_json",
    "spark_master_url",
    "start_connect_worker",
    "start_spark_cluster",
    "stop",
    "stop_spark_cluster",
    "subprocess",
    "supervise",
    "supervised_pid",
    "supervised_state",
    "supervisord_running",
    "up_airflow",
    "up_connect",
    "up_kafka",
    "up_mariadb",
    "up_postgres",
    "up_spark",
    "wait_until",
]


@dataclass
class Part:
    name: str
    start: Callable[[], None]
    healthy: Callable[[], object]
    where: Callable[[], str]


PARTS = [
    Part("postgres", up_postgres, postgres_healthy, lambda: f"{HOST}:{PORTS['postgres']}"),
    Part("mariadb", up_mariadb, mariadb_healthy, lambda: f"{HOST}:{PORTS['mariadb']}"),
    Part("lake", up_lake, lake_healthy, lambda: f"S3 {s3_url()}, Iceberg REST catalog {lake_catalog_url()}"),
    Part("kafka", up_kafka, kafka_healthy, kafka_bootstrap),
    Part("connect", up_connect, connect_healthy, connect_url),
    Part("airflow", up_airflow, airflow_healthy, airflow_url),
    Part("spark", up_spark, spark_check,
         lambda: spark_master_url() if SPARK_CLUSTER else "in-process (pyspark)"),
]


def cmd_up(only: list[str]) -> int:
    why_not = reserve_ports()
    if why_not:
        print(f"[stack] note: {why_not}", flush=True)
    for part in PARTS:
        if only and part.name not in only:
            continue
        t0 = time.time()
        print(f"[stack] {part.name:9s} starting ...", flush=True)
        part.start()
        print(f"[stack] {part.name:9s} ready at {part.where()} ({time.time() - t0:.1f}s)", flush=True)
    return 0


def cmd_down() -> int:
    if stop("workload"):
        print("[stack] stopped workload")
    if supervisord_running():
        for line in stop_in_order():
            print(f"[stack] {line.strip()}")
        supervisorctl("shutdown")
        deadline = time.time() + 60
        while supervisord_running() and time.time() < deadline:
            time.sleep(0.3)
        print("[stack] stopped supervisord")
    for part in (*reversed(AIRFLOW_PARTS), "connect", "kafka"):   # left by an older stackctl
        if stop(part, timeout=60):
            print(f"[stack] stopped {part}")
    reaped = reap_orphaned_airflow_workers(idle_only=False)
    if reaped:
        print(f"[stack] stopped {reaped} LocalExecutor worker(s) left by a scheduler that died")
    jobs = leftover_spark_jobs()
    kill_all(jobs)   # what they committed stays; the next run resumes from the committed offsets
    if jobs:
        print(f"[stack] stopped {len(jobs)} Spark job process(es) that outlived their Airflow task")
    if postgres_pid():
        down_postgres()
        print("[stack] stopped postgres")
    return 0


def _memory_mb(pid: int) -> float:
    """Memory of a process and its process group, in MB: the proportional set size (shared pages
    split among the processes sharing them). Resident size counts a forked worker's pages it
    shares with its parent again for every worker: 8 idle LocalExecutor workers read 145 MB each
    that way, 37 MB each in fact."""
    total = 0
    try:
        children = subprocess.run(["pgrep", "-g", str(os.getpgid(pid))], capture_output=True, text=True).stdout.split()
    except ProcessLookupError:
        return 0.0
    for p in set(children + [str(pid)]):
        for path, field in ((f"/proc/{p}/smaps_rollup", "Pss:"), (f"/proc/{p}/status", "VmRSS:")):
            try:
                kb = next((int(line.split()[1]) for line in Path(path).read_text().splitlines()
                           if line.startswith(field)), None)
            except OSError:
                kb = None
            if kb is not None:
                total += kb
                break
    return total / 1024


def cmd_status() -> int:
    bad = 0
    total_mb = 0.0
    for part in PARTS:
        try:
            ok = part.healthy()
            state = "healthy" if ok else "UNHEALTHY"
            detail = ok if isinstance(ok, str) else part.where()
        except Exception as exc:
            state, detail = "DOWN", f"{part.where()} — {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        if state != "healthy":
            bad += 1
        pids = {"postgres": [postgres_pid()], "mariadb": [supervised_pid("mariadb")], "kafka": [supervised_pid(p) for p in KAFKA_PARTS],
                "connect": [supervised_pid("connect")], "lake": [supervised_pid("s3"), supervised_pid("lake-catalog")],
                "airflow": [supervised_pid(p) for p in AIRFLOW_PARTS],
                "spark": [supervised_pid(p) for p in SPARK_PARTS] if SPARK_CLUSTER else []}.get(part.name, [])
        mb = sum(_memory_mb(p) for p in pids if p)
        total_mb += mb
        mem = f"{mb:7.0f} MB" if pids else "      - "
        where = {"airflow": log_file("airflow-scheduler"), "kafka": log_file(KAFKA_PARTS[0]),
                 "lake": log_file("lake-catalog"),
                 "spark": log_file("spark-master") if SPARK_CLUSTER else "the Airflow task logs"}.get(part.name,
                                                                                                  log_file(part.name))
        print(f"{part.name:9s} {state:9s} {mem}  {detail}   log: {where}")
        for sp in {"airflow": (*AIRFLOW_PARTS, "airflow-liveness"), "spark": SPARK_PARTS, "kafka": KAFKA_PARTS,
                   "lake": ("s3", "lake-catalog")}.get(part.name, (part.name,)):
            if sp in SUPERVISED:
                line = _supervision_line(sp)
                if line:
                    print(f"{'':9s} {line}")
    print(f"{'total':9s} {'':9s} {total_mb:7.0f} MB")
    if not supervisord_running():
        print("supervisord is not running: nothing restarts a part that dies. `make up` starts it.")
    return 1 if bad else 0


def _supervision_line(part: str) -> str:
    """'<part> RUNNING, restarted 2× (last: ...)' — only when there is something to say."""
    state = supervised_state(part)
    r = restarts().get(part, {})
    if state in ("RUNNING", None) and not r.get("count"):   # None: not a program of this mode (local Spark)
        return ""
    text = f"{part}: {state or 'not supervised'}"
    if r.get("count"):
        text += f", restarted {r['count']}× (last: {r.get('last', '?')})"
    return text


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    cmd, rest = argv[0], argv[1:]
    try:
        if cmd == "up":
            return cmd_up(rest)
        if cmd == "down":
            return cmd_down()
        if cmd == "status":
            return cmd_status()
        if cmd == "exec":   # run by supervisord
            exec_part(rest[0])
        if cmd == "restart-listener":   # run by supervisord
            return restart_listener()
        if cmd == "airflow-liveness":   # run by supervisord
            return watch_airflow_liveness()
        if cmd == "env":
            if rest == ["--json"]:   # for programs (the secure-mode test reads a second stack's)
                print(json.dumps(environment()))
                return 0
            for k, v in environment().items():
                print(f"export {k}={json.dumps(v) if not v.startswith('{') else repr(v)}")
            return 0
        if cmd == "mariadb":   # a client on the demo database, as the capture user
            os.execvp("mariadb", ["mariadb", f"-h{HOST}", f"-P{PORTS['mariadb']}", f"-u{MARIADB_USER}",
                                  f"-p{MARIADB_PASS}", *(rest or [MARIADB_DATABASE])])
        if cmd == "psql":
            db = DATABASES.get(rest[0], rest[0]) if rest else DATABASES["source"]
            os.execvpe("psql", ["psql", pg_url(db)] + rest[1:], full_env())
    except StackError as exc:
        print(f"[stack] ERROR: {exc}", file=sys.stderr)
        return 2
    print(f"unknown command {cmd!r}; use up | down | status | env | psql [source|target|airflow] | mariadb [database]", file=sys.stderr)
    return 64


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
