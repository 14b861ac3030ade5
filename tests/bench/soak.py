"""The chaos soak: pipelines left running while faults hit every part, then every target compared
with its source row for row.

    .venv/bin/python tests/bench/soak.py --minutes 60        # make soak MINUTES=60
    .venv/bin/python tests/bench/soak.py --minutes 12        # the short run (>= 10 faults)

Four pipelines stream continuously through the stack's real Airflow scheduler, as a team leaves
them: PostgreSQL and MariaDB sources, each into PostgreSQL and into Iceberg. Writers change the
sources all along (a few hundred rows/s in all): inserts, updates, deletes, key changes, and
updates of rows whose large values live out of line (TOAST) — of another column, and a second
later of the same row (the batch that folds both). Every 60-120 s one fault, at random: kill -9 of
the Kafka broker, of Kafka Connect, of a stream's Spark driver, of a full load's driver (a reload
asked for, then killed), of the Airflow scheduler; a PostgreSQL fast restart; a MariaDB restart;
the targets refusing connections for 60 s; the Iceberg catalog's connections terminated. A run of
30 minutes or more also has one outage of 20 minutes (Kafka stopped), longer than the old give-up,
in addition to its minutes of faults (a 60-minute run lasts about 80).
After each fault a marker row is written to each source; the fault is survived when the markers
reached every target, and its recovery is the time from the fault's end until then (the long
outage's is reported on its own, long_outage_recovery_s: it includes catching up the backlog of
its 20 minutes of writes). Faults overlap (each comes 60-120 s after the last, healed or not), so
a recovery can be cut short by the next fault before it heals (the targets refusing connections
while the scheduler's kill is being healed). longest_recovery_once_clear_s measures each recovery
from the moment nothing was failing any more: the latest of its fault's end, the end of every
fault that ended before its marker arrived, and — for a fault that ended while the long outage's
backlog was being caught up (its marker queues behind that backlog) — the catch-up's end.

Nobody acts on the pipelines: the soak has no way to (manual_steps counts none by design). At the
end the writers stop, and every target must equal its source: no row lost, none duplicated, no
gap in the committed batches, no automatic reload (none is caused). Then the soak's pipelines are
decommissioned (ops.lifecycle) — which must leave nothing behind — and its tables dropped.
Prints one RESULT line.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import random
import signal
import subprocess
import sys
import threading
import time

import psycopg2

from benchlib import ROOT, stackctl

os.environ.update(stackctl.environment())
os.environ["TIDELINE_PIPELINES"] = str(ROOT / "pipelines")

from tideline import state  # noqa: E402
from tideline.core.config import load_pipeline  # noqa: E402
from tideline.core.connections import get_connection  # noqa: E402

TABLE = "soak_items"
MARKER_BASE = 10 ** 12          # marker rows' ids: apart from the writers'
PIPELINES = {                   # name: (source kind, target kind)
    "soak_pg": ("postgres", "postgres"), "soak_lake": ("postgres", "iceberg"),
    "soak_maria": ("mariadb", "postgres"), "soak_maria_lake": ("mariadb", "iceberg")}
SOURCE_URL = stackctl.pg_url(stackctl.DATABASES["source"])
SUPER = {db: stackctl.pg_url(stackctl.DATABASES[db], stackctl.PG_SUPERUSER, stackctl.PG_SUPERPASS)
         for db in ("source", "target", "lake")}


def log(message: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {message}", flush=True)


# ---------------------------------------------------------------- pipelines and their tables

def pipeline_yaml(name: str) -> str:
    source, target = PIPELINES[name]
    src = ("{kind: mariadb, conn_id: tideline_mariadb_source, schema: shop}" if source == "mariadb"
           else "{conn_id: tideline_source, schema: public}")
    tgt = (f"{{kind: iceberg, catalog: tideline_lake, namespace: {name}}}" if target == "iceberg"
           else f"{{conn_id: tideline_target, schema: {name}}}")
    return (f"# the chaos soak's (tests/bench/soak.py): decommissioned when it ends\nname: {name}\nsource: {src}\n"
            f"target: {tgt}\nkafka: {{conn_id: tideline_kafka, topic_prefix: tideline.{name}, partitions: 2, "
            f"replication_factor: 1}}\nconnect: {{conn_id: tideline_connect}}\nspark: {{conn_id: spark_default, "
            f"parallelism: 2}}\nstream: {{trigger_interval_s: 5}}\ntables: [{{name: {TABLE}}}]\n")


def create_sources(rows: int) -> None:
    big = "md5(g::text || 'a') || repeat(md5(random()::text), 90)"   # ~2.9 kB, incompressible enough: TOASTed
    with psycopg2.connect(SOURCE_URL) as conn, conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS public.{TABLE}")
        cur.execute(f"CREATE TABLE public.{TABLE} (id bigint PRIMARY KEY, qty int NOT NULL, grp int, note text, "
                    f"big text)")
        cur.execute(f"ALTER TABLE public.{TABLE} ALTER COLUMN big SET STORAGE EXTERNAL")   # out of line, always
        cur.execute(f"INSERT INTO public.{TABLE} SELECT g, g % 100, g % 7, 'n' || g, {big} "
                    f"FROM generate_series(1, {rows}) g")
    m = stackctl.mariadb_connect(stackctl.MARIADB_DATABASE, autocommit=True)
    with m.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {TABLE}")
        cur.execute(f"CREATE TABLE {TABLE} (id bigint PRIMARY KEY, qty int NOT NULL, grp int, note text, "
                    f"big mediumtext) CHARACTER SET utf8mb4")
        cur.execute(f"INSERT INTO {TABLE} SELECT seq, seq % 100, seq % 7, CONCAT('n', seq), REPEAT(MD5(seq), 90) "
                    f"FROM seq_1_to_{rows}")   # (MariaDB's Sequence engine)
    m.close()


def drop_sources() -> None:
    with psycopg2.connect(SOURCE_URL) as conn, conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS public.{TABLE}")
    m = stackctl.mariadb_connect(stackctl.MARIADB_DATABASE, autocommit=True)
    with m.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {TABLE}")
    m.close()


def start_pipelines(names: list[str]) -> dict:
    for name in names:
        (ROOT / "pipelines" / f"{name}.yaml").write_text(pipeline_yaml(name))
    cfgs = {n: load_pipeline(ROOT / "pipelines" / f"{n}.yaml") for n in names}
    deadline = time.monotonic() + 300
    for name in names:   # the dag-processor parses the new files
        while True:
            try:   # (a DAG of an earlier soak's decommissioned pipeline is stale until parsed again)
                if not stackctl.airflow_api("GET", f"dags/sync_{name}").get("is_stale"):
                    break
            except Exception:   # not parsed yet
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"sync_{name} did not appear in Airflow within 300 s: see Airflow's import "
                                   f"errors (a dag-processor started before the code changed needs a restart)")
            time.sleep(3)
        wait(lambda name=name: stackctl.airflow_api("PATCH", f"dags/sync_{name}", {"is_paused": False}) and
             stackctl.airflow_api("POST", f"dags/sync_{name}/dagRuns",
                                  {"logical_date": None, "conf": {"stream_mode": "continuous"}}), 120,
             f"sync_{name} to take a run")
    for name, cfg in cfgs.items():
        wait(lambda cfg=cfg: phase(cfg) == "streaming" and streaming(cfg), 900, f"{name} to load and stream")
        log(f"{name} streams")
    return cfgs


def state_conn(cfg):
    return state.connect(get_connection(cfg.target.conn_id), connect_timeout=5)


def phase(cfg) -> str | None:
    conn = state_conn(cfg)
    try:
        st = state.get(conn, cfg.name, TABLE)
        return st.phase if st else None
    finally:
        conn.close()


def streaming(cfg) -> bool:
    """A continuous stream holds the table."""
    conn = state_conn(cfg)
    try:
        run = state.latest_streams(conn, cfg.name).get(TABLE)
        return run is not None and run.holds
    finally:
        conn.close()


def batches(cfg) -> list[int]:
    conn = state_conn(cfg)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT batch_id FROM tideline.batches WHERE pipeline = %s ORDER BY batch_id", (cfg.name,))
            return [r[0] for r in cur.fetchall()]
    finally:
        conn.close()


def auto_reloads(cfg) -> int:
    conn = state_conn(cfg)
    try:
        st = state.get(conn, cfg.name, TABLE)
        return (st.raw.get("auto_reloads") or 0) if st else 0
    finally:
        conn.close()


def wait(check, timeout: float, what: str, every: float = 2.0) -> float:
    started = time.monotonic()
    while True:
        try:
            if check():
                return time.monotonic() - started
        except Exception:   # a part is down meanwhile: not yet
            pass
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


# ---------------------------------------------------------------- writers

class Writer(threading.Thread):
    """Changes one source all along, riding out its outages (a transaction cut by one never happened)."""

    def __init__(self, kind: str, seed: int, per_s: float):
        super().__init__(daemon=True, name=f"writer-{kind}")
        self.kind, self.rng, self.pause = kind, random.Random(seed), 1.0 / per_s
        self.stop_event, self.ops, self.failed = threading.Event(), 0, 0
        self.next_id = 5_000_000 + seed * 10_000_000

    def connect(self):
        if self.kind == "mariadb":
            return stackctl.mariadb_connect(stackctl.MARIADB_DATABASE, autocommit=False)
        return psycopg2.connect(SOURCE_URL, connect_timeout=3)

    def big(self) -> str:
        return os.urandom(1500).hex()   # 3 kB, incompressible: out of line in PostgreSQL

    def some_id(self, cur) -> int | None:
        cur.execute(f"SELECT id FROM {TABLE} WHERE id >= %s AND id < %s ORDER BY id LIMIT 1",
                    (self.rng.randint(1, self.next_id), MARKER_BASE))
        row = cur.fetchone()
        return row[0] if row else None

    def step(self, conn) -> None:
        with conn.cursor() as cur:
            op = self.rng.choices(["insert", "update", "update_big", "delete", "rekey", "insert_then_update"],
                                  weights=[25, 35, 10, 10, 10, 10])[0]
            if op in ("insert", "insert_then_update"):
                self.next_id += 1
                cur.execute(f"INSERT INTO {TABLE} (id, qty, grp, note, big) VALUES (%s, %s, %s, %s, %s)",
                            (self.next_id, self.rng.randint(0, 99), self.rng.randint(0, 6), "new", self.big()))
                if op == "insert_then_update":   # both events in one batch: the fold keeps the big value
                    conn.commit()
                    cur.execute(f"UPDATE {TABLE} SET qty = qty + 1 WHERE id = %s", (self.next_id,))
            else:
                key = self.some_id(cur)
                if key is None:
                    return
                if op == "update":   # the big value unchanged: Debezium's placeholder from PostgreSQL
                    cur.execute(f"UPDATE {TABLE} SET qty = qty + 1, note = %s WHERE id = %s",
                                (f"u{self.ops}", key))
                elif op == "update_big":
                    cur.execute(f"UPDATE {TABLE} SET big = %s WHERE id = %s", (self.big(), key))
                elif op == "delete":
                    cur.execute(f"DELETE FROM {TABLE} WHERE id = %s", (key,))
                else:   # a key change
                    self.next_id += 1
                    cur.execute(f"UPDATE {TABLE} SET id = %s WHERE id = %s", (self.next_id, key))
        conn.commit()

    def run(self) -> None:
        conn = None
        while not self.stop_event.is_set():
            try:
                if conn is None:
                    conn = self.connect()
                self.step(conn)
                self.ops += 1
            except Exception:   # the source is away or restarting: reconnect and go on
                self.failed += 1
                try:
                    conn.close()
                except Exception:   # already gone
                    pass
                conn = None
                time.sleep(0.5)
            time.sleep(self.pause)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(30)


# ---------------------------------------------------------------- rows, markers, comparison

def source_rows(kind: str) -> dict[int, tuple]:
    sql = f"SELECT id, qty, grp, note, md5(big) FROM {TABLE}"
    if kind == "mariadb":
        m = stackctl.mariadb_connect(stackctl.MARIADB_DATABASE)
        try:
            with m.cursor() as cur:
                cur.execute(sql)
                return {r[0]: tuple(r[1:]) for r in cur.fetchall()}
        finally:
            m.close()
    with psycopg2.connect(SOURCE_URL) as conn, conn.cursor() as cur:
        cur.execute(sql)
        return {r[0]: tuple(r[1:]) for r in cur.fetchall()}


_LAKES: dict = {}


def lake_table(cfg):
    """The pipeline's Iceberg table, through one catalog per pipeline."""
    from tideline import targets
    if cfg.name not in _LAKES:
        _LAKES[cfg.name] = targets.for_pipeline(cfg, get_connection(cfg.target.conn_id)).pyiceberg_catalog()
    return _LAKES[cfg.name].load_table((cfg.name, TABLE))


