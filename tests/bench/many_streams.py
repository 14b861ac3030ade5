#!/usr/bin/env python3
"""Benchmark: one pipeline streaming 100 tables at a steady rate — end-to-end latency, Tideline and
the Debezium JDBC sink on the same workload in the same run, one after the other.

    .venv/bin/python tests/bench/many_streams.py [--rate 10000] [--seconds 90] [--tables 100]
                                                 [--stage-on driver|executors] [--skip-peer]

Source schema `bench_ms`: `--tables` tables of 2,000 rows (id bigint key, qty, note, amount), and
a probe row in each; one partition per topic. Each contestant runs alone, with only its own
Debezium connector capturing (two connectors at once would halve the 2-core machine for both):
1. Tideline: its connector (schemaless JSON, its default), the full load, then its stream in
   continuous mode as the sync DAG submits it (local[2], the DAG's settings), with a micro-batch
   every `--trigger-s` (stream.trigger_interval_s: 0.5 s here, as a pipeline that wants ~1 s
   freshness sets it; the product's default of 1 s costs ~0.5 s more latency and less CPU).
2. Peer: its connector (JSON with schemas, which the sink requires), the tables copied as the
   source then holds them, and the Debezium JDBC sink (upsert, deletes, tasks.max 2, tables routed
   by a RegexRouter; every column text, as it binds the captured values).

For each, the source takes ~`--rate` row changes per second for `--settle-s` + `--seconds`, spread
round-robin over the tables in transactions of 100 rows; every 0.5 s a probe row of the next table
is changed and the time until the target shows it is recorded (a probe not visible within 30 s
counts as 30 s). The goal's figures (p50_s, p95_s, p99_s) are the probes of the steady `--seconds`;
those of the first `--settle-s` (each side's JVMs compiling the paths the load takes: the stream's
first batches of thousands of events read and commit 3-4 times slower, and a fresh Connect worker's
Debezium task sends ~1,000 events/s for ~15 s) are reported apart, as settle_p95_s and the p95 of
every probe, all_p95_s. Then the load stops, and the target must equal the source table by table (count and a
digest of every row) before anything is reported — Tideline's, or no line; a JDBC sink still
behind after the wait is reported as such (same_result=tideline_only): it did not keep up. Last line:
RESULT tables=<n> trigger_s=<x> settle_s=<x> stage_on=<auto|driver|executors> rate_asked=<n> rate_made=<n> p50_s=<x> p95_s=<x> p99_s=<x>
       settle_p95_s=<x> all_p95_s=<x> jdbc_sink_p50_s=<x> jdbc_sink_p95_s=<x> jdbc_sink_settle_p95_s=<x>
       jdbc_sink_all_p95_s=<x> jdbc_sink_rate_made=<n> ratio_p95=<jdbc_sink p95 / Tideline p95>
       peak_rss_mb=<n> same_result=yes|tideline_only
"""
from __future__ import annotations

import argparse
import itertools
import os
import statistics
import tempfile
import threading
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import requests
import yaml

from benchlib import Drain, PeakRss, digests, forget_pipeline, run_bench, pg, stackctl

os.environ.update(stackctl.environment())

from incremental import jdbc_sink_config, spark_submit  # noqa: E402
from tideline.capture.connector import drop_capture, ensure_capture  # noqa: E402
from tideline.core.config import load_pipeline  # noqa: E402
from tideline.core.connections import get_connection  # noqa: E402
from tideline.core.settings import StreamSettings  # noqa: E402

SCHEMA, PIPELINE, PEER_PIPELINE, PEER_SCHEMA, PEER = "bench_ms", "benchms", "benchmspeer", "bench_ms_sink", \
    "bench-ms-jdbc-sink"
ROWS, PROBE, PROBE_TIMEOUT_S = 2_000, 1_000_000, 30.0
# Each probe sets a value no probe set before (the second contestant's tables are copied with the
# first one's probe values in them).
PROBE_VALUES = itertools.count(1)


def log(msg: str) -> None:
    print(f"[bench] {time.strftime('%H:%M:%S')} {msg}", flush=True)


def tables(n: int) -> list[str]:
    return [f"t_{i:03d}" for i in range(n)]


