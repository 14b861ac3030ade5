"""Helpers the integration tests share: exact comparison done inside PostgreSQL, cleanup of
source tables, and letting Kafka retention really delete what a stopped stream still needs."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from typing import Callable

import psycopg2
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

import stackctl
from tideline.kafka_offsets import earliest_offsets

SOURCE_URL = stackctl.pg_url(stackctl.DATABASES["source"])

# The lake every Iceberg integration test writes into, as teams run it: the stack's REST catalog
# over its S3 object store (services.lake), Tideline's state in a PostgreSQL database of its own.
# (The JDBC catalog on a file warehouse, tideline_lake, is the contract suite's other configuration.)
LAKE_CATALOG, LAKE_STATE = "tideline_lake_rest", "tideline_state"


def lake_target(namespace: str) -> dict:
    """A pipeline's `target` into the test lake, in `namespace`; with lake_settings()."""
    return {"kind": "iceberg", "catalog": LAKE_CATALOG, "namespace": namespace}


def lake_settings(namespace: str) -> dict:
    """The pipeline settings of an Iceberg pipeline into the test lake (target and state)."""
    return {"target": lake_target(namespace), "state": {"conn_id": LAKE_STATE}}


def lake_connections():
    """(the test lake's catalog connection, its state's)."""
    from tideline.core.connections import get_connection
    return get_connection(LAKE_CATALOG), get_connection(LAKE_STATE)


def wait_until(check: Callable[[], object], timeout: float, what: str, every: float = 0.5,
               passing: tuple[type[BaseException], ...] = (), proc=None):
    """Polls `check` every `every` seconds until it is true, and returns what it returned; an
    AssertionError naming `what` once `timeout` seconds have passed, or as soon as `proc` (a job
    the wait is for) has exited, with the end of its output. An exception of `passing` (a
    database restarting under the test) counts as not yet. The tests' one polling helper."""
    deadline = time.time() + timeout
    while True:
        try:
            found = check()
            if found:
                return found
        except passing:
            pass
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the job exited ({proc.returncode}) while waiting for {what}: "
                                 f"{proc.stdout.read()[-3000:]}")
        if time.time() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


def active_query(conn, like: str) -> bool:
    """Whether another session of `conn`'s database runs a statement LIKE `like` right now."""
    with conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE %s AND pid <> "
                    "pg_backend_pid()", (like,))
        return cur.fetchone()[0] > 0


def python_workers(jvm: int) -> list[int]:
    """The pyspark worker processes under a driver JVM (its daemon's children): the local master's
    executors' Python."""
    out = []
    for daemon in map(int, subprocess.run(["pgrep", "-f", "-P", str(jvm), "pyspark.daemon"], capture_output=True,
                                          text=True).stdout.split()):
        out += map(int, subprocess.run(["pgrep", "-P", str(daemon)], capture_output=True, text=True).stdout.split())
    return out


def kill_tasks_mid_copy(watch, proc) -> list[int]:
    """Once a task of the stream `proc` COPYs its rows into a staged batch table (seen from
    `watch`, an autocommit connection to the state database), kill -9 every Python worker of its
    tasks; returns their pids."""
    wait_until(lambda: active_query(watch, 'COPY "tideline"."stage\\_%'), 180, "a task to COPY its staged rows",
               0.02, proc=proc)
    killed = python_workers(proc.pid)
    assert killed, "no pyspark worker under the stream's driver"
    for pid in killed:
        os.kill(pid, signal.SIGKILL)
    return killed


def rows_as_text(conn, schema: str, table: str, order_by: str = "1") -> list[str]:
    """Every row as PostgreSQL's own text form, in a stable order: the exact-equality oracle."""
    with conn.cursor() as cur:
        cur.execute(f'SELECT t::text FROM "{schema}"."{table}" t ORDER BY {order_by}')
        return [r[0] for r in cur.fetchall()]