TARGET_URL = stackctl.pg_url(stackctl.DATABASES["target"], stackctl.PG_SYNC_USER, stackctl.PG_SYNC_PASS)


def target_rows(cfg) -> tuple[dict[int, tuple], int]:
    """The target's rows by key, and how many keys it holds more than once."""
    if cfg.target.kind == "iceberg":
        arrow = lake_table(cfg).scan().to_arrow()
        cols = [arrow.column(c).to_pylist() for c in ("id", "qty", "grp", "note", "big")]
        rows = {}
        for i, q, g, n, b in zip(*cols):
            rows[i] = (q, g, n, hashlib.md5(b.encode()).hexdigest() if b is not None else None)
        return rows, len(cols[0]) - len(rows)
    conn = psycopg2.connect(TARGET_URL)
    try:
        with conn.cursor() as cur:
            cur.execute(f'SELECT id, qty, grp, note, md5(big) FROM "{cfg.name}".{TABLE}')
            got = cur.fetchall()
        return {r[0]: tuple(r[1:]) for r in got}, len(got) - len({r[0] for r in got})
    finally:
        conn.close()


def has_marker(cfg, marker: int) -> bool:
    if cfg.target.kind == "iceberg":
        from pyiceberg.expressions import EqualTo
        return lake_table(cfg).scan(row_filter=EqualTo("id", marker), selected_fields=("id",)).to_arrow().num_rows == 1
    conn = psycopg2.connect(TARGET_URL, connect_timeout=3)
    try:
        with conn.cursor() as cur:
            cur.execute(f'SELECT count(*) FROM "{cfg.name}".{TABLE} WHERE id = %s', (marker,))
            return cur.fetchone()[0] == 1
    finally:
        conn.close()


