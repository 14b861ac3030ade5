"""Tideline's jobs on a Spark standalone cluster: a master and two one-core workers, started for
these tests from the installed PySpark (what `TIDELINE_SPARK_CLUSTER=1 make up` runs). A full load,
a stream under writes with kill -9 of an executor mid-batch, and a batch interval each end with
target == source; the work ran on both workers (the workers' own JSON status), and executors
imported Tideline from the library the job shipped (under the worker's work directory) — the
workers have no PYTHONPATH to this checkout."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

import stackctl
from helpers import Writer, drop_source, table_digest
from test_batch import make_events
from test_incremental import assert_batches_contiguous, batches, make_items, spark_submit, sync_until_equal
from tideline.full_load import FullLoad
from tideline.packaging import library_zip

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(stack):
    started = not stackctl.spark_cluster_healthy()   # a stack made with TIDELINE_SPARK_CLUSTER=1 has one
    if started:
        stackctl.start_spark_cluster()
    yield stackctl.spark_master_url()
    if started:
        stackctl.stop_spark_cluster()


def submit(cluster, job: str, *args: str, pipelines) -> subprocess.Popen:
    """The job as the operator submits it: to the master, the library shipped as --py-files."""
    return spark_submit(job, *args, env_extra={"TIDELINE_PIPELINES": str(pipelines.dir)}, master=cluster,
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
    state = stackctl.spark_master_json()
    return [a["id"] for a in state.get("activeapps", []) + state.get("completedapps", []) if a["name"] == name]


def finish(proc: subprocess.Popen, timeout: float = 300) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-4000:]
    return out


def test_full_load_runs_on_both_workers_with_the_shipped_library(cluster, source_db, target_db, pipelines,
                                                                 unique_name):
    t = f"{unique_name}_cl"
    make_items(source_db, t, 40_000)
    try:
        cfg = pipelines.make([{"name": t}], parallelism=4, create_topics=True)
        finish(submit(cluster, "full_load.py", "--pipeline", cfg.name, "--tables", t, pipelines=pipelines))
        assert table_digest(source_db, "public", t, "id") == table_digest(target_db, cfg.name, t, "id")
        [app] = app_ids(f"tideline-full-load-{cfg.name}")
        logs = executor_logs(app)
        workers = {d.parents[1].name for d, _ in logs}
        assert workers == {"worker-1", "worker-2"}, logs
        copied = [(d, line) for d, text in logs for line in text.splitlines() if "[tideline]" in line]
        assert {d.parents[1].name for d, _ in copied} == {"worker-1", "worker-2"}, "both workers copied partitions"
        for d, line in copied:
            library = line.rsplit("library ", 1)[1].rstrip(")")
            assert library.startswith(str(d)) and ".zip/tideline/__init__.py" in library, (d, line)
            assert not library.startswith(str(stackctl.ROOT / "plugins"))
    finally:
        drop_source(source_db, t)


def test_stream_survives_an_executor_killed_mid_batch(cluster, spark, source_db, target_db, pipelines, unique_name):
    t = f"{unique_name}_clst"
    make_items(source_db, t, 5_000)
    writer = Writer(f"public.{t}", 5_001, seed=3, pause=0.002)
    stream = None
    try:
        cfg = pipelines.make([{"name": t}], capture=True, stream={"max_offsets_per_trigger": 1000,
                                                                  "trigger_interval_s": 0.5})
        [loaded] = FullLoad(cfg, spark).run([t])
        writer.start()
        stream = submit(cluster, "incremental.py", "--pipeline", cfg.name, pipelines=pipelines)
        deadline = time.time() + 180
        while len(batches(target_db, cfg.name)) < 2:
            assert stream.poll() is None, stream.stdout.read()[-4000:]
            assert time.time() < deadline, "the stream committed nothing on the cluster"
            time.sleep(0.3)
        executors = subprocess.run(["pgrep", "-f", "CoarseGrainedExecutorBackend"], capture_output=True,
                                   text=True).stdout.split()
        assert executors, "no executor JVM on the workers"
        os.kill(int(executors[0]), signal.SIGKILL)   # mid-stream: a batch is running or about to
        n = len(batches(target_db, cfg.name))
        deadline = time.time() + 180
        while len(batches(target_db, cfg.name)) < n + 3:
            assert stream.poll() is None, stream.stdout.read()[-4000:]
            assert time.time() < deadline, "the stream did not go on after the executor was killed"
            time.sleep(0.3)
        writer.stop()
        os.killpg(stream.pid, signal.SIGTERM)
        stream.wait(60)
        sync_until_equal(cfg, spark, source_db, target_db, {t: "id"})
        assert_batches_contiguous(target_db, cfg.name, {cfg.topic(t): loaded.offsets})
        [app] = app_ids(f"tideline-incremental-{cfg.name}")
        assert {d.parents[1].name for d, _ in executor_logs(app)} == {"worker-1", "worker-2"}
    finally:
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
        finish(submit(cluster, "batch_sync.py", "--pipeline", cfg.name, "--start", day0.isoformat(),
                      "--end", (day0 + timedelta(days=3)).isoformat(), pipelines=pipelines))
        assert table_digest(source_db, "public", t, "id") == table_digest(target_db, cfg.name, t, "id")
    finally:
        drop_source(source_db, t)
