"""Tideline installed as a team installs it into its own Airflow: the wheel built from this
checkout, installed into a fresh venv outside it, its own AIRFLOW_HOME holding only the two
one-line DAG files of docs/install.md — then a PostgreSQL pipeline run by that install's DAG to
streaming, changes streamed, and verified equal by that install's `tideline verify`. Nothing of
the checkout is on its path: the Spark jobs it submits are the wheel's packed entrypoints.

The fresh venv reaches Airflow, Spark and the drivers through a .pth file to the dev venv
(tests/unit/test_wheel.py builds it the same way) rather than downloading them again; the
stack's Airflow metadata database, Kafka, Connect and Spark are the services it runs against."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig

import pytest

import stackctl
from helpers import drop_source, table_digest, wait_until
from test_dags import make_table

pytestmark = pytest.mark.integration

RUN_SYNC = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
assert not bag.import_errors, bag.import_errors
run = bag.dags[sys.argv[2]].test(run_conf={"stream_mode": "available_now"})
print(json.dumps({ti.task_id: ti.state for ti in run.get_task_instances()} | {"__run__": run.state,
                  "__file__": bag.dags[sys.argv[2]].fileloc}))
"""


@pytest.fixture(scope="module")
def install(tmp_path_factory, stack):
    base = tmp_path_factory.mktemp("installed")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(base / "dist"), str(stackctl.ROOT)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    [wheel] = (base / "dist").glob("tideline-*.whl")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    [site] = (venv / "lib").glob("python3*/site-packages")
    (site / "dev-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-deps", "--no-index", str(wheel)],
                         capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stderr
    dags = base / "airflow" / "dags"
    dags.mkdir(parents=True)
    (dags / "tideline.py").write_text("from tideline.airflow.dags import build_dags; globals().update(build_dags())\n")
    (dags / "tideline_config_errors.py").write_text(
        "from tideline.airflow.dags import raise_broken_pipelines; raise_broken_pipelines()\n")
    return venv, base, dags


def _env(venv, base, pipelines_dir) -> dict:
    """The stack's connections and services, with nothing of the checkout: no PYTHONPATH, no
    TIDELINE_HOME, no jar files named (Spark fetches the jars by their Maven coordinates:
    tideline.spark_packages), the install's own python for Spark's driver and workers, its own
    AIRFLOW_HOME."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "TIDELINE_HOME", "TIDELINE_SPARK_JARS", "TIDELINE_ICEBERG_JARS")}
    python = str(venv / "bin" / "python")
    dev_bin = os.path.dirname(sys.executable)   # spark-submit: the pyspark the install uses (via the .pth)
    return {**env, "PATH": f"{venv / 'bin'}:{dev_bin}:/usr/bin:/bin", "PYSPARK_PYTHON": python,
            "PYSPARK_DRIVER_PYTHON": python, "AIRFLOW_HOME": str(base / "airflow"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(base / "airflow" / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(base / "airflow" / "plugins"),
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True", "TIDELINE_PIPELINES": str(pipelines_dir)}


def test_an_installed_tideline_runs_a_pipeline_to_streaming_and_verifies_it_equal(
        install, source_db, target_db, pipelines, unique_name):
    venv, base, dags = install
    t = f"{unique_name}_inst"
    make_table(source_db, t, 2000)
    try:
        cfg = pipelines.adopt(pipelines.make([{"name": t}], partitions=1, create_topics=False))
        env = _env(venv, base, pipelines.dir)

        def sync() -> dict:
            out = subprocess.run([str(venv / "bin" / "python"), "-c", RUN_SYNC, str(dags), f"sync_{cfg.name}"],
                                 capture_output=True, text=True, env=env, cwd=base, timeout=900)
            assert out.returncode == 0, out.stderr[-3000:]
            return json.loads(out.stdout.strip().splitlines()[-1])
        first = sync()
        assert first["__run__"] == "success" and first["full_load"] == "success", first
        assert first["__file__"] == str(dags / "tideline.py"), first
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE {t} SET qty = qty + 1 WHERE id <= 300")
            cur.execute(f"DELETE FROM {t} WHERE id > 1900")
            cur.execute(f"INSERT INTO {t} SELECT g, 1, 'new' FROM generate_series(5001, 5050) g")
        wait_until(lambda: sync()["__run__"] == "success" and table_digest(source_db, "public", t, "id")
                   == table_digest(target_db, cfg.name, t, "id"), 300, "the installed stream to catch up")
        with target_db.cursor() as cur:
            cur.execute("SELECT phase FROM tideline.table_state WHERE pipeline = %s AND table_name = %s",
                        (cfg.name, t))
            assert cur.fetchone()[0] == "streaming"
        verified = subprocess.run([str(venv / "bin" / "tideline"), "verify", "--pipeline", cfg.name],
                                  capture_output=True, text=True, env=env, cwd=base, timeout=600)
        assert verified.returncode == 0, verified.stderr[-3000:]
        assert f"{t}: source 1,950 rows, target 1,950 rows; equal" in verified.stdout, verified.stdout   # said, not only exited 0
        status = subprocess.run([str(venv / "bin" / "tideline"), "status", "--json", "--pipeline", cfg.name],
                                capture_output=True, text=True, env=env, cwd=base, timeout=300)
        [found] = json.loads(status.stdout)
        assert status.returncode == 0 and found["state"] == "ok", status.stdout[-2000:]
        [row] = found["tables"]
        assert row["phase"] == "streaming" and row["last_verify"] and "equal" in row["last_verify"], row
    finally:
        drop_source(source_db, t)
