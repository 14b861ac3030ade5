"""One way to get a SparkSession, for the Spark jobs and the tests alike.

Under spark-submit the session already exists and carries --jars; run in-process (tests, the
demo) it is built in local mode with the Kafka connector and JDBC jars from TIDELINE_SPARK_JARS.
"""
from __future__ import annotations

import logging
import os
import re
import threading
import time

from pyspark.sql import SparkSession

from tideline import JOBS


DRIVER_ADDRESS_KEYS = ("spark.driver.host", "spark.driver.bindAddress")


def driver_java_options(*first: str, environ=None) -> str:
    """The driver JVM options a job is submitted with, after `first` (its kind's, from
    SparkSettings.job_conf): Tideline's log4j config, and this host's class archive when it has
    one (TIDELINE_SPARK_CLASS_ARCHIVE in `environ`, default this process's environment) — Spark's
    classes mapped parsed and verified instead of loaded, ~2 s off every job's start
    (stack/spark_class_archive.py). A JVM that cannot use the archive says so and starts without."""
    archive = (os.environ if environ is None else environ).get("TIDELINE_SPARK_CLASS_ARCHIVE", "")
    return " ".join(filter(None, [*first, f"-Dlog4j2.configurationFile={JOBS / 'log4j2.properties'}",
                                  f"-XX:SharedArchiveFile={archive}" if archive and os.path.isfile(archive) else ""]))


NIO_LOCAL_FILE_SYSTEM = "dev.tideline.hadoop.NioLocalFileSystem"


# Spark's default redaction ((?i)secret|password|token|access[.]?key) and a REST catalog's OAuth2
# `credential` (client id:secret): set on every job and session, so its UI, event log and
# environment listing never show one (targets.iceberg.catalog hands them over at run time)
REDACTION = {"spark.redaction.regex": "(?i)secret|password|token|access[.]?key|credential"}


def driver_conf(conf: dict[str, str], environ=None) -> dict[str, str]:
    """`conf` (a job kind's, from SparkSettings.job_conf) with what the driver's host adds: its JVM
    options (driver_java_options) and, when the host has Tideline's driver jar
    (TIDELINE_SPARK_DRIVER_CLASSPATH, built by `make setup` from stack/jvm/hadoop-nio), Hadoop's
    local file system setting permissions through java.nio — without Hadoop's native library it
    forks `chmod` of the whole driver JVM for every file it creates (a stream's checkpoint: ~5
    per batch). On the driver's class path, not --jars: Hadoop loads the file system before
    Spark adds the jars."""
    environ = os.environ if environ is None else environ
    out = {**REDACTION, **conf}
    out["spark.driver.extraJavaOptions"] = driver_java_options(conf.get("spark.driver.extraJavaOptions", ""),
                                                               environ=environ)
    jars = [j for j in environ.get("TIDELINE_SPARK_DRIVER_CLASSPATH", "").split(":") if j and os.path.isfile(j)]
    if jars:
        out["spark.driver.extraClassPath"] = ":".join(filter(None, [conf.get("spark.driver.extraClassPath"), *jars]))
        out.setdefault("spark.hadoop.fs.file.impl", NIO_LOCAL_FILE_SYSTEM)
    return out


def driver_address() -> dict[str, str]:
    """Where executors reach the driver: TIDELINE_SPARK_DRIVER_HOST (an address the workers can
    reach; default loopback, for local mode and the one-host stack), bound on
    TIDELINE_SPARK_DRIVER_BIND_ADDRESS (default: that address when it is loopback, else every
    interface)."""
    host = os.environ.get("TIDELINE_SPARK_DRIVER_HOST", "127.0.0.1")
    bind = os.environ.get("TIDELINE_SPARK_DRIVER_BIND_ADDRESS",
                          host if host.startswith("127.") or host == "localhost" else "0.0.0.0")
    return {"spark.driver.host": host, "spark.driver.bindAddress": bind}


class SessionStarting:
    """A SparkSession being started in a thread while the job's driver does what needs no Spark
    (a full load: the source's catalog, the epoch, the Kafka handover, the snapshot and its key
    ranges; a stream: claiming its tables and checking Kafka still holds their positions), the
    ~3-8 s of SparkContext start-up and those steps overlapping (tests/bench/full_load.py). Its
    first use waits for the session; a failure to start is raised there. Then it is the session
    (attributes pass through).

    `start=False`: not started until its first use (or `start()`) — a job that may need no Spark
    at all (a piped full load on a local master: driver_streams) does not pay for a SparkContext
    it never uses."""

    def __init__(self, app_name: str, start: bool = True, **kwargs):
        self.master = master_url(kwargs.get("master"))
        self._session = self._error = None
        self._ready = threading.Event()
        self._active_here = threading.local()
        self._args = (app_name, kwargs)
        self._starting = threading.Lock()
        self.started = False
        cores = local_cores(self)
        # the streams the driver may run at once when it pipes a load itself (driver_streams)
        self.driver_slots = threading.BoundedSemaphore(cores) if cores else None
        if start:
            self.start()

    def start(self) -> None:
        """Starts the session in its thread (once)."""
        with self._starting:
            if self.started:
                return
            self.started = True
        app_name, kwargs = self._args
        threading.Thread(target=self._start, args=(app_name,), kwargs=kwargs, daemon=True,
                         name="tideline-spark-start").start()

    def _start(self, app_name: str, **kwargs) -> None:
        started = time.monotonic()
        try:
            self._session = get_session(app_name, **kwargs)
            logging.getLogger("tideline.spark").info("Spark session ready in %.1fs", time.monotonic() - started)
        except BaseException as exc:  # noqa: BLE001 — raised in the thread that uses the session
            self._error = exc
        finally:
            self._ready.set()

    def ready(self, timeout: float = 0.0) -> bool:
        """Whether the session has started (or failed to), waiting up to `timeout` seconds; a
        session not asked for yet is not ready, and is not started by this."""
        return self.started and self._ready.wait(timeout)

    def session(self) -> SparkSession:
        """The session, made the active one of the calling thread the first time that thread uses
        it: Spark's SQLConf.get reads the thread's active session, and without one a JVM call
        outside Spark SQL (Iceberg's Spark3Util.loadIcebergTable in maintenance) sees the fallback
        settings, without the catalogs set on the session — getOrCreate made it active only in
        the thread that started it."""
        self.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error
        if not getattr(self._active_here, "done", False):
            self._session._jvm.org.apache.spark.sql.SparkSession.setActiveSession(self._session._jsparkSession)
            self._active_here.done = True
        return self._session

    def __getattr__(self, name: str):
        return getattr(self.session(), name)


