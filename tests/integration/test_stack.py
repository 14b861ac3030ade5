"""Each part of the local stack works for real: the things Tideline relies on, one test each."""
from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import stackctl
from tideline import spark_session

pytestmark = pytest.mark.integration


def test_postgres_logical_decoding_sees_a_committed_insert(source_db, unique_name):
    with source_db.cursor() as cur:
        cur.execute("SHOW wal_level")
        assert cur.fetchone()[0] == "logical"
        cur.execute(f"CREATE TABLE {unique_name} (id int PRIMARY KEY, note text)")
        cur.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (unique_name,))
        try:
            cur.execute(f"INSERT INTO {unique_name} VALUES (1, 'Grüße')")
            cur.execute("SELECT data FROM pg_logical_slot_get_changes(%s, NULL, NULL)", (unique_name,))
            changes = [r[0] for r in cur.fetchall()]
            assert any(f"table public.{unique_name}: INSERT: id[integer]:1 note[text]:'Grüße'" in c
                       for c in changes), changes
        finally:
            cur.execute("SELECT pg_drop_replication_slot(%s)", (unique_name,))
            cur.execute(f"DROP TABLE {unique_name}")
        cur.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (unique_name,))
        assert cur.fetchone()[0] == 0


def test_kafka_round_trip_with_acks_all(stack, unique_name):
    bootstrap = stack.kafka_bootstrap()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(unique_name, num_partitions=2, replication_factor=1)])[unique_name].result(30)
    try:
        delivered = []
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
        for i in range(100):
            producer.produce(unique_name, key=f"k{i % 7}", value=json.dumps({"i": i}),
                             on_delivery=lambda err, msg: delivered.append((err, msg.partition(), msg.offset())))
        assert producer.flush(30) == 0
        assert len(delivered) == 100 and all(err is None for err, _, _ in delivered)

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name,
                             "enable.auto.commit": False, "auto.offset.reset": "error"})
        consumer.assign([TopicPartition(unique_name, p, 0) for p in range(2)])
        seen = []
        deadline = time.time() + 30
        while len(seen) < 100 and time.time() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None:
                assert msg.error() is None, msg.error()
                seen.append(json.loads(msg.value())["i"])
        consumer.close()
        assert sorted(seen) == list(range(100))
        # per key order holds (same key -> same partition -> offset order)
        by_key: dict[int, list[int]] = {}
        for i in seen:
            by_key.setdefault(i % 7, []).append(i)
        assert all(v == sorted(v) for v in by_key.values())
    finally:
        admin.delete_topics([unique_name])[unique_name].result(30)


def test_connect_lists_the_debezium_postgres_connector(stack):
    with urllib.request.urlopen(f"{stack.connect_url()}/connector-plugins", timeout=10) as resp:
        plugins = json.loads(resp.read())
    classes = {p["class"]: p for p in plugins}
    assert stack.DEBEZIUM_CLASS in classes
    assert classes[stack.DEBEZIUM_CLASS]["version"].startswith("3.")


def test_spark_reads_kafka_and_jdbc(stack, spark, source_db, unique_name):
    bootstrap = stack.kafka_bootstrap()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(unique_name, num_partitions=1, replication_factor=1)])[unique_name].result(30)
    try:
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(10):
            producer.produce(unique_name, key=str(i), value=f"v{i}")
        producer.flush(30)
        df = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", unique_name).option("startingOffsets", "earliest")
              .option("endingOffsets", "latest").load())
        values = sorted(r.value.decode() for r in df.select("value").collect())
        assert values == sorted(f"v{i}" for i in range(10))
    finally:
        admin.delete_topics([unique_name])[unique_name].result(30)

    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE {unique_name} (id int PRIMARY KEY, amount numeric(12,2), name text)")
        cur.execute(f"INSERT INTO {unique_name} SELECT g, g * 1.25, 'Zoë ' || g FROM generate_series(1, 1000) g")
    try:
        df = (spark.read.format("jdbc")
              .option("url", f"jdbc:postgresql://{stack.HOST}:{stack.PORTS['postgres']}/{stack.DATABASES['source']}")
              .option("driver", "org.postgresql.Driver").option("user", stack.PG_USER).option("password", stack.PG_PASS)
              .option("dbtable", unique_name).option("partitionColumn", "id")
              .option("lowerBound", 1).option("upperBound", 1001).option("numPartitions", 4).load())
        assert df.rdd.getNumPartitions() == 4
        rows = {r.id: (r.amount, r.name) for r in df.collect()}
        assert len(rows) == 1000
        from decimal import Decimal
        assert rows[999] == (Decimal("1248.75"), "Zoë 999")
    finally:
        with source_db.cursor() as cur:
            cur.execute(f"DROP TABLE {unique_name}")


def test_airflow_imports_the_dag_folder_without_errors(stack):
    """The running Airflow (dag-processor + API) parsed dags/ and built every pipeline's DAG."""
    deadline = time.time() + 120
    dags: list[str] = []
    while time.time() < deadline:
        errors = stack.airflow_api("GET", "importErrors")
        assert errors["total_entries"] == 0, json.dumps(errors["import_errors"], indent=1)
        dags = [d["dag_id"] for d in stack.airflow_api("GET", "dags")["dags"]]
        if "sync_demo" in dags:
            break
        time.sleep(3)
    assert "sync_demo" in dags