def reset(names: list[str], cfgs) -> None:
    requests.delete(f"{stackctl.connect_url()}/connectors/{PEER}", timeout=30)
    for cfg in cfgs:
        drop_capture(cfg, get_connection("tideline_connect"), get_connection("tideline_source"))
    with closing(pg(stackctl.DATABASES["source"])) as conn, conn.cursor() as cur:
        cur.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        cur.execute(f"CREATE SCHEMA {SCHEMA}")
        for t in names:
            cur.execute(f"CREATE TABLE {SCHEMA}.{t} (id bigint PRIMARY KEY, qty int NOT NULL, note text, "
                        f"amount numeric(12,2))")
            cur.execute(f"INSERT INTO {SCHEMA}.{t} SELECT g, 0, 'row ' || g, g / 100.0 "
                        f"FROM generate_series(1, {ROWS}) g UNION ALL SELECT {PROBE}, 0, 'probe', 0")
    with closing(pg(stackctl.DATABASES["target"])) as conn, conn.cursor() as cur:
        for schema in (PIPELINE, PEER_SCHEMA):
            cur.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        forget_pipeline(cur, PIPELINE)
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": stackctl.kafka_bootstrap()})
    stale = [c.topic(t) for c in cfgs for t in names if c.topic(t) in admin.list_topics(timeout=10).topics]
    for fut in (admin.delete_topics(stale).values() if stale else []):
        fut.result(30)
    time.sleep(2 if stale else 0)


def copy_for_the_sink(names: list[str]) -> None:
    """The sink's tables, as the source holds them before the load starts (it upserts from there).
    Every column text: the sink binds each value as the events' schemas type it, and the captured
    values are text (as the sink makes its own tables in tests/bench/incremental.py)."""
    import io
    with closing(pg(stackctl.DATABASES["source"])) as src, closing(pg(stackctl.DATABASES["target"])) as tgt:
        with src.cursor() as cs, tgt.cursor() as ct:
            ct.execute(f"CREATE SCHEMA {PEER_SCHEMA}")
            for t in names:
                ct.execute(f"CREATE TABLE {PEER_SCHEMA}.{t} (id text PRIMARY KEY, qty text, note text, amount text)")
                rows = io.BytesIO()
                cs.copy_expert(f"COPY {SCHEMA}.{t} (id, qty, note, amount) TO STDOUT", rows)
                rows.seek(0)
                ct.copy_expert(f"COPY {PEER_SCHEMA}.{t} (id, qty, note, amount) FROM STDIN", rows)
        tgt.commit()


class SteadyLoad(threading.Thread):
    """~rate row changes per second over the tables, round-robin, 100 rows per transaction."""

    def __init__(self, names: list[str], rate: int):
        super().__init__(daemon=True)
        self.names, self.rate, self.stop, self.made = names, rate, threading.Event(), 0

    def run(self) -> None:
        with closing(pg(stackctl.DATABASES["source"])) as conn, conn.cursor() as cur:
            started, i = time.monotonic(), 0
            while not self.stop.is_set():
                t = self.names[i % len(self.names)]
                lo = (i // len(self.names) * 100) % (ROWS - 100)
                cur.execute(f"UPDATE {SCHEMA}.{t} SET qty = qty + 1, amount = amount + 0.01 "
                            f"WHERE id > %s AND id <= %s", (lo, lo + 100))
                self.made += cur.rowcount
                i += 1
                ahead = self.made / self.rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)


def probe_latencies(schema: str, names: list[str], seconds: float) -> list[tuple[float, float]]:
    """Every 0.5 s a probe row of the next table changes; (seconds since the first probe, the time
    until `schema` in the target shows it)."""
    out, first = [], time.time()
    with closing(pg(stackctl.DATABASES["source"])) as src, closing(pg(stackctl.DATABASES["target"])) as tgt, \
            src.cursor() as scur, tgt.cursor() as tcur:
        end = time.time() + seconds
        while time.time() < end:
            n = next(PROBE_VALUES)
            t = names[n % len(names)]
            scur.execute(f"UPDATE {SCHEMA}.{t} SET qty = %s WHERE id = {PROBE}", (n,))
            committed = time.time()
            while True:
                tcur.execute(f"SELECT qty::bigint FROM {schema}.{t} WHERE id::bigint = {PROBE}")
                row = tcur.fetchone()
                if row and row[0] >= n:
                    out.append((committed - first, time.time() - committed))
                    break
                if time.time() - committed >= PROBE_TIMEOUT_S:
                    out.append((committed - first, PROBE_TIMEOUT_S))   # counted as the timeout, not dropped
                    break
                time.sleep(0.02)
            time.sleep(max(0.0, 0.5 - (time.time() - committed)))
    return out


