#!/usr/bin/env python3
"""Benchmark: the Iceberg target — full load against the plain Spark job a user would write
instead, the change stream's rate, and a day of commits before and after maintenance.

    .venv/bin/python tests/bench/iceberg.py [--rows 5000000] [--parallelism 4] [--events 1000000]
                                            [--commits 240] [--skip-load] [--skip-stream]
                                            [--stage-on driver|executors]

   --catalog tideline_lake_rest (default: the stack's REST catalog, its warehouse on the S3 store, the
   state in tideline_state) or tideline_lake (the JDBC catalog on a file warehouse).

1. Full load: spark-submit of spark_jobs/full_load.py into the catalog (Spark start-up
   included), vs spark-submit of a plain PySpark job on the same table with the same parallelism:
   `spark.read.jdbc` partitioned on the key -> `writeTo(...).create()` (what the Iceberg docs
   show). Both results are checked: row count, sum of total, count of note, sum of customer_id.
2. Stream: `--events` changes (60% updates, 20% inserts, 20% deletes) on a table of `--events`/4
   keys, captured by Debezium; the incremental job (available_now, its default batch size, submitted
   with the settings the DAG gives it: PipelineConfig.job_conf) applies
   them into Iceberg, timed end to end with its peak RSS; then the table, read by PyIceberg, is
   checked equal to the source (count and an order-independent digest of every row).
3. A day of commits: `--commits` small batches (one every few minutes is ~240-480 a day), then the
   number of files and a full PyIceberg scan's time, before and after the maintenance job.
4. Freshness: the incremental job in continuous mode (as the DAG runs it) committing every
   `--commit-s` seconds while `--fresh-rate` rows/s change; a probe row changes every second, and
   its delay is until a PyIceberg scan of the table's current snapshot shows it (goal: p95 <= 2x
   the commit interval).
Last line:
RESULT full_load_rows_per_s=<n> plain_spark_rows_per_s=<n> ratio=<full_load/plain> cpu_per_m=<CPU-s per
       million rows, the job's processes and the databases'> plain_cpu_per_m=<n> plain_cpu_ratio=<plain/ours>
       stream_events_per_s=<n>
       stream_sustained_events_per_s=<after the first batch> stream_peak_rss_mb=<n> stage_on=<auto|driver|executors>
       driver_cpu_s_per_m=<the stream driver's Python CPU per million events> files_before=<data+delete> files_after=<n> scan_s_before=<x> scan_s_after=<x>
       commit_interval_s=<x> fresh_p50_s=<x> fresh_p95_s=<x> fresh_p95_ratio=<p95/commit interval>
"""
from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import tempfile
import time
from contextlib import closing
from pathlib import Path

import yaml

from benchlib import (ROOT, CpuMeter, driver_cpu, PeakRss, SteadyLoad, checkpoint, ensure_topic, run_bench, pg, run_full_load,
                     stackctl)
from full_load import TABLE, ensure_source

os.environ.update(stackctl.environment())

from tideline.capture.connector import drop_capture, ensure_capture  # noqa: E402
from tideline.core.config import load_pipeline  # noqa: E402
from tideline.core.connections import get_connection  # noqa: E402
from tideline.kafka_offsets import end_offsets  # noqa: E402
from tideline.spark_session import driver_conf  # noqa: E402
from tideline.targets import for_connection  # noqa: E402

NAMESPACE = "bench_lake"
LOAD_PIPELINE, STREAM_PIPELINE, STREAM_TABLE = "benchlake", "benchlakes", "bench_lake_changes"
# one row whose value the freshness phase sets; committed after STREAM_TABLE in each batch (tables
# commit in name order), so its delay includes the busy table's MERGE
PROBE_TABLE = "bench_lake_probe"
PROBE_TIMEOUT_S = 60
PLAIN_JOB = '''
import sys
from pyspark.sql import SparkSession
url, user, password, table, target, parts, lo, hi = sys.argv[1:9]
spark = SparkSession.builder.getOrCreate()
df = spark.read.jdbc(url, table, column="id", lowerBound=int(lo), upperBound=int(hi) + 1, numPartitions=int(parts),
                     properties={"user": user, "password": password, "driver": "org.postgresql.Driver",
                                 "fetchsize": "10000"})   # without it the driver holds a whole partition
df.writeTo(target).using("iceberg").create()
'''


