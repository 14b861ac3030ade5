"""The pipeline config's sections other than its tables: source and target endpoints, Kafka,
Connect, Spark, the stream, verify, alerts — each a typed model with its defaults and the rules a
value must follow (see core.config for the pipeline and its tables)."""
from __future__ import annotations

import re
from typing import Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

from tideline.core.names import TOPIC_PREFIX, identifier

class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Endpoint(_Model):
    conn_id: str = Field(description="Airflow connection id")
    schema_: str = Field(default="public", alias="schema",
                         description="the source schema of the tables (MariaDB: the database); a table's own overrides it")

    @field_validator("schema_")
    @classmethod
    def _schema(cls, v: str) -> str:
        return identifier(v, "schema")


class TargetEndpoint(Endpoint):
    """Where rows land: a PostgreSQL database, or an Iceberg catalog (`catalog:` its Airflow
    connection, `namespace:` the tables' namespace)."""
    kind: str = Field(default="postgres", description="the kind of target (postgres or iceberg: the kinds the "
                                                      "support table names); the connection must be one")
    conn_id: str = Field(validation_alias=AliasChoices("conn_id", "catalog"),
                         description="Airflow connection id (for iceberg: the catalog's)")
    schema_: str = Field(default="public", validation_alias=AliasChoices("schema", "namespace"),
                         description="the target schema the tables land in (Iceberg: `namespace`)")

    @field_validator("kind")
    @classmethod
    def _kind(cls, v: str) -> str:
        # the support table's kinds, which the target registry checks are exactly its own
        # (targets.check_support): the core reads no target package
        from tideline.core.support import target_kinds
        if v not in target_kinds():
            raise ValueError(f"is {v!r}; the kinds of target are: {', '.join(target_kinds())}")
        return v


class SourceEndpoint(Endpoint):
    kind: str = Field(default="postgres", description="the source database's engine (postgres or mariadb); the "
                                                      "connection must be one (a postgres, mysql or mariadb connection)")

    @field_validator("kind")
    @classmethod
    def _kind(cls, v: str) -> str:
        from tideline.core.support import source_kinds
        if v not in source_kinds():
            raise ValueError(f"is {v!r}; the kinds of source are: {', '.join(source_kinds())}")
        return v
    heartbeat_table: str | None = Field(
        default="tideline_heartbeat",
        description="table in the source schema the connector writes a heartbeat row to, so its slot advances "
                    "while the synced tables are idle (else the slot pins WAL until the disk fills); null = off")

    @field_validator("heartbeat_table")
    @classmethod
    def _heartbeat(cls, v: str | None) -> str | None:
        return v if v is None else identifier(v, "heartbeat_table")


