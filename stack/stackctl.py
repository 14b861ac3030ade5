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
"""
from __future__ import annotations

import json
import os
import pwd
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
STACK = ROOT / "stack"
VAR = Path(os.environ.get("TIDELINE_STACK_VAR", STACK / "var"))
LIB = STACK / "lib"
LOGS = VAR / "log"
RUN = VAR / "run"
VENV_BIN = Path(sys.executable).parent

PG_BIN = Path(os.environ.get("TIDELINE_PG_BIN", "/usr/lib/postgresql/15/bin"))
PORTS = {
    "postgres": int(os.environ.get("TIDELINE_PG_PORT", "55432")),
    "mariadb": int(os.environ.get("TIDELINE_MARIADB_PORT", "53306")),
    "kafka": int(os.environ.get("TIDELINE_KAFKA_PORT", "59092")),
    "kafka_controller": int(os.environ.get("TIDELINE_KAFKA_CONTROLLER_PORT", "59093")),
    "connect": int(os.environ.get("TIDELINE_CONNECT_PORT", "58083")),
    "airflow": int(os.environ.get("TIDELINE_AIRFLOW_PORT", "58080")),
    "spark_master": int(os.environ.get("TIDELINE_SPARK_MASTER_PORT", "57077")),
    "spark_master_ui": int(os.environ.get("TIDELINE_SPARK_MASTER_UI_PORT", "58180")),
    "spark_worker_ui": int(os.environ.get("TIDELINE_SPARK_WORKER_UI_PORT", "58181")),   # +1 per worker
}
# The stack's Spark: local mode inside each job (default), or a standalone cluster of a master and
# SPARK_WORKERS workers (one core each) that every job is submitted to: TIDELINE_SPARK_CLUSTER=1.
SPARK_CLUSTER = os.environ.get("TIDELINE_SPARK_CLUSTER", "").lower() in ("1", "true", "yes", "on")
SPARK_WORKERS = 2
SPARK_WORKER_MEMORY = os.environ.get("TIDELINE_SPARK_WORKER_MEMORY", "2g")
# Kafka: one broker (default), or three KRaft nodes (broker + controller each) with replication 3,
# min.insync.replicas 2 and no unclean leader election: TIDELINE_KAFKA_CLUSTER=1. Node i listens
# on the broker/controller ports + 2·(i-1).
KAFKA_BROKERS = 3 if os.environ.get("TIDELINE_KAFKA_CLUSTER", "").lower() in ("1", "true", "yes", "on") else 1
HOST = "127.0.0.1"
# Throwaway credentials of the local stack only; production reads Airflow connections.
PG_SUPERUSER, PG_SUPERPASS = "postgres", "postgres"
PG_USER, PG_PASS = "tideline", "tideline"
DATABASES = {"source": "tideline_source", "target": "tideline_target", "airflow": "airflow"}
AIRFLOW_ADMIN, AIRFLOW_ADMIN_PASS = "admin", "admin"
DEBEZIUM_CLASS = "io.debezium.connector.postgresql.PostgresConnector"
DEBEZIUM_MARIADB_CLASS = "io.debezium.connector.mariadb.MariaDbConnector"
# MariaDB: the demo shop's database, a capture user with exactly the privileges Debezium and
# the full load need, and an admin for setting up (throwaway, local stack only).
MARIADB_DATABASE = "shop"
MARIADB_USER, MARIADB_PASS = "tideline", "tideline"
MARIADB_ADMIN, MARIADB_ADMIN_PASS = "admin", "admin"
MARIADB_BIN = Path(os.environ.get("TIDELINE_MARIADB_BIN", "/usr/sbin"))


class StackError(RuntimeError):
    """A part of the stack failed to start or is unhealthy; the message names part and log."""


def log_file(part: str) -> Path:
    return LOGS / f"{part}.log"


def pid_file(part: str) -> Path:
    return RUN / f"{part}.pid"


# --------------------------------------------------------------------------- environment

def pg_url(db: str, user: str = PG_USER, password: str = PG_PASS, scheme: str = "postgresql") -> str:
    return f"{scheme}://{user}:{password}@{HOST}:{PORTS['postgres']}/{db}"


def mariadb_url(db: str = MARIADB_DATABASE, user: str = MARIADB_USER, password: str = MARIADB_PASS) -> str:
    return f"mysql://{user}:{password}@{HOST}:{PORTS['mariadb']}/{db}"


def kafka_node_ports(node: int) -> tuple[int, int]:
    """(broker, controller) port of the stack's KRaft node 1..KAFKA_BROKERS."""
    return KAFKA.node_ports(node)


def kafka_bootstrap() -> str:
    return KAFKA.bootstrap()


def connect_url() -> str:
    return f"http://{HOST}:{PORTS['connect']}"


def airflow_url() -> str:
    return f"http://{HOST}:{PORTS['airflow']}"


def spark_jars() -> list[str]:
    """The jobs' --jars: the Kafka connector and JDBC drivers, and Tideline's driver jar too — the
    driver has it on its class path (driver_conf), and with it here the executors can load the
    local file system class `spark.hadoop.fs.file.impl` names, should one ever open a file: path."""
    return sorted(str(p) for p in (LIB / "spark").glob("*.jar")) + [str(p) for p in _driver_classpath()]


def _jwt_secret() -> str:
    path = VAR / "airflow" / "jwt_secret"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(32))
    return path.read_text().strip()


