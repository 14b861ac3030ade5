"""partition_by for Iceberg targets (core.lake_partition): Iceberg's transforms parsed, refused
with what Iceberg takes, checked against the column's Iceberg type, rendered for Spark SQL."""
import pytest

from tideline.core import lake_partition
from tideline.core.config import parse_pipeline
from tideline.core.errors import ConfigError

LAKE = {"name": "shop", "source": {"conn_id": "src"}, "kafka": {"topic_prefix": "p"},
        "target": {"kind": "iceberg", "catalog": "lake", "namespace": "shop"}}


@pytest.mark.parametrize("text, spark", [
    ("day(created_at)", "days(`created_at`)"), ("hour( ts )", "hours(`ts`)"), ("year(d)", "years(`d`)"),
    ("bucket(16, id)", "bucket(16, `id`)"), ("truncate(4,name)", "truncate(4, `name`)"), ("region", "`region`"),
])
def test_iceberg_transforms_as_its_docs_write_them_render_for_spark_sql(text, spark):
    assert lake_partition.parse(text).spark_sql() == spark


@pytest.mark.parametrize("text, says", [
    ("days(ts)", "is not a partition transform"), ("bucket(id)", "bucket takes a width first"),
    ("day(3, ts)", "day takes the column alone"), ("truncate(0, s)", "truncate takes a width first"),
    ("bucket(16, id, x)", "is not a partition transform"),
])
def test_what_is_not_a_transform_is_refused_naming_the_forms(text, says):
    with pytest.raises(ValueError, match=r"(?s).*" + says):
        lake_partition.parse(text)


@pytest.mark.parametrize("text, iceberg, fits", [
    ("day(ts)", "timestamptz", True), ("day(d)", "date", True), ("hour(d)", "date", False),
    ("day(n)", "long", False), ("bucket(8, f)", "double", False), ("bucket(8, s)", "string", True),
    ("truncate(10, amount)", "decimal(12,2)", True), ("truncate(2, ts)", "timestamp", False), ("flag", "boolean", True),
])
def test_each_transform_takes_the_types_the_iceberg_spec_gives_it(text, iceberg, fits):
    why = lake_partition.parse(text).misfit(iceberg)
    assert (why is None) == fits, why
    if why:
        assert iceberg in why and "takes" in why


def test_the_config_refuses_a_bad_transform_a_column_not_synced_and_a_target_without_partitions():
    def problems(table, target=None):
        with pytest.raises(ConfigError) as err:
            parse_pipeline({**LAKE, **({"target": target} if target else {}), "tables": [table]}, "shop.yaml")
        return str(err.value)
    assert "partition_by" in problems({"name": "orders", "partition_by": ["days(at)"]})
    assert "does not sync" in problems({"name": "orders", "columns": ["id", "at"], "partition_by": ["bucket(4, x)"]})
    assert "twice" in problems({"name": "orders", "partition_by": ["day(at)", "day(at)"]})
    assert "partitioning is not supported from postgres into postgres" in problems(
        {"name": "orders", "partition_by": ["day(at)"]}, target={"conn_id": "tgt"})
    cfg = parse_pipeline({**LAKE, "tables": [{"name": "orders", "partition_by": ["day(at)", "bucket(16, id)"]}]}, "x")
    assert cfg.table("orders").partition_by == ["day(at)", "bucket(16, id)"]