def session_ready(spark) -> bool:
    """Whether `spark` (a SessionStarting, or a session) can run a job now."""
    return spark.ready() if isinstance(spark, SessionStarting) else True


def driver_streams(spark) -> int | None:
    """How many pipes the driver runs at once when it moves a load's rows itself: the local
    master's cores, when the job's session was never started (SessionStarting(start=False)). Spark
    in local mode would run the same pipes in as many Python workers on this host, after ~2-3 s
    of SparkContext start-up that competes with the two databases for the same cores
    (tests/bench/full_load_mariadb.py). None: Spark's tasks pipe (a cluster, or a session started)."""
    if isinstance(spark, SessionStarting) and not spark.started:
        return local_cores(spark)
    return None


def jvm_now(spark):
    """(the JVM, a Hadoop configuration) for a few calls into Java that need no Spark job (an
    Iceberg commit through Iceberg's own API): the session's once it has started; else, under
    spark-submit, the submitting JVM alone through py4j, with the job's spark.hadoop.* settings —
    a SparkContext's start-up (~3-5 s of two cores, its threads and ~250 MB) is not paid for a
    commit. A session started later shares that gateway. Outside spark-submit the session starts."""
    if isinstance(spark, SessionStarting) and not spark.started and os.environ.get("PYSPARK_GATEWAY_PORT"):
        from pyspark import SparkContext
        SparkContext._ensure_initialized()
        jvm = SparkContext._jvm
        return jvm, jvm.org.apache.spark.deploy.SparkHadoopUtil.get().newConfiguration(jvm.org.apache.spark.SparkConf())
    context = spark.sparkContext
    return context._jvm, context._jsc.hadoopConfiguration()


def local_cores(spark) -> int | None:
    """How many tasks `spark` runs at once on the driver's own host (a local master: local[N],
    local[*], local), or None when its executors run elsewhere (a cluster)."""
    return master_cores(spark.master if isinstance(spark, SessionStarting) else spark.sparkContext.master)


def master_cores(master: str) -> int | None:
    """local_cores of a master URL."""
    m = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\d+)?\])?", master.strip())
    if m is None:
        return None
    if m.group(1) == "*":
        return os.cpu_count() or 1
    return int(m.group(1) or 1)


def master_url(master: str | None = None) -> str:
    """The master a session of this process gets: `master` when given; under spark-submit its
    --master (which it hands the Python driver as MASTER); else TIDELINE_SPARK_MASTER or local[2]."""
    if master:
        return master
    if os.environ.get("SPARK_ENV_LOADED"):
        return os.environ.get("MASTER", "")
    return os.environ.get("TIDELINE_SPARK_MASTER", "local[2]")


def get_session(app_name: str, master: str | None = None, conf: dict[str, str] | None = None,
                extra_jars: list[str] | tuple = (), packages: str = "") -> SparkSession:
    """`extra_jars`: what the job's target needs (targets.Target.spark_jars); `packages`: the
    Maven coordinates of what no jar file names (tideline.spark_packages), which Spark resolves at
    the session's start. Under spark-submit the submitter gave them already."""
    builder = SparkSession.builder.appName(app_name)
    under_submit = bool(os.environ.get("SPARK_ENV_LOADED"))  # set by spark-submit's launcher
    if master or not under_submit:
        builder = builder.master(master_url(master))
    jars = ",".join(filter(None, [os.environ.get("TIDELINE_SPARK_JARS", ""), *extra_jars]))
    if jars and not under_submit:
        builder = builder.config("spark.jars", jars)
    if packages and not under_submit:
        builder = builder.config("spark.jars.packages", packages)
    defaults = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.enabled": "false",
        **driver_address(),
        "spark.driver.memory": "2g",
        "spark.sql.ansi.enabled": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "50000",
        **REDACTION,
    }
    for key, value in {**defaults, **(conf or {})}.items():
        if under_submit and key.startswith("spark.driver.") and key not in DRIVER_ADDRESS_KEYS:
            continue  # fixed by spark-submit before the JVM started
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(os.environ.get("TIDELINE_SPARK_LOG_LEVEL", "WARN"))
    return session
