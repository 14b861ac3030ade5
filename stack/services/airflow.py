"""Airflow 3 for the local stack: API server, scheduler, DAG processor and triggerer (LocalExecutor,
metadata in the stack's PostgreSQL), each supervised and started with the stack's environment."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
import urllib.request
from datetime import datetime
from pathlib import Path

from services.base import (AIRFLOW_ADMIN, AIRFLOW_ADMIN_PASS, AIRFLOW_USERS, HOST, LOGS, PORTS, ROOT, STACKCTL, VAR, VENV_BIN,
                           StackError, http_json, kill_all, log_file, parent_pid, stack_var, wait_until)
from services.addresses import airflow_url
from services.supervisor import stop_unsupervised, hung_file, supervise, supervised_pid


AIRFLOW_PARTS = ("airflow-api-server", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer")


def airflow_api(method: str, path: str, body: dict | None = None, timeout: float = 30.0):
    """The local Airflow's REST API (/api/v2/<path>) as the stack's admin user."""
    token = http_json(f"{airflow_url()}/auth/token", "POST",
                      {"username": AIRFLOW_ADMIN, "password": AIRFLOW_ADMIN_PASS})["access_token"]
    req = urllib.request.Request(f"{airflow_url()}/api/v2/{path}", method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read() or b"null")


def airflow_health() -> dict:
    return http_json(f"{airflow_url()}/api/v2/monitor/health")


def airflow_healthy() -> bool:
    health = airflow_health()
    needed = ("metadatabase", "scheduler", "dag_processor", "triggerer")
    return all((health.get(k) or {}).get("status") == "healthy" for k in needed)


AIRFLOW_COMMANDS = {
    "airflow-api-server": ["api-server", "--port", str(PORTS["airflow"]), "--host", HOST, "--workers", "1"],
    "airflow-scheduler": ["scheduler"],
    "airflow-dag-processor": ["dag-processor"],
    "airflow-triggerer": ["triggerer"],
}


def orphaned_airflow_workers(idle_only: bool) -> list[int]:
    """LocalExecutor workers of this stack whose scheduler died (kill -9, OOM): re-parented away
    from any scheduler, they wait forever on a queue nobody feeds, ~37 MB each of their own. Busy
    ones still run a task (a stream, say) that reports to the API server; idle ones serve nobody.
    Also the log servers (`airflow serve-logs`) a stopped scheduler or triggerer left: they serve
    nobody and keep the log port, so the next scheduler's own log server cannot bind it."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            log_server = cmd.startswith("airflow serve-logs")
            if not (cmd.startswith("airflow worker -- LocalExecutor") or log_server) or \
                    (idle_only and not log_server and "<idle>" not in cmd):
                continue
            ppid = parent_pid(int(d.name))
            parent = Path(f"/proc/{ppid}/cmdline").read_bytes() if ppid > 1 else b""
            # this stack's: supervisord starts its programs in ROOT (the environment is unreadable:
            # the process title overwrites it)
            if b"scheduler" in parent or b"triggerer" in parent or \
                    Path(os.readlink(d / "cwd")).resolve() != ROOT.resolve():
                continue
        except (OSError, ValueError, IndexError):
            continue
        found.append(int(d.name))
    return found