def log(msg: str) -> None:
    print(f"[bench] {time.strftime('%H:%M:%S')} {msg}", flush=True)


CATALOG = {"conn_id": "tideline_lake_rest"}   # --catalog
STATES = {"tideline_lake_rest": "tideline_state"}   # a catalog whose state lives apart: its database


def lake():
    state = STATES.get(CATALOG["conn_id"])
    return for_connection(get_connection(CATALOG["conn_id"]), get_connection(state) if state else None)


def lake_settings() -> dict:
    """A bench pipeline's target (and state) in the catalog --catalog names."""
    state = STATES.get(CATALOG["conn_id"])
    return {"target": {"kind": "iceberg", "catalog": CATALOG["conn_id"], "namespace": NAMESPACE},
            **({"state": {"conn_id": state}} if state else {})}


def drop_namespace(store) -> None:
    catalog = store.pyiceberg_catalog()
    if (NAMESPACE,) in catalog.list_namespaces():
        for ident in catalog.list_tables(NAMESPACE):
            catalog.purge_table(ident)
        if catalog.namespace_exists(NAMESPACE):   # a namespace only its tables made is gone with them
            catalog.drop_namespace(NAMESPACE)


def submit_command(args: list[str], env: dict, store, cfg=None, kind: str | None = None) -> tuple[list[str], dict]:
    """spark-submit's command line and environment for `args`: the stack's and Iceberg's jars and,
    given a pipeline `cfg`, the settings and memory environment the DAG submits its `kind` of job
    with (as dag_factory.spark_submission)."""
    if cfg is not None:
        env = dict(env, **cfg.spark.job_env(kind))
    conf = driver_conf(cfg.job_conf(kind, writes_in_jvm=store.capabilities().writes_in_jvm) if cfg is not None
                       else {}, environ=env)
    return [str(stackctl.VENV_BIN / "spark-submit"), "--master", "local[2]",
            *[x for k, v in conf.items() for x in ("--conf", f"{k}={v}")],
            "--jars", ",".join([env["TIDELINE_SPARK_JARS"], *store.spark_jars()]), *args], env


def submit(args: list[str], env: dict, store, cfg=None, kind: str | None = None,
           arrivals: list | None = None) -> tuple[float, float, str]:
    """spark-submit with the stack's and Iceberg's jars and, given a pipeline `cfg`, the settings and
    memory environment the DAG submits its `kind` of job with (as dag_factory.spark_submission; none for the
    plain job): (seconds, peak RSS MB, output). `arrivals` gets (monotonic time, line) as each line
    comes: the job's log has whole seconds, and a ~14 s span counted in those is off by up to 7%."""
    command, env = submit_command(args, env, store, cfg, kind)
    started = time.monotonic()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rss = PeakRss(proc.pid)
    rss.start()
    lines = []
    for line in iter(proc.stdout.readline, ""):
        lines.append(line)
        if arrivals is not None:
            arrivals.append((time.monotonic(), line))
    proc.wait()
    out = "".join(lines)
    rss.done.set()
    if proc.returncode != 0:
        print(out[-4000:])
        raise SystemExit(f"{next(a for a in args if a.endswith('.py'))} failed with exit status {proc.returncode}")
    return time.monotonic() - started, rss.peak / 1e6, out


def aggregates(arrow) -> tuple:
    import pyarrow.compute as pc
    return (arrow.num_rows, str(pc.sum(arrow["total"]).as_py()), pc.count(arrow["note"]).as_py(),
            pc.sum(arrow["customer_id"]).as_py())


