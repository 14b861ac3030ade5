"""Beyond one machine, with real processes: Tideline's jobs on a Spark standalone cluster (a master
and two one-core workers started from the installed PySpark — what `TIDELINE_SPARK_CLUSTER=1 make
up` runs) and a `production`-durability pipeline on a three-broker Kafka (three KRaft nodes:
replication 3, min.insync.replicas 2, no unclean leader election, with a Kafka Connect worker of
their own — what `TIDELINE_KAFKA_CLUSTER=1 make up` runs), both started beside the shared stack
for this module; the pipeline's connections point at them while it runs.

One pipeline goes through the whole production topology so the suite pays for one full load and
one convergence: the full load runs on both workers with Tideline imported from the library the
job shipped (under each worker's work directory — the workers have no PYTHONPATH to this
checkout); the doctor passes the production profile; the stream on the cluster, under writes,
meets kill -9 of an executor, kill -9 of its topic's partition leader, and two of three brokers
stopped (Kafka acknowledges no acks=all write, Debezium's producer blocks instead of losing); the
batches stay contiguous and target == source at the end. A batch interval runs on the cluster too."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

import stackctl
from helpers import Writer, catching_up, drop_source, lake_connections, table_digest
from test_batch import make_events
from test_incremental import assert_batches_contiguous, batches, make_items, spark_submit, sync_until_equal
from tideline import state
from tideline.ops import doctor
from tideline.capture.connector import ConnectClient, connector_name
from tideline.packaging import library_zip

pytestmark = pytest.mark.integration

HA = stackctl.KafkaCluster("kafka-ha", 3, stackctl.PORTS["kafka"] + stackctl.SIDE_KAFKA_OFFSET,
                           stackctl.PORTS["kafka_controller"] + stackctl.SIDE_KAFKA_OFFSET,
                           stackctl.VAR / "kafka-ha", stopwait=10, light_jvm=True)   # thrown away after the tests
CONNECT_HA_PORT = stackctl.PORTS["connect"] + stackctl.SIDE_CONNECT_OFFSET   # both reserved with the stack's ports


@pytest.fixture(scope="module")
def cluster(stack):
    started = not stackctl.spark_cluster_healthy()   # a stack made with TIDELINE_SPARK_CLUSTER=1 has one
    if started:
        stackctl.start_spark_cluster()
    yield stackctl.spark_master_url()
    if started:
        stackctl.stop_spark_cluster()


@pytest.fixture(scope="module")
def ha_kafka(stack):
    """The three-broker Kafka and its Connect worker, as the connections tideline_kafka and
    tideline_connect; everything is removed afterwards."""
    HA.start()
    url = stackctl.start_connect_worker("connect-ha", CONNECT_HA_PORT, HA, stopwait=10, light_jvm=True)
    mp = pytest.MonkeyPatch()
    mp.setenv("AIRFLOW_CONN_TIDELINE_KAFKA", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": HA.bootstrap()}}))
    mp.setenv("AIRFLOW_CONN_TIDELINE_CONNECT", json.dumps(
        {"conn_type": "http", "host": stackctl.HOST, "port": CONNECT_HA_PORT, "schema": "http"}))
    yield url
    mp.undo()
    stackctl.unsupervise(["connect-ha"])
    HA.stop()
    for d in (HA.home, stackctl.VAR / "connect-ha"):
        shutil.rmtree(d, ignore_errors=True)


def submit(cluster, job: str, cfg, *args: str, pipelines) -> subprocess.Popen:
    """The job as the operator submits it: to the master, the library shipped as --py-files."""
    return spark_submit(job, cfg, *args, env_extra={"TIDELINE_PIPELINES": str(pipelines.dir)}, master=cluster,
                        submit_args=("--py-files", str(library_zip()), "--conf", "spark.driver.host=127.0.0.1",
                                     "--conf", "spark.executor.memory=1g"))


def executor_logs(app_id: str) -> list[tuple[Path, str]]:
    """(work dir, stderr) of every executor of the application on every worker."""
    out = []
    for i in range(1, stackctl.SPARK_WORKERS + 1):
        for d in (stackctl.VAR / "spark" / f"worker-{i}" / app_id).glob("*"):
            if (d / "stderr").exists():
                out.append((d, (d / "stderr").read_text(errors="replace")))
    return out


def app_ids(name: str) -> list[str]:
    state_ = stackctl.spark_master_json()
    return [a["id"] for a in state_.get("activeapps", []) + state_.get("completedapps", []) if a["name"] == name]


def finish(proc: subprocess.Popen, timeout: float = 300) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-4000:]
    return out


def _wait_batches(target_db, cfg, count: int, stream: subprocess.Popen, what: str, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while len(batches(target_db, cfg.name)) < count:
        assert stream.poll() is None, stream.stdout.read()[-4000:]
        assert time.time() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.3)


def _acknowledged(topic: str) -> str | None:
    """Produces one record with acks=all (as Debezium's producer does); None if Kafka
    acknowledged it, else the error it ended with within 8 s."""
    from confluent_kafka import Producer
    result: list = []
    p = Producer({"bootstrap.servers": HA.bootstrap(), "acks": "all", "enable.idempotence": True,
                  "message.timeout.ms": 8000})
    p.produce(topic, b"probe", on_delivery=lambda err, _msg: result.append(None if err is None else err.name()))
    p.flush(15)
    return None if result == [None] else (result[0] if result else "no delivery report")


def _assert_shipped_library_on_both_workers(app: str) -> None:
    logs = executor_logs(app)
    assert {d.parents[1].name for d, _ in logs} == {"worker-1", "worker-2"}, logs
    copied = [(d, line) for d, text in logs for line in text.splitlines() if "[tideline]" in line]
    assert {d.parents[1].name for d, _ in copied} == {"worker-1", "worker-2"}, "both workers copied partitions"
    for d, line in copied:
        library = line.rsplit("library ", 1)[1].rstrip(")")
        assert library.startswith(str(d)) and ".zip/tideline/__init__.py" in library, (d, line)
        assert not library.startswith(str(stackctl.ROOT / "plugins"))


def test_production_topology_loses_and_doubles_nothing_through_executor_and_broker_faults(
        cluster, ha_kafka, spark, source_db, target_db, pipelines, unique_name):
    t = f"{unique_name}_prod"
    # 250,000 rows: five key ranges (one per 50,000 rows at most); the driver pipes the first while
    # the Spark session starts, so both workers copy partitions of the other four (a table of
    # 50,000 rows or fewer is piped by the driver alone)
    make_items(source_db, t, 250_000)
    writer = Writer(f"public.{t}", 250_001, seed=11, pause=0.003)
    stream = None
    stopped: list[str] = []
    try:
        cfg = pipelines.make([{"name": t}], parallelism=5, capture=True,
                             stream={"max_offsets_per_trigger": 1000, "trigger_interval_s": 0.5},
                             kafka={"durability": "production", "replication_factor": 3})
        topic = cfg.topic(t)

        # the full load on the cluster: partitions on both workers, from the shipped library
        finish(submit(cluster, "full_load.py", cfg, "--tables", t, pipelines=pipelines))
        assert table_digest(source_db, "public", t, "id") == table_digest(target_db, cfg.name, t, "id")
        [app] = app_ids(f"tideline-full-load-{cfg.name}")
        _assert_shipped_library_on_both_workers(app)
        loaded = state.get(target_db, cfg.name, t).resume_offsets

        checks = doctor.run(cfg)
        assert not [c for c in checks if c.status == "fail"], doctor.format_checks(checks)
        topic_check = next(c for c in checks if (c.part, c.name) == ("kafka", f"topic {topic}"))
        assert topic_check.status == "pass" and "replication 3, min.insync.replicas 2" in topic_check.detail

        writer.start()
        stream = submit(cluster, "incremental.py", cfg, pipelines=pipelines)
        _wait_batches(target_db, cfg, 2, stream, "the stream's first batches on the cluster")

        # 1. kill -9 an executor (the worker JVM's child) mid-stream: Spark re-runs its tasks
        executors = subprocess.run(["pgrep", "-f", "CoarseGrainedExecutorBackend"], capture_output=True,
                                   text=True).stdout.split()
        assert executors, "no executor JVM on the workers"
        os.kill(int(executors[0]), signal.SIGKILL)
        _wait_batches(target_db, cfg, len(batches(target_db, cfg.name)) + 3, stream,
                      "the stream to go on after an executor was killed")

        # 2. kill -9 the leader of partition 0: a new leader from the in-sync replicas takes over
        admin = AdminClient({"bootstrap.servers": HA.bootstrap()})
        leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
        os.kill(stackctl.supervised_pid(f"kafka-ha-{leader}"), signal.SIGKILL)
        deadline = time.time() + 60

        def partition_leader() -> int:
            """-1 while the client's own metadata request meets the killed broker and times out."""
            try:
                return admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
            except KafkaException:
                return -1
        while partition_leader() in (leader, -1):
            assert time.time() < deadline, "no new leader was elected"
            time.sleep(0.5)
        _wait_batches(target_db, cfg, len(batches(target_db, cfg.name)) + 3, stream,
                      "the stream to go on after the partition leader was killed")
        stackctl.wait_until("kafka-ha", HA.healthy, 120, "the killed broker back (supervisord restarts it)")

        # 3. stop the two brokers that do not lead partition 0: its leader stays, but with one
        # replica of three no acks=all write is acknowledged — Debezium's producer must block
        leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
        probe = f"{topic}.probe"   # a topic led by the same broker: what any acks=all producer gets
        others = [n for n in (1, 2, 3) if n != leader]
        admin.create_topics([NewTopic(probe, num_partitions=1, replica_assignment=[[leader, *others]])])[probe].result(30)
        pipelines.topics.append(probe)
        assert _acknowledged(probe) is None
        stopped = [f"kafka-ha-{n}" for n in others]
        for part in stopped:
            stackctl.supervisorctl("stop", part)
        writes_before = writer.count
        assert _acknowledged(probe) is not None, "Kafka acknowledged an acks=all write with one broker of three"
        time.sleep(4)   # with the probe's 8 s: ~12 s of a source changing while Kafka takes no write
        assert writer.count > writes_before + 100, "the source kept changing during the outage"
        status = ConnectClient(ha_kafka).status(connector_name(cfg))
        assert status["tasks"][0]["state"] == "RUNNING", f"the connector's task gave up instead of blocking: {status}"
        for part in stopped:
            stackctl.supervisorctl("start", part)
        stopped = []
        stackctl.wait_until("kafka-ha", HA.healthy, 120, "three brokers back")
        _wait_batches(target_db, cfg, len(batches(target_db, cfg.name)) + 3, stream,
                      "the stream to go on after the brokers returned")

        writer.stop()
        os.killpg(stream.pid, signal.SIGTERM)
        stream.wait(60)
        sync_until_equal(catching_up(cfg), spark, source_db, target_db, {t: "id"}, timeout=180)
        assert_batches_contiguous(target_db, cfg.name, {topic: loaded})
        assert ConnectClient(ha_kafka).status(connector_name(cfg))["tasks"][0]["state"] == "RUNNING"
        # the stream holds one core (spark.stream_cores), as the sync DAG submits it: the executor
        # killed, and the one the master started in its place
        [app] = app_ids(f"tideline-incremental-{cfg.name}")
        assert len(executor_logs(app)) >= 2, executor_logs(app)
    finally:
        for part in stopped:
            stackctl.supervisorctl("start", part)
        writer.stop_event.set()
        if stream is not None and stream.poll() is None:
            os.killpg(stream.pid, signal.SIGKILL)
        drop_source(source_db, t)


def test_batch_interval_on_the_cluster(cluster, source_db, target_db, pipelines, unique_name):
    t = f"{unique_name}_clb"
    day0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
    make_events(source_db, t, day0)
    try:
        cfg = pipelines.make([{"name": t, "mode": "batch", "cursor_column": "updated_at"}], create_topics=False)
        finish(submit(cluster, "batch_sync.py", cfg, "--start", day0.isoformat(),
                      "--end", (day0 + timedelta(days=3)).isoformat(), pipelines=pipelines))
        assert table_digest(source_db, "public", t, "id") == table_digest(target_db, cfg.name, t, "id")
    finally:
        drop_source(source_db, t)


def test_an_iceberg_load_on_the_cluster_writes_its_data_files_on_both_workers(
        cluster, source_db, pipelines, unique_name):
    """On a cluster the Iceberg load's data files are written by the executors (from the shipped
    library, COPY's CSV through Arrow), and the driver commits them once: the table equals the
    source row for row."""
    import hashlib

    from test_iceberg import iceberg_pipeline
    from tideline.targets import for_connection
    t = f"{unique_name}_lakecluster"
    make_items(source_db, t, 250_000)
    try:
        cfg = iceberg_pipeline(pipelines, unique_name, [{"name": t, "snapshot": "consistent"}], parallelism=5)
        finish(submit(cluster, "full_load.py", cfg, "--tables", t, pipelines=pipelines))
        [app] = app_ids(f"tideline-full-load-{cfg.name}")
        _assert_shipped_library_on_both_workers(app)
        assert any("COPY CSV -> Arrow -> Parquet" in text for _, text in executor_logs(app))
        lake = for_connection(*lake_connections())
        table = lake.pyiceberg_catalog().load_table((unique_name, t))
        assert len(table.snapshots()) == 1
        rows = table.scan().to_arrow().sort_by("id").to_pylist()
        lake_text = ",".join(f"{r['id']}:{r['qty']}:{r['note']}:{r['price']}" for r in rows)
        with source_db.cursor() as cur:
            cur.execute(f"SELECT count(*), md5(string_agg(id || ':' || qty || ':' || note || ':' || price, ',' "
                        f"ORDER BY id)) FROM public.{t}")
            assert cur.fetchone() == (len(rows), hashlib.md5(lake_text.encode()).hexdigest())
    finally:
        drop_source(source_db, t)