def write_marker(kind: str, marker: int) -> None:
    def put() -> bool:
        if kind == "mariadb":
            m = stackctl.mariadb_connect(stackctl.MARIADB_DATABASE, autocommit=True)
            try:
                with m.cursor() as cur:
                    # IGNORE: an insert that committed as the server went down (its reply lost) is tried again
                    cur.execute(f"INSERT IGNORE INTO {TABLE} (id, qty, grp, note, big) VALUES (%s, 0, 0, 'marker', 'm')",
                                (marker,))
            finally:
                m.close()
        else:
            with psycopg2.connect(SOURCE_URL, connect_timeout=3) as conn, conn.cursor() as cur:
                cur.execute(f"INSERT INTO {TABLE} (id, qty, grp, note, big) VALUES (%s, 0, 0, 'marker', 'm') "
                            f"ON CONFLICT DO NOTHING", (marker,))
        return True
    wait(put, 600, f"the {kind} source to take a marker", every=1)


# ---------------------------------------------------------------- faults

NO_OP = ("nothing killed", ": not running")   # a fault that found nothing to hit says so: it is not counted


def _kill(pid: int | None, what: str) -> str:
    if pid is None:
        return f"{what}: not running, nothing killed"
    os.kill(pid, signal.SIGKILL)
    return f"kill -9 {what} (pid {pid})"


