"""Every part of the stack killed under load, recovered with no person acting.

The demo pipeline streams continuously through the real Airflow scheduler (the sync_demo DAG)
while a workload keeps changing the source; each test injects one fault, measures how long until
a change made right after the fault reaches the target, then checks that the target equals the
source row for row and that the committed batches are gap-free. Recovery times are printed as
`[measure] recovery ...` lines (the README's reliability section quotes them)."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid

import psycopg2
import pytest

import stackctl
from helpers import table_digest, wait_until
from test_dags import airflow_env  # noqa: F401 — fixture

pytestmark = pytest.mark.integration
TABLES = (("customers", "id"), ("orders", "id"), ("order_items", "order_id, line_no"))
SOURCE_URL = stackctl.pg_url(stackctl.DATABASES["source"])
TARGET_URL = stackctl.pg_url(stackctl.DATABASES["target"])
SUPER_URL = stackctl.pg_url("postgres", stackctl.PG_SUPERUSER, stackctl.PG_SUPERPASS)
MEASURES = stackctl.VAR / "reliability.json"


def _connect(url: str, timeout: float = 120):
    """A connection, waiting while the database restarts or refuses."""
    deadline = time.time() + timeout
    while True:
        try:
            conn = psycopg2.connect(url, connect_timeout=3)
            conn.autocommit = True
            return conn
        except psycopg2.OperationalError:
            if time.time() > deadline:
                raise
            time.sleep(0.5)


def _query(url: str, sql: str, args=()):
    conn = _connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(sql, args or None)
            return cur.fetchall() if cur.description else None
    finally:
        conn.close()


class ResilientWorkload(threading.Thread):
    """The demo workload (stack/workload.py), carrying on through outages: a lost connection is
    reconnected; the transaction it was in never happened, so the source stays consistent."""

    def __init__(self, seed: int):
        super().__init__(daemon=True)
        sys.path.insert(0, str(stackctl.STACK))
        import workload
        self.workload_mod, self.rng = workload, random.Random(seed)
        self.stop_event, self.steps, self.outages = threading.Event(), 0, 0

    def run(self):
        conn = None
        while not self.stop_event.is_set():
            try:
                if conn is None:
                    conn = psycopg2.connect(SOURCE_URL, connect_timeout=3)
                    work = self.workload_mod.Workload(conn, self.rng)
                work.step()
                self.steps += 1
                time.sleep(0.02)
            except (psycopg2.OperationalError, psycopg2.InterfaceError):
                self.outages += 1
                conn = None
                time.sleep(0.5)
            except psycopg2.Error:   # a business rule of the demo (e.g. a row deleted meanwhile)
                conn.rollback()

    def stop(self):
        self.stop_event.set()
        self.join(30)


def _running_runs() -> list[dict]:
    runs = stackctl.airflow_api("GET", "dags/sync_demo/dagRuns?state=running&state=queued")["dag_runs"]
    return runs


def _stop_runs() -> None:
    for run in _running_runs():
        stackctl.airflow_api("PATCH", f"dags/sync_demo/dagRuns/{run['dag_run_id']}", {"state": "failed"})


def _last_batch() -> int:
    return _query(TARGET_URL, "SELECT coalesce(max(batch_id), 0) FROM tideline.batches WHERE pipeline = 'demo'")[0][0]


def _wait(check, timeout: float, what: str, every: float = 1.0):
    """helpers.wait_until, riding out the target restarting under the test."""
    wait_until(check, timeout, what, every, passing=(psycopg2.OperationalError,))


@pytest.fixture(scope="module")
def streaming_demo(stack):
    """sync_demo streaming continuously through the scheduler, a batch committed."""
    sys.path.insert(0, str(stackctl.STACK))
    import workload
    if not _query(SOURCE_URL, "SELECT to_regclass('public.customers') IS NOT NULL")[0][0]:
        workload.main(["--seed-customers", "50", "--seed-orders", "200", "--seed", "3"])
    _stream_demo()
    yield
    _stop_runs()


def _stream_demo() -> None:
    """A new continuous sync_demo run (any running one failed first), once it committed a batch."""
    stackctl.airflow_api("PATCH", "dags/sync_demo", {"is_paused": False})
    _stop_runs()
    run = stackctl.airflow_api("POST", "dags/sync_demo/dagRuns",
                               {"logical_date": None, "conf": {"stream_mode": "continuous"}})["dag_run_id"]
    writes = ResilientWorkload(seed=1)
    writes.start()
    try:   # a batch of this run's stream: the failed run's one goes on for a few seconds
        _wait(lambda: _query(TARGET_URL, "SELECT count(*) FROM tideline.batches WHERE pipeline = 'demo' AND "
                                         "committed_at > (SELECT max(started_at) FROM tideline.runs WHERE pipeline = "
                                         "'demo' AND kind = 'incremental' AND detail LIKE %s)",
                             (f"%(dag run {run}, try %",))[0][0], 420, "sync_demo to stream a batch")
    finally:
        writes.stop()


def _marker_arrives(started: float) -> float:
    """Inserts a customer right after the fault (retrying while the source is down) and returns
    the seconds from the fault until it is in the target."""
    email = f"probe-{uuid.uuid4().hex[:12]}@recovery.test"
    _query(SOURCE_URL, "INSERT INTO customers (email, full_name) VALUES (%s, 'recovery probe')", (email,))
    _wait(lambda: _query(TARGET_URL, "SELECT count(*) FROM demo.customers WHERE email = %s", (email,))[0][0] == 1
          or not _query(SOURCE_URL, "SELECT count(*) FROM customers WHERE email = %s", (email,))[0][0],
          600, "a change made after the fault to reach the target", every=0.5)
    return time.time() - started


def _assert_gap_free(since_batch: int) -> None:
    """Per topic partition, each batch starts where the one before it ended — except right after
    a full load, which sets the position itself."""
    rows = _query(TARGET_URL, "SELECT batch_id, committed_at, start_offsets, end_offsets FROM tideline.batches "
                              "WHERE pipeline = 'demo' AND batch_id > %s ORDER BY batch_id", (since_batch,))
    assert [r[0] for r in rows] == list(range(since_batch + 1, since_batch + 1 + len(rows)))
    loads = _query(TARGET_URL, "SELECT table_name, ended_at FROM tideline.runs WHERE pipeline = 'demo' "
                               "AND kind = 'full_load' AND outcome = 'succeeded' AND ended_at IS NOT NULL")
    position: dict[tuple[str, str], tuple[int, object]] = {}
    for batch_id, committed, start, end in rows:
        for topic, parts in start.items():
            table = topic.rsplit(".", 1)[-1]
            for p, first in parts.items():
                prev = position.get((topic, p))
                if prev is not None:
                    reloaded = any(t == table and prev[1] < ended < committed for t, ended in loads)
                    assert reloaded or first == prev[0], (batch_id, topic, p, first, prev)
                position[(topic, p)] = (end[topic][p], committed)


def _converges(timeout: float = 300) -> None:
    def equal():
        src, tgt = _connect(SOURCE_URL), _connect(TARGET_URL)
        try:
            return all(table_digest(src, "public", t, o) == table_digest(tgt, "demo", t, o) for t, o in TABLES)
        finally:
            src.close()
            tgt.close()
    _wait(equal, timeout, "the target to equal the source row for row", every=1)


def _record(scenario: str, seconds: float, recovered_by: str) -> None:
    print(f"\n[measure] recovery {scenario}: {seconds:.1f}s — {recovered_by}")
    seen = json.loads(MEASURES.read_text()) if MEASURES.exists() else {}
    seen[scenario] = {"seconds": round(seconds, 1), "recovered_by": recovered_by, "at": time.strftime("%F %T")}
    MEASURES.write_text(json.dumps(seen, indent=2))


def _scenario(name: str, fault, recovered_by: str) -> None:
    since = _last_batch()
    writes = ResilientWorkload(seed=hash(name) % 1000)
    writes.start()
    try:
        _wait(lambda: writes.steps >= 20, 60, "the workload to make 20 changes before the fault", every=0.1)
        started = time.time()
        fault()
        took = _marker_arrives(started)
        # the source goes on changing after the recovery too (steps, not seconds: a slow machine
        # makes fewer changes per second)
        after = writes.steps
        _wait(lambda: writes.steps >= max(after + 30, 60), 120,
              "the workload to make 30 more changes after the recovery", every=0.2)
    finally:
        writes.stop()
    _converges()
    _assert_gap_free(since)
    assert writes.steps > 50, "the workload did not run"
    _record(name, took, recovered_by)


def _java_pids(job: str) -> list[int]:
    """The Spark drivers (spark-submit JVMs) running spark_jobs/<job> for the demo pipeline."""
    out = subprocess.run(["pgrep", "-f", f"spark_jobs/{job}.*--pipeline demo"], capture_output=True, text=True)
    java = []
    for p in (int(p) for p in out.stdout.split()):
        try:
            if "java" in open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")[0].decode():
                java.append(p)
        except OSError:   # gone meanwhile
            pass
    return java


def _java_pid(job: str) -> int | None:
    pids = _java_pids(job)
    return pids[0] if pids else None


def _stream_python(jvm: int) -> int | None:
    """The job's Python process under a stream driver's JVM (spark-submit first runs a short java
    of its own with the same arguments, which has none)."""
    for pid in map(int, subprocess.run(["pgrep", "-P", str(jvm)], capture_output=True, text=True).stdout.split()):
        try:
            if b"spark_jobs/incremental.py" in open(f"/proc/{pid}/cmdline", "rb").read():
                return pid
        except OSError:
            pass
    return None


def _live_stream() -> int:
    """The demo stream's Spark driver JVM, once it is the only one, runs under a live Airflow task
    and has claimed its tables (its run rows are open). A stream whose task died (its scheduler
    killed, say) stops itself within 10 s and Airflow's retry starts a new one 30-40 s later; the
    stream of a run marked failed (_stream_demo) goes on until Airflow's next heartbeat ends its
    task, while the new one starts: a test that kills the stream's processes must pick the stream
    of a running DAG run, past its start."""
    def live() -> int | None:
        drivers = _java_pids("incremental.py")
        pythons = {jvm: _stream_python(jvm) for jvm in drivers}
        streams = [jvm for jvm, py in pythons.items() if py is not None]
        if len(streams) != 1:
            return None
        [jvm] = streams
        try:
            if stackctl.parent_pid(jvm) == 1:
                return None
        except OSError:
            return None
        claimed = [d for (d,) in _query(TARGET_URL, "SELECT detail FROM tideline.runs WHERE pipeline = 'demo' AND "
                                                    "kind = 'incremental' AND outcome = 'running' AND detail LIKE %s",
                                        (f"% stream by incremental pid {pythons[jvm]} %",))]
        running = [r["dag_run_id"] for r in _running_runs()]   # not a run marked failed, still stopping
        return jvm if any(f"(dag run {r}, try " in d for d in claimed for r in running) else None
    found: list[int] = []
    _wait(lambda: found.append(live()) or found[-1] is not None, 300,
          "one stream driver, under a live Airflow task, with its tables claimed")
    return found[-1]


def _restarted_by_supervisor(part: str, before: int) -> None:
    _wait(lambda: stackctl.restarts().get(part, {}).get("count", 0) > before and
          stackctl.supervised_state(part) == "RUNNING", 180, f"supervisord to restart {part}")


def test_kafka_broker_killed(streaming_demo):
    count = stackctl.restarts().get("kafka", {}).get("count", 0)

    def fault():
        os.kill(stackctl.supervised_pid("kafka"), signal.SIGKILL)
    _scenario("kill -9 Kafka broker", fault, "supervisord restarted the broker; producers and the stream's "
                                             "consumer reconnected")
    _restarted_by_supervisor("kafka", count)


def test_postgres_fast_restart(streaming_demo):
    count = stackctl.restarts().get("postgres", {}).get("count", 0)

    def fault():   # SIGINT = fast shutdown of source, target and Airflow's metadata database together
        pid = int((stackctl.VAR / "pg" / "data" / "postmaster.pid").read_text().split()[0])
        os.kill(pid, signal.SIGINT)
    _scenario("PostgreSQL fast restart", fault, "supervisord restarted PostgreSQL; the stream waited out the "
                                                "outage and re-ran its batch; Debezium and Airflow reconnected")
    _restarted_by_supervisor("postgres", count)
    _wait(stackctl.airflow_healthy, 180, "every Airflow component healthy again")


def test_kafka_connect_killed(streaming_demo):
    count = stackctl.restarts().get("connect", {}).get("count", 0)

    def fault():
        os.kill(stackctl.supervised_pid("connect"), signal.SIGKILL)
    _scenario("kill -9 Kafka Connect", fault, "supervisord restarted Connect; Debezium resumed from its stored "
                                              "source position (replayed events are skipped by their offsets)")
    _restarted_by_supervisor("connect", count)


def test_airflow_scheduler_hung_in_its_shutdown(streaming_demo):
    """Airflow 3's scheduler, sent into its shutdown, waits for every task its executor runs; a
    stream task never ends, so it hangs there alive, neither scheduling nor exiting, and
    supervisord (which restarts what exits) does nothing. Found on CI: PostgreSQL's fast restart
    hit the scheduler in a query its loop does not catch. A TERM sends it into the same shutdown
    on purpose. The stack's liveness watch sees a live scheduler with no heartbeat and stops it;
    supervisord starts it again."""
    import psutil

    def streams_under(scheduler: int) -> bool:   # (a fenced stream of an earlier run may still be ending)
        return any(scheduler in [p.pid for p in psutil.Process(d).parents()] for d in _java_pids("incremental.py"))
    if not streams_under(stackctl.supervised_pid("airflow-scheduler")):
        _stream_demo()   # the running stream belongs to an earlier scheduler (killed): a task of this one
    pid = stackctl.supervised_pid("airflow-scheduler")
    assert streams_under(pid), "the stream task does not run under the scheduler, so its shutdown would not wait"
    count = stackctl.restarts().get("airflow-scheduler", {}).get("count", 0)
    _scenario("Airflow scheduler hung in its shutdown", lambda: os.kill(pid, signal.SIGTERM),
              "the stack's liveness watch saw no scheduler heartbeat for 45 s while the process lived, killed "
              "it, and supervisord started it again; the stream task went on meanwhile")
    _restarted_by_supervisor("airflow-scheduler", count)
    log = (stackctl.LOGS / "restarts.log").read_text()
    assert f"(pid {pid}) lives and the metadata database answers — hung" in log, \
        "the scheduler exited on its own: the hang was not reproduced"
    _wait(stackctl.airflow_healthy, 180, "every Airflow component healthy again")


def test_airflow_scheduler_killed(streaming_demo):
    import psutil
    count = stackctl.restarts().get("airflow-scheduler", {}).get("count", 0)
    idle = []

    def idle_worker(p) -> bool:
        try:
            return "<idle>" in " ".join(p.cmdline())
        except (psutil.ZombieProcess, psutil.NoSuchProcess):   # a worker that just ended, not yet reaped
            return False

    def fault():
        pid = stackctl.supervised_pid("airflow-scheduler")
        idle.extend(p.pid for p in psutil.Process(pid).children() if idle_worker(p))
        os.kill(pid, signal.SIGKILL)
    _scenario("kill -9 Airflow scheduler", fault, "supervisord restarted the scheduler; the stream went on, or, "
                                                  "when its task died with the scheduler, its driver stopped itself "
                                                  "and the new scheduler retried the task")
    _restarted_by_supervisor("airflow-scheduler", count)
    # the dead scheduler's idle LocalExecutor workers do not linger (the new one removed them)
    assert idle, "the scheduler had no idle workers to leave behind"
    assert not [p for p in idle if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_airflow_triggerer_killed_leaves_no_log_server_holding_its_port(stack):
    """A killed triggerer's log server outlived it and kept port 8794, so the restarted triggerer
    served no logs (found on a CI stack); the restarted one now removes it and serves its own."""
    import psutil
    count = stackctl.restarts().get("airflow-triggerer", {}).get("count", 0)

    def log_servers(pid: int | None) -> list[int]:
        try:   # a triggerer just killed or replaced may be a zombie for a moment
            return [p.pid for p in psutil.Process(pid).children(recursive=True)
                    if "serve-logs" in " ".join(p.cmdline())]
        except (psutil.Error, TypeError, ValueError):
            return []

    old = stackctl.supervised_pid("airflow-triggerer")
    _wait(lambda: log_servers(old), 60, "the triggerer's log server to start")
    left = log_servers(old)
    os.kill(old, signal.SIGKILL)
    _restarted_by_supervisor("airflow-triggerer", count)
    _wait(lambda: not [p for p in left if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
          and log_servers(stackctl.supervised_pid("airflow-triggerer")), 120,
          "the dead triggerer's log server to be gone and the new triggerer's own to run")
    # (busy LocalExecutor workers a killed scheduler left may still run their task: not log servers)
    assert not [p for p in stackctl.orphaned_airflow_workers(idle_only=False)
                if "serve-logs" in " ".join(psutil.Process(p).cmdline())]


def test_stream_task_worker_killed(streaming_demo):
    orphan = _live_stream()

    def fault():
        os.kill(stackctl.parent_pid(orphan), signal.SIGKILL)   # its parent: the task
    _scenario("kill -9 the Airflow task process running the stream", fault,
              "Airflow retried the task; the orphaned driver stopped within 10 s, on seeing its task gone or "
              "the retry's newer epoch, whichever came first")
    # the Airflow side recovered too: a new attempt streams, the orphan is gone
    _wait(lambda: not os.path.exists(f"/proc/{orphan}") and _java_pids("incremental.py"),
          300, "a retried stream task to replace the orphaned driver, and the orphan to stop")


def test_a_stream_whose_task_died_and_whose_run_was_failed_stops_itself_even_when_its_stop_hangs(streaming_demo):
    """Found on a test stack: a stream task died with its LocalExecutor worker (its scheduler was
    killed) and the run was then marked failed, so no retry came to fence it; its Spark driver,
    re-parented, went on applying with no task in Airflow to show or stop it. The driver watches
    the process that started it and stops when that is gone. A CI run then left such an orphan
    that never stopped: here its JVM is frozen as well, so the stop hangs, and the driver must
    end itself and its JVM hard. (The stop that does not hang: test_stream_task_worker_killed.)"""
    driver = _live_stream()
    python = _stream_python(driver)
    since = _query(TARGET_URL, "SELECT now()")[0][0]
    task = stackctl.parent_pid(driver)
    worker = stackctl.parent_pid(task)
    assert worker != stackctl.supervised_pid("airflow-scheduler")
    for pid in (worker, task):   # the worker first: nothing is left to report the task's end
        os.kill(pid, signal.SIGKILL)
    # every call into the JVM hangs, the stop's included. Once the task has exited (the JVM
    # re-parented): a process group orphaned while one of its processes is stopped gets SIGHUP and
    # SIGCONT from the kernel, and the JVM would end on the SIGHUP
    _wait(lambda: stackctl.parent_pid(driver) != task, 10, "the killed task to exit", every=0.01)
    os.kill(driver, signal.SIGSTOP)
    _stop_runs()                 # a person marks the run failed: no retry will come
    try:
        # seen within LAUNCHER_CHECK_S, its stop hangs, it ends hard ORPHAN_EXIT_S later
        _wait(lambda: not (stackctl.pid_alive(driver) or stackctl.pid_alive(python)), 120,
              "the orphaned stream driver to end itself and its frozen JVM")
        rows = _query(TARGET_URL, "SELECT outcome, detail FROM tideline.runs WHERE pipeline = 'demo' AND kind = "
                                  "'incremental' AND ended_at > %s", (since,))
        assert rows and all(o == "failed" and f"the process that started this stream (pid {task}" in d
                            and "it ended hard" in d for o, d in rows), rows
        # what it said once its task was gone went to a file, not to the pipe nobody read
        kept = stackctl.LOGS / "airflow-tasks" / "tideline-orphans" / f"demo-{python}.log"
        assert f"Its log from then on: {kept}" in rows[0][1]
        assert "it stops itself" in kept.read_text()
    finally:
        stackctl.kill_all([driver, python])   # whatever happened, no frozen process stays behind
        _stream_demo()           # the tests after this one need the stream
    _converges()


def test_stream_spark_driver_killed(streaming_demo):
    killed_at = []
    driver = _live_stream()

    def fault():
        killed_at.append(_query(TARGET_URL, "SELECT now()")[0][0])
        os.kill(driver, signal.SIGKILL)
    _scenario("kill -9 the stream's Spark driver", fault, "the stream task submitted it again after 5 s "
                                                          "(core.keep_alive); it resumed from the offsets committed "
                                                          "in the target")
    # the run history says what died and when: the task's Python side outlives its JVM and closes
    # the row itself; if it could not, the run that took over closes it as abandoned
    rows = _query(TARGET_URL, "SELECT started_at, ended_at, detail FROM tideline.runs WHERE pipeline = 'demo' AND "
                              "kind = 'incremental' AND outcome = 'failed' AND ended_at > %s", (killed_at[0],))
    assert any("the Spark driver (JVM) died under the stream" in d
               or "abandoned: did not finish before a newer run (epoch" in d for _, _, d in rows), rows


def test_target_refuses_connections_for_twenty_seconds(streaming_demo):
    hba = stackctl.VAR / "pg" / "data" / "pg_hba.conf"
    original = hba.read_text()

    def fault():
        hba.write_text(f"host {stackctl.DATABASES['target']} all 127.0.0.1/32 reject\n" + original)
        _query(SUPER_URL, "SELECT pg_reload_conf()")
        _query(SUPER_URL,
               "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
               (stackctl.DATABASES["target"],))

        def restore():
            time.sleep(20)
            hba.write_text(original)
            _query(SUPER_URL, "SELECT pg_reload_conf()")
        threading.Thread(target=restore, daemon=True).start()
    try:
        _scenario("target refuses connections for 20 s", fault, "the running stream waited and retried its batch "
                                                                "on new connections, then caught up")
    finally:
        hba.write_text(original)
        _query(SUPER_URL, "SELECT pg_reload_conf()")


def _stream_try() -> tuple[str, int]:
    """The running sync_demo run's stream task: (run id, its Airflow try number)."""
    [run] = [r["dag_run_id"] for r in _running_runs() if r["conf"].get("stream_mode", "continuous") == "continuous"]
    ti = stackctl.airflow_api("GET", f"dags/sync_demo/dagRuns/{run}/taskInstances/incremental")
    return run, ti["try_number"]


