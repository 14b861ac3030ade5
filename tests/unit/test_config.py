"""The pipeline config model: valid files load; every error names file, field and what is allowed."""
from pathlib import Path

import pytest

from tideline.core.config import load_pipeline, load_pipelines, parse_pipeline
from tideline.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]

VALID = {
    "name": "shop",
    "source": {"conn_id": "src", "schema": "public"},
    "target": {"conn_id": "tgt", "schema": "dw"},
    "kafka": {"topic_prefix": "tl.shop", "partitions": 3},
    "tables": [{"name": "orders"}, {"name": "items", "primary_key": ["order_id", "line_no"]},
               {"name": "events", "mode": "batch", "cursor_column": "updated_at"}],
}


def with_change(path: list, value):
    import copy
    data = copy.deepcopy(VALID)
    node = data
    for key in path[:-1]:
        node = node[key]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return data


def problems(data) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as info:
        parse_pipeline(data, "pipelines/shop.yaml")
    assert "pipelines/shop.yaml" in str(info.value)
    return info.value.problems


def test_valid_config_loads_with_defaults():
    cfg = parse_pipeline(VALID, "x")
    assert cfg.kafka.replication_factor == 1
    assert cfg.spark.parallelism == 4
    assert cfg.table("items").primary_key == ["order_id", "line_no"]
    assert cfg.topic("orders") == "tl.shop.public.orders"
    assert cfg.slot_name == "tideline_shop"


def test_jobs_hold_capped_cores_on_a_cluster_and_the_pipeline_conf_wins():
    cfg = parse_pipeline(VALID, "x")
    assert cfg.spark.job_conf("stream") == {"spark.cores.max": "1", "spark.driver.extraJavaOptions":
                                           "-XX:+UseSerialGC -XX:MinHeapFreeRatio=10 -XX:MaxHeapFreeRatio=30 "
                                           "-XX:TieredStopAtLevel=1",
                                           "spark.sql.streaming.checkpointFileManagerClass":
                                           "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager",
                                           "spark.task.maxDirectResultSize": str(64 << 20)}
    assert cfg.spark.job_conf("load") == {"spark.cores.max": "4"}
    # a target whose writes are Spark jobs (an Iceberg MERGE) keeps the JVM's optimizing compiler
    assert cfg.job_conf("stream", writes_in_jvm=True)["spark.driver.extraJavaOptions"] == \
        "-XX:+UseSerialGC -XX:MinHeapFreeRatio=10 -XX:MaxHeapFreeRatio=30"
    cfg.spark.conf["spark.cores.max"] = "6"
    assert cfg.spark.job_conf("stream")["spark.cores.max"] == "6"
    # a stream of more topic partitions than Spark caches consumers for keeps one each
    assert "spark.kafka.consumer.cache.capacity" not in cfg.job_conf("stream")
    assert cfg.spark.job_conf("stream", topic_partitions=100)["spark.kafka.consumer.cache.capacity"] == "125"
    assert "spark.kafka.consumer.cache.capacity" not in cfg.spark.job_conf("load", topic_partitions=100)


def test_repo_demo_pipeline_is_valid():
    cfg = load_pipeline(ROOT / "pipelines" / "demo.yaml")
    assert [t.name for t in cfg.tables] == ["customers", "orders", "order_items", "audit_log"]
    assert cfg.table("audit_log").mode == "batch"


def test_unknown_field_is_named():
    (field, msg), = problems(with_change(["kafka", "partitons"], 3))
    assert field == "kafka.partitons" and "unknown field" in msg


def test_bad_mode_names_table_and_allowed_values():
    (field, msg), = problems(with_change(["tables", 0, "mode"], "stream"))
    assert field == "tables[0] (orders).mode"
    assert "'cdc'" in msg and "'batch'" in msg and "'stream'" in msg


def test_batch_without_cursor_is_rejected():
    (field, msg), = problems(with_change(["tables", 2, "cursor_column"], KeyError))
    assert "events" in field and "cursor_column" in msg


@pytest.mark.parametrize("name", ['x"y', "a,b", "", "é" * 32])
def test_names_that_no_quoting_carries_everywhere_are_refused(name):
    (field, msg), = problems(with_change(["tables", 0, "name"], name))
    assert field.startswith("tables[0]") and ("contains" in msg or "non-empty" in msg or "63 bytes" in msg)