def bench_load(args, env: dict, store) -> tuple[float, float, float, float, float]:
    ensure_source(args.rows)
    ensure_topic(f"benchlake.public.{TABLE}")
    with closing(pg(stackctl.DATABASES["source"])) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT count(*), sum(total)::text, count(note), sum(customer_id), min(id), max(id) FROM {TABLE}")
        *expected, lo, hi = cur.fetchone()
    expected = (expected[0], expected[1], expected[2], int(expected[3]))
    drop_namespace(store)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / f"{LOAD_PIPELINE}.yaml").write_text(yaml.safe_dump({
            "name": LOAD_PIPELINE, "source": {"conn_id": "tideline_source"}, **lake_settings(),
            "kafka": {"topic_prefix": "benchlake"},
            "spark": {"parallelism": args.parallelism, "conf": dict(args.load_conf)},
            "tables": [{"name": TABLE}]}))
        checkpoint()   # the source table's creation (when a bench of another size had it) is ~1.5 GB of WAL
        log(f"Tideline full load of {args.rows:,} rows into Iceberg (spark-submit, {args.parallelism} partitions)")
        with CpuMeter("Tideline's load", args.rows) as ours_cpu:
            ours, peak = run_full_load(LOAD_PIPELINE, Path(tmp), dict(env, TIDELINE_SPARK_JARS=",".join(
                [env["TIDELINE_SPARK_JARS"], *store.spark_jars()])))
        got = aggregates(store.pyiceberg_catalog().load_table((NAMESPACE, TABLE)).scan(
            selected_fields=("total", "note", "customer_id")).to_arrow())
        if got != expected:
            raise SystemExit(f"Tideline's Iceberg table differs from the source: {got} vs {expected}")
        log(f"Tideline: {ours:.1f}s, peak RSS {peak:.0f} MB; checked {got}")
        job = Path(tmp) / "plain_iceberg_load.py"
        job.write_text(PLAIN_JOB)
        src = get_connection("tideline_source")
        conf = [x for k, v in store.spark_conf().items() for x in ("--conf", f"{k}={v}")]
        if store.settings.store is not None:   # the object store's checksum settings, as Tideline's jobs get them
            conf += ["--conf", "spark.driver.extraJavaOptions=" + " ".join(
                f"-D{k}={v}" for k, v in store.settings.store.jvm_properties().items())]
        checkpoint()
        log(f"plain Spark job: spark.read.jdbc partitioned on id ({args.parallelism}) -> writeTo().create()")
        with CpuMeter("the plain Spark job", args.rows) as plain_cpu:
            plain, _, _ = submit([*conf, str(job), src.jdbc_url(), src.login, src.password, TABLE,
                                  f"{store.catalog}.{NAMESPACE}.plain_{TABLE}", str(args.parallelism), str(lo), str(hi)],
                                 env, store)
        got = aggregates(store.pyiceberg_catalog().load_table((NAMESPACE, f"plain_{TABLE}")).scan(
            selected_fields=("total", "note", "customer_id")).to_arrow())
        if got != expected:
            raise SystemExit(f"the plain job's Iceberg table differs from the source: {got} vs {expected}")
        log(f"plain Spark job: {plain:.1f}s; checked {got}")
    return args.rows / ours, args.rows / plain, peak, ours_cpu.total_per_m, plain_cpu.total_per_m


def source_digest() -> tuple[int, str]:
    with closing(pg(stackctl.DATABASES["source"])) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT id, v, note FROM {STREAM_TABLE}")
        return digest(cur.fetchall())


def digest(rows) -> tuple[int, str]:
    h = 0
    for r in rows:
        h ^= int.from_bytes(hashlib.blake2b(repr(tuple(r)).encode(), digest_size=8).digest(), "big")
    return len(rows), f"{h:016x}"


