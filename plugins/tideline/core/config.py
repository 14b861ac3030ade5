"""Pipeline config: `pipelines/<name>.yaml` validated into a typed model.

Every validation error names the file, the field path and what is allowed, so a person can fix
the YAML without reading code. Credentials never live here: only Airflow connection ids.
"""
from __future__ import annotations

import os
from pathlib import Path

import yaml
from pydantic import Field, PrivateAttr, ValidationError, field_validator, model_validator

from tideline.core import config_checks, support
from tideline.core.errors import ConfigError
from tideline.core.names import PIPELINE_NAME, topic_name
from tideline.core.settings import schedule as settings_schedule
from tideline.core.settings import (AlertSettings, ConnectSettings, HashSalt, KafkaSettings, MaintenanceSettings,
                                    SourceEndpoint, SparkSettings, StateEndpoint,
                                    StreamSettings, TargetEndpoint, VerifyConfig, _Model)
from tideline.core.table_config import TableConfig


class PipelineConfig(_Model):
    name: str = Field(description="lowercase, digits, _ ; names the DAGs, the slot and the publication "
                                  "(the file is <name>.yaml)")
    # the YAML it was read from (load_pipeline), if any: a running stream stops when it is deleted
    _loaded_from: Path | None = PrivateAttr(default=None)
    source: SourceEndpoint = Field(description="the database the tables are read from")
    target: TargetEndpoint
    state: StateEndpoint | None = Field(default=None, description="a PostgreSQL database for Tideline's state "
                                                                  "(default: the target's, or its JDBC catalog's)")
    kafka: KafkaSettings = Field(description="where the changes travel: the change topics")
    connect: ConnectSettings = Field(default_factory=ConnectSettings, description="Kafka Connect, which runs the "
                                                                               "pipeline's Debezium connector")
    spark: SparkSettings = Field(default_factory=SparkSettings, description="how the jobs run on Spark")
    stream: StreamSettings = Field(default_factory=StreamSettings, description="the change stream's batches")
    batch_schedule: str = Field(default="@daily", description="schedule of the batch_<name> DAG (cron or preset)")
    verify: VerifyConfig = Field(default_factory=VerifyConfig, description="the verify_<name> DAG: the target "
                                                                        "compared with the source")
    maintenance: MaintenanceSettings = Field(default_factory=MaintenanceSettings)
    alerts: AlertSettings = Field(default_factory=AlertSettings, description="who hears about what, and when "
                                                                          "(docs/operations.md lists every alert)")
    tables: list[TableConfig] = Field(min_length=1, description="the tables the pipeline carries, at least one")
    hash_salt: HashSalt | None = Field(default=None, description="where the salt of the tables' hash_columns is kept")

    _batch_schedule = field_validator("batch_schedule")(classmethod(lambda cls, v: settings_schedule(v)))

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
        landing: dict[tuple[str, str], str] = {}
        for t in self.tables:   # a target table holds one source table (its rows, its offsets)
            where = (self.target_schema(t.name), t.target_name or t.name)
            if where in landing:
                raise ValueError(f"tables {landing[where]!r} and {t.name!r} would both land in the target table "
                                 f"{where[0]}.{where[1]}: give one another target_name (or target_schema)")
            landing[where] = t.name
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
        # what a table asks of its target, refused for a pair without it (core.support)
        for mode, asks, what in (("partitioning", lambda t: t.partition_by, "give partition_by"),
                                 ("history", lambda t: t.history, "ask for history"),
                                 ("extras", lambda t: t.deletes == "soft" or t.metadata or t.changelog,
                                  "ask for deletes: soft, metadata or a changelog")):
            named = [t.name for t in self.tables if asks(t)]
            refused = support.refusal(self.source.kind, self.target.kind, mode) if named else None
            if refused:
                raise ValueError(f"tables {', '.join(named)} {what}, but {refused}")
        for t in self.tables:
            if t.row_filter is not None:
                config_checks.row_filter(t, self.source.kind)
            config_checks.hash_columns(t, self.hash_salt, self.source.kind)
            t._hash_salt_conn = self.hash_salt.conn_id if self.hash_salt else None
        config_checks.source_fields(self)
        for mode in sorted({t.mode for t in self.tables}):
            refused = support.refusal(self.source.kind, self.target.kind, mode)
            if refused:
                raise ValueError(f"tables {', '.join(t.name for t in self.tables if t.mode == mode)} are in {mode} "
                                 f"mode, but {refused}")
        downtime_ms = self.kafka.allowed_downtime_hours * 3600 * 1000
        if self.kafka.retention_ms < downtime_ms:
            raise ValueError(f"kafka.retention_ms ({self.kafka.retention_ms} ms = "
                             f"{self.kafka.retention_ms / 3_600_000:.1f} h) is shorter than "
                             f"kafka.allowed_downtime_hours ({self.kafka.allowed_downtime_hours:g} h): a stream "
                             f"stopped that long would lose offsets. Raise retention_ms or lower the downtime")
        return self

    def supports(self, mode: str) -> bool:
        """The pipeline's (source, target) pair supports `mode` (core.support)."""
        return support.supports(self.source.kind, self.target.kind, mode)

    def table(self, name: str) -> TableConfig:
        for t in self.tables:
            if t.name == name:
                return t
        raise ConfigError(f"pipeline {self.name}", [("tables", f"no table {name!r}; the pipeline has "
                                                               f"{', '.join(t.name for t in self.tables)}")])

    def job_conf(self, kind: str, writes_in_jvm: bool = False) -> dict[str, str]:
        """The Spark settings of one of this pipeline's jobs (SparkSettings.job_conf, sized to the
        topic partitions its stream reads; `writes_in_jvm`: its target's Capabilities say so)."""
        return self.spark.job_conf(kind, topic_partitions=len(self.tables) * self.kafka.partitions,
                                   writes_in_jvm=writes_in_jvm)

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
    def table_names(self) -> list[str]:
        return [t.name for t in self.tables]

    def target_table(self, table: str) -> str:
        """The target table a source table lands in: its target_name, or its own name."""
        return self.table(table).target_name or table

    def target_names(self, table: str):
        """What the target calls the table and its columns (core.target_names)."""
        from tideline.core.target_names import TargetNames
        return TargetNames.of(self.table(table))

    @property
    def source_schemas(self) -> list[str]:
        """Every source schema the pipeline reads (the heartbeat's first)."""
        return list(dict.fromkeys([self.source.schema_] + [self.source_schema(t.name) for t in self.tables]))

    @property
    def target_schemas(self) -> list[str]:
        return list(dict.fromkeys([self.target.schema_] + [self.target_schema(t.name) for t in self.tables]))

    @property
    def loaded_from(self) -> Path | None:
        return self._loaded_from

    @property
    def job_conn_ids(self) -> list[str]:
        """The connections its jobs use: the databases, Kafka, Connect (a stream says when capture
        failed), the alert webhook (a halt alerts) and the salt of hashed columns."""
        return list(dict.fromkeys([self.source.conn_id, self.target.conn_id, self.state_conn_id, self.kafka.conn_id,
                                   self.connect.conn_id] +
                                  [c for c in (self.alerts.webhook_conn_id, self.hash_salt and self.hash_salt.conn_id)
                                   if c]))

    @property
    def state_conn_id(self) -> str:
        """The connection of the database that holds the pipeline's state (state.of_pipeline)."""
        return self.state.conn_id if self.state else self.target.conn_id

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