def _descendants(pid: int) -> list[int]:
    """Every process below pid (children before their own children)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                children.setdefault(parent_pid(int(d.name)), []).append(int(d.name))
            except (OSError, ValueError, IndexError):
                continue
    out, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo += children.get(p, [])
    return out


def reap_orphaned_airflow_workers(idle_only: bool) -> int:
    """Kills them with what runs under them (a busy one's task and its Spark driver)."""
    pids = orphaned_airflow_workers(idle_only)
    for pid in pids:
        kill_all([pid, *_descendants(pid)])
    return len(pids)


# The component's name in GET /api/v2/monitor/health, for each part that heartbeats.
HEARTBEATS = {"airflow-scheduler": "scheduler", "airflow-dag-processor": "dag_processor",
              "airflow-triggerer": "triggerer"}
LIVENESS_GRACE_S = 45.0     # silent this long, while it could have written, means hung (Airflow
                            # itself calls a component unhealthy after 30 s; heartbeats come every 5 s)
LIVENESS_EVERY_S = 5.0


def silent_parts(health: dict | None, started: dict[str, float], metadata_ok_since: float, now: float,
                 grace: float = LIVENESS_GRACE_S) -> dict[str, float]:
    """The parts that have written no heartbeat for `grace` seconds although their process has run,
    and the metadata database has answered, all that time: {part: seconds silent}. The clock starts
    at the latest of their last heartbeat, their process start and the database coming back, so
    an outage of the database (no one can heartbeat) or a part still starting is never counted.
    health None = the API server did not answer: nothing can be judged."""
    if not health or (health.get("metadatabase") or {}).get("status") != "healthy":
        return {}
    silent = {}
    for part, name in HEARTBEATS.items():
        if part not in started:
            continue
        beat = (health.get(name) or {}).get(f"latest_{name}_heartbeat")
        last = datetime.fromisoformat(beat).timestamp() if beat else 0.0
        quiet = now - max(last, started[part], metadata_ok_since)
        if quiet >= grace:
            silent[part] = round(quiet, 1)
    return silent


def watch_airflow_liveness() -> int:
    """supervisord program: kills an Airflow component that lives but no longer heartbeats, so
    supervisord starts it again. supervisord restarts what exits; this is for what hangs. Found on
    a CI stack: PostgreSQL's fast restart hit the scheduler in a query its loop does not catch,
    and the scheduler went into its shutdown, which waits for every running task — a stream task
    never ends — so it neither scheduled nor exited. A TERM there hangs it the same way."""
    import psutil
    metadata_ok_since = time.time()
    with open(LOGS / "restarts.log", "a") as log:
        while True:
            time.sleep(LIVENESS_EVERY_S)
            try:
                health = airflow_health()
            except Exception:   # the API server restarting or gone: judge nothing meanwhile
                health = None
            now = time.time()
            if not health or (health.get("metadatabase") or {}).get("status") != "healthy":
                metadata_ok_since = now
                continue
            if all((health.get(n) or {}).get("status") == "healthy" for n in HEARTBEATS.values()):
                continue
            pids = {part: supervised_pid(part) for part in HEARTBEATS}
            started = {}
            for part, pid in pids.items():
                try:
                    started[part] = psutil.Process(pid).create_time() if pid else None
                except psutil.NoSuchProcess:
                    pass
            started = {part: t for part, t in started.items() if t}
            for part, quiet in silent_parts(health, started, metadata_ok_since, now).items():
                line = (f"{part}: no heartbeat for {quiet:.0f}s while its process (pid {pids[part]}) lives and "
                        f"the metadata database answers — hung; killing it so supervisord starts it again")
                print(f"{time.strftime('%F %T')} {line}", flush=True)
                log.write(f"{time.strftime('%F %T')} {line}\n")
                log.flush()
                hung_file(part).write_text(f"{pids[part]} no heartbeat for {quiet:.0f}s while it lived (hung)")
                _stop_hung(pids[part])


def _stop_hung(pid: int) -> None:
    """kill -9, of the process itself. A TERM would not do: a scheduler in its shutdown exits on a
    second signal into the interpreter's exit, which waits for the same workers again. A
    LocalExecutor worker under it that still runs a task goes on, as when the scheduler is killed."""
    kill_all([pid])


def leftover_spark_jobs() -> list[int]:
    """Processes of this checkout's Spark jobs (spark-submit's JVM, the Python driver) still
    running: after `make down` stopped Airflow, whatever is left outlived its task — a driver
    whose JVM died waits out the database outage for the batch it holds, an orphan notices its
    task gone only at its next check. A job is a process with a `spark_jobs/*.py` of this checkout
    among its arguments (not any mention of the folder: the tests' own Spark session names its
    log4j file there) started for this stack's data folder (a second stack of the same checkout,
    as test_secure starts, keeps its jobs apart)."""
    jobs = (str(ROOT.resolve() / "spark_jobs") + "/").encode()
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:   # the environment read only of a job's process
                argv = (d / "cmdline").read_bytes().split(b"\0")
                if not any(a.startswith(jobs) and a.endswith(b".py") for a in argv):
                    continue
                env = dict(kv.split("=", 1) for kv in (d / "environ").read_bytes().decode(errors="replace").split("\0")
                           if "=" in kv)
            except OSError:
                continue
            if stack_var(env).resolve() == VAR.resolve():
                found.append(int(d.name))
    return found


def exec_part(part: str) -> None:
    """What supervisord runs for an Airflow component: the command with the stack's environment.
    A scheduler or triggerer starting after one that died first removes the idle workers and the
    log server the dead one left (the log server keeps the port the new one's must bind)."""
    if part in ("airflow-scheduler", "airflow-triggerer"):
        reaped = reap_orphaned_airflow_workers(idle_only=True)
        if reaped:
            print(f"[stack] removed {reaped} idle LocalExecutor worker(s) or log server(s) left by a {part[8:]} "
                  f"that died", flush=True)
    os.execvpe(str(VENV_BIN / "airflow"), [str(VENV_BIN / "airflow"), *AIRFLOW_COMMANDS[part]], _full_env())


def up_airflow() -> None:
    home = VAR / "airflow"
    home.mkdir(parents=True, exist_ok=True)
    (home / "passwords.json").write_text(json.dumps({user: password for user, (_role, password) in
                                                     AIRFLOW_USERS.items()}))
    env = _full_env()
    if not (home / ".db_migrated").exists():
        res = subprocess.run([str(VENV_BIN / "airflow"), "db", "migrate"], env=env,
                             capture_output=True, text=True)
        LOGS.mkdir(parents=True, exist_ok=True)
        log_file("airflow-db-migrate").write_text(res.stdout + res.stderr)
        if res.returncode != 0:
            raise StackError(f"airflow: `airflow db migrate` failed; log: {log_file('airflow-db-migrate')}\n"
                             + "\n".join((res.stdout + res.stderr).splitlines()[-15:]))
        (home / ".db_migrated").write_text(time.strftime("%F %T"))
    for part in AIRFLOW_COMMANDS:
        stop_unsupervised(part)
        # through `stackctl exec`, so each (re)start gets the stack's environment as it is now
        supervise(part, shlex.join([sys.executable, str(STACKCTL), "exec", part]))
    supervise("airflow-liveness", shlex.join([sys.executable, str(STACKCTL), "airflow-liveness"]))
    wait_until("airflow-api-server", airflow_healthy, 180,
               f"GET {airflow_url()}/api/v2/monitor/health reports all components healthy")




def _full_env() -> dict[str, str]:
    from services.env import full_env
    return full_env()