@pytest.mark.parametrize("name", ["Order Lines", "Käufe", "select", "1abc", "orders; drop table x", "Straße 😀"])
def test_names_are_written_as_the_database_spells_them(name):
    cfg = parse_pipeline(with_change(["tables", 0, "name"], name), "t.yaml")
    assert cfg.tables[0].name == name


def test_topic_names_follow_debezium_and_collisions_are_refused():
    from tideline.core.names import topic_name
    assert topic_name("p", "public", "Order Lines") == "p.public.Order_Lines"
    assert topic_name("p", "public", "Käufe") == "p.public.K_ufe"
    assert topic_name("p", "public", "a😀") == "p.public.a__"   # two UTF-16 units, as Java counts
    data = with_change(["tables"], [{"name": "Order Lines"}, {"name": "Order_Lines"}])
    (field, msg), = problems(data)
    assert "'Order Lines' and 'Order_Lines' would share the Kafka topic" in msg


def test_duplicate_table_and_empty_key():
    data = with_change(["tables"], [{"name": "a"}, {"name": "a"}])
    assert "listed twice" in problems(data)[0][1]
    data = with_change(["tables", 0, "primary_key"], [])
    assert "at least one column" in problems(data)[0][1]


def test_several_problems_reported_at_once():
    data = with_change(["kafka", "partitions"], 0)
    data["name"] = "Bad-Name"
    fields = {f for f, _ in problems(data)}
    assert fields == {"kafka.partitions", "name"}


def test_broken_file_does_not_hide_others(tmp_path):
    (tmp_path / "good.yaml").write_text((ROOT / "pipelines" / "demo.yaml").read_text().replace("name: demo", "name: good"))
    (tmp_path / "bad.yaml").write_text("name: bad\nsource: [\n")
    (tmp_path / "misnamed.yaml").write_text((ROOT / "pipelines" / "demo.yaml").read_text())
    good, bad = load_pipelines(tmp_path)
    assert list(good) == ["good"]
    assert set(Path(p).name for p in bad) == {"bad.yaml", "misnamed.yaml"}
    assert "(yaml)" in str(bad[str(tmp_path / "bad.yaml")])
    assert "must equal the file name" in str(bad[str(tmp_path / "misnamed.yaml")])


def test_core_imports_neither_airflow_nor_pyspark():
    import subprocess
    import sys
    code = ("import sys, tideline.core.config, tideline.core.errors; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('airflow', 'pyspark')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT,
                   env={"PYTHONPATH": str(ROOT / "plugins"), "PATH": "/usr/bin:/bin"})


def test_column_selection_rules():
    data = with_change(["tables", 0, "exclude_columns"], ["secret"])
    assert parse_pipeline(data, "x").table("orders").exclude_columns == ["secret"]
    data = with_change(["tables", 1, "exclude_columns"], ["line_no"])
    assert "primary key column 'line_no' must be synced" in problems(data)[0][1]
    data = with_change(["tables", 0, "columns"], ["a"])
    data["tables"][0]["exclude_columns"] = ["b"]
    assert "not both" in problems(data)[0][1]


def test_select_columns_keeps_the_key_and_names_unknown_columns():
    from tideline.core.errors import SourceError
    from tideline.core.table_shape import Column, TableShape, select_columns
    shape = TableShape("s", "t", (Column("id", "bigint", True), Column("a", "text", False),
                                  Column("secret", "text", False)), ("id",))
    assert select_columns(shape, ["a"], [], "t").column_names == ["id", "a"]
    assert select_columns(shape, None, ["secret"], "t").column_names == ["id", "a"]
    with pytest.raises(SourceError, match="does not have: nope"):
        select_columns(shape, None, ["nope"], "t")


def test_a_missing_pipeline_file_names_the_pipelines_that_exist(tmp_path):
    import pytest

    from tideline.core.config import load_pipeline
    from tideline.core.errors import ConfigError
    (tmp_path / "shop.yaml").write_text("name: shop\n")
    with pytest.raises(ConfigError, match="no such pipeline config; pipelines in .*: shop"):
        load_pipeline(tmp_path / "shpo.yaml")