class KafkaSettings(_Model):
    @property
    def max_message_bytes(self) -> int:
        return self.max_message_mb * 1024 * 1024

    conn_id: str = Field(default="tideline_kafka", description="Airflow connection of type kafka, extra "
                                                                "{\"bootstrap.servers\": ...}")
    topic_prefix: str = Field(description="topics are <prefix>.<source schema>.<table>")
    partitions: int = Field(default=1, ge=1, le=1000, description="partitions per change topic (created by Tideline; "
                                                                 "never changed afterwards)")
    replication_factor: int = Field(default=1, ge=1, le=10, description="replicas per topic; production: 3 "
                                                                       "(min.insync.replicas is set to 2)")
    retention_ms: int = Field(default=7 * 24 * 3600 * 1000, ge=60_000,
                              description="how long Kafka keeps changes: the longest a stream may stop safely")
    json_schemas: bool = Field(default=False, description="embed Kafka Connect schemas in the change events "
                                                          "(bigger messages; some sinks, e.g. JDBC, need them)")
    durability: Literal["local", "production"] = Field(
        default="local", description="what the doctor requires of the topics: local allows one replica; "
                                     "production needs replication >= 3, min.insync.replicas >= 2, no unclean "
                                     "leader election")
    allowed_downtime_hours: float = Field(
        default=72, gt=0, description="how long the stream may be stopped without losing offsets: topic "
                                      "retention must be longer (the doctor checks the real topics)")
    max_message_mb: int = Field(
        default=64, ge=1, le=90, description="largest change event (one row's image) the pipeline carries, in MB: "
                                             "the connector's producer and the change topics are set to it (Kafka's "
                                             "own default, 1 MB, would stop capture at the first big row); below "
                                             "the brokers' socket.request.max.bytes (100 MB by default)")
    source_fields: list[str] | None = Field(
        default=None, description="fields of Debezium's `source` block to keep in the change events, e.g. "
                                   "[ts_ms] (all the stream reads): ~half the bytes on Kafka (571 -> 276 per "
                                   "benchmark event); null (default) keeps the whole block for other consumers")

    @field_validator("source_fields")
    @classmethod
    def _source_fields(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return v
        if "ts_ms" not in v:
            raise ValueError("must keep ts_ms (the source commit time the stream's lag is measured from), "
                             "or be null to keep the whole source block")
        bad = [f for f in v if not re.fullmatch(r"[a-z_][a-z0-9_]*", f)]
        if bad:
            raise ValueError(f"{bad} are not field names of Debezium's source block (lowercase, digits, _)")
        return v

    @field_validator("topic_prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        if not TOPIC_PREFIX.match(v):
            raise ValueError("letters, digits, '.', '_' and '-' only (it becomes part of Kafka topic names)")
        return v


class ConnectSettings(_Model):
    conn_id: str = Field(default="tideline_connect", description="Airflow http connection to the Kafka Connect REST API")
    retry_minutes: float = Field(
        default=5.0, gt=0, le=1440,
        description="how long the connector retries a source it loses while streaming (a restart, a "
                    "network cut) before its task FAILS, which make status, the stream, the watch DAG and an "
                    "alert report (Debezium's default retries forever). A source it cannot reach or log in to "
                    "when its task starts is retried forever whatever this says: capture_failure sees that by "
                    "the source's side (an inactive slot) and names the cause")

    @property
    def max_retries(self) -> int:
        """Debezium's errors.max.retries for retry_minutes, at RETRY_WAIT_MS between tries."""
        return max(1, round(self.retry_minutes * 60_000 / RETRY_WAIT_MS))


RETRY_WAIT_MS = 10_000   # Debezium's retriable.restart.connector.wait.ms (its default, made explicit)


# A stream's driver JVM: the serial collector (see job_conf); a heap that grows only while under
# 10% of it is free after a collection and gives back what is over 30% free — a batch's raw records
# are garbage right after it, and Java's defaults (40%/70%) kept the heap larger for nothing.
# A pipeline's spark.conf can set other options.
STREAM_JAVA_OPTIONS = "-XX:+UseSerialGC -XX:MinHeapFreeRatio=10 -XX:MaxHeapFreeRatio=30"
# ... and the client compiler only (C1) when the JVM only reads the batches (the target's writes are
# not Spark jobs: targets.Capabilities.writes_in_jvm): C2's compilations cost a 2-core host more
# than its faster code gives back. Measured on 2 cores: backlog of 2M events, driver JVM peak ~960
# -> ~760 MB at the same speed (tests/bench/incremental.py); streams at light load, JVM 592-685 ->
# 522 MB and 30% -> 17% of a core each (tests/bench/capacity.py). Where the JVM writes (an Iceberg
# MERGE), C1's code is what the stream waits for: a MERGE of ~258,000 changes 8.7 -> 6.3 s, of 90
# changes 2.3-3.9 -> 1.8-2.2 s (tests/bench/iceberg.py).
CLIENT_COMPILER_ONLY = "-XX:TieredStopAtLevel=1"


CHECKPOINT_FILE_MANAGER = "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager"
DIRECT_RESULT_BYTES = 64 << 20   # below spark.rpc.message.maxSize (128 MB), which direct results must fit
KAFKA_CONSUMER_CACHE = 64    # spark.kafka.consumer.cache.capacity's default


class SparkSettings(_Model):
    conn_id: str = Field(default="spark_default", description="Airflow Spark connection the jobs are submitted with")
    parallelism: int = Field(default=4, ge=1, le=256, description="JDBC partitions per table in a full load")
    tables_at_once: int = Field(
        default=4, ge=1, le=64,
        description="tables a full load reads at once, each with its own snapshot and `parallelism` partitions, "
                    "sharing the job's cores: many small tables load in about the time of the biggest instead of one "
                    "after another. The source serves up to tables_at_once x (parallelism + 1) connections at once; "
                    "a target that cannot take loads side by side (Iceberg) loads one table at a time")
    stream_cores: int = Field(default=1, ge=1, le=256,
                              description="cores a running stream holds on a Spark cluster (its spark.cores.max; "
                                          "loads and batches hold at most `parallelism`): a cluster needs "
                                          "streams x stream_cores + the loads' cores, or a job waits for cores")
    conf: dict[str, str] = Field(default_factory=dict, description="extra Spark settings for the jobs")

    def job_conf(self, kind: str, topic_partitions: int = 0, writes_in_jvm: bool = False) -> dict[str, str]:
        """The Spark settings of one job kind (stream | load | batch), for a target whose writes
        are Spark jobs or not (`writes_in_jvm`). On a standalone cluster an
        application takes every free core unless capped, so a first stream would starve the
        rest (local mode ignores the cap). A stream's driver runs the serial collector: it lives
        for days applying batches one after another, and G1's regions and threads cost it ~250 MB
        of resident memory and ~10% of a core for nothing (tests/bench/capacity.py). The
        pipeline's own `conf` wins."""
        conf = {"spark.cores.max": str(self.stream_cores if kind == "stream" else self.parallelism)}
        if kind == "stream":
            conf["spark.driver.extraJavaOptions"] = (STREAM_JAVA_OPTIONS if writes_in_jvm
                                                     else f"{STREAM_JAVA_OPTIONS} {CLIENT_COMPILER_ONLY}")
            # The per-run checkpoint through Hadoop's FileSystem API: the default FileContext one
            # forks `readlink` (and, for its .crc files, `chmod`) of a driver JVM for every
            # checkpoint file without Hadoop's native library — several per batch. This one still
            # has Hadoop fork `chmod` per new file, unless the driver runs with Tideline's local
            # file system (spark_session.driver_conf). The checkpoint is disposable (the target
            # holds the position), so its rename semantics don't matter.
            conf["spark.sql.streaming.checkpointFileManagerClass"] = CHECKPOINT_FILE_MANAGER
            # A batch's raw records come back as task results of ~15 MB each; above 1 MB (the
            # default) Spark parks each in the block manager and fetches it back over the network
            # stack, two more copies of every batch through the heap: ~6% of the stream's time.
            conf["spark.task.maxDirectResultSize"] = str(DIRECT_RESULT_BYTES)
            # One cached Kafka consumer per topic partition read (`topic_partitions`: the stream's
            # tables x kafka.partitions). Past Spark's default of 64 every batch closes and reopens
            # consumers (tests/bench/many_streams.py: 100 tables).
            if topic_partitions > KAFKA_CONSUMER_CACHE:
                conf["spark.kafka.consumer.cache.capacity"] = str(topic_partitions + topic_partitions // 4)
        return {**conf, **self.conf}

    @staticmethod
    def job_env(kind: str) -> dict[str, str]:
        """How one job kind's processes allocate memory (the sync DAG submits with these; so do the
        benchmarks). MALLOC_ARENA_MAX: glibc gives each JVM thread its own malloc arena; two are
        plenty. A stream also fixes glibc's mmap threshold (it otherwise rises once a batch's big
        buffers are freed, and the next batches' then stay in the heap for good) and sends pyarrow
        through that malloc instead of mimalloc, which keeps freed batches for reuse: the stream's
        Python driver peaks ~150 MB lower at the same speed (tests/bench/incremental.py)."""
        env = {"MALLOC_ARENA_MAX": "2"}
        if kind == "stream":
            env.update(MALLOC_MMAP_THRESHOLD_="131072", ARROW_DEFAULT_MEMORY_POOL="system")
        return env


class StreamSettings(_Model):
    max_offsets_per_trigger: int | None = Field(
        default=None, ge=100, description="events per batch at most; default the target's (200,000; an Iceberg "
                                          "table's 500,000: each of its commits costs a scan of the table's keys)")
    max_batch_mb: float | None = Field(default=None, ge=1, description="a batch's raw change events weigh at most "
                                                                      "about this many MB (the driver holds them): "
                                                                      "fewer events per batch when the events are "
                                                                      "big; default the target's (128; an Iceberg "
                                                                      "table's 256)")
    trigger_interval_s: float = Field(default=1.0, ge=0.1, le=3600,
                                      description="continuous mode: how often a batch starts")
    outage_wait_minutes: float = Field(default=10, ge=0, description="a database that restarts or refuses "
                                                                     "connections is waited out this long by a "
                                                                     "running stream before its task fails")
    stage_on: Literal["auto", "driver", "executors"] = Field(
        default="auto", description="where a batch's events are decoded, compacted and staged for its commit: "
                                    "driver (the driver's Python, as the read's tasks hand them over), executors "
                                    "(each Spark task decodes its share of the Kafka ranges and COPYs its rows "
                                    "into the batch's table; the driver only commits), or auto: executors on a "
                                    "cluster, driver on a local master (whose executors are the driver's own "
                                    "cores). See the sizing guide")
    on_bad_message: Literal["stop", "dead_letter"] = Field(
        default="stop", description="stop: halt with topic/partition/offset; dead_letter: record it and go on")
    checkpoint_dir: str | None = Field(
        default=None, description="directory of each run's Spark checkpoint (disposable: the position lives in "
                                  "the target); default the driver's temp directory. With the driver on a "
                                  "cluster node, storage the driver host keeps")

    def events_at_most(self, target_default: int) -> int:
        """max_offsets_per_trigger, else the target's (Capabilities.batch_events)."""
        return self.max_offsets_per_trigger or target_default

    def mb_at_most(self, target_mb: float) -> float:
        """max_batch_mb, else the target's (Capabilities.batch_mb)."""
        return self.max_batch_mb or target_mb

    def batch_events(self, mean_event_bytes: float | None, target_default: int = 200_000,
                     target_mb: float = 128) -> int:
        """Events per batch: max_offsets_per_trigger (else the target's `target_default`,
        Capabilities.batch_events), or fewer when that many events of the size seen in the topics
        would weigh more than max_batch_mb (else the target's `target_mb`). 200,000 events of ~600
        bytes are ~120 MB; the same count of 5 KB rows would be 1 GB — past the driver's heap and
        Spark's 1 GB cap on a job's results, a batch that fails every time it is tried."""
        most = self.events_at_most(target_default)
        if not mean_event_bytes:
            return most
        return max(1, min(most, int(self.mb_at_most(target_mb) * 1e6 / mean_event_bytes)))


SCHEDULE_PRESETS = ("@once", "@continuous", "@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly",
                    "@annually")


def schedule(value: str | None) -> str | None:
    """A DAG schedule Airflow takes: one of its presets, or a cron expression of five fields —
    checked when the YAML is read, so a typo names the file, line and field instead of failing
    later inside Airflow's own validation of a DAG nobody sees."""
    if value is None or value in SCHEDULE_PRESETS:
        return value
    from croniter import croniter
    if not croniter.is_valid(value) or len(value.split()) != 5:
        raise ValueError(f"{value!r} is not a schedule: give a cron expression of five fields (minute hour "
                         f"day-of-month month day-of-week, e.g. \"0 3 * * *\") or one of {', '.join(SCHEDULE_PRESETS)}")
    return value


def next_run(value: str | None, after):
    """When a schedule (checked by `schedule`) next fires after `after` (an aware datetime, UTC):
    for a data-interval DAG, when the interval now open is run. None for no schedule or @once."""
    if value in (None, "@once", "@continuous"):
        return None
    from croniter import croniter
    cron = {"@hourly": "0 * * * *", "@daily": "0 0 * * *", "@weekly": "0 0 * * 0", "@monthly": "0 0 1 * *",
            "@quarterly": "0 0 1 */3 *", "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *"}.get(value, value)
    return croniter(cron, after).get_next(type(after))


class StateEndpoint(_Model):
    """Where Tideline's state lives (schema `tideline`: phases, fencing epochs, offsets, runs, chunks,
    the stream's decode stage): a PostgreSQL database of its own. By default the target's database
    (a PostgreSQL target: rows and state commit together) or a JDBC catalog's; required for an
    Iceberg catalog of another type (REST, Glue, ...), which has no database to hold it."""
    conn_id: str = Field(description="Airflow connection id of a PostgreSQL database for Tideline's state")


class HashSalt(_Model):
    conn_id: str = Field(description="the Airflow connection whose password is the salt of the hash_columns "
                                     "(core.column_hash); changing it changes every hash: re-snapshot after")


class VerifyConfig(_Model):
    schedule: str | None = Field(default="0 3 * * *", description="cron of the verify_<name> DAG (nightly by "
                                                                     "default); null = no scheduled verify")
    tables: list[str] | None = Field(default=None, description="tables to verify (default: every cdc table)")
    repair: bool = Field(default=False, description="repair what the scheduled verify finds, then verify again")
    sample_rows: int = Field(default=100, ge=0, le=100_000, description="differing keys listed per table")

    _schedule = field_validator("schedule")(classmethod(lambda cls, v: schedule(v)))


class MaintenanceSettings(_Model):
    """Table maintenance of a target whose every commit adds files (Iceberg): compaction, snapshot
    expiry and orphan-file removal, by the maintain_<name> DAG."""
    schedule: str | None = Field(default="30 2 * * *", description="cron of the maintain_<name> DAG (nightly by "
                                                                   "default); null = only when triggered")
    snapshot_retention_hours: float = Field(default=24, ge=0, description="snapshots older than this are expired "
                                                                           "(never the one holding the offsets the "
                                                                           "stream resumes from, nor anything newer)")
    orphan_age_hours: float = Field(default=72, ge=1, description="files no snapshot references and older than "
                                                                   "this are deleted (younger ones may belong to a "
                                                                   "write still committing)")
    target_file_mb: int = Field(default=128, ge=1, le=4096, description="compaction writes data files of about "
                                                                         "this size")

    _schedule = field_validator("schedule")(classmethod(lambda cls, v: schedule(v)))


class AlertSettings(_Model):
    webhook_conn_id: str | None = Field(default=None, description="Airflow HTTP connection of a chat webhook "
                                                                  "(Slack/Mattermost-style JSON {\"text\": ...})")
    headroom_below_hours: float = Field(default=12, ge=0, description="alert when Kafka retention will delete "
                                                                       "an offset the stream still needs within "
                                                                       "this many hours")
    repeat_after_hours: float = Field(default=6, ge=0, description="a condition the watch DAG keeps seeing "
                                                                  "is alerted again after this long")
    check_every_minutes: int = Field(default=30, ge=1, le=1440, description="how often the watch_<name> DAG "
                                                                            "checks headroom, stream running "
                                                                            "or not")
    stalled_after_minutes: float = Field(default=15, gt=0, description="alert when a table's stream has "
                                                                       "committed nothing for this long while "
                                                                       "Kafka holds events for it")
    max_retained_wal_mb: float = Field(default=4096, gt=0, description="alert when the pipeline's capture "
                                                                       "holds more than this much of the source's "
                                                                       "log (a replication slot's retained WAL, the "
                                                                       "binlogs kept from the connector's position)")
    slot_inactive_minutes: float = Field(default=30, gt=0, description="alert when nobody has read the "
                                                                        "pipeline's replication slot for this long "
                                                                        "(its connector stopped: the source keeps "
                                                                        "WAL for it without bound)")