def test_a_stream_waits_for_a_source_that_does_not_answer_and_streams_again_by_itself(streaming_demo):
    """The stream's driver dies while the source refuses the stream's role (capture goes on: its
    replication connection was open before). The stream task does not fail nor spend an Airflow
    retry: it says what it waits for in the state (status, the view, the metrics), looks again
    every 10 s, and submits the stream as soon as the source answers (core.keep_alive)."""
    from tideline.core.config import load_pipeline
    from tideline.ops.status import pipeline_status
    cfg = load_pipeline(stackctl.ROOT / "pipelines" / "demo.yaml")
    env = stackctl.environment()
    hba = stackctl.VAR / "pg" / "data" / "pg_hba.conf"
    original = hba.read_text()
    driver = _live_stream()
    before = _stream_try()
    seen = []

    def waiting() -> bool:
        rows = pipeline_status(cfg, environ=env, exact_counts=False)
        seen.append(rows[0].stream_waiting)
        return bool(rows[0].stream_waiting) and all(r.stream_waiting == rows[0].stream_waiting for r in rows
                                                    if cfg.table(r.table).mode == "cdc")

    def fault():
        hba.write_text(f"host {stackctl.DATABASES['source']} {stackctl.PG_CDC_USER} 127.0.0.1/32 reject\n" + original)
        _query(SUPER_URL, "SELECT pg_reload_conf()")
        os.kill(driver, signal.SIGKILL)
        _wait(waiting, 240, "status to say the stream waits for the source", every=3)
        assert seen[-1].startswith(f"waiting for source ({cfg.source.conn_id}): ") and "(try " in seen[-1], seen[-1]
        rows = pipeline_status(cfg, environ=env, exact_counts=False)   # (status logs in as the stream does)
        assert rows[0].stream_tries >= 1 and rows[0].source_error.startswith(f"the source ({cfg.source.conn_id}) "
                                                                             f"does not answer: ")
        # the outage goes on: it waits, does not give up, and looks again (every 10 s: its wait's row
        # is written at each look)
        looked = "SELECT updated_at FROM tideline.stream_waits WHERE pipeline = 'demo'"
        first = _query(TARGET_URL, looked)[0][0]
        _wait(lambda: _query(TARGET_URL, looked)[0][0] > first, 60, "the waiting stream task to look again", every=2)
        assert pipeline_status(cfg, environ=env, exact_counts=False)[0].stream_waiting
        hba.write_text(original)
        _query(SUPER_URL, "SELECT pg_reload_conf()")
    try:
        _scenario("the source refuses the stream for 1-2 minutes as its driver dies", fault,
                  "the stream task waited for the source, looking every 10 s, and submitted the stream as soon "
                  "as it answered: no Airflow retry, no person")
    finally:
        hba.write_text(original)
        _query(SUPER_URL, "SELECT pg_reload_conf()")
    assert _stream_try() == before, "the stream task failed or was retried by Airflow: it should have waited"
    assert not pipeline_status(cfg, environ=env, exact_counts=False)[0].stream_waiting