def test_change_events_keep_the_whole_source_block_unless_told_which_fields():
    from tideline.core import debezium
    from tideline.core.connections import Conn
    src = Conn("src", "postgres", "db", 5432, "u", "p", "shop")
    whole = debezium.connector_config(parse_pipeline(VALID, "x"), src)
    assert whole["transforms"] == "guard" and "transforms.slim.type" not in whole   # the whole block
    assert whole["transforms.guard.max.bytes"] == str(64 << 20) == whole["producer.override.max.request.size"]
    slim = debezium.connector_config(parse_pipeline(with_change(["kafka", "source_fields"], ["ts_ms"]), "x"), src)
    assert (slim["transforms"], slim["transforms.slim.type"], slim["transforms.slim.keep"]) == (
        "slim,guard", "dev.tideline.connect.SlimSource", "ts_ms")
    more = parse_pipeline(with_change(["kafka", "source_fields"], ["ts_ms", "lsn"]), "x")
    assert debezium.connector_config(more, src)["transforms.slim.keep"] == "ts_ms,lsn"
    [(where, why)] = problems(with_change(["kafka", "source_fields"], ["lsn"]))
    assert where == "kafka.source_fields" and "must keep ts_ms" in why


def test_the_connectors_retries_while_streaming_follow_retry_minutes():
    """Debezium retries a source it loses while streaming forever by default, its task RUNNING:
    capture stopped while looking healthy. errors.max.retries = retry_minutes at 10 s a try."""
    from tideline.core import debezium
    from tideline.core.connections import Conn
    src = Conn("src", "postgres", "db", 5432, "u", "p", "shop")
    default = debezium.connector_config(parse_pipeline(VALID, "x"), src)
    assert (default["errors.max.retries"], default["retriable.restart.connector.wait.ms"]) == ("30", "10000")
    short = parse_pipeline(with_change(["connect"], {"conn_id": "c", "retry_minutes": 0.5}), "x")
    assert debezium.connector_config(short, src)["errors.max.retries"] == "3"
    [(where, why)] = problems(with_change(["connect"], {"retry_minutes": 0}))
    assert where == "connect.retry_minutes" and "greater than 0" in why


def test_job_env_caps_malloc_arenas_for_every_job_and_returns_a_streams_freed_batches():
    from tideline.core.settings import SparkSettings
    assert SparkSettings.job_env("load") == SparkSettings.job_env("batch") == {"MALLOC_ARENA_MAX": "2"}
    assert SparkSettings.job_env("stream") == {"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": "131072",
                                               "ARROW_DEFAULT_MEMORY_POOL": "system"}


def test_a_batch_of_big_events_holds_fewer_of_them():
    from tideline.core.settings import StreamSettings
    stream = StreamSettings()
    assert stream.batch_events(None) == stream.batch_events(0) == 200_000     # nothing seen yet: the count
    assert stream.batch_events(600) == 200_000                                  # 120 MB: within 128 MB
    assert stream.batch_events(5_000) == 25_600                                 # 5 KB rows: 128 MB of them
    assert StreamSettings(max_batch_mb=1).batch_events(4e6) == 1                # never less than one event
    assert StreamSettings(max_offsets_per_trigger=1_000).batch_events(5_000) == 1_000


def test_the_batch_size_is_the_targets_unless_the_pipeline_says():
    from tideline.core.settings import StreamSettings
    from tideline.targets import target_class
    iceberg, postgres = (target_class(k).capabilities().batch_events for k in ("iceberg", "postgres"))
    assert (postgres, iceberg) == (200_000, 500_000)
    assert StreamSettings().batch_events(None, iceberg) == 500_000
    assert StreamSettings().batch_events(300, iceberg) == 426_666                 # 128 MB of 300-byte events
    assert StreamSettings(max_offsets_per_trigger=2_000).batch_events(None, iceberg) == 2_000
    # the weight bound is the target's too: 256 MB for Iceberg, so ~520-byte events fill its batches
    lake_mb = target_class("iceberg").capabilities().batch_mb
    assert (target_class("postgres").capabilities().batch_mb, lake_mb) == (128, 256)
    assert StreamSettings().batch_events(520, iceberg, lake_mb) == 492_307
    assert StreamSettings().batch_events(520, 200_000, 128) == 200_000
    assert StreamSettings(max_batch_mb=128).batch_events(520, iceberg, lake_mb) == 246_153   # the pipeline's says


