"""Spark for the local stack: local mode inside each job (default), or a standalone master and
workers (TIDELINE_SPARK_CLUSTER=1); and the drivers' class archive either way."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from services.base import (HOST, LIB, PORTS, ROOT, SPARK_CLUSTER, SPARK_WORKER_MEMORY, SPARK_WORKERS, STACK, VAR,
                           VENV_BIN, StackError, http_json, java, wait_until)
from services.addresses import CLASS_ARCHIVE, driver_classpath, spark_jars, spark_master_url
from services.env import environment
from services.supervisor import SPARK_PARTS, unsupervise, supervise, supervisord_running


def spark_check() -> str:
    jars = spark_jars()
    names = " ".join(Path(j).name for j in jars)
    if "spark-sql-kafka" not in names or "postgresql" not in names or "mariadb-java-client" not in names:
        raise StackError(f"spark: Kafka connector or JDBC jar missing in {LIB / 'spark'}. Run `make setup`.")
    import pyspark
    if SPARK_CLUSTER:
        return spark_cluster_healthy()
    return f"local mode, pyspark {pyspark.__version__}, {len(jars)} extra jars"


def spark_master_json() -> dict:
    """The master's own JSON view: workers (state, cores, memory) and applications."""
    return http_json(f"http://{HOST}:{PORTS['spark_master_ui']}/json/")


def spark_cluster_healthy() -> str | bool:
    try:
        state = spark_master_json()
    except OSError:  # no master listening
        return False
    alive = [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]
    if len(alive) < SPARK_WORKERS:
        return False
    return (f"{spark_master_url()}: {len(alive)} workers ({sum(w['cores'] for w in alive)} cores), "
            f"{len(state.get('activeapps', []))} running application(s)")


def _spark_home() -> Path:
    import pyspark
    return Path(pyspark.__file__).parent


def _spark_daemon(main: str, args: list[str]) -> str:
    """A Spark master or worker JVM from the installed PySpark distribution. Its ports are the
    stack's or none: with spark.port.maxRetries=0 a port taken (our ports sit in Linux's ephemeral
    range, so a client socket can hold one for a while) stops the daemon and supervisord starts it
    again, instead of Spark moving to the next port, where nothing looks for it (seen in CI: the
    master's UI on 58181, its status probe on 58180 refused for 60 s)."""
    home = _spark_home()
    return shlex.join([java(), "-Xms128m", "-Xmx512m", "-XX:+IgnoreUnrecognizedVMOptions", "-Dspark.port.maxRetries=0",
                       "-cp", f"{home / 'conf'}:{home / 'jars'}/*", main, *args])


def up_spark() -> None:
    """Local mode needs no process. The cluster: a master and SPARK_WORKERS workers, supervised.
    Workers get a clean environment (no PYTHONPATH): executors import Tideline only from the
    library each job ships (--py-files), never from this checkout. Either way the drivers start
    from this host, with its class archive."""
    pyspark_bytecode()
    build_class_archive()
    if not SPARK_CLUSTER:
        if supervisord_running():
            unsupervise(SPARK_PARTS)
        spark_check()
        return
    start_spark_cluster()


def pyspark_bytecode() -> None:
    """Puts each module's bytecode into pyspark's own zips (pyspark.zip, py4j's), which Spark
    puts first on every driver's and Python worker's path: Python compiles what it imports from a
    zip at every start (pyspark alone ~0.45 s per process), not once (tideline.packaging)."""
    sys.path.insert(0, str(ROOT / "plugins"))
    from tideline.packaging import with_bytecode
    for archive in sorted((_spark_home() / "python" / "lib").glob("*.zip")):
        if with_bytecode(archive):
            print(f"[stack] spark     {archive.name}: bytecode added (once)", flush=True)


def _class_archive_stamp() -> str:
    """What the archive was recorded against: a JVM only maps an archive made by the same JVM
    build from the same class path (pyspark's jars, and Tideline's driver jars, which come first
    on it and are checked by size and time: a rebuilt one needs a new archive)."""
    version = subprocess.run([java(), "-version"], capture_output=True, text=True).stderr.strip()
    return json.dumps({"java": version, "jars": sorted(p.name for p in (_spark_home() / "jars").glob("*.jar")),
                       "driver": [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in driver_classpath()]})


def build_class_archive() -> None:
    """Records the Spark driver's class archive (stack/spark_class_archive.py says why) when it is
    missing or was made for another JVM or pyspark; the jobs use it when it exists
    (tideline.spark_session.driver_java_options)."""
    stamp_file = CLASS_ARCHIVE.with_suffix(".stamp")
    stamp = _class_archive_stamp()
    if CLASS_ARCHIVE.exists() and stamp_file.exists() and stamp_file.read_text() == stamp:
        return
    print("[stack] spark     recording the driver's class archive (once, ~20 s) ...", flush=True)
    partial = CLASS_ARCHIVE.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    driver = ":".join(map(str, driver_classpath()))   # the class path the drivers start with
    res = subprocess.run([str(VENV_BIN / "spark-submit"), "--master", "local[1]", "--conf",
                          f"spark.driver.extraJavaOptions=-XX:ArchiveClassesAtExit={partial}",
                          *(["--conf", f"spark.driver.extraClassPath={driver}"] if driver else []),
                          str(STACK / "spark_class_archive.py")],
                         env={**os.environ, **environment()}, capture_output=True, text=True, timeout=300)
    if res.returncode != 0 or not partial.exists():
        raise StackError(f"spark: recording the driver's class archive failed (exit {res.returncode}):\n"
                         f"{(res.stdout + res.stderr)[-3000:]}")
    partial.replace(CLASS_ARCHIVE)
    stamp_file.write_text(stamp)


def start_spark_cluster() -> None:
    """The standalone master and workers, supervised (also what the cluster tests start)."""
    # SPARK_SCALA_VERSION: a worker builds each executor's command with Spark's launcher, which
    # asks for it when it does not run from a release tarball (a PySpark install is not one)
    scala = next(_spark_home().glob("jars/spark-core_*.jar")).name.split("_")[1].split("-")[0]
    spark_env = {"SPARK_HOME": str(_spark_home()), "SPARK_SCALA_VERSION": scala, "PYTHONPATH": "",
                 "SPARK_LOCAL_IP": HOST, "JAVA_HOME": str(Path(java()).resolve().parents[1])}
    supervise("spark-master", _spark_daemon("org.apache.spark.deploy.master.Master", [
        "--host", HOST, "--port", str(PORTS["spark_master"]), "--webui-port", str(PORTS["spark_master_ui"])]),
        environment=spark_env)
    wait_until("spark-master", lambda: "workers" in spark_master_json(), 60,
               f"the master's status at http://{HOST}:{PORTS['spark_master_ui']}/json/")
    for i in range(1, SPARK_WORKERS + 1):
        work = VAR / "spark" / f"worker-{i}"
        work.mkdir(parents=True, exist_ok=True)
        supervise(f"spark-worker-{i}", _spark_daemon("org.apache.spark.deploy.worker.Worker", [
            "--host", HOST, "--cores", "1", "--memory", SPARK_WORKER_MEMORY, "--work-dir", str(work),
            "--webui-port", str(PORTS["spark_worker_ui"] + i - 1), spark_master_url()]), environment=spark_env)
    wait_until("spark", spark_cluster_healthy, 90, f"{SPARK_WORKERS} workers registered with {spark_master_url()}")


def stop_spark_cluster() -> None:
    unsupervise(SPARK_PARTS)
