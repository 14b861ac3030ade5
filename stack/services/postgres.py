"""PostgreSQL for the local stack: its own cluster (wal_level=logical) holding the demo source, the
target and Airflow's metadata database."""
from __future__ import annotations

import os
import pwd
import shlex
import subprocess
from pathlib import Path

from services.base import (DATABASES, HOST, LOGS, PG_CDC_PASS, PG_CDC_USER, PG_PASS, PG_SUPERPASS, PG_SUPERUSER,
                           PG_SYNC_PASS, PG_SYNC_USER, PG_USER, PORTS, ROOT, SECURE, VAR, StackError, pid_alive,
                           server_home, wait_until)
from services.supervisor import supervisorctl, supervise, supervised_state
from services.tls import client_tls, server_copies

PG_BIN = Path(os.environ.get("TIDELINE_PG_BIN", "/usr/lib/postgresql/15/bin"))


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
                            password=password, connect_timeout=3, **client_tls())


def postgres_healthy() -> bool:
    with pg_connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW wal_level")
        return cur.fetchone()[0] == "logical"


def up_postgres() -> None:
    _ensure_postgres_installed()
    owner = _pg_owner()
    home = server_home("pg", owner)
    data, sock = home / "data", home / "sock"
    if not (data / "PG_VERSION").exists():
        data.mkdir(parents=True, exist_ok=True)
        sock.mkdir(parents=True, exist_ok=True)
        pwfile = home / "pwfile"
        pwfile.write_text(PG_SUPERPASS + "\n")
        if owner:
            pw = pwd.getpwnam(owner)
            for p in (home, data, sock, pwfile):
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
    changed = _write_mode(data, owner)
    LOGS.mkdir(parents=True, exist_ok=True)
    was_running = supervised_state("postgres") == "RUNNING"
    if supervised_state("postgres") != "RUNNING" and postgres_pid():   # started by pg_ctl (older stackctl)
        down_postgres()
    # Fast shutdown (SIGINT) when stopped; PostgreSQL's own log goes to stderr, kept by supervisord.
    supervise("postgres", shlex.join([str(PG_BIN / "postgres"), "-D", str(data), "-p", str(PORTS["postgres"])]),
              user=owner, stopsignal="INT", stopwait=120)
    if changed and was_running:   # switched between plain and secure mode
        supervisorctl("restart", "postgres")
    wait_until("postgres", postgres_healthy, 60, f"connect to {HOST}:{PORTS['postgres']} with wal_level=logical")
    _bootstrap_databases()


MODE_CONF = "tideline_mode.conf"


def _write_mode(data: Path, owner: str | None) -> bool:
    """The settings of the stack's mode — TLS and who may connect how — rewritten at each `up`:
    secure mode serves TLS with the stack's certificate and accepts TCP clients over TLS only
    (hostssl); the plain mode over TCP without TLS. Unix-socket logins stay for the stack's own
    administration. True when they changed (the server must restart to take them)."""
    conf = data / "postgresql.conf"
    if f"include_if_exists = '{MODE_CONF}'" not in conf.read_text():
        with open(conf, "a") as f:
            f.write(f"include_if_exists = '{MODE_CONF}'\n")
    if SECURE:
        certs = server_copies(owner, data.parent)
        mode = f"ssl = on\nssl_cert_file = '{certs.cert}'\nssl_key_file = '{certs.key}'\nssl_min_protocol_version = 'TLSv1.2'\n"
    else:
        mode = "ssl = off\n"
    host = "hostssl" if SECURE else "host"
    hba = ("# Generated by stack/stackctl.py (" + ("secure mode: TCP over TLS only" if SECURE else "plain mode") + ")\n"
           "local   all          all                 scram-sha-256\n"
           "local   replication  all                 scram-sha-256\n"
           f"{host:7s} all          all    127.0.0.1/32 scram-sha-256\n"
           f"{host:7s} replication  all    127.0.0.1/32 scram-sha-256\n"
           f"{host:7s} all          all    ::1/128      scram-sha-256\n"
           f"{host:7s} replication  all    ::1/128      scram-sha-256\n")
    changed = False
    for path, text in ((data / MODE_CONF, mode), (data / "pg_hba.conf", hba)):
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            if owner:
                pw = pwd.getpwnam(owner)
                os.chown(path, pw.pw_uid, pw.pw_gid)
            changed = True
    return changed


def _bootstrap_databases() -> None:
    """The owner role and the databases, then Tideline's least-privileged roles (_grant_roles)."""
    conn = pg_connect()
    conn.autocommit = True
    with conn.cursor() as cur:
        for user, password, attrs in ((PG_USER, PG_PASS, "LOGIN REPLICATION CREATEDB"),
                                      (PG_CDC_USER, PG_CDC_PASS, "LOGIN REPLICATION"),
                                      (PG_SYNC_USER, PG_SYNC_PASS, "LOGIN")):
            cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (user,))
            if not cur.fetchone():
                cur.execute(f"CREATE ROLE {user} {attrs} PASSWORD %s", (password,))
            else:   # a stack made when the password was another
                cur.execute(f"ALTER ROLE {user} PASSWORD %s", (password,))
        cur.execute(f"GRANT {PG_SYNC_USER} TO {PG_USER}")
        for db in DATABASES.values():
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (db,))
            if not cur.fetchone():
                cur.execute(f'CREATE DATABASE "{db}" OWNER {PG_USER}')
    conn.close()
    _grant_roles()