def table_digest(conn, schema: str, table: str, order_by: str) -> tuple[int, str]:
    """(row count, md5 of all rows in key order) for large tables."""
    with conn.cursor() as cur:
        cur.execute(f'SELECT count(*), md5(coalesce(string_agg(t::text, E\'\\n\' ORDER BY {order_by}), \'\')) '
                    f'FROM "{schema}"."{table}" t')
        return cur.fetchone()


def query(url: str, sql: str, args=()) -> list:
    """One statement on its own autocommit connection (e.g. as a database's superuser): its rows."""
    import psycopg2
    conn = psycopg2.connect(url)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(sql, args or None)
            return cur.fetchall() if cur.description else []
    finally:
        conn.close()


def full_loads(conn, pipeline: str) -> int:
    """How many full loads a pipeline's run history holds: one unless something reloaded."""
    with conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM tideline.runs WHERE pipeline = %s AND kind = 'full_load'", (pipeline,))
        n = cur.fetchone()[0]
    conn.rollback()
    return n


def drop_source(source_db, *tables: str) -> None:
    with source_db.cursor() as cur:
        for t in tables:
            cur.execute(f'DROP TABLE IF EXISTS public."{t}" CASCADE')


def _set_topic_configs(admin: AdminClient, topic: str, values: dict[str, str]) -> None:
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in values.items()]
    for fut in admin.incremental_alter_configs([ConfigResource("topic", topic, incremental_configs=entries)]).values():
        fut.result(30)


