"""What every part of the local stack shares: where it lives, its ports and throwaway
credentials, its two modes (one Kafka broker or three; local Spark or a cluster), waiting for a
part to be ready, and the processes it runs."""
from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
import urllib.request
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
STACK = ROOT / "stack"
STACKCTL = STACK / "stackctl.py"   # what supervisord runs for the Airflow parts and its event listener


def stack_var(environ) -> Path:
    """The stack data folder an environment names: TIDELINE_STACK_VAR (set but empty: the default,
    never the cwd), else stack/var."""
    return Path(environ.get("TIDELINE_STACK_VAR") or STACK / "var")


VAR = stack_var(os.environ)
LIB = STACK / "lib"
LOGS = VAR / "log"
RUN = VAR / "run"
VENV_BIN = Path(sys.executable).parent

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
    "s3": int(os.environ.get("TIDELINE_S3_PORT", "59333")),                     # the object store (services.lake)
    "lake_catalog": int(os.environ.get("TIDELINE_LAKE_CATALOG_PORT", "58282")),  # the Iceberg REST catalog
}
# The stack's Spark: local mode inside each job (default), or a standalone cluster of a master and
# SPARK_WORKERS workers (one core each) that every job is submitted to: TIDELINE_SPARK_CLUSTER=1.
SPARK_CLUSTER = os.environ.get("TIDELINE_SPARK_CLUSTER", "").lower() in ("1", "true", "yes", "on")
SPARK_WORKERS = 2
SPARK_WORKER_MEMORY = os.environ.get("TIDELINE_SPARK_WORKER_MEMORY", "2g")
# Kafka: one broker (default), or three KRaft nodes (broker + controller each) with replication 3,
# min.insync.replicas 2 and no unclean leader election: TIDELINE_KAFKA_CLUSTER=1. Node i listens
# on the broker/controller ports + 2·(i-1).
KAFKA_CLUSTER_NODES = 3
# The cluster test starts a second three-node Kafka and a Connect worker beside the stack
# (tests/integration/test_cluster.py), on the stack's Kafka and Connect ports + these offsets.
SIDE_KAFKA_OFFSET, SIDE_CONNECT_OFFSET = 100, 10
# The secure stack test_secure starts beside the shared one, in its own data folder: its ports
# (the environment of its stackctl). Reserved with the stack's, as the cluster test's are.
SECURE_TEST_PORTS = {"TIDELINE_PG_PORT": 56432, "TIDELINE_MARIADB_PORT": 54306, "TIDELINE_KAFKA_PORT": 59192,
                     "TIDELINE_KAFKA_CONTROLLER_PORT": 59193, "TIDELINE_CONNECT_PORT": 58183}
KAFKA_BROKERS = KAFKA_CLUSTER_NODES if os.environ.get("TIDELINE_KAFKA_CLUSTER", "").lower() in ("1", "true", "yes", "on") else 1
HOST = "127.0.0.1"
# Secure mode (TIDELINE_STACK_SECURE=1), as a production DBA and Kafka operator would run it: the
# stack's own CA (services.tls), PostgreSQL over TLS only (hostssl, clients verify-full), Kafka
# over SASL_SSL only (SCRAM-SHA-512) for Connect and every Tideline client.
SECURE = os.environ.get("TIDELINE_STACK_SECURE", "").lower() in ("1", "true", "yes", "on")
# The test stack (TIDELINE_STACK_LEAN_JVM=1, what the integration tests start): Kafka's and
# Connect's JVMs compile with the client compiler only. Measured over the suite on 2 cores, where
# it is CPU-bound: compiling was most of what those JVMs did (jcmd's java.ci.totalTime in their
# first 11 minutes: Connect 172 s against 203 CPU-s in all, Kafka 93 s against 92). The tests
# check what they do, not how fast; the demo and the benchmarks (the Debezium JDBC sink runs on
# this Connect) get the default, and `make up` restarts a lean part with it.
LEAN_JVM = os.environ.get("TIDELINE_STACK_LEAN_JVM", "").lower() in ("1", "true", "yes", "on")
KAFKA_ADMIN, KAFKA_ADMIN_PASS = "admin", "kafka-admin"      # the brokers' login to each other (secure mode)
KAFKA_USER, KAFKA_PASS = "tideline", "tl-kafka-pw-4c1e"     # Connect's and Tideline's (secure mode)
# Throwaway credentials of the local stack only; production reads Airflow connections.
PG_SUPERUSER, PG_SUPERPASS = "postgres", "postgres"
# Tideline's own logins are words found nowhere else, so a whole test run's logs can be searched
# for them (tests/integration/test_log_hygiene.py): none may ever be printed.
# `tideline` is the databases' owner and the demo application's role (it creates the source
# tables, the tests' fixtures use it); Tideline itself logs in with least-privileged roles, as a
# user's DBA would give it (README "Security"): tideline_cdc reads the source (REPLICATION, SELECT,
# and the DBA's tideline_dba functions for its publication), tideline_sync owns what it writes in
# the target and the Iceberg catalog's database. `tideline` is a member of tideline_sync, so it
# reads and cleans up what Tideline wrote.
PG_USER, PG_PASS = "tideline", "tl-pg-pw-8d2f"
PG_CDC_USER, PG_CDC_PASS = "tideline_cdc", "tl-cdc-pw-31a9"
PG_SYNC_USER, PG_SYNC_PASS = "tideline_sync", "tl-sync-pw-7e60"
DATABASES = {"source": "tideline_source", "target": "tideline_target", "airflow": "airflow",
             "lake": "tideline_lake",   # the Iceberg JDBC catalog (and an Iceberg pipeline's state)
             "lake_catalog": "tideline_lake_catalog"}   # the REST catalog server's own (services.lake)
