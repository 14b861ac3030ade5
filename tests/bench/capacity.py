#!/usr/bin/env python3
"""Capacity: what one streaming pipeline costs on a host, and so how many stream at once.

    .venv/bin/python tests/bench/capacity.py [--pipelines 3] [--rate 200] [--seconds 60]
                                             [--conf spark.driver.memory=1g ...]

Starts N pipelines, each over its own table with its own connector, full-loads them, then runs N
continuous stream jobs at once exactly as the sync DAG submits them (spark-submit, local[2], the
library shipped as --py-files, the stream's settings and environment plus any --conf given), while a writer changes
every table at --rate rows/s. Once every stream has committed batches, it samples each job's
process tree for --seconds: the driver JVM, the Python driver and any Python workers, and the
CPU they use; and checks every target equals its source at the end. Last line:
RESULT streams=<n> per_stream_rss_mb=<mean> per_stream_peak_mb=<max> jvm_mb=<n> python_mb=<n>
       cpu_pct_per_stream=<n> host_available_mb=<n> fit_by_memory=<n>
(fit_by_memory: how many more streams of this size the host's available memory holds.)
"""
from __future__ import annotations

import argparse
import os
import random
import subprocess
import tempfile
import threading
import time
from contextlib import closing
from pathlib import Path

import psutil
import yaml

from benchlib import ROOT, Drain, run_bench, pg, stackctl

os.environ.update(stackctl.environment())

from tideline.capture.connector import drop_capture, ensure_capture  # noqa: E402
from tideline.core.config import load_pipeline  # noqa: E402
from tideline.core.connections import get_connection  # noqa: E402
from tideline.packaging import library_zip  # noqa: E402
from tideline.spark_session import driver_conf  # noqa: E402

PREFIX = "benchcap"
ROWS = 20_000


def log(msg: str) -> None:
    print(f"[bench] {time.strftime('%H:%M:%S')} {msg}", flush=True)


def setup(n: int, tmp: Path) -> list:
    cfgs = []
    for i in range(1, n + 1):
        name = f"{PREFIX}{i}"
        (tmp / f"{name}.yaml").write_text(yaml.safe_dump({
            "name": name, "source": {"conn_id": "tideline_source"},
            "target": {"conn_id": "tideline_target", "schema": name},
            "kafka": {"topic_prefix": name}, "tables": [{"name": name}]}))
        cfg = load_pipeline(tmp / f"{name}.yaml")
        teardown([cfg])
        with closing(pg(stackctl.DATABASES["source"])) as conn, conn.cursor() as cur:
            cur.execute(f"CREATE TABLE {name} (id bigint PRIMARY KEY, qty int NOT NULL, note text, "
                        f"amount numeric(12,2), updated_at timestamptz NOT NULL DEFAULT now())")
            cur.execute(f"INSERT INTO {name} (id, qty, note, amount) SELECT g, g % 100, 'row ' || g, g / 7.0 "
                        f"FROM generate_series(1, {ROWS}) g")
        ensure_capture(cfg, get_connection("tideline_kafka"), get_connection("tideline_connect"),
                       get_connection("tideline_source"))
        cfgs.append(cfg)
    return cfgs


def teardown(cfgs) -> None:
    for cfg in cfgs:
        drop_capture(cfg, get_connection("tideline_connect"), get_connection("tideline_source"))
        with closing(pg(stackctl.DATABASES["source"])) as conn, conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {cfg.name}")
        with closing(pg(stackctl.DATABASES["target"])) as conn, conn.cursor() as cur:
            cur.execute(f"DROP SCHEMA IF EXISTS {cfg.name} CASCADE")
            cur.execute("SELECT to_regclass('tideline.table_state') IS NOT NULL")
            if cur.fetchone()[0]:
                for t in ("table_state", "runs", "batches", "dead_letters"):
                    cur.execute(f"DELETE FROM tideline.{t} WHERE pipeline = %s", (cfg.name,))
        from confluent_kafka.admin import AdminClient
        admin = AdminClient({"bootstrap.servers": stackctl.kafka_bootstrap()})
        gone = [t for t in admin.list_topics(timeout=10).topics if t.startswith(f"{cfg.name}.")]
        for fut in (admin.delete_topics(gone).values() if gone else []):
            fut.result(30)