def _java_of(job: str, pipeline: str) -> int | None:
    out = subprocess.run(["pgrep", "-f", f"spark_jobs/{job}.*--pipeline {pipeline}( |$)"], capture_output=True,
                         text=True).stdout.split()
    for pid in map(int, out):
        try:
            if "java" in open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0].decode():
                return pid
        except OSError:
            pass
    return None


def _super(db: str, sql: str) -> None:
    conn = psycopg2.connect(SUPER[db], connect_timeout=5)
    conn.autocommit = True
    try:
        conn.cursor().execute(sql)
    finally:
        conn.close()


def _refuse_targets(seconds: float) -> str:
    hba = stackctl.VAR / "pg" / "data" / "pg_hba.conf"
    original = hba.read_text()
    dbs = [stackctl.DATABASES["target"], stackctl.DATABASES["lake"]]
    hba.write_text("".join(f"host {db} {stackctl.PG_SYNC_USER} 127.0.0.1/32 reject\n" for db in dbs) + original)
    try:
        _super("source", "SELECT pg_reload_conf()")
        for db in dbs:
            _super("source", f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{db}' "
                             f"AND usename = '{stackctl.PG_SYNC_USER}'")
        time.sleep(seconds)
    finally:
        hba.write_text(original)
        _super("source", "SELECT pg_reload_conf()")
    return f"the targets refused connections for {seconds:.0f} s"


