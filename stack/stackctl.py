#!/usr/bin/env python3
"""Local stack of real services for Tideline, run as plain processes on loopback.

`stackctl.py up|down|status|env|psql` — PostgreSQL (own cluster, wal_level=logical),
Kafka (single KRaft node), Kafka Connect (distributed, Debezium plugin), Airflow 3
(LocalExecutor, PostgreSQL metadata DB) and Spark in local mode (pyspark + jars).
Everything lives under stack/var (data, logs, pids); ports come from TIDELINE_*_PORT.
`up` is idempotent: a part that is already healthy is left alone.
"""
from __future__ import annotations

import json
import os
import pwd
import secrets
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
    "kafka": int(os.environ.get("TIDELINE_KAFKA_PORT", "59092")),
    "kafka_controller": int(os.environ.get("TIDELINE_KAFKA_CONTROLLER_PORT", "59093")),
    "connect": int(os.environ.get("TIDELINE_CONNECT_PORT", "58083")),
    "airflow": int(os.environ.get("TIDELINE_AIRFLOW_PORT", "58080")),
}
HOST = "127.0.0.1"
# Throwaway credentials of the local stack only; production reads Airflow connections.
PG_SUPERUSER, PG_SUPERPASS = "postgres", "postgres"
PG_USER, PG_PASS = "tideline", "tideline"
DATABASES = {"source": "tideline_source", "target": "tideline_target", "airflow": "airflow"}
AIRFLOW_ADMIN, AIRFLOW_ADMIN_PASS = "admin", "admin"
DEBEZIUM_CLASS = "io.debezium.connector.postgresql.PostgresConnector"


class StackError(RuntimeError):
    """A part of the stack failed to start or is unhealthy; the message names part and log."""


def log_file(part: str) -> Path:
    return LOGS / f"{part}.log"


def pid_file(part: str) -> Path:
    return RUN / f"{part}.pid"


# --------------------------------------------------------------------------- environment

def pg_url(db: str, user: str = PG_USER, password: str = PG_PASS, scheme: str = "postgresql") -> str:
    return f"{scheme}://{user}:{password}@{HOST}:{PORTS['postgres']}/{db}"


def kafka_bootstrap() -> str:
    return f"{HOST}:{PORTS['kafka']}"


def connect_url() -> str:
    return f"http://{HOST}:{PORTS['connect']}"


def airflow_url() -> str:
    return f"http://{HOST}:{PORTS['airflow']}"


