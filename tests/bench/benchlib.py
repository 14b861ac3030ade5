"""What the benchmarks share: the stack's environment, autocommit connections, peak memory."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from contextlib import closing, contextmanager
from pathlib import Path

import psutil

import psycopg2

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "stack"))
sys.path.insert(0, str(ROOT / "plugins"))
import stackctl  # noqa: E402


def db_url(db: str) -> str:
    """A stack database's URL as the role that writes it: the target as Tideline's own role there
    (tideline_sync owns what is written, whoever writes it), the source as its application."""
    if db == stackctl.DATABASES["target"]:
        return stackctl.pg_url(db, stackctl.PG_SYNC_USER, stackctl.PG_SYNC_PASS)
    return stackctl.pg_url(db)


def pg(db: str):
    """Autocommit connection to a stack database by its full name."""
    conn = psycopg2.connect(db_url(db))
    conn.autocommit = True
    return conn


def run_bench(main) -> None:
    """Every bench script's `__main__`: `main()` with the stack's other captures stopped, its
    return value the exit status."""
    with other_captures_stopped():
        sys.exit(main())


@contextmanager
def other_captures_stopped():
    """The stack's other change captures (the demo's connectors, say) stopped while a benchmark
    runs, and resumed after. A PostgreSQL capture's walsender decodes every write to its
    database, whatever its publication holds: two idle demo connectors each took ~40 CPU-seconds
    decoding a bench table's creation, and took them from the contestants. A stopped connector
    (Connect's `stop`, not `pause`: a paused Debezium task keeps its replication connection) keeps
    its slot, so it resumes where it stopped. A bench stopped by SIGTERM resumes them too."""
    import signal

    import requests
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    url = stackctl.connect_url()
    names = [n for n in requests.get(f"{url}/connectors", timeout=30).json()
             if requests.get(f"{url}/connectors/{n}/status", timeout=30).json()["connector"]["state"] == "RUNNING"]
    slots = [c["slot.name"] for c in (requests.get(f"{url}/connectors/{n}/config", timeout=30).json() for n in names)
             if "slot.name" in c]
    for n in names:
        requests.put(f"{url}/connectors/{n}/stop", timeout=60).raise_for_status()
    if names:
        print(f"[bench] stopped the stack's other captures while the bench runs: {', '.join(names)}", flush=True)
    try:
        with closing(pg(stackctl.DATABASES["target"])) as conn, conn.cursor() as cur:
            deadline = time.monotonic() + 120
            while True:   # their walsenders gone, not only their connectors told
                cur.execute("SELECT slot_name FROM pg_replication_slots WHERE active AND slot_name = ANY(%s)", (slots,))
                active = [r[0] for r in cur.fetchall()]
                stopped = all(requests.get(f"{url}/connectors/{n}/status", timeout=30).json()["connector"]["state"]
                              == "STOPPED" for n in names)
                if stopped and not active:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the stack's other captures did not stop in 120 s (slots still active: {active})")
                time.sleep(0.5)
        yield
    finally:
        for n in names:   # one the bench dropped itself (a capture of its own left by a killed run) stays gone
            resp = requests.put(f"{url}/connectors/{n}/resume", timeout=60)
            if resp.status_code != 404:
                resp.raise_for_status()
        if names:
            print(f"[bench] resumed: {', '.join(names)}", flush=True)


def checkpoint() -> float:
    """A CHECKPOINT of the stack's PostgreSQL (as its superuser), no autovacuum running, then the host's dirty pages
    written out (sync), before a contestant starts: a load writes ~1 GB of WAL, more than
    max_wal_size, and a stream bench's 2M changes ~7 GB of Kafka log, so without it the next
    contestant pays for what came before it. Returns the seconds it took."""
    started = time.monotonic()
    conn = psycopg2.connect(stackctl.pg_url(stackctl.DATABASES["target"], stackctl.PG_SUPERUSER, stackctl.PG_SUPERPASS))
    conn.autocommit = True
    try:
        cur = conn.cursor()
        cur.execute("CHECKPOINT")
        # and no autovacuum worker left running: one that took the previous contestant's table
        # (or the freshly made source) would spend the next contestant's CPU (CpuMeter counts
        # every process of the servers) on the same two cores
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            cur.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'")
            if not cur.fetchone()[0]:
                break
            time.sleep(0.5)
    finally:
        conn.close()
    os.sync()
    return time.monotonic() - started


def wal_counters() -> dict[str, float]:
    """The stack's PostgreSQL's WAL written so far (bytes, full-page images) and the checkpoints
    it has run (asked for by WAL volume, or by time): the difference over a contestant says what
    its writes cost the database beyond the rows."""
    with closing(psycopg2.connect(stackctl.pg_url(stackctl.DATABASES["target"], stackctl.PG_SUPERUSER,
                                                  stackctl.PG_SUPERPASS))) as conn, conn.cursor() as cur:
        cur.execute("SELECT w.wal_bytes, w.wal_fpi, b.checkpoints_req, b.checkpoints_timed "
                    "FROM pg_stat_wal w, pg_stat_bgwriter b")
        return dict(zip(("wal_bytes", "wal_fpi", "checkpoints_req", "checkpoints_timed"), map(float, cur.fetchone())))


def wal_since(before: dict[str, float]) -> str:
    """What wal_counters() grew by since `before`, in words."""
    now = wal_counters()
    d = {k: now[k] - before[k] for k in now}
    return (f"WAL {d['wal_bytes'] / 1e9:.2f} GB ({d['wal_fpi']:,.0f} full-page images), checkpoints "
            f"{d['checkpoints_req']:.0f} by WAL volume + {d['checkpoints_timed']:.0f} timed")


class PeakRss(threading.Thread):
    """Peak memory of a process tree, sampled every 100 ms; `done.set()` stops it. `peak` sums
    each process's resident set (RSS); `peak_pss` sums proportional set sizes, which count a page
    shared by several processes of the tree once — a JVM that forks a helper (Hadoop's local file
    system runs chmod for each checkpoint file, unless the driver has Tideline's driver jar) shows
    up twice in the RSS sum for that moment."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.root, self.peak, self.peak_pss = psutil.Process(pid), 0, 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            try:
                procs = [p for p in [self.root, *self.root.children(recursive=True)] if p.is_running()]
                self.peak = max(self.peak, sum(p.memory_info().rss for p in procs))
                self.peak_pss = max(self.peak_pss, sum(p.memory_full_info().pss for p in procs))
            except psutil.Error:
                pass
            time.sleep(0.1)


class Drain(threading.Thread):
    """Reads a running job's output into `path` as it comes: an undrained pipe fills (64 KB) and
    blocks the job at its next log line — a stream of many tables logs that much in seconds."""

    def __init__(self, proc, path: Path):
        super().__init__(daemon=True)
        self.proc, self.path = proc, path

    def run(self) -> None:
        with open(self.path, "w") as out:
            for line in self.proc.stdout:
                out.write(line)
                out.flush()

    def tail(self, chars: int = 3000) -> str:
        return self.path.read_text()[-chars:] if self.path.exists() else ""


class SteadyLoad(threading.Thread):
    """~rate row changes per second on a source table (`column = column + 1` over its keys 1..keys
    in turn), in small transactions, until `stop` is set."""

    def __init__(self, table: str, column: str, keys: int, rate: int):
        super().__init__(daemon=True)
        self.table, self.column, self.keys, self.rate, self.stop = table, column, keys, rate, threading.Event()

    def run(self):
        with closing(pg(stackctl.DATABASES["source"])) as conn, conn.cursor() as cur:
            i = 0
            per_tick = max(1, self.rate // 20)
            while not self.stop.is_set():
                lo = (i * per_tick) % (self.keys - per_tick)
                cur.execute(f"UPDATE {self.table} SET {self.column} = {self.column} + 1 WHERE id > %s AND id <= %s",
                            (lo, lo + per_tick))
                i += 1
                time.sleep(0.05)


def digests(db: str, schema: str, tables: list[str]) -> dict[str, tuple]:
    """Each table's row count and an order-independent digest of its rows' text, to check a copy."""
    with closing(pg(stackctl.DATABASES[db])) as conn, conn.cursor() as cur:
        out = {}
        for t in tables:
            cur.execute(f"SELECT count(*), coalesce(sum(hashtextextended(t::text, 0)::numeric), 0)::text "
                        f"FROM {schema}.{t} t")
            out[t] = cur.fetchone()
        return out


def forget_pipeline(cur, pipeline: str) -> None:
    """A benchmark pipeline's rows in Tideline's state, so a new run starts from nothing."""
    cur.execute("SELECT to_regclass('tideline.table_state') IS NOT NULL")
    if cur.fetchone()[0]:
        for t in ("table_state", "runs", "batches", "dead_letters", "chunked_loads"):
            cur.execute(f"DELETE FROM tideline.{t} WHERE pipeline = %s", (pipeline,))


def first_load(pipeline: str, schema: str) -> None:
    """Tideline's load in a benchmark is a first load, as the peers' are into fresh tables: its
    target schema dropped and its state forgotten — a reload would also drop the previous run's
    table (~1 GB of files at 5M rows) inside the timed swap."""
    with closing(pg(stackctl.DATABASES["target"])) as conn, conn.cursor() as cur:
        cur.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        forget_pipeline(cur, pipeline)


def ensure_topic(topic: str) -> None:
    """The change topic a full load records its offsets from (one partition), once."""
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": stackctl.kafka_bootstrap()})
    for fut in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        try:
            fut.result(30)
        except Exception as exc:  # already there from an earlier run
            if "already exists" not in str(exc):
                raise


def start_full_load(pipeline: str, pipelines: Path, env: dict, master: str = "local[2]",
                    submit_args: tuple[str, ...] = ()) -> subprocess.Popen:
    """spark-submit of the full load job for `pipeline` (configs in `pipelines`), as the sync DAG
    submits it; its output on the returned process's stdout."""
    from tideline.core.config import load_pipeline
    from tideline.core.connections import get_connection
    from tideline.core.settings import SparkSettings
    from tideline.load.full_load import piped_load_conf
    from tideline.spark_session import driver_conf
    env = dict(env, **SparkSettings.job_env("load"))   # as the sync DAG submits it (Spark's 1 GB driver heap)
    cfg = load_pipeline(pipelines / f"{pipeline}.yaml")
    # as the DAG's operator: the load kind's settings and the pipeline's own spark.conf over the
    # driver JVM sized by where the rows go, then the host's (class archive, driver jar) — before,
    # a bench's pipeline `spark.conf` (iceberg.py --load-conf) never reached the driver's JVM options
    from tideline.airflow.dag_factory import spark_submission
    submission = spark_submission(cfg, "load")
    conf = driver_conf({**piped_load_conf(get_connection(cfg.source.conn_id, env), cfg.target.kind),
                        **submission["conf"]}, environ=env)
    proc = subprocess.Popen([str(stackctl.VENV_BIN / "spark-submit"), "--master", master, *submit_args,
                             *[x for k, v in conf.items() for x in ("--conf", f"{k}={v}")],
                             "--jars", env["TIDELINE_SPARK_JARS"],
                             str(ROOT / "spark_jobs" / "full_load.py"), "--pipeline", pipeline,
                             "--pipelines-dir", str(pipelines)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc


def run_full_load(pipeline: str, pipelines: Path, env: dict, master: str = "local[2]",
                  submit_args: tuple[str, ...] = ()) -> tuple[float, float]:
    """The full load job (start_full_load), Spark start-up included: (seconds end to end, peak RSS
    in MB of the job's process tree — on a cluster, the driver's only; executors run under the
    workers)."""
    started = time.monotonic()
    proc = start_full_load(pipeline, pipelines, env, master, submit_args)
    rss = PeakRss(proc.pid)
    rss.start()
    out, _ = proc.communicate()
    rss.done.set()
    secs = time.monotonic() - started
    for line in out.splitlines():
        if os.environ.get("BENCH_FULL_LOG"):
            print("   ", line.rstrip())
        elif "[tideline]" in line or "tideline." in line:
            print("   ", line.strip()[-160:])
    if proc.returncode != 0:
        print(out[-4000:])
        raise SystemExit(f"full load failed with exit status {proc.returncode}")
    return secs, rss.peak / 1e6


CLK_TCK = os.sysconf("SC_CLK_TCK")
SERVERS = ("postgres", "mariadbd", "mysqld")


def server_cpu_s() -> float:
    """CPU-seconds the database servers' processes (PostgreSQL's, MariaDB's) have used, with their
    exited children's (a backend that ended counts in its postmaster's)."""
    total = 0
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        comm, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        if comm in SERVERS:
            total += sum(int(x) for x in rest[11:15])   # utime, stime, cutime, cstime
    return total / CLK_TCK


def children_cpu_s() -> float:
    """CPU-seconds of this process's children that ended and were waited for (a tool the bench ran:
    spark-submit's JVM and Python, psql, pgcopydb, pgloader)."""
    import resource
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


class CpuMeter:
    """CPU-seconds per million rows of one timed run, for each side: the tool (every process it
    ran, waited for) and the database servers (source and target). On a shared machine wall time
    moves 2x between days; the CPU a run costs moves much less."""

    def __init__(self, what: str, rows: int):
        self.what, self.rows = what, rows

    def __enter__(self):
        self.tool0, self.server0 = children_cpu_s(), server_cpu_s()
        return self

    def __exit__(self, *exc):
        self.tool = children_cpu_s() - self.tool0
        self.server = server_cpu_s() - self.server0
        per_m = 1e6 / max(1, self.rows)
        self.tool_per_m, self.server_per_m = self.tool * per_m, self.server * per_m
        if exc[0] is None:
            print(f"[bench] {self.what}: CPU {self.tool:.1f}s tool + {self.server:.1f}s databases = "
                  f"{self.total_per_m:.2f} CPU-s per million rows", flush=True)
        return False

    @property
    def total_per_m(self) -> float:
        return self.tool_per_m + self.server_per_m


DRIVER_CPU = re.compile(r"driver Python CPU ([0-9.]+)s while streaming")


def driver_cpu(out: str) -> float:
    """The stream driver's Python CPU seconds from its query's start, as its last line says (stream.run)."""
    found = DRIVER_CPU.findall(out)
    return float(found[-1]) if found else float("nan")