def test_tables_of_other_schemas_and_their_target_schemas():
    data = with_change(["tables"], [{"name": "a"}, {"name": "b", "schema": "eu", "target_schema": "lake"}])
    cfg = parse_pipeline(data, "t.yaml")
    assert (cfg.source_schema("a"), cfg.target_schema("a")) == (cfg.source.schema_, cfg.target.schema_)
    assert (cfg.source_schema("b"), cfg.target_schema("b")) == ("eu", "lake")
    assert cfg.topic("b").endswith(".eu.b")
    data = with_change(["tables"], [{"name": "a"}, {"name": "a", "schema": "eu"}])
    assert "sync the second in another pipeline" in problems(data)[0][1]


def test_a_schedule_airflow_would_refuse_is_refused_when_the_file_is_read_naming_file_line_and_field(tmp_path):
    path = tmp_path / "nightly.yaml"
    path.write_text("name: nightly\nsource: {conn_id: s}\ntarget: {conn_id: t}\nkafka: {topic_prefix: p}\n"
                    "verify:\n  schedule: \"0 25 * * *\"\nbatch_schedule: every day\ntables: [{name: a}]\n")
    with pytest.raises(ConfigError) as err:
        load_pipeline(path)
    text = str(err.value)
    assert str(path) in text and "verify.schedule" in text and "'0 25 * * *' is not a schedule" in text
    assert "batch_schedule" in text and "'every day' is not a schedule" in text and "@daily" in text
    assert "line 6" in text and "line 7" in text, text
    path.write_text(path.read_text().replace('"0 25 * * *"', "null").replace("every day", "\"@hourly\""))
    assert load_pipeline(path).batch_schedule == "@hourly"


def test_make_validate_checks_files_offline_and_fails_on_an_invalid_one(tmp_path, capsys):
    from tideline.ops.validate import main
    good = tmp_path / "fine.yaml"
    good.write_text("name: fine\nsource: {conn_id: s}\ntarget: {conn_id: t}\nkafka: {topic_prefix: p}\ntables: [{name: a}]\n")
    bad = tmp_path / "broken.yaml"
    bad.write_text("name: broken\nsource: {conn_id: s}\ntarget: {conn_id: t}\nkafka: {topic_prefix: p}\n"
                   "tables: [{name: a, snapshot: sometimes}]\n")
    assert main([str(good)]) == 0
    assert main([str(good), str(bad)]) == 1
    out = capsys.readouterr().out
    assert f"ok      {good}: pipeline fine, 1 table(s), postgres -> postgres" in out
    assert f"INVALID {bad}" in out and "tables[0] (a).snapshot (line 5)" in out and "sometimes" in out, out


def test_a_production_deployment_gives_replication_3_to_pipelines_that_do_not_state_it(tmp_path, monkeypatch):
    """docker/docker-compose.yml sets TIDELINE_KAFKA_DURABILITY=production: a YAML written for a
    laptop does not land on the 3-broker cluster with one replica; what a file states still wins."""
    import yaml
    (tmp_path / "shop.yaml").write_text(yaml.safe_dump(VALID))
    stated = with_change(["kafka", "replication_factor"], 2)
    stated["name"] = "stated"
    (tmp_path / "stated.yaml").write_text(yaml.safe_dump(stated))
    assert load_pipeline(tmp_path / "shop.yaml").kafka.replication_factor == 1
    monkeypatch.setenv("TIDELINE_KAFKA_DURABILITY", "production")
    cfg = load_pipeline(tmp_path / "shop.yaml")
    assert (cfg.kafka.replication_factor, cfg.kafka.durability) == (3, "production")
    assert load_pipeline(tmp_path / "stated.yaml").kafka.replication_factor == 2
    monkeypatch.setenv("TIDELINE_KAFKA_DURABILITY", "prod")
    with pytest.raises(ConfigError, match=r"TIDELINE_KAFKA_DURABILITY.*'prod' is not a Kafka profile: local or production"):
        load_pipeline(tmp_path / "shop.yaml")