def _reload_killed(cfgs: dict) -> str:
    name = random.choice(sorted(cfgs))
    stackctl.airflow_api("POST", f"dags/sync_{name}/dagRuns", {"logical_date": None, "conf": {
        "action": "full_reload", "tables": [TABLE], "stream_mode": "continuous"}})
    try:
        wait(lambda: _java_of("full_load.py", name) is not None, 240, "the reload's driver", every=0.5)
    except TimeoutError:
        return f"{name}: its full reload's driver never ran (nothing killed)"
    time.sleep(random.uniform(2, 8))   # into the load, or just before: either is a load killed
    return _kill(_java_of("full_load.py", name), f"{name}'s full load driver")


LONG_OUTAGE = "Kafka stopped for"   # the long outage's fault name starts so


def _stop_kafka(minutes: float) -> str:
    stackctl.supervisorctl("stop", "kafka")
    try:
        time.sleep(minutes * 60)
    finally:
        stackctl.supervisorctl("start", "kafka")
    return f"{LONG_OUTAGE} {minutes:g} min"


def faults(cfgs: dict) -> dict:
    return {
        "kill -9 Kafka broker": lambda: _kill(stackctl.supervised_pid("kafka"), "the Kafka broker"),
        "kill -9 Kafka Connect": lambda: _kill(stackctl.supervised_pid("connect"), "Kafka Connect"),
        "kill -9 a stream's driver": lambda: (lambda n: _kill(_java_of("incremental.py", n),
                                                              f"{n}'s stream driver"))(random.choice(sorted(cfgs))),
        "kill -9 a full load's driver": lambda: _reload_killed(cfgs),
        "kill -9 Airflow scheduler": lambda: _kill(stackctl.supervised_pid("airflow-scheduler"), "the scheduler"),
        "PostgreSQL fast restart": lambda: _kill_signal(
            int((stackctl.VAR / "pg" / "data" / "postmaster.pid").read_text().split()[0]), signal.SIGINT,
            "PostgreSQL fast shutdown (supervisord restarts it)"),
        "MariaDB restart": lambda: _kill_signal(stackctl.supervised_pid("mariadb"), signal.SIGTERM,
                                                "MariaDB stopped (supervisord restarts it)"),
        "targets refuse connections for 60 s": lambda: _refuse_targets(60),
        "Iceberg catalog connections terminated": lambda: (_super(
            "source", f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
                      f"'{stackctl.DATABASES['lake']}' AND pid <> pg_backend_pid()"), "catalog connections cut")[1],
    }


def _kill_signal(pid: int | None, sig: int, what: str) -> str:
    if pid is None:
        return f"{what}: not running"
    os.kill(pid, sig)
    return what


# ---------------------------------------------------------------- the run

def compare(cfgs: dict) -> dict:
    """Every target against its source: rows compared, lost, duplicated (a key held twice, or one
    the source no longer has), different."""
    out = {"rows": 0, "lost": 0, "duplicated": 0, "different": 0}
    sources = {kind: source_rows(kind) for kind in {PIPELINES[n][0] for n in cfgs}}
    for name, cfg in cfgs.items():
        want = sources[PIPELINES[name][0]]
        got, twice = target_rows(cfg)
        out["rows"] += len(want)
        out["lost"] += len(want.keys() - got.keys())
        out["duplicated"] += twice + len(got.keys() - want.keys())
        out["different"] += sum(1 for k in want.keys() & got.keys() if want[k] != got[k])
    return out


