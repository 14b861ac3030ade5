"""Pipeline config: `pipelines/<name>.yaml` validated into a typed model.

Every validation error names the file, the field path and what is allowed, so a person can fix
the YAML without reading code. Credentials never live here: only Airflow connection ids.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tideline.core.errors import ConfigError

PIPELINE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,40}$")
TOPIC_PREFIX = re.compile(r"^[A-Za-z0-9._-]{1,100}$")


def name_problem(value: object) -> str | None:
    """Why `value` cannot name a schema, table or column, or None. Names are written as the
    database spells them (case, spaces, unicode, reserved words) and quoted wherever Tideline
    writes SQL; what no quoting makes safe everywhere — in SQL, in Debezium's comma-separated
    table list — is refused."""
    if not isinstance(value, str) or not value:
        return "must be a non-empty name"
    if len(value.encode()) > 63:
        return "is longer than 63 bytes (PostgreSQL would cut it)"
    bad = [c for c in ('"', ",", "\x00") if c in value]
    if bad:
        return f"contains {', '.join(repr(c) for c in bad)}, which Tideline cannot carry in a name: rename it"
    return None


def _identifier(value: str, what: str) -> str:
    problem = name_problem(value)
    if problem:
        raise ValueError(f"{what} {value!r} {problem}")
    return value


def topic_name(prefix: str, schema: str, table: str) -> str:
    """Debezium's topic for a source table: <prefix>.<schema>.<table>, each character a topic name
    cannot hold (outside [A-Za-z0-9._-], counted in UTF-16 units as Java does) turned into '_',
    cut at 249 characters — as its topic naming strategy does."""
    out = []
    for ch in f"{prefix}.{schema}.{table}":
        if ch.isascii() and (ch.isalnum() or ch in "._-"):
            out.append(ch)
        else:
            out.append("_" * (2 if ord(ch) > 0xFFFF else 1))
    return "".join(out)[:249]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Endpoint(_Model):
    conn_id: str = Field(description="Airflow connection id")
    schema_: str = Field(default="public", alias="schema")

    @field_validator("schema_")
    @classmethod
    def _schema(cls, v: str) -> str:
        return _identifier(v, "schema")


class SourceEndpoint(Endpoint):
    heartbeat_table: str | None = Field(
        default="tideline_heartbeat",
        description="table in the source schema the connector writes a heartbeat row to, so its slot advances "
                    "while the synced tables are idle (else the slot pins WAL until the disk fills); null = off")

    @field_validator("heartbeat_table")
    @classmethod
    def _heartbeat(cls, v: str | None) -> str | None:
        return v if v is None else _identifier(v, "heartbeat_table")


class KafkaSettings(_Model):
    @property
    def max_message_bytes(self) -> int:
        return self.max_message_mb * 1024 * 1024

    conn_id: str = "tideline_kafka"
    topic_prefix: str
    partitions: int = Field(default=1, ge=1, le=1000)
    replication_factor: int = Field(default=1, ge=1, le=10)
    retention_ms: int = Field(default=7 * 24 * 3600 * 1000, ge=60_000)
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
    conn_id: str = "tideline_connect"


# A stream's driver JVM: the serial collector (see job_conf); a heap that grows only while under
# 10% of it is free after a collection and gives back what is over 30% free — a batch's raw records
# are garbage right after it, and Java's defaults (40%/70%) kept the heap larger for nothing; and
# the client compiler only (C1): C2's compilations cost a 2-core host more than its faster code
# gives back. Measured on 2 cores: backlog of 2M events, driver JVM peak ~960 -> ~760 MB at the
# same speed (tests/bench/incremental.py); streams at light load, JVM 592-685 -> 522 MB and 30% ->
# 17% of a core each (tests/bench/capacity.py). A pipeline's spark.conf can set other options.
STREAM_JAVA_OPTIONS = "-XX:+UseSerialGC -XX:MinHeapFreeRatio=10 -XX:MaxHeapFreeRatio=30 -XX:TieredStopAtLevel=1"


CHECKPOINT_FILE_MANAGER = "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager"
DIRECT_RESULT_BYTES = 64 << 20   # below spark.rpc.message.maxSize (128 MB), which direct results must fit


class SparkSettings(_Model):
    conn_id: str = "spark_default"
    parallelism: int = Field(default=4, ge=1, le=256, description="JDBC partitions per table in a full load")
    stream_cores: int = Field(default=1, ge=1, le=256,
                              description="cores a running stream holds on a Spark cluster (its spark.cores.max; "
                                          "loads and batches hold at most `parallelism`): a cluster needs "
                                          "streams x stream_cores + the loads' cores, or a job waits for cores")
    conf: dict[str, str] = Field(default_factory=dict)

    def job_conf(self, kind: str) -> dict[str, str]:
        """The Spark settings of one job kind (stream | load | batch). On a standalone cluster an
        application takes every free core unless capped, so a first stream would starve the
        rest (local mode ignores the cap). A stream's driver runs the serial collector: it lives
        for days applying batches one after another, and G1's regions and threads cost it ~250 MB
        of resident memory and ~10% of a core for nothing (tests/bench/capacity.py). The
        pipeline's own `conf` wins."""
        conf = {"spark.cores.max": str(self.stream_cores if kind == "stream" else self.parallelism)}
        if kind == "stream":
            conf["spark.driver.extraJavaOptions"] = STREAM_JAVA_OPTIONS
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
    max_offsets_per_trigger: int = Field(default=200_000, ge=100, description="events per batch at most")
    max_batch_mb: float = Field(default=128, ge=1, description="a batch's raw change events weigh at most about "
                                                               "this many MB (the driver holds them): fewer events "
                                                               "per batch when the events are big")
    trigger_interval_s: float = Field(default=1.0, ge=0.1, le=3600)
    outage_wait_minutes: float = Field(default=10, ge=0, description="a database that restarts or refuses "
                                                                     "connections is waited out this long by a "
                                                                     "running stream before its task fails")
    on_bad_message: Literal["stop", "dead_letter"] = Field(
        default="stop", description="stop: halt with topic/partition/offset; dead_letter: record it and go on")
    checkpoint_dir: str | None = Field(
        default=None, description="directory of each run's Spark checkpoint (disposable: the position lives in "
                                  "the target); default the driver's temp directory. With the driver on a "
                                  "cluster node, storage the driver host keeps")

    def batch_events(self, mean_event_bytes: float | None) -> int:
        """Events per batch: max_offsets_per_trigger, or fewer when that many events of the size
        seen in the topics would weigh more than max_batch_mb. 200,000 events of ~600 bytes are
        ~120 MB; the same count of 5 KB rows would be 1 GB — past the driver's heap and Spark's
        1 GB cap on a job's results, a batch that fails every time it is tried."""
        if not mean_event_bytes:
            return self.max_offsets_per_trigger
        return max(1, min(self.max_offsets_per_trigger, int(self.max_batch_mb * 1e6 / mean_event_bytes)))