# What a DBA grants Tideline's roles (README "Security"), and for a stack made before these roles
# existed, what its owner role had made in the target handed to tideline_sync.
_SOURCE_GRANTS = f"""
ALTER DEFAULT PRIVILEGES FOR ROLE {PG_USER} GRANT USAGE ON SCHEMAS TO {PG_CDC_USER};
ALTER DEFAULT PRIVILEGES FOR ROLE {PG_USER} GRANT SELECT ON TABLES TO {PG_CDC_USER};
DO $$ DECLARE s text; BEGIN
  FOR s IN SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%' AND nspname NOT IN
           ('information_schema', 'tideline_dba') LOOP
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO {PG_CDC_USER}', s);
    EXECUTE format('GRANT SELECT ON ALL TABLES IN SCHEMA %I TO {PG_CDC_USER}', s);
  END LOOP;
END $$;
GRANT USAGE ON SCHEMA tideline_dba TO {PG_CDC_USER};
GRANT EXECUTE ON FUNCTION tideline_dba.publish(text, text[]), tideline_dba.heartbeat_table(text, text)
  TO {PG_CDC_USER};
"""
_TARGET_GRANTS = f"""
GRANT CREATE ON SCHEMA public TO {PG_SYNC_USER};
DO $$ DECLARE r record; BEGIN
  FOR r IN SELECT nspname FROM pg_namespace WHERE nspowner = '{PG_USER}'::regrole AND nspname <> 'public' LOOP
    EXECUTE format('ALTER SCHEMA %I OWNER TO {PG_SYNC_USER}', r.nspname);
  END LOOP;
  FOR r IN SELECT c.oid::regclass AS rel, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE c.relowner = '{PG_USER}'::regrole AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f', 'c')
             AND n.nspname NOT LIKE 'pg\\_%' AND n.nspname <> 'information_schema'
             AND NOT (c.relkind = 'S' AND EXISTS (SELECT FROM pg_depend d WHERE d.classid = 'pg_class'::regclass
                      AND d.objid = c.oid AND d.deptype IN ('a', 'i'))) LOOP   -- a serial's moves with its table
    EXECUTE format('ALTER %s %s OWNER TO {PG_SYNC_USER}', CASE r.relkind WHEN 'v' THEN 'VIEW'
      WHEN 'm' THEN 'MATERIALIZED VIEW' WHEN 'S' THEN 'SEQUENCE' WHEN 'f' THEN 'FOREIGN TABLE'
      WHEN 'c' THEN 'TYPE' ELSE 'TABLE' END, r.rel);
  END LOOP;
  FOR r IN SELECT p.oid::regprocedure AS fn FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
           WHERE p.proowner = '{PG_USER}'::regrole AND n.nspname NOT LIKE 'pg\\_%' LOOP
    EXECUTE format('ALTER FUNCTION %s OWNER TO {PG_SYNC_USER}', r.fn);
  END LOOP;
  FOR r IN SELECT t.oid::regtype AS ty FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
           WHERE t.typowner = '{PG_USER}'::regrole AND t.typtype IN ('e', 'd') AND n.nspname NOT LIKE 'pg\\_%' LOOP
    EXECUTE format('ALTER TYPE %s OWNER TO {PG_SYNC_USER}', r.ty);
  END LOOP;
END $$;
"""


def _grant_roles() -> None:
    """tideline_cdc: SELECT on the source's tables (now and to come) and the DBA's functions
    (sql/dba/postgres_source.sql) for its publication; tideline_sync: CREATE in the target's and
    the Iceberg catalog's databases. Idempotent, run at every `up`."""
    for db, statements in ((DATABASES["source"], (ROOT / "sql" / "dba" / "postgres_source.sql").read_text()
                            + _SOURCE_GRANTS),
                           (DATABASES["target"], _TARGET_GRANTS), (DATABASES["lake"], _TARGET_GRANTS)):
        conn = pg_connect(db)
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                if db == DATABASES["source"]:
                    cur.execute(f'GRANT CONNECT ON DATABASE "{db}" TO {PG_CDC_USER}')
                else:
                    cur.execute(f'GRANT CONNECT, CREATE ON DATABASE "{db}" TO {PG_SYNC_USER}')
                cur.execute(statements)
        finally:
            conn.close()


def down_postgres() -> None:
    """Stops a PostgreSQL that runs outside supervisord (started by pg_ctl)."""
    data = VAR / "pg" / "data"
    if (data / "PG_VERSION").exists() and (PG_BIN / "pg_ctl").exists():
        subprocess.run(_as_pg_owner([str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"]),
                       capture_output=True)


def postgres_pid() -> int | None:
    pidfile = VAR / "pg" / "data" / "postmaster.pid"
    try:
        pid = int(pidfile.read_text().splitlines()[0])
        return pid if pid_alive(pid) else None
    except (OSError, ValueError, IndexError):
        return None