def test_spark_drivers_start_from_the_class_archive(stack, tmp_path):
    """`make up` records the archive; a driver submitted with the jobs' settings (driver_conf: its
    JVM options and class path) maps it (-Xshare:on: a JVM that cannot use the archive refuses to
    start instead of quietly loading every class — as it would if the class path differed from
    the one the archive was recorded with)."""
    conf = spark_session.driver_conf({})
    options = conf.pop("spark.driver.extraJavaOptions")
    assert f"-XX:SharedArchiveFile={stackctl.CLASS_ARCHIVE}" in options
    script = tmp_path / "started.py"
    script.write_text("print('driver started')\n")

    def submit(java_options: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(stackctl.VENV_BIN / "spark-submit"), "--master", "local[1]",
                               *[x for k, v in conf.items() for x in ("--conf", f"{k}={v}")],
                               "--driver-java-options", java_options, str(script)],
                              env=dict(os.environ), capture_output=True, text=True, timeout=120)

    used = submit(f"{options} -Xshare:on")
    assert used.returncode == 0 and "driver started" in used.stdout, used.stdout + used.stderr
    # the check can fail: an archive the JVM cannot map stops it under -Xshare:on
    other = tmp_path / "other.jsa"
    other.write_bytes(b"not an archive")
    refused = submit(f"-XX:SharedArchiveFile={other} -Xshare:on")
    assert refused.returncode != 0, refused.stdout


def test_a_class_archive_recorded_for_another_jvm_or_pyspark_is_recorded_again(stack):
    """After an upgrade of the JVM or pyspark the old archive would be refused by every driver (each
    then starting slowly, with a warning); `make up` records it again and drivers map the new one."""
    stamp = stackctl.CLASS_ARCHIVE.with_suffix(".stamp")
    current = stamp.read_text()
    stamp.write_text(current.replace('"jars": [', '"jars": ["pyspark-of-another-version.jar", '))
    before = stackctl.CLASS_ARCHIVE.stat().st_mtime_ns
    stackctl.build_class_archive()
    assert stamp.read_text() == current
    rebuilt = stackctl.CLASS_ARCHIVE.stat().st_mtime_ns
    assert rebuilt != before
    stackctl.build_class_archive()   # up to date now: kept as it is
    assert stackctl.CLASS_ARCHIVE.stat().st_mtime_ns == rebuilt


def test_spark_drivers_create_files_without_forking_chmod(stack, tmp_path):
    """Without Hadoop's native library, its local file system forks `chmod` of the whole driver JVM
    for each file it creates — a stream's checkpoint makes several per batch. The drivers' host
    settings (driver_conf) put Tideline's java.nio file system on their class path instead. A
    `chmod` first on PATH logs every call: none with those settings, some without (the control)."""
    from tideline.core.settings import SparkSettings
    fake = tmp_path / "bin"
    fake.mkdir()
    calls = tmp_path / "chmod.log"
    (fake / "chmod").write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\nexec /bin/chmod \"$@\"\n")
    (fake / "chmod").chmod(0o755)
    script = tmp_path / "checkpointing.py"
    script.write_text(
        "import tempfile\n"
        "from pyspark.sql import SparkSession\n"
        "s = SparkSession.builder.getOrCreate()\n"
        "print('fs', s._jvm.org.apache.hadoop.fs.FileSystem.getLocal(s._jsc.hadoopConfiguration()).getClass().getName())\n"
        "q = (s.readStream.format('rate').option('rowsPerSecond', 10).load().writeStream\n"
        "     .foreachBatch(lambda df, i: None).option('checkpointLocation', tempfile.mkdtemp())\n"
        "     .trigger(processingTime='500 milliseconds').start())\n"
        "while (q.lastProgress or {}).get('batchId', -1) < 3:\n"
        "    q.awaitTermination(0.2)\n"
        "q.stop()\n")

    def run(environ: dict) -> tuple[str, int]:
        calls.unlink(missing_ok=True)
        conf = spark_session.driver_conf(SparkSettings().job_conf("stream"), environ=environ)
        done = subprocess.run([str(stackctl.VENV_BIN / "spark-submit"), "--master", "local[1]",
                               *[x for k, v in conf.items() for x in ("--conf", f"{k}={v}")], str(script)],
                              env=environ, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stdout + done.stderr[-3000:]
        return done.stdout, len(calls.read_text().splitlines()) if calls.exists() else 0

    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}")
    out, forked = run(env)
    assert f"fs {spark_session.NIO_LOCAL_FILE_SYSTEM}" in out and forked == 0, (out, forked)
    out, forked = run(dict(env, TIDELINE_SPARK_DRIVER_CLASSPATH=""))   # the control: Hadoop's own
    assert spark_session.NIO_LOCAL_FILE_SYSTEM not in out and forked > 0, (out, forked)