class VerifyConfig(_Model):
    schedule: str | None = Field(default="0 3 * * *", description="cron of the verify_<name> DAG (nightly by "
                                                                     "default); null = no scheduled verify")
    tables: list[str] | None = Field(default=None, description="tables to verify (default: every cdc table)")
    repair: bool = Field(default=False, description="repair what the scheduled verify finds, then verify again")
    sample_rows: int = Field(default=100, ge=0, le=100_000, description="differing keys listed per table")


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


class TableConfig(_Model):
    name: str
    schema_: str | None = Field(default=None, alias="schema",
                                description="the table's source schema (MariaDB: database); default source.schema")
    target_schema: str | None = Field(default=None, description="the target schema it lands in; default "
                                                                "target.schema")
    primary_key: list[str] | None = Field(
        default=None, description="key columns; omitted = read from the source catalog")
    columns: list[str] | None = Field(default=None, description="sync only these columns, plus the key "
                                                                "(default: all)")
    exclude_columns: list[str] = Field(default_factory=list, description="never sync these columns")
    mode: Literal["cdc", "batch"] = "cdc"
    cursor_column: str | None = None
    safety_lag_s: int = Field(default=300, ge=0)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _identifier(v, "table name")

    @field_validator("schema_", "target_schema")
    @classmethod
    def _schemas(cls, v: str | None) -> str | None:
        return v if v is None else _identifier(v, "schema")

    @field_validator("primary_key")
    @classmethod
    def _pk(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("must list at least one column, or be omitted to use the source's primary key")
        if len(set(v)) != len(v):
            raise ValueError(f"lists a column twice: {v}")
        return [_identifier(c, "primary key column") for c in v]

    @field_validator("columns", "exclude_columns")
    @classmethod
    def _column_names(cls, v):
        return v if v is None else [_identifier(c, "column") for c in v]

    @model_validator(mode="after")
    def _batch_needs_cursor(self) -> "TableConfig":
        if self.columns is not None and self.exclude_columns:
            raise ValueError(f"table {self.name!r}: give columns (include) or exclude_columns, not both")
        for key in self.primary_key or []:
            if key in self.exclude_columns:
                raise ValueError(f"table {self.name!r}: primary key column {key!r} must be synced")
        if self.mode == "batch" and not self.cursor_column:
            raise ValueError(f"table {self.name!r} is in batch mode and needs cursor_column "
                             f"(a monotonic id or update-time column)")
        if self.cursor_column:
            _identifier(self.cursor_column, "cursor_column")
        return self


class PipelineConfig(_Model):
    name: str
    source: SourceEndpoint
    target: Endpoint
    kafka: KafkaSettings
    connect: ConnectSettings = Field(default_factory=ConnectSettings)
    spark: SparkSettings = Field(default_factory=SparkSettings)
    stream: StreamSettings = Field(default_factory=StreamSettings)
    batch_schedule: str = Field(default="@daily", description="schedule of the batch_<name> DAG (cron or preset)")
    verify: VerifyConfig = Field(default_factory=VerifyConfig)
    alerts: AlertSettings = Field(default_factory=AlertSettings)
    tables: list[TableConfig] = Field(min_length=1)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not PIPELINE_NAME.match(v):
            raise ValueError("lowercase letters, digits and _, starting with a letter, at most 41 characters "
                             "(it names the DAGs, the replication slot and the publication)")
        return v

    @model_validator(mode="after")
    def _unique_tables(self) -> "PipelineConfig":
        seen: dict[str, TableConfig] = {}
        for t in self.tables:
            if t.name in seen:
                other = seen[t.name]
                if (other.schema_ or self.source.schema_) != (t.schema_ or self.source.schema_):
                    raise ValueError(f"table {t.name!r} is named in schemas {other.schema_ or self.source.schema_!r} "
                                     f"and {t.schema_ or self.source.schema_!r}: a pipeline knows its tables by name "
                                     f"(its state, params and target tables), so sync the second in another "
                                     f"pipeline")
                raise ValueError(f"table {t.name!r} is listed twice")
            seen[t.name] = t
        cdc = [t.name for t in self.tables if t.mode == "cdc"]
        topics: dict[str, str] = {}
        heartbeat = [self.source.heartbeat_table] if self.source.heartbeat_table else []
        for name in cdc + heartbeat:
            topic = self.topic(name) if name in cdc else topic_name(self.kafka.topic_prefix, self.source.schema_, name)
            if topic in topics:
                raise ValueError(f"tables {topics[topic]!r} and {name!r} would share the Kafka topic {topic!r} "
                                 f"(Debezium turns characters a topic name cannot hold into '_'): their changes "
                                 f"could not be told apart. Sync one of them in another pipeline (another "
                                 f"kafka.topic_prefix), or rename one at the source")
            topics[topic] = name
        if self.source.heartbeat_table in [t.name for t in self.tables]:
            raise ValueError(f"source.heartbeat_table {self.source.heartbeat_table!r} is also a synced table; "
                             f"name another table for the heartbeat")
        for name in self.verify.tables or []:
            if name not in cdc:
                raise ValueError(f"verify.tables names {name!r}, which is not a cdc table of this pipeline "
                                 f"(cdc tables: {', '.join(cdc) or 'none'})")
        downtime_ms = self.kafka.allowed_downtime_hours * 3600 * 1000
        if self.kafka.retention_ms < downtime_ms:
            raise ValueError(f"kafka.retention_ms ({self.kafka.retention_ms} ms = "
                             f"{self.kafka.retention_ms / 3_600_000:.1f} h) is shorter than "
                             f"kafka.allowed_downtime_hours ({self.kafka.allowed_downtime_hours:g} h): a stream "
                             f"stopped that long would lose offsets. Raise retention_ms or lower the downtime")
        return self

    def table(self, name: str) -> TableConfig:
        for t in self.tables:
            if t.name == name:
                return t
        raise ConfigError(f"pipeline {self.name}", [("tables", f"no table {name!r}; the pipeline has "
                                                               f"{', '.join(t.name for t in self.tables)}")])

    def topic(self, table: str) -> str:
        """Debezium's topic for a source table (topic_name)."""
        return topic_name(self.kafka.topic_prefix, self.source_schema(table), table)

    def source_schema(self, table: str) -> str:
        """The schema (MariaDB: database) a table is read from: its own, or source.schema."""
        return self.table(table).schema_ or self.source.schema_

    def target_schema(self, table: str) -> str:
        """The schema a table lands in: its own target_schema, or target.schema."""
        return self.table(table).target_schema or self.target.schema_

    @property
    def source_schemas(self) -> list[str]:
        """Every source schema the pipeline reads (the heartbeat's first)."""
        return list(dict.fromkeys([self.source.schema_] + [self.source_schema(t.name) for t in self.tables]))

    @property
    def target_schemas(self) -> list[str]:
        return list(dict.fromkeys([self.target.schema_] + [self.target_schema(t.name) for t in self.tables]))

    @property
    def slot_name(self) -> str:
        return f"tideline_{self.name}"

    @property
    def publication_name(self) -> str:
        return f"tideline_{self.name}"


def _field_path(loc: tuple, data: dict) -> str:
    """Turns pydantic's location into `tables[2].primary_key`, naming the table when known."""
    parts: list[str] = []
    node = data
    for item in loc:
        if isinstance(item, int):
            label = f"[{item}]"
            if isinstance(node, list) and item < len(node) and isinstance(node[item], dict) and "name" in node[item]:
                label = f"[{item}] ({node[item]['name']})"
            parts.append(label)
            node = node[item] if isinstance(node, list) and item < len(node) else None
        else:
            parts.append(("." if parts else "") + str(item))
            node = node.get(item) if isinstance(node, dict) else None
    return "".join(parts) or "(top level)"


def _line_finder(text: str):
    """loc (pydantic's path into the YAML) -> the line it is written on, from YAML's node marks."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        root = None

    def line(loc: tuple) -> int | None:
        node, found = root, None
        for item in loc:
            if isinstance(node, yaml.MappingNode):
                match = [(k, v) for k, v in node.value if k.value == item]
                if not match:
                    break
                found, node = match[0][0].start_mark.line + 1, match[0][1]
            elif isinstance(node, yaml.SequenceNode) and isinstance(item, int) and item < len(node.value):
                node = node.value[item]
                found = node.start_mark.line + 1
            else:
                break
        return found
    return line


def parse_pipeline(data: object, source: str, line_of=None) -> PipelineConfig:
    if not isinstance(data, dict):
        raise ConfigError(source, [("(top level)", "expected a mapping of pipeline settings")])
    try:
        return PipelineConfig.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown field (check the spelling; see pipelines/README.md for the fields)"
            elif err["type"] == "literal_error":
                msg = f"{msg} (got {err.get('input')!r})"
            line = line_of(err["loc"]) if line_of else None
            problems.append((_field_path(err["loc"], data) + (f" (line {line})" if line else ""), msg))
        raise ConfigError(source, problems) from None


def load_pipeline(path: str | Path) -> PipelineConfig:
    path = Path(path)
    if not path.is_file():
        known = sorted(p.stem for p in path.parent.glob("*.yaml")) if path.parent.is_dir() else []
        raise ConfigError(str(path), [("(file)", f"no such pipeline config; pipelines in {path.parent}: "
                                                 f"{', '.join(known) or 'none'}")])
    text = path.read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(str(path), [("(yaml)", str(exc).replace("\n", " "))]) from None
    config = parse_pipeline(data, str(path), _line_finder(text))
    if config.name != path.stem:
        raise ConfigError(str(path), [("name", f"{config.name!r} must equal the file name {path.stem!r}")])
    return config


def load_pipelines(folder: str | Path) -> tuple[dict[str, PipelineConfig], dict[str, ConfigError]]:
    """All pipelines of a folder; a broken file is returned as an error and never hides the others."""
    good: dict[str, PipelineConfig] = {}
    bad: dict[str, ConfigError] = {}
    for path in sorted(Path(folder).glob("*.yaml")):
        try:
            good[path.stem] = load_pipeline(path)
        except ConfigError as exc:
            bad[str(path)] = exc
    return good, bad