def lake_digest(store) -> tuple[int, str]:
    arrow = store.pyiceberg_catalog().load_table((NAMESPACE, STREAM_TABLE)).scan().to_arrow()
    return digest(list(zip(arrow["id"].to_pylist(), arrow["v"].to_pylist(), arrow["note"].to_pylist())))


STAGE_ON: dict = {}   # --stage-on: the stream.stage_on of every stream this bench runs (else what auto picks)


def stream_pipeline(folder: Path, max_events: int | None = None, commit_s: float | None = None) -> Path:
    stream = dict(STAGE_ON, **({"max_offsets_per_trigger": max_events} if max_events else {}))
    if commit_s:
        stream["trigger_interval_s"] = commit_s
    (folder / f"{STREAM_PIPELINE}.yaml").write_text(yaml.safe_dump({
        "name": STREAM_PIPELINE, "source": {"conn_id": "tideline_source"}, **lake_settings(),
        "kafka": {"topic_prefix": "benchlakes", "partitions": 2},
        "stream": stream,
        "maintenance": {"snapshot_retention_hours": 0, "orphan_age_hours": 1},
        "tables": [{"name": STREAM_TABLE}, {"name": PROBE_TABLE}]}))
    return folder


def wait_for_events(cfg, at_least: int) -> None:
    deadline = time.time() + 600
    while sum(end_offsets(stackctl.kafka_bootstrap(), cfg.topic(STREAM_TABLE)).values()) < at_least:
        if time.time() > deadline:
            raise SystemExit("Debezium did not deliver the changes within 600s")
        time.sleep(1)


def run_stream(folder: Path, env: dict, store) -> tuple[float, float, float, float]:
    env = dict(env, TIDELINE_PIPELINES=str(folder))
    cfg = load_pipeline(folder / f"{STREAM_PIPELINE}.yaml")
    arrivals = []
    secs, peak, _ = submit([str(ROOT / "spark_jobs" / "incremental.py"), "--pipeline", STREAM_PIPELINE,
                            "--mode", "available_now"], env, store, cfg, "stream", arrivals)
    committed = []   # (when its line arrived, events) per batch, from the job's log
    cpu = driver_cpu("\n".join(line for _, line in arrivals))
    for at, line in arrivals:
        if ("batch " in line and "events" in line) or "merged in one Iceberg commit" in line:
            print("   ", line.strip()[-170:])
        m = BATCH_LINE.search(line)
        if m:
            committed.append((at, int(m.group(1).replace(",", ""))))
    return secs, peak, sustained(committed), cpu


BATCH_LINE = re.compile(r"\] INFO tideline\.incremental: batch \d+: ([\d,]+) events")


def sustained(committed: list[tuple[float, int]]) -> float:
    """Events per second once the stream runs: the batches after the first (which carries the JVM's
    warm-up) over the time from the first batch's commit to the last's."""
    if len(committed) < 3:
        return 0.0
    span = committed[-1][0] - committed[0][0]
    return sum(n for _, n in committed[1:]) / span if span else 0.0


