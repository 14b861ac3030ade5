#!/usr/bin/env python3
"""Benchmark: applying Debezium change events — Tideline's incremental job vs the Debezium JDBC
sink connector on the same Connect worker, same topic, same run; then end-to-end latency.

    .venv/bin/python tests/bench/incremental.py [--events 2000000] [--keys 100000] [--latency-seconds 120]
                                                [--with-extras] [--with-history]

1. A source table gets ~`events` changes over `keys` keys (inserts, updates, deletes), captured by
   two Debezium connectors from the same transactions: Tideline's pipeline (schemaless JSON, its
   default) and the peer's (JSON with schemas, which the JDBC sink requires).
2. Tideline: spark-submit of spark_jobs/incremental.py --mode available_now as the sync DAG
   submits it (default settings: 1 GB driver heap, max_offsets_per_trigger 200,000), timed end to
   end (Spark start-up included), into a target table the full load created.
3. Peer: the Debezium JDBC sink (insert.mode=upsert, delete.enabled=true, tasks.max = the topic's
   partitions) applies its topic into another schema; timed until its consumer group has consumed
   the whole topic. Same source transactions, same number of events; what differs is the
   encoding the sink requires (JSON with schemas, ~3x the bytes per event) and that it applies
   every event while Tideline compacts each batch to the last change per key.
4. Latency: the job in continuous mode while the source changes at a steady ~1,000 rows/s; probe
   rows are committed every 0.5 s and the time until each is visible in the target is recorded (a
   probe not visible within 30 s counts as 30 s, it is not dropped).
5. With --with-extras / --with-history: the same events into a table with soft deletes and every
   metadata column / into a history (SCD type 2) table, each submitted alike right after
   Tideline's plain run; their events/s and the ratio to the plain run are printed
   (`extras_ratio`, `history_ratio`: what each option costs, 1.00 = nothing).
Both targets are checked equal to the source (exit status 1 otherwise). Last line:
RESULT apply_events_per_s=<n> jdbc_sink_events_per_s=<n> ratio=<apply/jdbc_sink> p50_latency_s=<x> p95_latency_s=<x> peak_rss_mb=<n> p99_latency_s=<x> peak_pss_mb=<n>
(peak_rss_mb sums the RSS of the job's processes; peak_pss_mb their proportional set sizes: see benchlib.PeakRss)
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from contextlib import closing
from pathlib import Path

import psycopg2
import requests
import yaml

from cluster import executors as cluster_executors
from benchlib import (ROOT, Drain, driver_cpu, PeakRss, SteadyLoad, checkpoint, forget_pipeline, run_bench, pg,
                     stackctl, wal_counters, wal_since)

os.environ.update(stackctl.environment())

from tideline.capture.connector import drop_capture, ensure_capture  # noqa: E402
from tideline.core.config import load_pipeline  # noqa: E402
from tideline.core.connections import get_connection  # noqa: E402
from tideline.kafka_offsets import end_offsets  # noqa: E402
from tideline.spark_session import driver_conf  # noqa: E402

PIPELINE, TABLE = "benchinc", "bench_changes"
PEER_PIPELINE = "benchpeer"   # same table, events with JSON schemas, for the JDBC sink
# same table and events into a table with an option (--with-<option>): its pipeline, table options, live rows
OPTION_SIDES = {
    "extras": ("benchext", {"deletes": "soft", "metadata": ["synced_at", "op", "source_ts", "source_position"]},
               "_tideline_deleted_at IS NULL"),
    "history": ("benchhist", {"history": True}, "_tideline_current"),
    # the same events staged the other way (stream.stage_on): its ratio is the other way over this run's
    "other_stage": ("benchstg", {}, "true"),
}
PEER_SCHEMA = "bench_jdbc_sink"
PEER = "bench-jdbc-sink"
JOB_LOG = Path(tempfile.gettempdir()) / "bench-incremental-job.log"   # the availableNow job's whole output
CLUSTER = False   # --cluster: Tideline's jobs on the stack's standalone cluster



def log(msg: str) -> None:
    print(f"[bench] {time.strftime('%H:%M:%S')} {msg}", flush=True)


def spark_submit(pipelines: Path, *args: str, pipeline: str = PIPELINE) -> subprocess.Popen:
    """As the sync DAG submits the stream: local[2], Spark's default 1 GB driver heap, the
    stream's settings and memory environment from the pipeline (spark.job_conf, spark.job_env)."""
    cfg = load_pipeline(pipelines / f"{pipeline}.yaml")
    env = dict(os.environ, TIDELINE_PIPELINES=str(pipelines), **cfg.spark.job_env("stream"))
    conf = driver_conf(cfg.job_conf("stream"))
    cluster = ()
    if CLUSTER:   # the library as --py-files, as the operator submits it; both one-core workers
        from tideline.packaging import library_zip
        cluster = ("--py-files", str(library_zip()), "--conf", "spark.executor.memory=1g", "--conf",
                   f"spark.cores.max={stackctl.SPARK_WORKERS}")
    return subprocess.Popen([str(stackctl.VENV_BIN / "spark-submit"), "--master",
                             stackctl.spark_master_url() if CLUSTER else "local[2]",
                             *[x for k, v in conf.items() for x in ("--conf", f"{k}={v}")], *cluster,
                             "--jars", env["TIDELINE_SPARK_JARS"],
                             str(ROOT / "spark_jobs" / "incremental.py"), "--pipeline", pipeline, *args],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def reset(cfgs) -> None:
    requests.delete(f"{stackctl.connect_url()}/connectors/{PEER}", timeout=30)
    for cfg in cfgs:
        drop_capture(cfg, get_connection("tideline_connect"), get_connection("tideline_source"))
    with closing(pg(stackctl.DATABASES["source"])) as conn, conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {TABLE}")
        cur.execute(f"CREATE TABLE {TABLE} (id bigint PRIMARY KEY, qty int NOT NULL, note text, "
                    f"amount numeric(12,2), updated_at timestamptz NOT NULL DEFAULT now())")
    with closing(pg(stackctl.DATABASES["target"])) as conn, conn.cursor() as cur:
        options = [name for name, _t, _l in OPTION_SIDES.values()]
        for schema in (PIPELINE, PEER_PIPELINE, PEER_SCHEMA, *options):
            cur.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        cur.execute(f"CREATE SCHEMA {PEER_SCHEMA}")
        for name in (PIPELINE, *options):
            forget_pipeline(cur, name)
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": stackctl.kafka_bootstrap()})
    for cfg in cfgs:
        topic = cfg.topic(TABLE)
        if topic in admin.list_topics(timeout=10).topics:
            admin.delete_topics([topic])[topic].result(30)
    time.sleep(2)


def generate_changes(events: int, keys: int) -> int:
    """~events changes over keys rows: all inserted, then update rounds, deletes and re-inserts."""
    made = 0
    with closing(pg(stackctl.DATABASES["source"])) as conn, conn.cursor() as cur:
        cur.execute(f"INSERT INTO {TABLE} (id, qty, note, amount) SELECT g, 0, 'note ' || g, g / 100.0 "
                    f"FROM generate_series(1, {keys}) g")
        made += keys
        step = max(1, keys // 10)
        round_no = 0
        while made < events:
            round_no += 1
            if round_no % 4 == 0:
                lo = (round_no * step) % keys
                cur.execute(f"DELETE FROM {TABLE} WHERE id > {lo} AND id <= {lo + step}")
                made += cur.rowcount
                cur.execute(f"INSERT INTO {TABLE} (id, qty, note, amount) SELECT g, {round_no}, 'again', 1 "
                            f"FROM generate_series({lo + 1}, {lo + step}) g ON CONFLICT DO NOTHING")
                made += cur.rowcount
            else:
                n = min(keys, events - made)
                cur.execute(f"UPDATE {TABLE} SET qty = qty + 1, amount = amount + 0.01, updated_at = now() "
                            f"WHERE id <= {n}")
                made += cur.rowcount
    return made


def wait_for_topic(topic: str, at_least: int, timeout: float = 900) -> int:
    deadline = time.time() + timeout
    last, stable_since = -1, time.time()
    while time.time() < deadline:
        total = sum(end_offsets(stackctl.kafka_bootstrap(), topic).values())
        if total != last:
            last, stable_since = total, time.time()
        elif total >= at_least and time.time() - stable_since > 5:
            return total
        time.sleep(1)
    raise SystemExit(f"Debezium produced only {last} events to {topic} in {timeout}s")


def equal_to_source(schema: str, live: str = "true") -> bool:
    """`live`: the target's rows that count (a soft-delete table keeps its deleted ones, marked)."""
    # id::bigint: the JDBC sink creates its table from the events' schemas, where every column is text
    q = ("SELECT count(*), md5(string_agg(id || ':' || qty || ':' || coalesce(note, '') || ':' || amount, ',' "
         "ORDER BY id::bigint)) FROM {} WHERE {}")
    with closing(pg(stackctl.DATABASES["source"])) as s, closing(pg(stackctl.DATABASES["target"])) as t:
        with s.cursor() as cs, t.cursor() as ct:
            cs.execute(q.format(TABLE, "true"))
            ct.execute(q.format(f"{schema}.{TABLE}", live))
            a, b = cs.fetchone(), ct.fetchone()
    if a != b:
        log(f"  {schema}: source {a} vs target {b}")
    return a == b


PROBE_TIMEOUT_S = 30.0


def event_bytes(topic: str, sample: int = 2000) -> float:
    """Mean size (key + value) of the first `sample` events of the topic."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": stackctl.kafka_bootstrap(), "group.id": f"bench-size-{time.time()}",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        sizes = []
        while len(sizes) < sample:
            msgs = consumer.consume(500, timeout=5)
            if not msgs:
                break
            sizes += [len(m.key() or b"") + len(m.value() or b"") for m in msgs if not m.error()]
        return sum(sizes) / len(sizes) if sizes else 0.0
    finally:
        consumer.close()


def jdbc_sink_config(tasks: int, **settings: str) -> dict[str, str]:
    """The Debezium JDBC sink as a user would set it up for this target: upserts by the record key,
    deletes applied, JSON with schemas; `settings` name its topics and tables."""
    target = get_connection("tideline_target")
    return {
        "connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector", "tasks.max": str(tasks),
        "connection.url": f"jdbc:postgresql://{target.host}:{target.port}/{target.schema}",
        "connection.username": target.login, "connection.password": target.password,
        "insert.mode": "upsert", "delete.enabled": "true", "primary.key.mode": "record_key",
        "schema.evolution": "basic",
        "key.converter": "org.apache.kafka.connect.json.JsonConverter", "key.converter.schemas.enable": "true",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter", "value.converter.schemas.enable": "true",
        "consumer.override.max.poll.records": "2000", "batch.size": "2000", **settings,
    }


def run_jdbc_sink(topic: str, tasks: int) -> float:
    config = jdbc_sink_config(tasks, topics=topic, **{"collection.name.format": f"{PEER_SCHEMA}.{TABLE}"})
    started = time.monotonic()
    resp = requests.put(f"{stackctl.connect_url()}/connectors/{PEER}/config", json=config, timeout=30)
    resp.raise_for_status()
    from confluent_kafka import Consumer, TopicPartition
    group = Consumer({"bootstrap.servers": stackctl.kafka_bootstrap(), "group.id": f"connect-{PEER}"})
    parts = end_offsets(stackctl.kafka_bootstrap(), topic)
    deadline = time.time() + 1800
    while time.time() < deadline:
        committed = group.committed([TopicPartition(topic, p) for p in parts], timeout=10)
        done = sum(max(tp.offset, 0) for tp in committed)
        status = requests.get(f"{stackctl.connect_url()}/connectors/{PEER}/status", timeout=10).json()
        if any(t["state"] == "FAILED" for t in status.get("tasks", [])):
            raise SystemExit(f"JDBC sink failed: {status['tasks'][0].get('trace', '')[:2000]}")
        if done >= sum(parts.values()):
            break
        time.sleep(0.5)
    secs = time.monotonic() - started
    group.close()
    requests.delete(f"{stackctl.connect_url()}/connectors/{PEER}", timeout=30)
    return secs


def measure_latency(pipelines: Path, keys: int, seconds: float) -> tuple[list[float], float, float]:
    probe_id = keys + 10_000_000
    with closing(pg(stackctl.DATABASES["source"])) as conn, conn.cursor() as cur:
        cur.execute(f"INSERT INTO {TABLE} (id, qty) VALUES (%s, 0) ON CONFLICT (id) DO UPDATE SET qty = 0",
                    (probe_id,))
    proc = spark_submit(pipelines, "--mode", "continuous")
    Drain(proc, pipelines / "stream.log").start()
    rss = PeakRss(proc.pid)
    rss.start()
    load = SteadyLoad(TABLE, "qty", keys, 1000)
    lat: list[float] = []
    try:
        with closing(pg(stackctl.DATABASES["target"])) as tgt, tgt.cursor() as tcur:
            deadline = time.time() + 180
            while time.time() < deadline:  # wait until the stream runs and has applied the probe row
                try:
                    tcur.execute(f"SELECT qty FROM {PIPELINE}.{TABLE} WHERE id = %s", (probe_id,))
                    if tcur.fetchone() == (0,):
                        break
                except psycopg2.Error:
                    pass
                time.sleep(0.2)
            load.start()
            end = time.time() + seconds
            n = 0
            with closing(pg(stackctl.DATABASES["source"])) as src, src.cursor() as scur:
                while time.time() < end:
                    n += 1
                    scur.execute(f"UPDATE {TABLE} SET qty = %s WHERE id = %s", (n, probe_id))
                    committed = time.time()
                    while True:
                        tcur.execute(f"SELECT qty FROM {PIPELINE}.{TABLE} WHERE id = %s", (probe_id,))
                        if tcur.fetchone()[0] >= n:
                            lat.append(time.time() - committed)
                            break
                        if time.time() - committed >= PROBE_TIMEOUT_S:
                            lat.append(PROBE_TIMEOUT_S)   # counted as the timeout, not dropped
                            break
                        time.sleep(0.02)
                    time.sleep(max(0.0, 0.5 - (time.time() - committed)))
    finally:
        load.stop.set()
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        rss.done.set()
    return lat, rss.peak / 1e6, rss.peak_pss / 1e6


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--latency-seconds", type=float, default=120)
    ap.add_argument("--skip-peer", action="store_true", help="Tideline only (no ratio): for profiling")
    ap.add_argument("--with-extras", action="store_true",
                    help="also the same events into a table with soft deletes and every metadata column, "
                         "submitted alike right after: prints extras_events_per_s and extras_ratio")
    ap.add_argument("--with-history", action="store_true",
                    help="also the same events into a history (SCD type 2) table, submitted alike right after: "
                         "prints history_events_per_s and history_ratio")
    ap.add_argument("--stage-on", choices=("driver", "executors"), default=None,
                    help="stream.stage_on of Tideline's run (default: what auto picks: driver on local[2], executors with "
                         "--cluster)")
    ap.add_argument("--with-other_stage", action="store_true", dest="with_other_stage",
                    help="also the same events with the other stream.stage_on, submitted alike right after: prints "
                         "other_stage_events_per_s and other_stage_ratio (other over this run's)")
    ap.add_argument("--cluster", action="store_true",
                    help="Tideline's jobs on the stack's standalone cluster (a master, two one-core workers; started "
                         "for the run if it is not up): prints executors=<n>, the executors the stream ran")
    ap.add_argument("--source-block", choices=("slim", "full"), default="full",
                    help="events keep Debezium's whole source block (the default) or only source.ts_ms "
                         "(kafka.source_fields: [ts_ms]), for both Tideline's and the peer's topic")
    args = ap.parse_args()
    global CLUSTER
    CLUSTER = args.cluster
    started_cluster = CLUSTER and not stackctl.spark_cluster_healthy()
    if started_cluster:
        log("starting the standalone cluster (master + 2 one-core workers)")
        stackctl.start_spark_cluster()
    try:
        return measure(args)
    finally:
        if started_cluster:
            stackctl.stop_spark_cluster()


def measure(args) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        pipelines = Path(tmp)
        chosen = [o for o in OPTION_SIDES if getattr(args, f"with_{o}")]
        from tideline.core.settings import StreamSettings
        stage = args.stage_on or StreamSettings().stage_on
        if stage == "auto":   # what stream.executor_stage.stages_on_executors picks
            stage = "executors" if CLUSTER else "driver"
        other = {"driver": "executors", "executors": "driver"}[stage]
        sides = ((PIPELINE, False, {}), (PEER_PIPELINE, True, {})) + \
            tuple((OPTION_SIDES[o][0], False, OPTION_SIDES[o][1]) for o in chosen)
        for name, schemas, table in sides:
            stream = {"stage_on": other if name == OPTION_SIDES["other_stage"][0] else stage}
            (pipelines / f"{name}.yaml").write_text(yaml.safe_dump({
                "name": name, "source": {"conn_id": "tideline_source"},
                "target": {"conn_id": "tideline_target", "schema": name},
                "kafka": {"topic_prefix": name, "partitions": 3, "json_schemas": schemas,
                          **({"source_fields": ["ts_ms"]} if args.source_block == "slim" else {})},
                "stream": stream, "tables": [{"name": TABLE, **table}]}))
        cfg = load_pipeline(pipelines / f"{PIPELINE}.yaml")
        peer_cfg = load_pipeline(pipelines / f"{PEER_PIPELINE}.yaml")
        option_cfgs = {o: load_pipeline(pipelines / f"{OPTION_SIDES[o][0]}.yaml") for o in chosen}
        topic, peer_topic = cfg.topic(TABLE), peer_cfg.topic(TABLE)
        captured = [cfg, peer_cfg, *option_cfgs.values()]
        reset(captured)
        for c in captured:
            ensure_capture(c, get_connection("tideline_kafka"), get_connection("tideline_connect"),
                           get_connection("tideline_source"))
        from tideline.load.full_load import FullLoad
        from tideline.spark_session import get_session
        spark = get_session("bench-full-load")
        for c in (cfg, *option_cfgs.values()):
            FullLoad(c, spark).run([TABLE])   # empty table: the stream starts at offset 0
        spark.stop()
        log(f"generating ~{args.events:,} changes over {args.keys:,} keys at the source ...")
        made = generate_changes(args.events, args.keys)
        total = wait_for_topic(topic, made)
        peer_total = wait_for_topic(peer_topic, made)
        option_totals = {o: wait_for_topic(c.topic(TABLE), made) for o, c in option_cfgs.items()}
        with closing(pg(stackctl.DATABASES["source"])) as conn, conn.cursor() as cur:
            # now, not by autovacuum in the middle of whichever contestant runs first
            cur.execute(f"VACUUM ANALYZE {TABLE}")
        log(f"{total:,} change events in {topic} ({event_bytes(topic):,.0f} bytes each), {peer_total:,} in "
            f"{peer_topic} ({event_bytes(peer_topic):,.0f} bytes each); source block: {args.source_block}")

        log(f"Tideline incremental job, availableNow ... (checkpoint and sync before it: {checkpoint():.1f}s)")
        wal = wal_counters()
        started = time.monotonic()
        proc = spark_submit(pipelines, "--mode", "available_now")
        rss = PeakRss(proc.pid)
        rss.start()
        out, _ = proc.communicate()
        apply_secs = time.monotonic() - started
        rss.done.set()
        JOB_LOG.write_text(out)
        for line in out.splitlines():
            if "batch " in line and "events" in line:
                print("   ", line.strip()[-170:])
        if proc.returncode != 0:
            print(out[-4000:])
            raise SystemExit(f"incremental job failed with {proc.returncode}")
        assert equal_to_source(PIPELINE), "Tideline's target differs from the source"
        cpu = driver_cpu(out)
        log(f"Tideline: {total:,} events in {apply_secs:.1f}s end to end, driver Python CPU {cpu:.1f}s, peak RSS {rss.peak / 1e6:,.0f} MB "
            f"(PSS {rss.peak_pss / 1e6:,.0f}); {wal_since(wal)}; the job's log: {JOB_LOG}")

        option_secs, option_cpu = {}, {}
        for o in chosen:
            name, table_options, live = OPTION_SIDES[o]
            log(f"Tideline into a table with {table_options}, availableNow ... (checkpoint: {checkpoint():.1f}s)")
            started = time.monotonic()
            proc = spark_submit(pipelines, "--mode", "available_now", pipeline=name)
            out, _ = proc.communicate()
            option_secs[o] = time.monotonic() - started
            option_cpu[o] = driver_cpu(out)
            if proc.returncode != 0:
                print(out[-4000:])
                raise SystemExit(f"the {o} job failed with {proc.returncode}")
            assert equal_to_source(name, live), f"the {o} target's live rows differ"
            log(f"Tideline with {o}: {option_totals[o]:,} events in {option_secs[o]:.1f}s end to end")

        sink_secs = float("nan")
        if not args.skip_peer:
            log(f"Debezium JDBC sink (upsert, deletes) on the same topic ... (checkpoint and sync before it: "
                f"{checkpoint():.1f}s)")
            wal = wal_counters()
            sink_secs = run_jdbc_sink(peer_topic, peer_cfg.kafka.partitions)
            wal_used = wal_since(wal)
            sink_equal = equal_to_source(PEER_SCHEMA)
            log(f"JDBC sink ({peer_cfg.kafka.partitions} tasks): {peer_total:,} events in {sink_secs:.1f}s "
                f"(target equal to source: {sink_equal}); {wal_used}")
            if not sink_equal:
                raise SystemExit("the JDBC sink's target differs from the source: its figure would not be comparable")

        lat, stream_peak, stream_pss = [], 0.0, 0.0
        try:
            if args.latency_seconds > 0:
                log(f"latency: continuous mode, ~1,000 changes/s for {args.latency_seconds:.0f}s ...")
                lat, stream_peak, stream_pss = measure_latency(pipelines, args.keys, args.latency_seconds)
                log(f"latency phase: peak RSS {stream_peak:,.0f} MB (PSS {stream_pss:,.0f})")
        finally:   # idle slots of a finished benchmark would pin the source's WAL for good
            requests.delete(f"{stackctl.connect_url()}/connectors/{PEER}", timeout=30)
            for c in captured:
                drop_capture(c, get_connection("tideline_connect"), get_connection("tideline_source"))
    lat.sort()
    p50 = statistics.median(lat) if lat else float("nan")
    p95 = lat[int(0.95 * (len(lat) - 1))] if lat else float("nan")
    p99 = lat[int(0.99 * (len(lat) - 1))] if lat else float("nan")
    log(f"{len(lat)} probes: p50 {p50:.2f}s p95 {p95:.2f}s p99 {p99:.2f}s max {max(lat) if lat else float('nan'):.2f}s "
        f"({sum(x >= PROBE_TIMEOUT_S for x in lat)} timed out)")
    apply_rate, sink_rate = total / apply_secs, peer_total / sink_secs
    peak, peak_pss = max(rss.peak / 1e6, stream_peak), max(rss.peak_pss / 1e6, stream_pss)
    print(f"RESULT apply_events_per_s={apply_rate:.0f} jdbc_sink_events_per_s={sink_rate:.0f} "
          f"ratio={apply_rate / sink_rate:.2f} p50_latency_s={p50:.2f} p95_latency_s={p95:.2f} peak_rss_mb={peak:.0f} "
          f"p99_latency_s={p99:.2f} peak_pss_mb={peak_pss:.0f}"
          + "".join(f" {o}_events_per_s={option_totals[o] / option_secs[o]:.0f} "
                    f"{o}_ratio={(option_totals[o] / option_secs[o]) / apply_rate:.2f}" for o in chosen)
          + f" stage_on={stage} driver_cpu_s_per_m={cpu / total * 1e6:.1f}"
          + (f" other_stage_driver_cpu_s_per_m={option_cpu['other_stage'] / option_totals['other_stage'] * 1e6:.1f}"
             if "other_stage" in chosen else "")
          + (f" executors={cluster_executors(f'tideline-incremental-{PIPELINE}')}" if CLUSTER else ""))
    return 0


if __name__ == "__main__":
    run_bench(main)