def warm_up(schema: str, table: str, timeout: float = 300) -> None:
    """Until `schema` shows a change of the first table (the stream's start is not latency)."""
    with closing(pg(stackctl.DATABASES["source"])) as src, src.cursor() as cur:
        cur.execute(f"UPDATE {SCHEMA}.{table} SET qty = -1 WHERE id = {PROBE}")
    deadline = time.time() + timeout
    with closing(pg(stackctl.DATABASES["target"])) as tgt, tgt.cursor() as cur:
        while True:
            cur.execute(f"SELECT qty::bigint FROM {schema}.{table} WHERE id::bigint = {PROBE}")
            if cur.fetchone() == (-1,):
                return
            if time.time() > deadline:
                raise SystemExit(f"{schema} did not apply a change within {timeout:.0f}s")
            time.sleep(0.5)


def wait_equal(schema: str, names: list[str], timeout: float = 300) -> bool:
    deadline = time.time() + timeout
    while True:
        want, got = digests("source", SCHEMA, names), digests("target", schema, names)
        if got == want:
            return True
        if time.time() > deadline:
            log(f"  {schema}: {sum(got[t] != want[t] for t in names)} table(s) differ from the source")
            return False
        time.sleep(3)


@dataclass
class Probes:
    """One contestant's probe latencies: while it settled under the load, and after."""
    settle: list[float]
    steady: list[float]


def measure(schema: str, names: list[str], rate: int, settle: float, seconds: float) -> tuple[Probes, float, bool]:
    """Steady changes and probes against one contestant: (latencies, changes made per second,
    whether `schema` equals the source afterwards)."""
    warm_up(schema, names[0])
    load = SteadyLoad(names, rate)
    load.start()
    log(f"~{rate:,} changes/s over {len(names)} tables for {settle:.0f}s + {seconds:.0f}s, probing {schema} ...")
    started = time.monotonic()
    try:
        timed = probe_latencies(schema, names, settle + seconds)
    finally:
        load.stop.set()
        load.join()
    made = load.made / (time.monotonic() - started)
    probes = Probes([lat for at, lat in timed if at < settle], [lat for at, lat in timed if at >= settle])
    log(f"{schema}: settling ({settle:.0f}s): {summary(probes.settle)}; steady: {summary(probes.steady)}; the load "
        f"made {made:,.0f} changes/s; waiting for {schema} to equal the source ...")
    return probes, made, wait_equal(schema, names)