def test_full_load_driver_killed_mid_copy(streaming_demo):
    # enough bytes that the reload's COPY lasts a few seconds (~90 MB), in few rows: every row also
    # streams through Debezium and the live stream, and each later digest of the module hashes it
    _query(SOURCE_URL, "INSERT INTO orders (customer_id, status, total, note) SELECT (SELECT min(id) FROM customers), "
                       "'new', mod(g, 1000), repeat('bulk order ', 80) FROM generate_series(1, 100000) g")

    def fault():
        stackctl.airflow_api("POST", "dags/sync_demo/dagRuns", {"logical_date": None, "conf": {
            "action": "full_reload", "tables": ["orders"], "stream_mode": "continuous"}})
        _wait(lambda: _java_pid("full_load.py") is not None and _query(
            TARGET_URL, "SELECT count(*) FROM pg_stat_activity WHERE query ILIKE 'COPY %orders%FROM STDIN%'")[0][0],
            300, "the full load of orders to be copying", every=0.2)
        os.kill(_java_pid("full_load.py"), signal.SIGKILL)
    _scenario("kill -9 a full load's Spark driver mid-COPY", fault,
              "Airflow retried the full load, which reloaded the table from a new snapshot; nothing of the killed "
              "load was swapped in")
    outcomes = _query(TARGET_URL, "SELECT outcome FROM tideline.runs WHERE pipeline = 'demo' AND table_name = "
                                  "'orders' AND kind = 'full_load' ORDER BY run_id DESC LIMIT 2")
    assert outcomes[0][0] == "succeeded"