def spark_jars() -> list[str]:
    return sorted(str(p) for p in (LIB / "spark").glob("*.jar"))


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
        "PYTHONPATH": os.pathsep.join([str(ROOT / "plugins"), str(ROOT)]),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": HOST,  # Spark binds to loopback only
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        # Airflow connections (the only place credentials come from).
        "AIRFLOW_CONN_TIDELINE_SOURCE": pg_url(DATABASES["source"]),
        "AIRFLOW_CONN_TIDELINE_TARGET": pg_url(DATABASES["target"]),
        "AIRFLOW_CONN_TIDELINE_KAFKA": json.dumps(
            {"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap()}}),
        "AIRFLOW_CONN_TIDELINE_CONNECT": json.dumps(
            {"conn_type": "http", "host": HOST, "port": PORTS["connect"], "schema": "http"}),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(
            {"conn_type": "spark", "host": "local[2]",
             "extra": {"spark-binary": "spark-submit", "deploy-mode": "client"}}),
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
        "AIRFLOW__API__HOST": HOST,
        "AIRFLOW__API__PORT": str(PORTS["airflow"]),
        "AIRFLOW__API__BASE_URL": airflow_url(),
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
        "AIRFLOW__SCHEDULER__STANDALONE_DAG_PROCESSOR": "True",
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
    status = subprocess.run(_as_pg_owner([str(PG_BIN / "pg_ctl"), "-D", str(data), "status"]),
                            capture_output=True, text=True)
    if status.returncode != 0:
        logpath = VAR / "pg" / "postgres.log"
        if owner and not logpath.exists():
            logpath.touch()
            pw = pwd.getpwnam(owner)
            os.chown(logpath, pw.pw_uid, pw.pw_gid)
        subprocess.run(_as_pg_owner([str(PG_BIN / "pg_ctl"), "-D", str(data), "-l", str(logpath),
                                     "-o", f"-p {PORTS['postgres']}", "-w", "-t", "60", "start"]),
                       check=False, stdout=subprocess.DEVNULL)
        _link_log("postgres", logpath)
    wait_until("postgres", postgres_healthy, 60, f"connect to {HOST}:{PORTS['postgres']} with wal_level=logical")
    _bootstrap_databases()


def _link_log(part: str, real: Path) -> None:
    link = log_file(part)
    if not link.exists() and not link.is_symlink():
        link.symlink_to(real)


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
    data = VAR / "pg" / "data"
    if (data / "PG_VERSION").exists() and (PG_BIN / "pg_ctl").exists():
        subprocess.run(_as_pg_owner([str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"]),
                       capture_output=True)


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
    return [_java(), "-Xms256m", f"-Xmx{heap}", "-XX:+UseG1GC", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={_log4j_config(part)}",
            "-cp", _kafka_classpath(), main, *args]


def kafka_healthy() -> bool:
    import logging
    from confluent_kafka.admin import AdminClient
    quiet = logging.getLogger("stackctl.rdkafka")
    quiet.addHandler(logging.NullHandler())
    quiet.propagate = False
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap(), "socket.timeout.ms": 3000}, logger=quiet)
    md = admin.list_topics(timeout=3)
    return len(md.brokers) >= 1


def up_kafka() -> None:
    if running_pid("kafka"):
        wait_until("kafka", kafka_healthy, 60, f"metadata from {kafka_bootstrap()}")
        return
    kdir = VAR / "kafka"
    data = kdir / "data"
    props = kdir / "server.properties"
    kdir.mkdir(parents=True, exist_ok=True)
    props.write_text(f"""# Generated by stack/stackctl.py — single-node KRaft for the local stack.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@{HOST}:{PORTS['kafka_controller']}
listeners=PLAINTEXT://{HOST}:{PORTS['kafka']},CONTROLLER://{HOST}:{PORTS['kafka_controller']}
advertised.listeners=PLAINTEXT://{HOST}:{PORTS['kafka']}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs={data}
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
unclean.leader.election.enable=false
# Topics are created on purpose (Debezium topic creation, tests), never by a typo.
auto.create.topics.enable=false
# Retention is enforced quickly so tests that shorten a topic's retention see it happen.
log.retention.hours=168
log.retention.check.interval.ms=2000
log.segment.delete.delay.ms=500
log.initial.task.delay.ms=1000
group.initial.rebalance.delay.ms=0
""")
    if not (data / "meta.properties").exists():
        cluster_id = subprocess.run(_jvm("kafka-storage", "kafka.tools.StorageTool", ["random-uuid"], "256m"),
                                    capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
        fmt = subprocess.run(_jvm("kafka-storage", "kafka.tools.StorageTool",
                                  ["format", "-t", cluster_id, "-c", str(props)], "256m"),
                             capture_output=True, text=True)
        if fmt.returncode != 0:
            raise StackError(f"kafka: formatting {data} failed: {fmt.stdout}{fmt.stderr}")
    spawn("kafka", _jvm("kafka", "kafka.Kafka", [str(props)], "768m"))
    wait_until("kafka", kafka_healthy, 90, f"metadata from {kafka_bootstrap()}")


# --------------------------------------------------------------------------- Kafka Connect

def connect_healthy() -> bool:
    plugins = http_json(f"{connect_url()}/connector-plugins")
    return any(p.get("class") == DEBEZIUM_CLASS for p in plugins)


def up_connect() -> None:
    if running_pid("connect"):
        wait_until("connect", connect_healthy, 120, f"GET {connect_url()}/connector-plugins lists {DEBEZIUM_CLASS}")
        return
    plugin_dir = LIB / "connect-plugins"
    if not (plugin_dir / "debezium-connector-postgres").exists():
        raise StackError(f"connect: Debezium plugin missing in {plugin_dir}. Run `make setup`.")
    props = VAR / "connect" / "worker.properties"
    props.parent.mkdir(parents=True, exist_ok=True)
    props.write_text(f"""# Generated by stack/stackctl.py — Kafka Connect in distributed mode.
bootstrap.servers={kafka_bootstrap()}
group.id=tideline-connect
listeners=http://{HOST}:{PORTS['connect']}
rest.advertised.host.name={HOST}
rest.advertised.port={PORTS['connect']}
plugin.path={plugin_dir}
plugin.discovery=hybrid_warn
key.converter=org.apache.kafka.connect.json.JsonConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
key.converter.schemas.enable=true
value.converter.schemas.enable=true
config.storage.topic=_tideline_connect_configs
offset.storage.topic=_tideline_connect_offsets
status.storage.topic=_tideline_connect_status
config.storage.replication.factor=1
offset.storage.replication.factor=1
status.storage.replication.factor=1
offset.flush.interval.ms=1000
topic.creation.enable=true
# No-loss producer settings for every source task (acks=all is the default; made explicit).
producer.acks=all
producer.enable.idempotence=true
producer.max.in.flight.requests.per.connection=5
""")
    spawn("connect", _jvm("connect", "org.apache.kafka.connect.cli.ConnectDistributed", [str(props)], "1g"))
    wait_until("connect", connect_healthy, 180, f"GET {connect_url()}/connector-plugins lists {DEBEZIUM_CLASS}")


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
    commands = {
        "airflow-api-server": ["api-server", "--port", str(PORTS["airflow"]), "--host", HOST, "--workers", "1"],
        "airflow-scheduler": ["scheduler"],
        "airflow-dag-processor": ["dag-processor"],
        "airflow-triggerer": ["triggerer"],
    }
    for part, args in commands.items():
        if not running_pid(part):
            spawn(part, [str(VENV_BIN / "airflow"), *args], env=env)
    wait_until("airflow-api-server", airflow_healthy, 180,
               f"GET {airflow_url()}/api/v2/monitor/health reports all components healthy")


# --------------------------------------------------------------------------- Spark

def spark_check() -> str:
    jars = spark_jars()
    names = " ".join(Path(j).name for j in jars)
    if "spark-sql-kafka" not in names or "postgresql" not in names:
        raise StackError(f"spark: Kafka connector or JDBC jar missing in {LIB / 'spark'}. Run `make setup`.")
    import pyspark
    return f"local mode, pyspark {pyspark.__version__}, {len(jars)} extra jars"


# --------------------------------------------------------------------------- commands

@dataclass
class Part:
    name: str
    start: Callable[[], None]
    healthy: Callable[[], object]
    where: Callable[[], str]


PARTS = [
    Part("postgres", up_postgres, postgres_healthy, lambda: f"{HOST}:{PORTS['postgres']}"),
    Part("kafka", up_kafka, kafka_healthy, kafka_bootstrap),
    Part("connect", up_connect, connect_healthy, connect_url),
    Part("airflow", up_airflow, airflow_healthy, airflow_url),
    Part("spark", spark_check, spark_check, lambda: "in-process (pyspark)"),
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
    for part in ("workload", *reversed(AIRFLOW_PARTS)):
        if stop(part):
            print(f"[stack] stopped {part}")
    for part in ("connect", "kafka"):
        if stop(part, timeout=60):
            print(f"[stack] stopped {part}")
    down_postgres()
    print("[stack] stopped postgres")
    return 0


def _rss_mb(pid: int) -> float:
    """Resident memory of a process and its children, in MB."""
    total = 0
    try:
        children = subprocess.run(["pgrep", "-g", str(os.getpgid(pid))], capture_output=True, text=True).stdout.split()
    except ProcessLookupError:
        return 0.0
    for p in set(children + [str(pid)]):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
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
        pids = {"postgres": [_postgres_pid()], "kafka": [running_pid("kafka")],
                "connect": [running_pid("connect")],
                "airflow": [running_pid(p) for p in AIRFLOW_PARTS]}.get(part.name, [])
        mb = sum(_rss_mb(p) for p in pids if p)
        total_mb += mb
        mem = f"{mb:7.0f} MB" if pids else "      - "
        where = {"airflow": log_file("airflow-scheduler"), "spark": "the Airflow task logs"}.get(part.name,
                                                                                                  log_file(part.name))
        print(f"{part.name:9s} {state:9s} {mem}  {detail}   log: {where}")
    print(f"{'total':9s} {'':9s} {total_mb:7.0f} MB")
    return 1 if bad else 0


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
        if cmd == "env":
            for k, v in environment().items():
                print(f"export {k}={json.dumps(v) if not v.startswith('{') else repr(v)}")
            return 0
        if cmd == "psql":
            db = DATABASES.get(rest[0], rest[0]) if rest else DATABASES["source"]
            os.execvpe("psql", ["psql", pg_url(db)] + rest[1:], full_env())
    except StackError as exc:
        print(f"[stack] ERROR: {exc}", file=sys.stderr)
        return 2
    print(f"unknown command {cmd!r}; use up | down | status | env | psql [source|target|airflow]", file=sys.stderr)
    return 64


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