def summary(latencies: list[float]) -> str:
    if not latencies:
        return "no probes"
    return (f"{len(latencies)} probes, p50 {statistics.median(latencies):.2f}s p95 {pct(latencies, 0.95):.2f}s "
            f"max {max(latencies):.2f}s")


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[int(q * (len(values) - 1))] if values else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=int, default=10_000)
    ap.add_argument("--seconds", type=float, default=90, help="the steady load's probes, after --settle-s")
    ap.add_argument("--settle-s", type=float, default=20,
                    help="the load's first seconds, whose probes are reported apart (settle_p95_s)")
    ap.add_argument("--tables", type=int, default=100)
    ap.add_argument("--trigger-s", type=float, default=0.5,
                    help="Tideline's stream.trigger_interval_s (default 0.5; the product's default is 1.0)")
    ap.add_argument("--stage-on", choices=("driver", "executors"), default=None,
                    help="Tideline's stream.stage_on (default: what auto picks: driver on local[2])")
    ap.add_argument("--skip-peer", action="store_true", help="Tideline only (no ratio): for profiling")
    ap.add_argument("--stream-log", default=str(Path(tempfile.gettempdir()) / "bench-many-streams.log"))
    args = ap.parse_args()
    names = tables(args.tables)
    with tempfile.TemporaryDirectory() as tmp:
        pipelines = Path(tmp)
        for name, schemas in ((PIPELINE, False), (PEER_PIPELINE, True)):
            (pipelines / f"{name}.yaml").write_text(yaml.safe_dump({
                "name": name, "source": {"conn_id": "tideline_source", "schema": SCHEMA},
                "target": {"conn_id": "tideline_target", "schema": name},
                "kafka": {"topic_prefix": name, "partitions": 1, "json_schemas": schemas},
                "tables": [{"name": t} for t in names],
                "stream": {"trigger_interval_s": args.trigger_s, **({"stage_on": args.stage_on} if args.stage_on else {})}}))
        cfg, peer_cfg = (load_pipeline(pipelines / f"{n}.yaml") for n in (PIPELINE, PEER_PIPELINE))
        log(f"{args.tables} tables of {ROWS:,} rows ...")
        reset(names, [cfg, peer_cfg])
        kafka, connect, source = (get_connection(c) for c in ("tideline_kafka", "tideline_connect", "tideline_source"))
        # 1. Tideline alone: its connector, the full load, then its stream as the sync DAG submits it
        proc = None
        try:
            ensure_capture(cfg, kafka, connect, source)
            from tideline.load.full_load import FullLoad
            from tideline.spark_session import get_session
            spark = get_session("bench-many-streams")
            FullLoad(cfg, spark).run(names)
            spark.stop()
            proc = spark_submit(pipelines, "--mode", "continuous", pipeline=PIPELINE)
            Drain(proc, Path(args.stream_log)).start()
            log(f"Tideline's stream started (its log: {args.stream_log})")
            rss = PeakRss(proc.pid)
            rss.start()
            ours, made, same = measure(PIPELINE, names, args.rate, args.settle_s, args.seconds)
            rss.done.set()
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(60)
            drop_capture(cfg, connect, source)   # an idle slot would pin the source's WAL
        if not same:
            raise SystemExit("Tideline's target differs from the source: no figure is reported")
        ours_line = (f"RESULT tables={args.tables} trigger_s={args.trigger_s:g} settle_s={args.settle_s:g} "
                     f"stage_on={args.stage_on or StreamSettings().stage_on} rate_asked={args.rate} rate_made={made:.0f} "
                     f"p50_s={statistics.median(ours.steady):.2f} "
                     f"p95_s={pct(ours.steady, 0.95):.2f} p99_s={pct(ours.steady, 0.99):.2f} "
                     f"settle_p95_s={pct(ours.settle, 0.95):.2f} all_p95_s={pct(ours.settle + ours.steady, 0.95):.2f}")
        if args.skip_peer:
            print(f"{ours_line} peak_rss_mb={rss.peak / 1e6:.0f} same_result=yes (peer skipped)")
            return 0
        # 2. the peer alone: its connector, the tables copied as they are now, the JDBC sink
        try:
            ensure_capture(peer_cfg, kafka, connect, source)
            copy_for_the_sink(names)
            sink = jdbc_sink_config(2, **{
                "topics.regex": rf"{PEER_PIPELINE}\.{SCHEMA}\..*", "collection.name.format": f"{PEER_SCHEMA}.${{topic}}",
                "transforms": "table", "transforms.table.type": "org.apache.kafka.connect.transforms.RegexRouter",
                "transforms.table.regex": r".*\.(t_\d+)", "transforms.table.replacement": "$1"})
            requests.put(f"{stackctl.connect_url()}/connectors/{PEER}/config", json=sink, timeout=30).raise_for_status()
            log("the Debezium JDBC sink started (2 tasks)")
            theirs, peer_made, peer_same = measure(PEER_SCHEMA, names, args.rate, args.settle_s, args.seconds)
            if not peer_same:
                status = requests.get(f"{stackctl.connect_url()}/connectors/{PEER}/status", timeout=10).json()
                log(f"the sink's tasks: {[(t['state'], t.get('trace', '')[:300]) for t in status['tasks']]}")
        finally:
            requests.delete(f"{stackctl.connect_url()}/connectors/{PEER}", timeout=30)
            drop_capture(peer_cfg, connect, source)
    sink_p95 = pct(theirs.steady, 0.95)
    # a sink still behind when the wait ends has not kept up: its probes' 30 s stand, and the line says so
    print(f"{ours_line} jdbc_sink_p50_s={statistics.median(theirs.steady):.2f} jdbc_sink_p95_s={sink_p95:.2f} "
          f"jdbc_sink_settle_p95_s={pct(theirs.settle, 0.95):.2f} "
          f"jdbc_sink_all_p95_s={pct(theirs.settle + theirs.steady, 0.95):.2f} "
          f"jdbc_sink_rate_made={peer_made:.0f} ratio_p95={sink_p95 / pct(ours.steady, 0.95):.2f} "
          f"peak_rss_mb={rss.peak / 1e6:.0f} "
          f"same_result={'yes' if peer_same else 'tideline_only (the JDBC sink had not caught up)'}")
    return 0


if __name__ == "__main__":
    run_bench(main)