def test_a_reload_asked_as_available_now_hands_the_tables_back_to_a_continuous_stream(streaming_demo):
    """The reload's stream takes every table over from the continuous one (fenced, it stops) and
    ends once it has applied what Kafka holds; a change made after it ended still arrives, because
    the run started a continuous stream again."""
    recent = "dags/sync_demo/dagRuns?order_by=-run_after&limit=20"
    before = {r["dag_run_id"] for r in stackctl.airflow_api("GET", recent)["dag_runs"]}

    def fault():
        run = stackctl.airflow_api("POST", "dags/sync_demo/dagRuns", {"logical_date": None, "conf": {
            "action": "full_reload", "tables": ["customers"], "stream_mode": "available_now"}})
        _wait(lambda: stackctl.airflow_api("GET", f"dags/sync_demo/dagRuns/{run['dag_run_id']}")["state"]
              in ("success", "failed"), 600, "the available_now reload to finish", every=2)
        assert stackctl.airflow_api("GET", f"dags/sync_demo/dagRuns/{run['dag_run_id']}")["state"] == "success"
    _scenario("full reload as available_now while a continuous stream runs", fault,
              "the reload's run took the tables over, applied what Kafka held, and started a continuous stream "
              "again")
    after = [r for r in stackctl.airflow_api("GET", recent)["dag_runs"] if r["dag_run_id"] not in before]
    assert any(r["conf"].get("stream_mode") == "continuous" and r["state"] == "running" for r in after), after
    held = _query(TARGET_URL, "SELECT DISTINCT ON (table_name) table_name, stream_mode, outcome FROM tideline.runs "
                              "WHERE pipeline = 'demo' AND kind = 'incremental' ORDER BY table_name, run_id DESC")
    assert {(m, o) for _, m, o in held} == {("continuous", "running")}, held