JAVA_OPTIONS: list[str] = []   # --java-options: extra driver JVM options for the streams
ENV: dict[str, str] = {}        # --env: extra environment for the streams


def submit(job: str, cfg, tmp: Path, conf: list[str], *args: str, tuned: bool = False) -> subprocess.Popen:
    """As the DAG's operator submits a job: local[2], the job kind's settings (spark.job_conf,
    spark.job_env), the shipped library; `tuned` adds --java-options/--env (and conf) to try."""
    kind = "stream" if job == "incremental.py" else "load"
    dag_conf = cfg.job_conf(kind)
    env = dict(os.environ, TIDELINE_PIPELINES=str(tmp), **cfg.spark.job_env(kind), **(ENV if tuned else {}))
    dag_conf = driver_conf(dag_conf)
    java = " ".join([dag_conf.pop("spark.driver.extraJavaOptions"), *(JAVA_OPTIONS if tuned else [])])
    confs = [x for c in ["spark.driver.host=127.0.0.1", "spark.driver.bindAddress=127.0.0.1",
                         *(f"{k}={v}" for k, v in dag_conf.items()), *conf]
             for x in ("--conf", c)]
    return subprocess.Popen([str(stackctl.VENV_BIN / "spark-submit"), "--master", "local[2]", *confs,
                             "--py-files", str(library_zip()), "--jars", env["TIDELINE_SPARK_JARS"],
                             "--driver-java-options", java,
                             str(ROOT / "spark_jobs" / job), "--pipeline", cfg.name, *args],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


class Writer(threading.Thread):
    """Updates and inserts on every table at `rate` rows/s in total."""

    def __init__(self, cfgs, rate: int):
        super().__init__(daemon=True)
        self.cfgs, self.rate, self.done = cfgs, rate, threading.Event()

    def run(self) -> None:
        rng, next_id = random.Random(1), ROWS + 1
        with closing(pg(stackctl.DATABASES["source"])) as conn, conn.cursor() as cur:
            while not self.done.is_set():
                started = time.monotonic()
                for cfg in self.cfgs:
                    per = max(1, self.rate // len(self.cfgs) // 10)
                    cur.execute(f"UPDATE {cfg.name} SET qty = qty + 1, updated_at = now() WHERE id = ANY(%s)",
                                ([rng.randint(1, ROWS) for _ in range(per)],))
                    cur.execute(f"INSERT INTO {cfg.name} (id, qty, note) VALUES (%s, 1, 'new')", (next_id,))
                    next_id += 1
                time.sleep(max(0.0, 0.1 - (time.monotonic() - started)))


def batches(cfg) -> int:
    with closing(pg(stackctl.DATABASES["target"])) as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM tideline.batches WHERE pipeline = %s", (cfg.name,))
        return cur.fetchone()[0]


def tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _sum(procs, value) -> float:
    """Sum of value(p) over processes that still exist (short-lived ones come and go)."""
    total = 0.0
    for p in procs:
        try:
            total += value(p)
        except psutil.Error:
            pass
    return total


def cpu_seconds(pid: int) -> float:
    return _sum(tree(pid), lambda p: p.cpu_times().user + p.cpu_times().system)


def equal(cfg) -> bool:
    q = "SELECT count(*), coalesce(sum(hashtext(t::text)), 0) FROM {} t"
    with closing(pg(stackctl.DATABASES["source"])) as s, s.cursor() as sc, \
            closing(pg(stackctl.DATABASES["target"])) as t, t.cursor() as tc:
        sc.execute(q.format(cfg.name))
        tc.execute(q.format(f"{cfg.name}.{cfg.name}"))
        return sc.fetchone() == tc.fetchone()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipelines", type=int, default=3)
    ap.add_argument("--rate", type=int, default=200, help="changes per second over all tables")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--conf", action="append", default=[], help="extra Spark conf key=value for the streams")
    ap.add_argument("--java-options", default="", help="extra driver JVM options for the streams")
    ap.add_argument("--env", action="append", default=[], help="extra KEY=VALUE environment for the streams")
    args = ap.parse_args()
    JAVA_OPTIONS.extend(args.java_options.split())
    ENV.update(kv.split("=", 1) for kv in args.env)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        cfgs = setup(args.pipelines, tmp)
        streams: list[subprocess.Popen] = []
        drains: list[Drain] = []
        writer = Writer(cfgs, args.rate)
        try:
            for cfg in cfgs:
                log(f"{cfg.name}: full load of {ROWS:,} rows")
                load = submit("full_load.py", cfg, tmp, [])
                out, _ = load.communicate()
                if load.returncode != 0:
                    raise SystemExit(out[-3000:])
            writer.start()
            for cfg in cfgs:
                streams.append(submit("incremental.py", cfg, tmp, args.conf, tuned=True))
                drains.append(Drain(streams[-1], tmp / f"{cfg.name}.log"))
                drains[-1].start()
            tried = " ".join(args.conf + JAVA_OPTIONS + args.env) or "the DAG's settings"
            log(f"{len(streams)} streams started ({tried}); "
                f"waiting for batches")
            deadline = time.time() + 300
            while not all(batches(cfg) >= 3 for cfg in cfgs):
                for s, d in zip(streams, drains):
                    if s.poll() is not None:
                        d.join(5)
                        raise SystemExit(f"a stream exited: {d.tail()}")
                if time.time() > deadline:
                    raise SystemExit("the streams committed no batches within 300 s")
                time.sleep(1)
            log(f"sampling for {args.seconds:.0f}s")
            jvm, py, total, peak = [], [], [], [0.0] * len(streams)
            cpu_start = {s.pid: cpu_seconds(s.pid) for s in streams}
            started = time.monotonic()
            while time.monotonic() - started < args.seconds:
                for i, s in enumerate(streams):
                    procs = tree(s.pid)
                    j = _sum(procs, lambda p: p.memory_info().rss if p.name() == "java" else 0) / 1e6
                    p_ = _sum(procs, lambda p: p.memory_info().rss if p.name().startswith("python") else 0) / 1e6
                    jvm.append(j)
                    py.append(p_)
                    total.append(j + p_)
                    peak[i] = max(peak[i], j + p_)
                time.sleep(1)
            secs = time.monotonic() - started
            cpu = [(cpu_seconds(s.pid) - cpu_start[s.pid]) / secs * 100 for s in streams]
            available = psutil.virtual_memory().available / 1e6
        finally:
            writer.done.set()
            for s in streams:
                s.terminate()
            for s in streams:
                try:
                    s.wait(60)
                except subprocess.TimeoutExpired:
                    s.kill()
        # the streams stopped; apply the rest and check every target equals its source
        for cfg in cfgs:
            catch_up = submit("incremental.py", cfg, tmp, [], "--mode", "available_now")
            catch_up.communicate()
            if not equal(cfg):
                raise SystemExit(f"{cfg.name}: target differs from the source")
        teardown(cfgs)
    mean = sum(total) / len(total)
    print(f"[bench] per stream: {mean:.0f} MB resident on average (JVM {sum(jvm) / len(jvm):.0f} MB, Python "
          f"{sum(py) / len(py):.0f} MB), peak {max(peak):.0f} MB, {sum(cpu) / len(cpu):.0f}% of a core; "
          f"{available:.0f} MB still available", flush=True)
    print(f"RESULT streams={len(streams)} per_stream_rss_mb={mean:.0f} per_stream_peak_mb={max(peak):.0f} "
          f"jvm_mb={sum(jvm) / len(jvm):.0f} python_mb={sum(py) / len(py):.0f} "
          f"cpu_pct_per_stream={sum(cpu) / len(cpu):.0f} host_available_mb={available:.0f} "
          f"fit_by_memory={int(available // max(peak))}")
    return 0


if __name__ == "__main__":
    run_bench(main)