DURABILITY_ENV = "TIDELINE_KAFKA_DURABILITY"
# what a deployment's profile gives every pipeline that does not state the field itself
KAFKA_PROFILES = {"local": {}, "production": {"replication_factor": 3, "durability": "production"}}


def with_deployment_defaults(data: object, profile: str | None, source: str) -> object:
    """`data` with the deployment's Kafka profile under what the file states: a production
    deployment (TIDELINE_KAFKA_DURABILITY=production, as docker/docker-compose.yml sets) gives a
    pipeline that does not say otherwise replication 3 and the production durability checks, so
    a YAML written for a laptop does not land on a 3-broker cluster with one replica."""
    if not profile:
        return data
    if profile not in KAFKA_PROFILES:
        raise ConfigError(source, [(f"${DURABILITY_ENV}", f"{profile!r} is not a Kafka profile: "
                                                          f"{' or '.join(KAFKA_PROFILES)}")])
    if not isinstance(data, dict) or not isinstance(data.get("kafka"), dict):
        return data
    return {**data, "kafka": {**KAFKA_PROFILES[profile], **data["kafka"]}}


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
    data = with_deployment_defaults(data, os.environ.get(DURABILITY_ENV), str(path))
    config = parse_pipeline(data, str(path), _line_finder(text))
    if config.name != path.stem:
        raise ConfigError(str(path), [("name", f"{config.name!r} must equal the file name {path.stem!r}")])
    config._loaded_from = path.resolve()
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