def test_watchdog_alerts_when_a_stream_commits_nothing_while_events_wait(
        spark, airflow_env, webhook, source_db, target_db, pipelines, unique_name):
    """The watch DAG, not the stream task, says so: the stream is not running at all here (as when
    its task died, sits in retries or failed), Kafka holds events, no batch for longer than the bound."""
    from helpers import drop_source
    from test_dags import make_table, run_dag
    from tideline import state
    from tideline.load.full_load import FullLoad
    t = f"{unique_name}_stall"
    make_table(source_db, t, 50)
    try:
        cfg = pipelines.make([{"name": t}], capture=True, alerts={"webhook_conn_id": "tideline_test_hook",
                                                                  "stalled_after_minutes": 0.05})
        FullLoad(cfg, spark).run([t])
        state.record_error(target_db, cfg.name, t, "stream stopped: OperationalError: the target went away")
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE {t} SET qty = qty + 1 WHERE id <= 10")
        time.sleep(4)
        _wait(lambda: run_dag(f"watch_{cfg.name}")["headroom"] == "success" and any(
            "has committed no batch" in m["text"] for m in webhook), 60, "the stall alert", every=2)
        text = next(m["text"] for m in webhook if "has committed no batch" in m["text"])
        assert f"{t}: the stream of pipeline {cfg.name}" in text and "events for it" in text
        assert "the target went away" in text and f"trigger sync_{cfg.name}" in text
    finally:
        drop_source(source_db, t)