def bench_stream(args, env: dict, store) -> tuple[float, float, float, int, int, float, float]:
    keys = args.events // 4
    with closing(pg(stackctl.DATABASES["source"])) as conn, conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {STREAM_TABLE}")
        cur.execute(f"CREATE TABLE {STREAM_TABLE} (id bigint PRIMARY KEY, v bigint NOT NULL, note text)")
        cur.execute(f"INSERT INTO {STREAM_TABLE} SELECT g, g, 'note ' || g FROM generate_series(1, {keys}) g")
        cur.execute(f"DROP TABLE IF EXISTS {PROBE_TABLE}")
        cur.execute(f"CREATE TABLE {PROBE_TABLE} (id int PRIMARY KEY, n bigint NOT NULL)")
        cur.execute(f"INSERT INTO {PROBE_TABLE} VALUES (1, 0)")
    with tempfile.TemporaryDirectory() as tmp:
        folder = stream_pipeline(Path(tmp))
        cfg = load_pipeline(folder / f"{STREAM_PIPELINE}.yaml")
        drop_capture(cfg, get_connection("tideline_connect"), get_connection("tideline_source"))
        ensure_capture(cfg, get_connection("tideline_kafka"), get_connection("tideline_connect"),
                       get_connection("tideline_source"))
        from tideline.load.full_load import FullLoad
        from tideline.spark_session import get_session
        spark = get_session("bench-lake", extra_jars=store.spark_jars())
        FullLoad(cfg, spark).run([STREAM_TABLE, PROBE_TABLE])
        base = sum(end_offsets(stackctl.kafka_bootstrap(), cfg.topic(STREAM_TABLE)).values())
        log(f"making {args.events:,} changes over {keys:,} keys (60% updates, 20% inserts, 20% deletes)")
        with closing(pg(stackctl.DATABASES["source"])) as conn, conn.cursor() as cur:
            step = args.events // 10
            for i in range(10):   # each round: 6 updates, 2 inserts, 2 deletes per 10 events
                n = step // 10
                cur.execute(f"UPDATE {STREAM_TABLE} SET v = v + 1 WHERE id IN (SELECT id FROM {STREAM_TABLE} "
                            f"ORDER BY (id * {7919 + i}) % 1000003 LIMIT {6 * n})")
                cur.execute(f"INSERT INTO {STREAM_TABLE} SELECT g, g, 'new ' || g FROM generate_series("
                            f"{keys * 10 + i * 2 * n + 1}, {keys * 10 + (i + 1) * 2 * n}) g")
                cur.execute(f"DELETE FROM {STREAM_TABLE} WHERE id IN (SELECT id FROM {STREAM_TABLE} "
                            f"ORDER BY (id * {104729 + i}) % 1000033 LIMIT {2 * n})")
        events = (args.events // 100) * 100
        wait_for_events(cfg, base + events)
        log(f"stream of {events:,} events into Iceberg (spark-submit, available_now)")
        secs, peak, steady, cpu = run_stream(folder, env, store)
        expected, got = source_digest(), lake_digest(store)
        if got != expected:
            raise SystemExit(f"the Iceberg table differs from the source after the stream: {got} vs {expected}")
        log(f"stream: {secs:.1f}s end to end ({events / secs:,.0f} events/s; {steady:,.0f} events/s sustained, "
            f"after the first batch), driver Python CPU {cpu:.1f}s, peak RSS {peak:.0f} MB; equal {got}")
        # a day of small commits, then maintenance
        folder = stream_pipeline(Path(tmp), max_events=100)
        per = 100
        log(f"{args.commits} small commits ({per} events each)")
        with closing(pg(stackctl.DATABASES["source"])) as conn, conn.cursor() as cur:
            for i in range(args.commits):
                cur.execute(f"UPDATE {STREAM_TABLE} SET v = v + 1 WHERE id IN (SELECT id FROM {STREAM_TABLE} "
                            f"ORDER BY (id * {31 + i}) % 1000003 LIMIT {per - 10})")
                cur.execute(f"DELETE FROM {STREAM_TABLE} WHERE id IN (SELECT id FROM {STREAM_TABLE} "
                            f"ORDER BY (id * {97 + i}) % 1000033 LIMIT 10)")
        wait_for_events(cfg, base + events + args.commits * per)
        run_stream(folder, env, store)
        before = store.table_facts(NAMESPACE, STREAM_TABLE)
        scan_before = timed_scan(store)
        log(f"after the commits: {before}; full scan {scan_before:.2f}s")
        m_secs, _, _ = submit([str(ROOT / "spark_jobs" / "maintain.py"), "--pipeline", STREAM_PIPELINE],
                              dict(env, TIDELINE_PIPELINES=str(folder)), store, cfg, "load")   # as the maintain DAG submits it
        after = store.table_facts(NAMESPACE, STREAM_TABLE)
        scan_after = timed_scan(store)
        if lake_digest(store) != source_digest():
            raise SystemExit("the Iceberg table differs from the source after maintenance")
        log(f"after maintenance ({m_secs:.1f}s end to end): {after}; full scan {scan_after:.2f}s; equal to the source")
        log(f"freshness: last, a continuous stream committing every {args.commit_s:g}s while the source changes "
            f"~{args.fresh_rate:,} rows/s, for {args.fresh_seconds:.0f}s")
        fresh = measure_freshness(stream_pipeline(Path(tmp), commit_s=args.commit_s), env, store, keys,
                                  args.fresh_rate, args.fresh_seconds)
        spark.stop()
        # the connector and its replication slot go too: a slot left behind pins the source's WAL
        drop_capture(cfg, get_connection("tideline_connect"), get_connection("tideline_source"))
    return (events / secs, steady, peak, cpu / events * 1e6, before["data_files"] + before["delete_files"],
            after["data_files"] + after["delete_files"], scan_before, scan_after, fresh)


def measure_freshness(folder: Path, env: dict, store, keys: int, rate: int, seconds: float) -> tuple[float, float]:
    """p50 and p95 seconds from a source commit to its row in the Iceberg table, read by PyIceberg
    (not Spark): the stream runs continuously (as the DAG runs it) at the pipeline's commit
    interval while `rate` rows/s change in STREAM_TABLE; every second the probe row gets the next
    value, and each value's delay is the time until a scan of the table's current snapshot shows
    it or a later one (a probe not seen within PROBE_TIMEOUT_S counts as that, it is not dropped)."""
    env = dict(env, TIDELINE_PIPELINES=str(folder))
    cfg = load_pipeline(folder / f"{STREAM_PIPELINE}.yaml")
    command, env = submit_command([str(ROOT / "spark_jobs" / "incremental.py"), "--pipeline", STREAM_PIPELINE,
                                   "--mode", "continuous"], env, store, cfg, "stream")
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    catalog, delays = store.pyiceberg_catalog(), {}

    def probe_value() -> int:
        rows = catalog.load_table((NAMESPACE, PROBE_TABLE)).scan(selected_fields=("n",)).to_arrow()
        return rows.column("n")[0].as_py() if rows.num_rows else -1

    load = SteadyLoad(STREAM_TABLE, "v", keys, rate)
    try:
        with closing(pg(stackctl.DATABASES["source"])) as conn, conn.cursor() as cur:
            cur.execute(f"UPDATE {PROBE_TABLE} SET n = -2 WHERE id = 1")
            deadline = time.time() + 180
            while probe_value() != -2:   # the stream runs and applies
                if time.time() > deadline or proc.poll() is not None:
                    raise SystemExit("the continuous stream did not apply the first probe within 180s")
                time.sleep(0.2)
            load.start()
            written: dict[int, float] = {}   # probe value -> when the source committed it
            seen, n, end = 0, 0, time.time() + seconds
            while written.keys() - delays.keys() or time.time() < end:
                now = time.time()
                if now < end and now - written.get(n, 0) >= 1.0:   # a new probe every second
                    n += 1
                    cur.execute(f"UPDATE {PROBE_TABLE} SET n = %s WHERE id = 1", (n,))
                    written[n] = time.time()
                value = probe_value()
                for k in range(seen + 1, value + 1):   # every probe up to the value seen is visible now
                    delays.setdefault(k, time.time() - written[k])
                seen = max(seen, value)
                for k in written.keys() - delays.keys():
                    if time.time() - written[k] >= PROBE_TIMEOUT_S:
                        delays[k] = PROBE_TIMEOUT_S   # counted as the timeout, not dropped
                time.sleep(0.05)
    finally:
        load.stop.set()
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    ordered = sorted(delays.values())
    p50, p95 = ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    log(f"freshness: {len(ordered)} probes, p50 {p50:.2f}s p95 {p95:.2f}s max {ordered[-1]:.2f}s")
    return p50, p95


def timed_scan(store) -> float:
    best = None
    for _ in range(3):
        started = time.monotonic()
        store.pyiceberg_catalog().load_table((NAMESPACE, STREAM_TABLE)).scan().to_arrow()
        secs = time.monotonic() - started
        best = secs if best is None else min(best, secs)
    return best


def setting(text: str) -> tuple[str, str]:
    """A --load-conf KEY=VALUE (argparse says what is wrong with one that is not)."""
    key, sep, value = text.partition("=")
    if not (key and sep):
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE (e.g. spark.sql.iceberg.compression-level=1)")
    return key, value


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--parallelism", type=int, default=4)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--commits", type=int, default=240)
    ap.add_argument("--commit-s", type=float, default=5.0, help="the freshness phase's commit interval")
    ap.add_argument("--fresh-rate", type=int, default=1000, help="rows/s changed during the freshness phase")
    ap.add_argument("--fresh-seconds", type=float, default=60)
    ap.add_argument("--skip-load", action="store_true")
    ap.add_argument("--load-conf", action="append", default=[], metavar="KEY=VALUE", type=setting,
                    help="a Spark setting of Tideline's load job (the pipeline's spark.conf): to try a tuning")
    ap.add_argument("--skip-stream", action="store_true", help="only the full load against the plain job")
    ap.add_argument("--catalog", choices=("tideline_lake_rest", "tideline_lake"), default="tideline_lake_rest",
                    help="the REST catalog on the S3 store (default), or the JDBC catalog on a file warehouse")
    ap.add_argument("--stage-on", choices=("driver", "executors"), default=None,
                    help="stream.stage_on of the streams (default: what auto picks: driver on local[2])")
    args = ap.parse_args()
    CATALOG["conn_id"] = args.catalog
    if args.stage_on:
        STAGE_ON["stage_on"] = args.stage_on
    env = stackctl.full_env()
    store = lake()
    ours = plain = peak_load = cpu = plain_cpu = 0.0
    if not args.skip_load:
        ours, plain, peak_load, cpu, plain_cpu = bench_load(args, env, store)
    rate = steady = peak = stream_cpu = files_before = files_after = scan_before = scan_after = 0
    fresh = (0.0, 0.0)
    if not args.skip_stream:
        rate, steady, peak, stream_cpu, files_before, files_after, scan_before, scan_after, fresh = \
            bench_stream(args, env, store)
    print(f"RESULT catalog={args.catalog} full_load_rows_per_s={ours:.0f} plain_spark_rows_per_s={plain:.0f} "
          f"ratio={ours / plain if plain else 0:.2f} load_peak_rss_mb={peak_load:.0f} cpu_per_m={cpu:.2f} "
          f"plain_cpu_per_m={plain_cpu:.2f} plain_cpu_ratio={plain_cpu / cpu if cpu else 0:.2f} "
          f"stream_events_per_s={rate:.0f} "
          f"stream_sustained_events_per_s={steady:.0f} "
          f"stream_peak_rss_mb={peak:.0f} stage_on={STAGE_ON.get('stage_on', 'auto')} "
          f"driver_cpu_s_per_m={stream_cpu:.1f} files_before={files_before} files_after={files_after} "
          f"scan_s_before={scan_before:.2f} scan_s_after={scan_after:.2f} commit_interval_s={args.commit_s:g} "
          f"fresh_p50_s={fresh[0]:.2f} fresh_p95_s={fresh[1]:.2f} fresh_p95_ratio={fresh[1] / args.commit_s:.2f}")
    return 0


if __name__ == "__main__":
    run_bench(main)