AIRFLOW_ADMIN, AIRFLOW_ADMIN_PASS = "admin", "admin"
# a user of each of Airflow's roles besides admin (simple auth manager): username -> (role, password)
AIRFLOW_USERS = {AIRFLOW_ADMIN: ("admin", AIRFLOW_ADMIN_PASS), "viewer": ("viewer", "viewer"), "operator": ("op", "op")}
DEBEZIUM_CLASS = "io.debezium.connector.postgresql.PostgresConnector"
DEBEZIUM_MARIADB_CLASS = "io.debezium.connector.mariadb.MariaDbConnector"
# MariaDB: the demo shop's database, a capture user with exactly the privileges Debezium and
# the full load need, and an admin for setting up (throwaway, local stack only).
MARIADB_DATABASE = "shop"
MARIADB_USER, MARIADB_PASS = "tideline", "tl-maria-pw-5b7a"
MARIADB_ADMIN, MARIADB_ADMIN_PASS = "admin", "admin"
# The object store's access key and secret (services.lake), what an Airflow `aws` connection holds
S3_ACCESS_KEY, S3_SECRET_KEY = "tideline-s3", "tl-s3-secret-2c9e"
S3_BUCKET, S3_REGION = "lake", "us-east-1"
# The REST catalog's one OAuth2 client (services.lake): Tideline's catalog connection logs in with it
LAKE_CLIENT_ID, LAKE_CLIENT_SECRET = "tideline-lake", "tl-lake-secret-5f1a"


class StackError(RuntimeError):
    """A part of the stack failed to start or is unhealthy; the message names part and log."""


OUTSIDE_HOMES = Path("/var/lib/tideline")


def server_home(name: str, owner: str | None) -> Path:
    """VAR/<name>: where a server that runs as its own OS user (PostgreSQL, MariaDB under root)
    keeps its data. A clone in a folder that user cannot enter (root's home is 0700, so
    `cd ~ && git clone … && make demo`) failed at initdb with "Permission denied"; there the home
    is a link to /var/lib/tideline/<clone>/<name>, which it can enter (`make clean` removes both).
    Returns the resolved path: the server itself must never be given one through the link."""
    import hashlib
    import pwd
    import subprocess
    home = VAR / name
    VAR.mkdir(parents=True, exist_ok=True)
    if not owner or home.is_symlink() or subprocess.run(
            ["runuser", "-u", owner, "--", "test", "-x", str(VAR)], capture_output=True).returncode == 0:
        return home.resolve()
    # keyed by the stack's own VAR, not the clone: test_secure's second stack (VAR/secure) in the
    # same clone took the first one's outside home for "left by a removed clone" and removed it,
    # PostgreSQL's data under the running stack (a suite run from a clone in /root)
    outside = OUTSIDE_HOMES / hashlib.sha1(str(VAR.resolve()).encode()).hexdigest()[:12] / name
    outside.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(outside.parent, 0o755)
    if outside.exists():   # no link here to it: left by a clone at this path since removed, never ours
        print(f"[stack] {name:<9} removing {outside}: left by a removed clone at {ROOT}, not this one's",
              flush=True)
        shutil.rmtree(outside)
    if home.exists():   # made before it moved: the folder goes along
        shutil.move(str(home), str(outside))
    outside.mkdir(exist_ok=True)
    pw = pwd.getpwnam(owner)
    os.chown(outside, pw.pw_uid, pw.pw_gid)
    home.symlink_to(outside, target_is_directory=True)
    return outside


def log_file(part: str) -> Path:
    return LOGS / f"{part}.log"


def pid_file(part: str) -> Path:
    return RUN / f"{part}.pid"


def pid_alive(pid: int) -> bool:
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


def parent_pid(pid: int) -> int:
    """The parent of pid, from /proc (OSError when pid is gone). The command's name may hold
    spaces and parentheses: the fields follow its last ')'."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def kill_all(pids) -> None:
    """kill -9 each, the ones already gone skipped."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def running_pid(part: str) -> int | None:
    path = pid_file(part)
    if not path.exists():
        return None
    try:
        pid = int(path.read_text().strip())
    except ValueError:
        return None
    return pid if pid_alive(pid) else None


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
        while time.time() < deadline and pid_alive(pid):
            time.sleep(0.2)
        if not pid_alive(pid):
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


def java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    return str(Path(java_home) / "bin" / "java") if java_home else (shutil.which("java") or "java")