def _stack_processes() -> list[int]:
    """Every process of the local stack: supervisord and all below it (PostgreSQL, MariaDB,
    Kafka, Connect, each Airflow part, its task workers and their Spark drivers), and any Spark
    job or PostgreSQL that runs outside it."""
    import psutil
    roots = [stackctl.postgres_pid(), *stackctl.leftover_spark_jobs()]
    pidfile = stackctl.STACK / "var" / "run" / "supervisord.pid"
    if stackctl.supervisord_running():
        roots.append(int(pidfile.read_text().strip()))
    found: set[int] = set()
    for pid in filter(None, roots):
        try:
            found |= {pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))}
        except psutil.NoSuchProcess:
            pass
    return sorted(found)


def test_the_whole_stack_killed_as_a_host_crash_then_make_up_streams_again(streaming_demo):
    """kill -9 of every process of the stack at once, as a host crash (or an OOM killer's sweep)
    leaves it, then `make up`, what a boot runs: the pipeline that was streaming streams again
    with no person acting — its DAG run's stream task is retried by the new scheduler."""
    import psutil
    driver = _live_stream()
    killed: list[int] = []

    def fault():
        killed.extend(_stack_processes())
        assert driver in killed and stackctl.postgres_pid() in killed, "the stack's processes were not all found"
        for pid in killed:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _wait(lambda: not [p for p in killed if psutil.pid_exists(p) and
                           psutil.Process(p).status() != psutil.STATUS_ZOMBIE], 30, "every stack process to be gone")
        up = subprocess.run(["make", "up"], cwd=stackctl.STACK.parent, capture_output=True, text=True, timeout=900)
        assert up.returncode == 0, f"make up after the crash failed:\n{up.stdout}\n{up.stderr}"
    _scenario("kill -9 of the whole stack, then make up", fault,
              "make up started every part again; the new scheduler found the stream task dead and retried it; "
              "the stream resumed from its committed offsets")
    assert len(killed) > 10
    _wait(stackctl.airflow_healthy, 180, "every Airflow component healthy again")
