"""A pipeline with the `production` durability profile on a real three-broker Kafka: three KRaft
nodes (replication 3, min.insync.replicas 2, no unclean leader election) and a Kafka Connect
worker of their own, started beside the shared stack for these tests (what
`TIDELINE_KAFKA_CLUSTER=1 make up` runs as the stack's Kafka). The pipeline's connections point at
them for the duration of the module. The doctor passes it; the change topic's partition leader
killed -9 mid-stream under writes loses and doubles nothing; with two brokers stopped Kafka
acknowledges no acks=all write, Debezium's producer blocks (its task stays RUNNING) rather than
losing, and once the brokers are back the target converges exactly."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

import stackctl
from helpers import Writer, drop_source
from test_incremental import assert_batches_contiguous, batches, make_items, spark_submit, sync_until_equal
from tideline import doctor
from tideline.connector import ConnectClient, connector_name
from tideline.full_load import FullLoad

pytestmark = pytest.mark.integration

HA = stackctl.KafkaCluster("kafka-ha", 3, stackctl.PORTS["kafka"] + 100, stackctl.PORTS["kafka_controller"] + 100,
                           stackctl.VAR / "kafka-ha", stopwait=10)   # thrown away after the tests
CONNECT_HA_PORT = stackctl.PORTS["connect"] + 10


@pytest.fixture(scope="module")
def ha_kafka(stack):
    """The three-broker Kafka and its Connect worker, as the connections tideline_kafka and
    tideline_connect; everything is removed afterwards."""
    HA.start()
    url = stackctl.start_connect_worker("connect-ha", CONNECT_HA_PORT, HA, stopwait=10)
    mp = pytest.MonkeyPatch()
    mp.setenv("AIRFLOW_CONN_TIDELINE_KAFKA", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": HA.bootstrap()}}))
    mp.setenv("AIRFLOW_CONN_TIDELINE_CONNECT", json.dumps(
        {"conn_type": "http", "host": stackctl.HOST, "port": CONNECT_HA_PORT, "schema": "http"}))
    yield url
    mp.undo()
    stackctl._unsupervise(["connect-ha"])
    HA.stop()
    for d in (HA.home, stackctl.VAR / "connect-ha"):
        shutil.rmtree(d, ignore_errors=True)


def _production(pipelines, t: str, stream: dict):
    return pipelines.make([{"name": t}], capture=True, stream=stream,
                          kafka={"durability": "production", "replication_factor": 3})


def _stream(pipelines, cfg) -> subprocess.Popen:
    return spark_submit("incremental.py", "--pipeline", cfg.name, env_extra={"TIDELINE_PIPELINES": str(pipelines.dir)})


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


def test_production_pipeline_on_three_brokers_loses_and_doubles_nothing_through_broker_faults(
        ha_kafka, spark, source_db, target_db, pipelines, unique_name):
    """One stream under writes meets both faults in turn (one pipeline, so the suite pays for one
    full load and one final convergence): the doctor passes the production profile; kill -9 of
    partition 0's leader; then two of three brokers stopped. Contiguous batches and target ==
    source at the end: nothing lost, nothing doubled."""
    t = f"{unique_name}_ha"
    make_items(source_db, t, 5_000)
    writer = Writer(f"public.{t}", 5_001, seed=11, pause=0.003)
    stream = None
    stopped: list[str] = []
    try:
        cfg = _production(pipelines, t, {"max_offsets_per_trigger": 1000, "trigger_interval_s": 0.5})
        topic = cfg.topic(t)
        [loaded] = FullLoad(cfg, spark).run([t])
        checks = doctor.run(cfg)
        assert not [c for c in checks if c.status == "fail"], doctor.format_checks(checks)
        topic_check = next(c for c in checks if (c.part, c.name) == ("kafka", f"topic {topic}"))
        assert topic_check.status == "pass" and "replication 3, min.insync.replicas 2" in topic_check.detail

        writer.start()
        stream = _stream(pipelines, cfg)
        _wait_batches(target_db, cfg, 2, stream, "the stream's first batches")
        admin = AdminClient({"bootstrap.servers": HA.bootstrap()})

        # 1. kill -9 the leader of partition 0: a new leader from the in-sync replicas takes over,
        # Debezium and the stream carry on
        leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
        os.kill(stackctl.supervised_pid(f"kafka-ha-{leader}"), signal.SIGKILL)
        deadline = time.time() + 60
        while admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader in (leader, -1):
            assert time.time() < deadline, "no new leader was elected"
            time.sleep(0.5)
        _wait_batches(target_db, cfg, len(batches(target_db, cfg.name)) + 3, stream,
                      "the stream to go on after the partition leader was killed")
        stackctl.wait_until("kafka-ha", HA.healthy, 120, "the killed broker back (supervisord restarts it)")

        # 2. stop the two brokers that do not lead partition 0: its leader stays, but with one
        # replica of three, no acks=all write is acknowledged — Debezium's producer must block
        leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
        probe = f"{topic}.probe"   # a topic led by the same broker: what any acks=all producer gets
        others = [n for n in (1, 2, 3) if n != leader]
        admin.create_topics([NewTopic(probe, num_partitions=1, replica_assignment=[[leader, *others]])])[probe].result(30)
        pipelines.topics.append(probe)
        assert _acknowledged(probe) is None
        stopped = [f"kafka-ha-{n}" for n in others]
        for part in stopped:
            stackctl._supervisorctl("stop", part)
        writes_before = writer.count
        refused = _acknowledged(probe)
        assert refused is not None, "Kafka acknowledged an acks=all write with one broker of three"
        time.sleep(10)
        assert writer.count > writes_before + 100, "the source kept changing during the outage"
        status = ConnectClient(ha_kafka).status(connector_name(cfg))
        assert status["tasks"][0]["state"] == "RUNNING", f"the connector's task gave up instead of blocking: {status}"
        for part in stopped:
            stackctl._supervisorctl("start", part)
        stopped = []
        stackctl.wait_until("kafka-ha", HA.healthy, 120, "three brokers back")
        _wait_batches(target_db, cfg, len(batches(target_db, cfg.name)) + 3, stream,
                      "the stream to go on after the brokers returned")

        writer.stop()
        os.killpg(stream.pid, signal.SIGTERM)
        stream.wait(60)
        sync_until_equal(cfg, spark, source_db, target_db, {t: "id"}, timeout=180)
        assert_batches_contiguous(target_db, cfg.name, {topic: loaded.offsets})
        assert ConnectClient(ha_kafka).status(connector_name(cfg))["tasks"][0]["state"] == "RUNNING"
    finally:
        for part in stopped:
            stackctl._supervisorctl("start", part)
        writer.stop_event.set()
        if stream is not None and stream.poll() is None:
            os.killpg(stream.pid, signal.SIGKILL)
        drop_source(source_db, t)