def gaps(cfgs: dict) -> int:
    """Batches missing from a pipeline's committed sequence (it must be gap-free)."""
    missing = 0
    for cfg in cfgs.values():
        ids = batches(cfg)
        missing += (ids[-1] - ids[0] + 1 - len(ids)) if ids else 0
    return missing


def teardown(cfgs: dict) -> None:
    from tideline import targets
    from tideline.ops import lifecycle
    for name, cfg in cfgs.items():
        for run in stackctl.airflow_api("GET", f"dags/sync_{name}/dagRuns?state=running&state=queued")["dag_runs"]:
            stackctl.airflow_api("PATCH", f"dags/sync_{name}/dagRuns/{run['dag_run_id']}", {"state": "failed"})
        path = ROOT / "pipelines" / f"{name}.yaml"
        lifecycle.decommission(cfg, get_connection, config_path=path)   # (it logs what it removed)
        path.with_name(path.name + lifecycle.RETIRED_SUFFIX).unlink(missing_ok=True)
        if cfg.target.kind == "iceberg":
            targets.for_pipeline(cfg, get_connection(cfg.target.conn_id)).drop_table(name, TABLE)
        else:
            _super("target", f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    drop_sources()


def once_clear_s(ended: float, healed: float, other_ends: list[float],
                 outage: tuple[float, float] | None) -> float:
    """A recovery measured from the moment nothing was failing any more: the latest of its fault's
    end, the end of every other fault that ended before it healed (that fault cut its healing
    short), and the long outage's catch-up end when the fault ended during that catch-up (its
    marker queued behind the outage's backlog). The long outage itself is not an "other fault":
    the catch-up rule covers it."""
    clear = max([ended] + [e for e in other_ends if ended <= e <= healed])
    if outage and outage[0] <= ended < outage[1]:
        clear = max(clear, outage[1])
    return max(0.0, healed - clear)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=60, help="how long faults are injected")
    ap.add_argument("--rows", type=int, default=20000, help="rows each source table starts with")
    ap.add_argument("--rate", type=float, default=100, help="changes per second per source (at most)")
    ap.add_argument("--long-outage-minutes", type=float, default=None,
                    help="one Kafka outage this long (default: 20 in runs of 30 minutes or more, else none)")
    ap.add_argument("--pipelines", default=",".join(PIPELINES), help="which of the soak's pipelines run")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--keep", action="store_true", help="leave the pipelines and tables in place")
    ap.add_argument("--clean", action="store_true", help="only remove what an earlier soak left, then exit")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    random.seed(seed)
    long_outage = args.long_outage_minutes if args.long_outage_minutes is not None else \
        (20 if args.minutes >= 30 else 0)
    names = [n for n in args.pipelines.split(",") if n]
    log(f"seed {seed}; {args.minutes:g} min of faults{f', one {long_outage:g}-min outage' if long_outage else ''}; "
        f"pipelines {', '.join(names)}")
    leftover = {n: load_pipeline(ROOT / "pipelines" / f"{n}.yaml") for n in PIPELINES
                if (ROOT / "pipelines" / f"{n}.yaml").exists()}
    if leftover:   # an earlier soak that was stopped part way
        log(f"removing what an earlier soak left: {', '.join(leftover)}")
        teardown(leftover)
    if args.clean:
        return 0
    create_sources(args.rows)
    cfgs = start_pipelines(names)
    before = {n: auto_reloads(c) for n, c in cfgs.items()}
    writers = [Writer(kind, i + 1, args.rate) for i, kind in enumerate(sorted({PIPELINES[n][0] for n in names}))]
    for w in writers:
        w.start()
    kinds, chosen = faults(cfgs), []
    started, marker = time.monotonic(), MARKER_BASE
    recovered: dict[int, tuple[str, float | None]] = {}   # fault number -> (its name, recovery s or None)
    ended: dict[int, float] = {}   # fault number -> when it ended (monotonic)
    watchers: list[threading.Thread] = []

    def watch(number: int, name: str, what: str, marker: int) -> None:
        """The fault's recovery, watched beside the next faults (they do not wait for it)."""
        try:
            took = wait(lambda: all(has_marker(c, marker) for c in cfgs.values()), 900, "the marker in every target")
            recovered[number] = (name, took)
            log(f"fault {number}: {what} — every target had the marker {took:.0f} s after the fault ended")
        except TimeoutError:
            recovered[number] = (name, None)
            log(f"fault {number}: {what} — NOT recovered within 900 s")
    long_at = started + args.minutes * 60 * 0.3 if long_outage else None
    last, deadline = time.monotonic(), started + args.minutes * 60
    while time.monotonic() < deadline:
        # one fault every 60-120 s, counted from the last one's start, whether or not the ones
        # before have recovered yet (faults overlap as they do in life; each recovery is its own)
        time.sleep(max(5.0, random.uniform(60, 120) - (time.monotonic() - last)))
        last = time.monotonic()
        if long_at is not None and time.monotonic() >= long_at:
            name, fault, long_at = f"{LONG_OUTAGE} {long_outage:g} min", lambda: _stop_kafka(long_outage), None
            deadline += long_outage * 60   # the long outage comes in addition to the run's minutes of faults
        else:
            name = random.choice(sorted(kinds))
            fault = kinds[name]
        what = fault()
        if name.startswith(LONG_OUTAGE):   # the next fault 60-120 s after it, not at once
            last = time.monotonic()
        if any(s in what for s in NO_OP):   # its target was not there (restarting after the last fault)
            log(f"not counted: {what}; another fault follows shortly")
            last = time.monotonic() - 55
            continue
        marker += 1
        for kind in {PIPELINES[n][0] for n in names}:
            write_marker(kind, marker)
        chosen.append(name)
        ended[len(chosen)] = time.monotonic()
        watchers.append(threading.Thread(target=watch, args=(len(chosen), name, what, marker), daemon=True))
        watchers[-1].start()
    for t in watchers:   # every fault's recovery (each gives up after 900 s)
        t.join()
    # the long outage's recovery includes catching up its 20 minutes of backlog: reported on its own
    healed = {n: took for n, (name, took) in recovered.items() if took is not None and not name.startswith(LONG_OUTAGE)}
    outage = next(((ended[n], ended[n] + took) for n, (name, took) in recovered.items()
                   if name.startswith(LONG_OUTAGE) and took is not None), None)   # (Kafka back, caught up)
    once_clear = [once_clear_s(ended[n], ended[n] + took, [ended[m] for m in healed if m != n], outage)
                  for n, took in healed.items()]
    survived = sum(1 for _n, took in recovered.values() if took is not None)
    recoveries = list(healed.values())
    outage_s = outage[1] - outage[0] if outage else None
    for w in writers:
        w.stop()
    log(f"writers stopped after {sum(w.ops for w in writers):,} changes ({sum(w.failed for w in writers)} cut by "
        f"faults); waiting for every target to equal its source")
    seen = {}
    try:
        wait(lambda: (seen.update(compare(cfgs)) or True) and not (seen["lost"] or seen["duplicated"]
                                                                   or seen["different"]), 900,
             "every target to equal its source", every=10)
    except TimeoutError:
        log(f"targets differ after 900 s: {seen}")
    reloads = sum(auto_reloads(c) - before[n] for n, c in cfgs.items())
    result = (f"RESULT faults={len(chosen)} survived={survived} longest_recovery_s="
              f"{max(recoveries) if recoveries else 0:.0f} "
              f"longest_recovery_once_clear_s={max(once_clear) if once_clear else 0:.0f} "
              f"{f'long_outage_recovery_s={outage_s:.0f} ' if outage_s is not None else ''}"
              f"rows_compared={seen.get('rows', 0)} manual_steps=0 "
              f"lost={seen.get('lost', -1)} duplicated={seen.get('duplicated', -1)} reloads={reloads} "
              f"different={seen.get('different', -1)} batch_gaps={gaps(cfgs)} minutes={args.minutes:g} seed={seed}")
    log("faults: " + ", ".join(f"{k} ×{chosen.count(k)}" for k in sorted(set(chosen))))
    print(result, flush=True)   # before the teardown: a teardown that fails must not lose the run's figures
    if not args.keep:
        teardown(cfgs)
    ok = survived == len(chosen) and not (seen.get("lost") or seen.get("duplicated") or seen.get("different"))
    return 0 if ok and not reloads else 1


if __name__ == "__main__":
    sys.exit(main())