def let_retention_delete(bootstrap: str, topic: str, needed: int, touch: Callable[[], None],
                         timeout: float = 90) -> None:
    """Shortens the topic's retention until Kafka no longer holds offset `needed` of partition 0
    (calling `touch` to write more changes, so segments roll and old ones expire), then puts the
    topic's retention settings back."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    keys = ("retention.ms", "segment.ms")
    described = list(admin.describe_configs([ConfigResource("topic", topic)]).values())[0].result(30)
    original = {k: described[k].value for k in keys}
    _set_topic_configs(admin, topic, {"retention.ms": "1000", "segment.ms": "500"})
    try:
        deadline = time.time() + timeout
        while earliest_offsets(bootstrap, topic)[0] <= needed:
            assert time.time() < deadline, f"retention did not delete offset {needed} of {topic} in {timeout}s"
            touch()
            time.sleep(1)
    finally:
        _set_topic_configs(admin, topic, original)


class Writer(threading.Thread):
    """Keeps changing the source (inserts, updates, deletes, key updates) until stopped. `connect`
    opens the source connection (PostgreSQL by default; a PyMySQL one for MariaDB sources)."""

    def __init__(self, table: str, first_id: int, seed: int = 1, pause: float = 0.002, max_id: int | None = None,
                 connect: Callable[[], object] | None = None):
        super().__init__(daemon=True)
        self.table, self.next_id, self.rng, self.pause = table, first_id, random.Random(seed), pause
        self.max_id = max_id  # changes (other than inserts) only touch ids below this one
        self.connect = connect or (lambda: psycopg2.connect(SOURCE_URL))
        self.stop_event, self.errors, self.count = threading.Event(), [], 0

    def run(self):
        conn = self.connect()
        try:
            while not self.stop_event.is_set():
                r = self.rng.random()
                cur = conn.cursor()
                try:
                    if r < 0.45:
                        cur.execute(f"INSERT INTO {self.table} (id, qty, note) VALUES (%s, %s, %s)",
                                    (self.next_id, self.rng.randint(0, 99), f"n{self.next_id} ü😀"))
                        self.next_id += 1
                    elif r < 0.8:
                        cur.execute(f"UPDATE {self.table} SET qty = qty + 1, note = CONCAT(note, '!') WHERE id = %s",
                                    (self._existing(),))
                    elif r < 0.95:
                        cur.execute(f"DELETE FROM {self.table} WHERE id = %s", (self._existing(),))
                    else:
                        cur.execute(f"UPDATE {self.table} SET id = %s WHERE id = %s",
                                    (self.next_id, self._existing()))
                        self.next_id += 1
                    conn.commit()
                except Exception:
                    conn.rollback()
                    raise
                finally:
                    cur.close()
                self.count += 1
                time.sleep(self.pause)
        except Exception as exc:
            self.errors.append(exc)
        finally:
            conn.close()

    def _existing(self) -> int:
        return self.rng.randrange(1, self.max_id or self.next_id)

    def stop(self):
        self.stop_event.set()
        self.join(30)
        assert not self.errors, self.errors


def seed_demo(source_db) -> None:
    """The demo shop in the source, small, unless it is there already."""
    import sys
    sys.path.insert(0, str(stackctl.ROOT / "stack"))
    import workload
    with source_db.cursor() as cur:
        cur.execute("SELECT to_regclass('public.customers') IS NOT NULL")
        if not cur.fetchone()[0]:
            workload.main(["--seed-customers", "50", "--seed-orders", "200", "--seed", "3"])


def run_demo_dag(stack, conf: dict, timeout: float = 420) -> tuple[str, dict, dict[str, str]]:
    """One sync_demo run through the running api-server and scheduler: (run id, the run, task states)."""
    stack.airflow_api("PATCH", "dags/sync_demo", {"is_paused": False})
    run_id = stack.airflow_api("POST", "dags/sync_demo/dagRuns", {"logical_date": None, "conf": conf})["dag_run_id"]
    info, tis = wait_for_run(stack, "sync_demo", run_id, timeout)
    return run_id, info, tis


def wait_for_run(stack, dag_id: str, run_id: str, timeout: float = 420) -> tuple[dict, dict[str, str]]:
    """A DAG run waited for until it ends (or the timeout): (the run, its task states)."""
    from urllib.parse import quote
    run = f"dags/{dag_id}/dagRuns/{quote(run_id, safe='')}"
    deadline = time.time() + timeout
    while time.time() < deadline:
        info = stack.airflow_api("GET", run)
        if info["state"] in ("success", "failed"):
            break
        time.sleep(1)
    tis = {ti["task_id"]: ti["state"] for ti in stack.airflow_api("GET", f"{run}/taskInstances")["task_instances"]}
    return info, tis


def start_continuous(run, timeout: float = 90) -> tuple[threading.Thread, dict]:
    """Runs an IncrementalRun (continuous mode) in a thread and waits until its streaming query is
    active; returns the thread and a dict that holds, under "exc", whatever ended the run. A run
    that ends before its query starts fails the test with that error."""
    ended: dict = {}

    def stream() -> None:
        try:
            run.run()
        except BaseException as exc:  # noqa: BLE001 — the test asserts on it
            ended["exc"] = exc
    thread = threading.Thread(target=stream, daemon=True)
    thread.start()
    deadline = time.time() + timeout
    while (run.query is None or not run.query.isActive) and thread.is_alive():
        assert time.time() < deadline, f"the stream did not start within {timeout:.0f}s"
        time.sleep(0.2)
    assert thread.is_alive(), ended
    return thread, ended


def stream_until(cfg, spark, check: Callable[[], object], what: str, timeout: float = 90) -> None:
    """Applies what Kafka holds (an available_now run) until `check` holds: Debezium is
    asynchronous, so a target state is reached, not assumed. `what` names it if it never comes."""
    from tideline.stream.run import IncrementalRun
    deadline = time.time() + timeout
    while True:
        IncrementalRun(cfg, spark, "available_now").run()
        if check():
            return
        assert time.time() < deadline, f"{what}: not within {timeout:.0f}s"
        time.sleep(1)


def catching_up(cfg):
    """`cfg` with its stream's batch size back at the target's default. Tests make batches small
    so their faults land mid-stream; catching up after the faults needs no such limit (a backlog
    of 50,000 events in batches of 500 took ~40 s of the suite)."""
    return cfg.model_copy(update={"stream": cfg.stream.model_copy(update={"max_offsets_per_trigger": None})})