def environment() -> dict[str, str]:
    """Every variable the services, the Spark jobs and the tests need, in one place."""
    airflow_home = VAR / "airflow"
    env = {
        "TIDELINE_HOME": str(ROOT),
        "TIDELINE_SPARK_JARS": ",".join(spark_jars()),
        "TIDELINE_SPARK_CLASS_ARCHIVE": str(CLASS_ARCHIVE),
        # Hadoop's local file system without a forked chmod per file (stack/jvm/hadoop-nio)
        "TIDELINE_SPARK_DRIVER_CLASSPATH": ":".join(map(str, _driver_classpath())),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "plugins"), str(ROOT)]),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": HOST,  # Spark binds to loopback only
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        # Airflow connections (the only place credentials come from).
        "AIRFLOW_CONN_TIDELINE_SOURCE": pg_url(DATABASES["source"]),
        "AIRFLOW_CONN_TIDELINE_TARGET": pg_url(DATABASES["target"]),
        "AIRFLOW_CONN_TIDELINE_MARIADB_SOURCE": mariadb_url(),
        "AIRFLOW_CONN_TIDELINE_KAFKA": json.dumps(
            {"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap()}}),
        "AIRFLOW_CONN_TIDELINE_CONNECT": json.dumps(
            {"conn_type": "http", "host": HOST, "port": PORTS["connect"], "schema": "http"}),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(
            {"conn_type": "spark", "host": spark_master_url() if SPARK_CLUSTER else "local[2]",
             "extra": {"spark-binary": "spark-submit", "deploy-mode": "client"}}),
        **({"TIDELINE_SPARK_MASTER": spark_master_url()} if SPARK_CLUSTER else {}),
        # Airflow itself.
        "AIRFLOW_HOME": str(airflow_home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "8",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{airflow_url()}/execution/",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{AIRFLOW_ADMIN}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(airflow_home / "passwords.json"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": pg_url(DATABASES["airflow"], scheme="postgresql+psycopg2"),
        # Riding out a metadata database restart: pooled connections are tested before use and
        # operations hit by an OperationalError are retried; a component that still dies is
        # restarted by supervisord.
        "AIRFLOW__DATABASE__SQL_ALCHEMY_POOL_PRE_PING": "True",
        "AIRFLOW__DATABASE__MAX_DB_RETRIES": "10",
        "AIRFLOW__API__HOST": HOST,
        "AIRFLOW__API__PORT": str(PORTS["airflow"]),
        "AIRFLOW__API__BASE_URL": airflow_url(),
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
        "AIRFLOW__SCHEDULER__STANDALONE_DAG_PROCESSOR": "True",
        # a task whose worker died (kill -9, OOM) is found and retried after 90 s without a
        # heartbeat, not the default 300 s (heartbeats go every 5 s; 18 missed is not a slow machine)
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "90",
        # a scheduler that died leaves its running tasks orphaned; its successor resets them for
        # a retry at its next orphan check: every 30 s, not the default 300 s
        "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "30",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(LOGS / "airflow-tasks"),
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    if (airflow_home / "jwt_secret").exists() or VAR.exists():
        env["AIRFLOW__API_AUTH__JWT_SECRET"] = _jwt_secret()
    return env


def full_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(environment())
    return env


# --------------------------------------------------------------------------- processes

def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def running_pid(part: str) -> int | None:
    path = pid_file(part)
    if not path.exists():
        return None
    try:
        pid = int(path.read_text().strip())
    except ValueError:
        return None
    return pid if _pid_alive(pid) else None


def spawn(part: str, argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> int:
    """Start a detached process in its own session, log to stack/var/log/<part>.log."""
    LOGS.mkdir(parents=True, exist_ok=True)
    RUN.mkdir(parents=True, exist_ok=True)
    with open(log_file(part), "ab") as log:
        log.write(f"\n==== {time.strftime('%F %T')} starting {part}: {' '.join(argv)}\n".encode())
        log.flush()
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env or full_env(), cwd=str(cwd or ROOT), start_new_session=True)
    pid_file(part).write_text(str(proc.pid))
    return proc.pid


def stop(part: str, timeout: float = 30.0) -> bool:
    pid = running_pid(part)
    if pid is None:
        pid_file(part).unlink(missing_ok=True)
        return False
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            break
        deadline = time.time() + wait
        while time.time() < deadline and _pid_alive(pid):
            time.sleep(0.2)
        if not _pid_alive(pid):
            break
    pid_file(part).unlink(missing_ok=True)
    return True


# --------------------------------------------------------------------------- supervision

SPARK_PARTS = ("spark-master", *(f"spark-worker-{i}" for i in range(1, SPARK_WORKERS + 1)))
KAFKA_PARTS = ("kafka",) if KAFKA_BROKERS == 1 else tuple(f"kafka-{i}" for i in range(1, KAFKA_BROKERS + 1))
SUPERVISED = ("postgres", "mariadb", *KAFKA_PARTS, "connect", *SPARK_PARTS, "airflow-api-server", "airflow-scheduler",
              "airflow-dag-processor", "airflow-triggerer")
SUP_DIR = VAR / "supervisor"
SUP_SOCK = RUN / "supervisor.sock"
RESTARTS = RUN / "restarts.json"
# Start order; `supervisorctl stop all` stops in the reverse order.
PRIORITY = {part: 10 * (i + 1) for i, part in enumerate(SUPERVISED)}


def _supervisorctl(*args: str, check: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run([str(VENV_BIN / "supervisorctl"), "-c", str(SUP_DIR / "supervisord.conf"), *args],
                          capture_output=True, text=True, check=check, timeout=180)


def supervisord_running() -> bool:
    pidfile = RUN / "supervisord.pid"
    try:
        return _pid_alive(int(pidfile.read_text().strip())) and SUP_SOCK.exists()
    except (OSError, ValueError):
        return False


def _ensure_supervisord() -> None:
    """supervisord with its main config (programs are added one file each, see supervise())."""
    (SUP_DIR / "programs").mkdir(parents=True, exist_ok=True)
    LOGS.mkdir(parents=True, exist_ok=True)
    RUN.mkdir(parents=True, exist_ok=True)
    py, me = sys.executable, Path(__file__).resolve()
    (SUP_DIR / "supervisord.conf").write_text(f"""; Generated by stack/stackctl.py — the local stack's process supervisor.
[unix_http_server]
file={SUP_SOCK}
chmod=0700

[supervisord]
logfile={LOGS / "supervisord.log"}
logfile_maxbytes=20MB
logfile_backups=2
pidfile={RUN / "supervisord.pid"}
childlogdir={LOGS}
directory={ROOT}
minfds=4096

[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface

[supervisorctl]
serverurl=unix://{SUP_SOCK}

; Counts and logs every unexpected exit and the restart that follows (make status shows them).
[eventlistener:restart-log]
command={py} {me} restart-listener
events=PROCESS_STATE_EXITED,PROCESS_STATE_RUNNING,PROCESS_STATE_FATAL,PROCESS_STATE_BACKOFF
stderr_logfile={LOGS / "restart-listener.log"}
priority=1

[include]
files={SUP_DIR / "programs"}/*.conf
""")
    if supervisord_running():
        return
    res = subprocess.run([str(VENV_BIN / "supervisord"), "-c", str(SUP_DIR / "supervisord.conf")],
                         capture_output=True, text=True, env=full_env())
    if res.returncode != 0:
        raise StackError(f"supervisord did not start: {res.stdout}{res.stderr} (log {LOGS / 'supervisord.log'})")
    deadline = time.time() + 30
    while not (supervisord_running() and _supervisorctl("pid").returncode == 0):
        if time.time() > deadline:
            raise StackError(f"supervisord did not answer on {SUP_SOCK} within 30s (log {LOGS / 'supervisord.log'})")
        time.sleep(0.3)


def supervise(part: str, command: str, user: str | None = None, stopsignal: str = "TERM",
              stopwait: int = 60, environment: dict[str, str] | None = None) -> None:
    """Registers `part` with supervisord (restart on any exit, backoff while it fails to stay
    up) and starts it if it is not running."""
    _ensure_supervisord()
    (SUP_DIR / "programs" / f"{part}.conf").write_text(f"""[program:{part}]
command={command}
directory={ROOT}
priority={PRIORITY.get(part, 900)}
autostart=true
autorestart=true
startsecs=5
; while it keeps failing, supervisord waits 1 s, 2 s, 3 s ... between attempts
startretries=100
stopsignal={stopsignal}
stopwaitsecs={stopwait}
stopasgroup=true
killasgroup=true
redirect_stderr=true
stdout_logfile={log_file(part)}
stdout_logfile_maxbytes=50MB
stdout_logfile_backups=2
{f"user={user}" if user else ""}
{"environment=" + ",".join(f'{k}="{v}"' for k, v in environment.items()) if environment else ""}
""")
    link = log_file(part)
    if link.is_symlink():
        link.unlink()
    _supervisorctl("update")   # adds a new program (autostart) or restarts a changed one
    if supervised_state(part) not in ("RUNNING", "STARTING", "BACKOFF"):
        _supervisorctl("start", part)


def supervised_state(part: str) -> str | None:
    """RUNNING, STARTING, BACKOFF, STOPPED, EXITED, FATAL (supervisord's words), None if unknown."""
    if not supervisord_running():
        return None
    out = _supervisorctl("status", part).stdout.split()
    return out[1] if len(out) > 1 and out[0] == part else None


def supervised_pid(part: str) -> int | None:
    if not supervisord_running():
        return None
    out = _supervisorctl("pid", part).stdout.strip()
    return int(out) if out.isdigit() and int(out) > 0 else None


def restarts() -> dict[str, dict]:
    try:
        return json.loads(RESTARTS.read_text())
    except (OSError, ValueError):
        return {}


def restart_listener() -> int:
    """supervisord event listener: every unexpected exit of a part, the restart that brought it
    back and how long that took, into stack/var/run/restarts.json and stack/var/log/restarts.log."""
    out, log = sys.stdout, open(LOGS / "restarts.log", "a")
    while True:
        out.write("READY\n")
        out.flush()
        header = dict(kv.split(":", 1) for kv in sys.stdin.readline().split())
        payload = dict(kv.split(":", 1) for kv in sys.stdin.read(int(header.get("len", 0))).split())
        event, part = header.get("eventname", ""), payload.get("processname", "?")
        seen = restarts()
        entry = seen.setdefault(part, {"count": 0})
        now, line = time.time(), None
        if event == "PROCESS_STATE_EXITED":   # a stop asked for is STOPPING/STOPPED, never EXITED
            how = "unexpectedly" if payload.get("expected") == "0" else "with its normal exit status, unasked"
            entry.update(count=entry["count"] + 1, exited_at=now, last=f"pid {payload.get('pid')} exited "
                         f"{how} at {time.strftime('%F %T')}")
            line = f"{part}: pid {payload.get('pid')} exited {how}; supervisord restarts it"
        elif event == "PROCESS_STATE_RUNNING" and entry.get("exited_at"):
            took = now - entry.pop("exited_at")
            entry["last"] += f", running again after {took:.1f}s (restarted by supervisord)"
            entry["recovery_s"] = round(took, 1)
            line = f"{part}: running again (pid {payload.get('pid')}) {took:.1f}s after it exited"
        elif event == "PROCESS_STATE_BACKOFF":
            line = f"{part}: exited while starting; supervisord retries with a growing delay"
        elif event == "PROCESS_STATE_FATAL":
            entry["last"] = f"gave up at {time.strftime('%F %T')} after repeated start failures"
            line = f"{part}: FATAL — supervisord gave up restarting it; see {log_file(part)}; `make up` starts it"
        if line:
            log.write(f"{time.strftime('%F %T')} {line}\n")
            log.flush()
            tmp = RESTARTS.with_suffix(".tmp")
            tmp.write_text(json.dumps(seen))
            tmp.replace(RESTARTS)
        out.write("RESULT 2\nOK")
        out.flush()


def _stop_unsupervised(part: str) -> None:
    """A part started by an older stackctl (its own pid file, no supervisor): stopped once, so
    the supervised one can take its port."""
    if pid_file(part).exists() and running_pid(part):
        stop(part)


def wait_until(part: str, check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    last_error = ""
    while time.time() < deadline:
        try:
            if check():
                return
        except Exception as exc:  # readiness probes fail until the service is up
            last_error = f"{type(exc).__name__}: {exc}"
        time.sleep(1.0)
    tail = ""
    if log_file(part).exists():
        tail = "\n".join(log_file(part).read_text(errors="replace").splitlines()[-15:])
    raise StackError(
        f"{part} did not become ready within {timeout:.0f}s ({what}). "
        f"Last probe error: {last_error or 'none'}. Log: {log_file(part)}\n--- last lines ---\n{tail}")


def http_json(url: str, method: str = "GET", body: dict | None = None, timeout: float = 5.0):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json", "Accept": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read() or b"null")


# --------------------------------------------------------------------------- PostgreSQL

def _pg_owner() -> str | None:
    """PostgreSQL refuses to run as root; as root we run it as the 'postgres' OS user."""
    return "postgres" if os.geteuid() == 0 else None


def _as_pg_owner(argv: list[str]) -> list[str]:
    owner = _pg_owner()
    return ["runuser", "-u", owner, "--", *argv] if owner else argv


def _ensure_postgres_installed() -> None:
    if (PG_BIN / "pg_ctl").exists():
        return
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    if found:
        globals()["PG_BIN"] = found[-1].parent
        return
    raise StackError("postgres: server binaries not found under /usr/lib/postgresql. "
                     "Install them with `apt-get install -y postgresql` (done by .ci/run and `make setup`).")


def pg_connect(db: str = "postgres", user: str = PG_SUPERUSER, password: str = PG_SUPERPASS):
    import psycopg2
    return psycopg2.connect(host=HOST, port=PORTS["postgres"], dbname=db, user=user,
                            password=password, connect_timeout=3)


def postgres_healthy() -> bool:
    with pg_connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW wal_level")
        return cur.fetchone()[0] == "logical"


def up_postgres() -> None:
    _ensure_postgres_installed()
    data = VAR / "pg" / "data"
    sock = VAR / "pg" / "sock"
    owner = _pg_owner()
    if not (data / "PG_VERSION").exists():
        data.mkdir(parents=True, exist_ok=True)
        sock.mkdir(parents=True, exist_ok=True)
        pwfile = VAR / "pg" / "pwfile"
        pwfile.write_text(PG_SUPERPASS + "\n")
        if owner:
            pw = pwd.getpwnam(owner)
            for p in (VAR / "pg", data, sock, pwfile):
                os.chown(p, pw.pw_uid, pw.pw_gid)
        os.chmod(data, 0o700)
        subprocess.run(_as_pg_owner([str(PG_BIN / "initdb"), "-D", str(data), "-U", PG_SUPERUSER,
                                     "--pwfile", str(pwfile), "--auth=scram-sha-256", "-E", "UTF8",
                                     "--locale=C.UTF-8"]),
                       check=True, stdout=subprocess.DEVNULL)
        pwfile.unlink()
        with open(data / "postgresql.conf", "a") as conf:
            conf.write(f"""
# --- Tideline local stack ---
listen_addresses = '{HOST}'
port = {PORTS['postgres']}
unix_socket_directories = '{sock}'
wal_level = logical
max_replication_slots = 20
max_wal_senders = 20
max_connections = 200
shared_buffers = 256MB
fsync = on
synchronous_commit = on
log_min_messages = warning
""")
    LOGS.mkdir(parents=True, exist_ok=True)
    if supervised_state("postgres") != "RUNNING" and _postgres_pid():   # started by pg_ctl (older stackctl)
        down_postgres()
    # Fast shutdown (SIGINT) when stopped; PostgreSQL's own log goes to stderr, kept by supervisord.
    supervise("postgres", shlex.join([str(PG_BIN / "postgres"), "-D", str(data), "-p", str(PORTS["postgres"])]),
              user=owner, stopsignal="INT", stopwait=120)
    wait_until("postgres", postgres_healthy, 60, f"connect to {HOST}:{PORTS['postgres']} with wal_level=logical")
    _bootstrap_databases()


def _bootstrap_databases() -> None:
    conn = pg_connect()
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (PG_USER,))
        if not cur.fetchone():
            cur.execute(f"CREATE ROLE {PG_USER} LOGIN REPLICATION CREATEDB PASSWORD %s", (PG_PASS,))
        for db in DATABASES.values():
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (db,))
            if not cur.fetchone():
                cur.execute(f'CREATE DATABASE "{db}" OWNER {PG_USER}')
    conn.close()


def down_postgres() -> None:
    """Stops a PostgreSQL that runs outside supervisord (started by pg_ctl)."""
    data = VAR / "pg" / "data"
    if (data / "PG_VERSION").exists() and (PG_BIN / "pg_ctl").exists():
        subprocess.run(_as_pg_owner([str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"]),
                       capture_output=True)


# --------------------------------------------------------------------------- MariaDB

def _mariadb_owner() -> str | None:
    """mariadbd refuses to run as root unless told to; as root it runs as the 'mysql' OS user."""
    return "mysql" if os.geteuid() == 0 else None


def mariadb_connect(db: str | None = None, user: str = MARIADB_ADMIN, password: str = MARIADB_ADMIN_PASS,
                    **kw):
    import pymysql
    return pymysql.connect(host=HOST, port=PORTS["mariadb"], user=user, password=password, database=db,
                           connect_timeout=3, charset="utf8mb4", **kw)


def mariadb_healthy() -> bool:
    conn = mariadb_connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@log_bin, @@binlog_format, @@binlog_row_image")
            return cur.fetchone() == (1, "ROW", "FULL")
    finally:
        conn.close()


def _mariadb_conf(data: Path) -> Path:
    """The server's settings: what binlog capture needs (row-based, full row images, GTIDs, a
    server id) and a binlog expiry the tests shorten at run time (SET GLOBAL)."""
    mdir = VAR / "mariadb"
    conf = mdir / "my.cnf"
    conf.write_text(f"""# Generated by stack/stackctl.py — MariaDB for the local stack.
[mariadbd]
datadir = {data}
socket = {mdir / "mariadb.sock"}
pid-file = {mdir / "mariadb.pid"}
bind-address = {HOST}
port = {PORTS['mariadb']}
skip-name-resolve
server-id = 1
log-bin = {mdir / "binlog" / "mariadb-bin"}
binlog_format = ROW
binlog_row_image = FULL
binlog_row_metadata = FULL
gtid_strict_mode = ON
binlog_expire_logs_seconds = 604800
max_binlog_size = 64M
character-set-server = utf8mb4
collation-server = utf8mb4_bin
default-time-zone = '+00:00'
innodb_buffer_pool_size = 128M
max_connections = 200
""")
    return conf


def up_mariadb() -> None:
    if not (MARIADB_BIN / "mariadbd").exists():
        raise StackError("mariadb: mariadbd not found in /usr/sbin. Install it with "
                         "`apt-get install -y mariadb-server` (done by `make setup`).")
    mdir, data = VAR / "mariadb", VAR / "mariadb" / "data"
    owner = _mariadb_owner()
    fresh = not (data / "mysql").exists()
    for d in (mdir, data, mdir / "binlog"):
        d.mkdir(parents=True, exist_ok=True)
        if owner:
            pw = pwd.getpwnam(owner)
            os.chown(d, pw.pw_uid, pw.pw_gid)
    conf = _mariadb_conf(data)
    if fresh:
        res = subprocess.run(["mariadb-install-db", f"--defaults-file={conf}", f"--datadir={data}",
                              *([f"--user={owner}"] if owner else []), "--auth-root-authentication-method=socket",
                              "--skip-test-db"], capture_output=True, text=True)
        if res.returncode != 0:
            raise StackError(f"mariadb: mariadb-install-db failed: {res.stdout[-1500:]}{res.stderr[-1500:]}")
    # mariadbd logs to stderr without log-error: supervisord keeps it in stack/var/log/mariadb.log
    supervise("mariadb", shlex.join([str(MARIADB_BIN / "mariadbd"), f"--defaults-file={conf}",
                                     *([f"--user={owner}"] if owner else [])]), stopwait=120)
    wait_until("mariadb", _mariadb_socket_ready, 60, f"the server socket {mdir / 'mariadb.sock'}")
    _bootstrap_mariadb()
    wait_until("mariadb", mariadb_healthy, 30, f"log in at {HOST}:{PORTS['mariadb']} with row-based binlog")


def _mariadb_socket_ready() -> bool:
    return _mariadb_root(["SELECT 1"]).returncode == 0


def _mariadb_root(statements: list[str]) -> subprocess.CompletedProcess:
    """Runs statements as MariaDB's root over the socket (root's only way in)."""
    return subprocess.run(["mariadb", f"--socket={VAR / 'mariadb' / 'mariadb.sock'}", "-uroot", "-e",
                           ";\n".join(statements)], capture_output=True, text=True, timeout=60)


def _bootstrap_mariadb() -> None:
    """The admin, the capture user with Debezium's and the full load's privileges, the demo database."""
    res = _mariadb_root([
        f"CREATE USER IF NOT EXISTS '{MARIADB_ADMIN}'@'{HOST}' IDENTIFIED BY '{MARIADB_ADMIN_PASS}'",
        f"GRANT ALL PRIVILEGES ON *.* TO '{MARIADB_ADMIN}'@'{HOST}' WITH GRANT OPTION",
        f"CREATE USER IF NOT EXISTS '{MARIADB_USER}'@'{HOST}' IDENTIFIED BY '{MARIADB_PASS}'",
        f"GRANT SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, REPLICATION CLIENT, BINLOG MONITOR "
        f"ON *.* TO '{MARIADB_USER}'@'{HOST}'",
        f"CREATE DATABASE IF NOT EXISTS `{MARIADB_DATABASE}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
        f"GRANT ALL PRIVILEGES ON `{MARIADB_DATABASE}`.* TO '{MARIADB_USER}'@'{HOST}'",
    ])
    if res.returncode != 0:
        raise StackError(f"mariadb: creating its users and database failed: {res.stderr.strip()}")


# --------------------------------------------------------------------------- Kafka

def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    return str(Path(java_home) / "bin" / "java") if java_home else (shutil.which("java") or "java")


def _kafka_classpath() -> str:
    jars = sorted((LIB / "kafka").glob("*.jar"))
    if not jars:
        raise StackError(f"kafka: no jars in {LIB / 'kafka'}. Run `make setup` (mvn -f stack/jvm/pom.xml package).")
    return os.pathsep.join(str(j) for j in jars)


def _log4j_config(part: str) -> Path:
    path = VAR / "conf" / f"log4j2-{part}.properties"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("""status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
logger.kafka.name = kafka
logger.kafka.level = warn
logger.apache.name = org.apache.kafka
logger.apache.level = warn
logger.connectrt.name = org.apache.kafka.connect.runtime.WorkerSourceTask
logger.connectrt.level = info
logger.debezium.name = io.debezium
logger.debezium.level = info
logger.reflections.name = org.reflections
logger.reflections.level = error
""")
    return path


def _jvm(part: str, main: str, args: list[str], heap: str) -> list[str]:
    """Kafka and Connect: G1 with a periodic collection once a minute when none ran, which gives
    heap a burst (a backlog, a snapshot) took back to the OS instead of keeping it forever."""
    return [_java(), "-Xms256m", f"-Xmx{heap}", "-XX:+UseG1GC", "-XX:G1PeriodicGCInterval=60000",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={_log4j_config(part)}",
            "-cp", _kafka_classpath(), main, *args]


def _unsupervise(parts) -> None:
    """Drops programs of the other stack mode (a single broker vs three, local Spark vs a cluster)."""
    gone = [p for p in parts if (SUP_DIR / "programs" / f"{p}.conf").exists()]
    for p in gone:
        _supervisorctl("stop", p)
        (SUP_DIR / "programs" / f"{p}.conf").unlink()
    if gone:
        _supervisorctl("update")


@dataclass(frozen=True)
class KafkaCluster:
    """KRaft nodes (broker + controller each) on loopback, supervised: the stack's own Kafka (one
    node, or three with TIDELINE_KAFKA_CLUSTER=1), and the three-node cluster the durability tests
    start beside it. Node i listens on the broker/controller ports + 2·(i-1). With three nodes:
    replication 3, min.insync.replicas 2, no unclean leader election."""
    prefix: str            # supervised program name (one node), or prefix-1 .. prefix-n
    nodes: int
    broker_port: int
    controller_port: int
    home: Path
    stopwait: int = 60     # seconds a node gets to shut down cleanly

    @property
    def parts(self) -> tuple[str, ...]:
        return (self.prefix,) if self.nodes == 1 else tuple(f"{self.prefix}-{i}" for i in range(1, self.nodes + 1))

    def node_ports(self, node: int) -> tuple[int, int]:
        return self.broker_port + 2 * (node - 1), self.controller_port + 2 * (node - 1)

    def bootstrap(self) -> str:
        return ",".join(f"{HOST}:{self.node_ports(i)[0]}" for i in range(1, self.nodes + 1))

    def healthy(self) -> bool:
        import logging
        from confluent_kafka.admin import AdminClient
        quiet = logging.getLogger("stackctl.rdkafka")
        quiet.addHandler(logging.NullHandler())
        quiet.propagate = False
        admin = AdminClient({"bootstrap.servers": self.bootstrap(), "socket.timeout.ms": 3000}, logger=quiet)
        return len(admin.list_topics(timeout=3).brokers) >= self.nodes

    def properties(self, node: int, data: Path) -> str:
        n = self.nodes
        broker, controller = self.node_ports(node)
        voters = ",".join(f"{i}@{HOST}:{self.node_ports(i)[1]}" for i in range(1, n + 1))
        replicas, min_isr = min(3, n), (2 if n >= 3 else 1)
        return f"""# Generated by stack/stackctl.py — KRaft node {node} of {n} ({self.prefix}).
process.roles=broker,controller
node.id={node}
controller.quorum.voters={voters}
listeners=PLAINTEXT://{HOST}:{broker},CONTROLLER://{HOST}:{controller}
advertised.listeners=PLAINTEXT://{HOST}:{broker}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs={data}
num.partitions=1
default.replication.factor={replicas}
min.insync.replicas={min_isr}
offsets.topic.replication.factor={replicas}
transaction.state.log.replication.factor={replicas}
transaction.state.log.min.isr={min_isr}
share.coordinator.state.topic.replication.factor={replicas}
share.coordinator.state.topic.min.isr={min_isr}
unclean.leader.election.enable=false
# Topics are created on purpose (Debezium topic creation, tests), never by a typo.
auto.create.topics.enable=false
# Retention is enforced quickly so tests that shorten a topic's retention see it happen.
log.retention.hours=168
log.retention.check.interval.ms=2000
log.segment.delete.delay.ms=500
log.initial.task.delay.ms=1000
group.initial.rebalance.delay.ms=0
"""

    def start(self) -> None:
        if all(supervised_state(p) == "RUNNING" for p in self.parts):
            wait_until(self.prefix, self.healthy, 60, f"metadata from {self.bootstrap()}")
            return
        self.home.mkdir(parents=True, exist_ok=True)
        id_file = self.home / "cluster-id"
        if not id_file.exists():
            id_file.write_text(subprocess.run(
                _jvm("kafka-storage", "kafka.tools.StorageTool", ["random-uuid"], "256m"),
                capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1])
        cluster_id = id_file.read_text().strip()
        for node, part in enumerate(self.parts, start=1):
            ndir = self.home if self.nodes == 1 else self.home / part   # a single broker keeps its old place
            data, props = ndir / "data", ndir / "server.properties"
            ndir.mkdir(parents=True, exist_ok=True)
            props.write_text(self.properties(node, data))
            if not (data / "meta.properties").exists():
                fmt = subprocess.run(_jvm("kafka-storage", "kafka.tools.StorageTool",
                                          ["format", "-t", cluster_id, "-c", str(props)], "256m"),
                                     capture_output=True, text=True)
                if fmt.returncode != 0:
                    raise StackError(f"{part}: formatting {data} failed: {fmt.stdout}{fmt.stderr}")
            supervise(part, shlex.join(_jvm(part, "kafka.Kafka", [str(props)], "768m" if self.nodes == 1 else "512m")),
                      stopwait=self.stopwait)
        wait_until(self.prefix, self.healthy, 120, f"metadata from {self.bootstrap()} with {self.nodes} broker(s)")

    def stop(self) -> None:
        _unsupervise(self.parts)


KAFKA = KafkaCluster("kafka", KAFKA_BROKERS, PORTS["kafka"], PORTS["kafka_controller"], VAR / "kafka")


def kafka_healthy() -> bool:
    return KAFKA.healthy()


def up_kafka() -> None:
    _stop_unsupervised("kafka")
    _unsupervise([p for p in ("kafka", "kafka-1", "kafka-2", "kafka-3") if p not in KAFKA_PARTS])
    KAFKA.start()


# --------------------------------------------------------------------------- Kafka Connect

def connect_healthy(url: str | None = None) -> bool:
    plugins = {p.get("class") for p in http_json(f"{url or connect_url()}/connector-plugins")}
    return DEBEZIUM_CLASS in plugins and DEBEZIUM_MARIADB_CLASS in plugins


def up_connect() -> None:
    _stop_unsupervised("connect")
    start_connect_worker("connect", PORTS["connect"], KAFKA)


def start_connect_worker(part: str, port: int, kafka: KafkaCluster, stopwait: int = 60) -> str:
    """A Kafka Connect worker (distributed mode) with the Debezium plugins, on `kafka`; its
    internal topics are named after the part and replicated like the cluster. Returns its URL."""
    url = f"http://{HOST}:{port}"
    if supervised_state(part) == "RUNNING":
        wait_until(part, lambda: connect_healthy(url), 120, f"GET {url}/connector-plugins lists {DEBEZIUM_CLASS}")
        return url
    plugin_dir = LIB / "connect-plugins"
    if not all((plugin_dir / p).exists() for p in ("debezium-connector-postgres", "debezium-connector-mariadb")):
        raise StackError(f"{part}: Debezium plugin missing in {plugin_dir}. Run `make setup`.")
    props = VAR / part / "worker.properties"
    props.parent.mkdir(parents=True, exist_ok=True)
    internal = "_tideline_connect" if part == "connect" else f"_tideline_{part.replace('-', '_')}"
    replicas = min(3, kafka.nodes)
    props.write_text(f"""# Generated by stack/stackctl.py — Kafka Connect in distributed mode ({part}).
bootstrap.servers={kafka.bootstrap()}
group.id=tideline-{part}
listeners=http://{HOST}:{port}
rest.advertised.host.name={HOST}
rest.advertised.port={port}
plugin.path={plugin_dir}
plugin.discovery=hybrid_warn
key.converter=org.apache.kafka.connect.json.JsonConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
key.converter.schemas.enable=true
value.converter.schemas.enable=true
config.storage.topic={internal}_configs
offset.storage.topic={internal}_offsets
status.storage.topic={internal}_status
config.storage.replication.factor={replicas}
offset.storage.replication.factor={replicas}
status.storage.replication.factor={replicas}
offset.flush.interval.ms=1000
topic.creation.enable=true
# No-loss producer settings for every source task: acks from all in-sync replicas (the default,
# made explicit), idempotence, and retries without a count limit inside the delivery timeout —
# 10 min, so a Kafka outage that short (or too few in-sync replicas) blocks the connector rather
# than failing its task; a longer one fails the task, which ensure_connector restarts, resuming
# from the last committed source offset.
producer.acks=all
producer.enable.idempotence=true
producer.max.in.flight.requests.per.connection=5
producer.retries=2147483647
producer.delivery.timeout.ms=600000
""")
    supervise(part, shlex.join(_jvm(part, "org.apache.kafka.connect.cli.ConnectDistributed", [str(props)], "1g")),
              stopwait=stopwait)
    wait_until(part, lambda: connect_healthy(url), 180, f"GET {url}/connector-plugins lists {DEBEZIUM_CLASS}")
    return url


# --------------------------------------------------------------------------- Airflow

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
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
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
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
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
        for p in [pid, *_descendants(pid)]:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
    return len(pids)


def exec_part(part: str) -> None:
    """What supervisord runs for an Airflow component: the command with the stack's environment.
    A scheduler or triggerer starting after one that died first removes the idle workers and the
    log server the dead one left (the log server keeps the port the new one's must bind)."""
    if part in ("airflow-scheduler", "airflow-triggerer"):
        reaped = reap_orphaned_airflow_workers(idle_only=True)
        if reaped:
            print(f"[stack] removed {reaped} idle LocalExecutor worker(s) or log server(s) left by a {part[8:]} "
                  f"that died", flush=True)
    os.execvpe(str(VENV_BIN / "airflow"), [str(VENV_BIN / "airflow"), *AIRFLOW_COMMANDS[part]], full_env())


def up_airflow() -> None:
    home = VAR / "airflow"
    home.mkdir(parents=True, exist_ok=True)
    (home / "passwords.json").write_text(json.dumps({AIRFLOW_ADMIN: AIRFLOW_ADMIN_PASS}))
    env = full_env()
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
        _stop_unsupervised(part)
        # through `stackctl exec`, so each (re)start gets the stack's environment as it is now
        supervise(part, shlex.join([sys.executable, str(Path(__file__).resolve()), "exec", part]))
    wait_until("airflow-api-server", airflow_healthy, 180,
               f"GET {airflow_url()}/api/v2/monitor/health reports all components healthy")


# --------------------------------------------------------------------------- Spark

def spark_check() -> str:
    jars = spark_jars()
    names = " ".join(Path(j).name for j in jars)
    if "spark-sql-kafka" not in names or "postgresql" not in names or "mariadb-java-client" not in names:
        raise StackError(f"spark: Kafka connector or JDBC jar missing in {LIB / 'spark'}. Run `make setup`.")
    import pyspark
    if SPARK_CLUSTER:
        return spark_cluster_healthy()
    return f"local mode, pyspark {pyspark.__version__}, {len(jars)} extra jars"


def spark_master_url() -> str:
    return f"spark://{HOST}:{PORTS['spark_master']}"


def spark_master_json() -> dict:
    """The master's own JSON view: workers (state, cores, memory) and applications."""
    return http_json(f"http://{HOST}:{PORTS['spark_master_ui']}/json/")


def spark_cluster_healthy() -> str | bool:
    try:
        state = spark_master_json()
    except OSError:  # no master listening
        return False
    alive = [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]
    if len(alive) < SPARK_WORKERS:
        return False
    return (f"{spark_master_url()}: {len(alive)} workers ({sum(w['cores'] for w in alive)} cores), "
            f"{len(state.get('activeapps', []))} running application(s)")


def _spark_home() -> Path:
    import pyspark
    return Path(pyspark.__file__).parent


def _spark_daemon(main: str, args: list[str]) -> str:
    """A Spark master or worker JVM from the installed PySpark distribution. Its ports are the
    stack's or none: with spark.port.maxRetries=0 a port taken (our ports sit in Linux's ephemeral
    range, so a client socket can hold one for a while) stops the daemon and supervisord starts it
    again, instead of Spark moving to the next port, where nothing looks for it (seen in CI: the
    master's UI on 58181, its status probe on 58180 refused for 60 s)."""
    home = _spark_home()
    return shlex.join([_java(), "-Xms128m", "-Xmx512m", "-XX:+IgnoreUnrecognizedVMOptions", "-Dspark.port.maxRetries=0",
                       "-cp", f"{home / 'conf'}:{home / 'jars'}/*", main, *args])


def up_spark() -> None:
    """Local mode needs no process. The cluster: a master and SPARK_WORKERS workers, supervised.
    Workers get a clean environment (no PYTHONPATH): executors import Tideline only from the
    library each job ships (--py-files), never from this checkout. Either way the drivers start
    from this host, with its class archive."""
    build_class_archive()
    if not SPARK_CLUSTER:
        if supervisord_running():
            _unsupervise(SPARK_PARTS)
        spark_check()
        return
    start_spark_cluster()


CLASS_ARCHIVE = LIB / "spark-driver-classes.jsa"


def _driver_classpath() -> list[Path]:
    """Tideline's jars for the drivers' class path (stack/jvm/hadoop-nio; see
    tideline.spark_session.driver_conf)."""
    return sorted((LIB / "driver").glob("*.jar"))


def _class_archive_stamp() -> str:
    """What the archive was recorded against: a JVM only maps an archive made by the same JVM
    build from the same class path (pyspark's jars, and Tideline's driver jars, which come first
    on it and are checked by size and time: a rebuilt one needs a new archive)."""
    java = subprocess.run([_java(), "-version"], capture_output=True, text=True).stderr.strip()
    return json.dumps({"java": java, "jars": sorted(p.name for p in (_spark_home() / "jars").glob("*.jar")),
                       "driver": [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in _driver_classpath()]})


def build_class_archive() -> None:
    """Records the Spark driver's class archive (stack/spark_class_archive.py says why) when it is
    missing or was made for another JVM or pyspark; the jobs use it when it exists
    (tideline.spark_session.driver_java_options)."""
    stamp_file = CLASS_ARCHIVE.with_suffix(".stamp")
    stamp = _class_archive_stamp()
    if CLASS_ARCHIVE.exists() and stamp_file.exists() and stamp_file.read_text() == stamp:
        return
    print("[stack] spark     recording the driver's class archive (once, ~20 s) ...", flush=True)
    partial = CLASS_ARCHIVE.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    driver = ":".join(map(str, _driver_classpath()))   # the class path the drivers start with
    res = subprocess.run([str(VENV_BIN / "spark-submit"), "--master", "local[1]", "--conf",
                          f"spark.driver.extraJavaOptions=-XX:ArchiveClassesAtExit={partial}",
                          *(["--conf", f"spark.driver.extraClassPath={driver}"] if driver else []),
                          str(STACK / "spark_class_archive.py")],
                         env={**os.environ, **environment()}, capture_output=True, text=True, timeout=300)
    if res.returncode != 0 or not partial.exists():
        raise StackError(f"spark: recording the driver's class archive failed (exit {res.returncode}):\n"
                         f"{(res.stdout + res.stderr)[-3000:]}")
    partial.replace(CLASS_ARCHIVE)
    stamp_file.write_text(stamp)


def start_spark_cluster() -> None:
    """The standalone master and workers, supervised (also what the cluster tests start)."""
    # SPARK_SCALA_VERSION: a worker builds each executor's command with Spark's launcher, which
    # asks for it when it does not run from a release tarball (a PySpark install is not one)
    scala = next(_spark_home().glob("jars/spark-core_*.jar")).name.split("_")[1].split("-")[0]
    spark_env = {"SPARK_HOME": str(_spark_home()), "SPARK_SCALA_VERSION": scala, "PYTHONPATH": "",
                 "SPARK_LOCAL_IP": HOST, "JAVA_HOME": str(Path(_java()).resolve().parents[1])}
    supervise("spark-master", _spark_daemon("org.apache.spark.deploy.master.Master", [
        "--host", HOST, "--port", str(PORTS["spark_master"]), "--webui-port", str(PORTS["spark_master_ui"])]),
        environment=spark_env)
    wait_until("spark-master", lambda: "workers" in spark_master_json(), 60,
               f"the master's status at http://{HOST}:{PORTS['spark_master_ui']}/json/")
    for i in range(1, SPARK_WORKERS + 1):
        work = VAR / "spark" / f"worker-{i}"
        work.mkdir(parents=True, exist_ok=True)
        supervise(f"spark-worker-{i}", _spark_daemon("org.apache.spark.deploy.worker.Worker", [
            "--host", HOST, "--cores", "1", "--memory", SPARK_WORKER_MEMORY, "--work-dir", str(work),
            "--webui-port", str(PORTS["spark_worker_ui"] + i - 1), spark_master_url()]), environment=spark_env)
    wait_until("spark", spark_cluster_healthy, 90, f"{SPARK_WORKERS} workers registered with {spark_master_url()}")


def stop_spark_cluster() -> None:
    _unsupervise(SPARK_PARTS)


# --------------------------------------------------------------------------- commands

@dataclass
class Part:
    name: str
    start: Callable[[], None]
    healthy: Callable[[], object]
    where: Callable[[], str]


PARTS = [
    Part("postgres", up_postgres, postgres_healthy, lambda: f"{HOST}:{PORTS['postgres']}"),
    Part("mariadb", up_mariadb, mariadb_healthy, lambda: f"{HOST}:{PORTS['mariadb']}"),
    Part("kafka", up_kafka, kafka_healthy, kafka_bootstrap),
    Part("connect", up_connect, connect_healthy, connect_url),
    Part("airflow", up_airflow, airflow_healthy, airflow_url),
    Part("spark", up_spark, spark_check,
         lambda: spark_master_url() if SPARK_CLUSTER else "in-process (pyspark)"),
]


def cmd_up(only: list[str]) -> int:
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
        res = _supervisorctl("stop", "all")   # reverse start order: Airflow, Connect, Kafka, PostgreSQL
        for line in res.stdout.splitlines():
            print(f"[stack] {line.strip()}")
        _supervisorctl("shutdown")
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
    if _postgres_pid():
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


def _postgres_pid() -> int | None:
    pidfile = VAR / "pg" / "data" / "postmaster.pid"
    try:
        pid = int(pidfile.read_text().splitlines()[0])
        return pid if _pid_alive(pid) else None
    except (OSError, ValueError, IndexError):
        return None


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
        pids = {"postgres": [_postgres_pid()], "mariadb": [supervised_pid("mariadb")], "kafka": [supervised_pid(p) for p in KAFKA_PARTS],
                "connect": [supervised_pid("connect")],
                "airflow": [supervised_pid(p) for p in AIRFLOW_PARTS],
                "spark": [supervised_pid(p) for p in SPARK_PARTS] if SPARK_CLUSTER else []}.get(part.name, [])
        mb = sum(_memory_mb(p) for p in pids if p)
        total_mb += mb
        mem = f"{mb:7.0f} MB" if pids else "      - "
        where = {"airflow": log_file("airflow-scheduler"), "kafka": log_file(KAFKA_PARTS[0]),
                 "spark": log_file("spark-master") if SPARK_CLUSTER else "the Airflow task logs"}.get(part.name,
                                                                                                  log_file(part.name))
        print(f"{part.name:9s} {state:9s} {mem}  {detail}   log: {where}")
        for sp in {"airflow": AIRFLOW_PARTS, "spark": SPARK_PARTS, "kafka": KAFKA_PARTS}.get(part.name, (part.name,)):
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
    if state == "RUNNING" and not r.get("count"):
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
        if cmd == "env":
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
