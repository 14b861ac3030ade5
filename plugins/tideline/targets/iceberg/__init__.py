"""Apache Iceberg tables as a target (`target.IcebergTarget`): rows written by Spark (and Tideline's
own Parquet writer) into the tables of a JDBC or REST catalog (`catalog`), on a file system or S3, a
snapshot live in one commit whose summary carries the offsets and epoch, a MERGE commit per stream
batch; Tideline's state in the database `state.conn_id` names, else the JDBC catalog's.

Declared here without importing Spark or PyIceberg: the DAG parser and the config read it.
"""
from tideline.targets.base import Capabilities, TargetSpec

# One table at a time: a load switches a session-wide Spark setting while it reads (targets.iceberg.load).
# Larger stream batches: a MERGE's cost is mostly fixed — it joins the changes with the table's keys,
# plans and commits (~2 s at 250,000 rows) — and every commit is a snapshot. ~488,000 events per batch
# (256 MB of ~520-byte events) carried 54,387 / 43,867 events/s sustained, where 128 MB (~260,000 of
# them) carried 35,835 and 200,000 events 31,250 (tests/bench/iceberg.py; peak RSS ~1.5 GB either way:
# the batch's raw records are a small part of it). No batch mode: an interval would need a MERGE of its own.
TARGET = TargetSpec(
    kind="iceberg", conn_types=("iceberg",),
    capabilities=Capabilities(holds_state=False, snapshot_publish="commit", copy_in=False, maintenance=True,
                              concurrent_loads=False, batch_events=500_000, batch_mb=256, writes_in_jvm=True,
                              chunked_loads=True, table_extras=True, partitioning=True,
                              history=True, loads_from_csv=True),
    implementation="tideline.targets.iceberg.target:IcebergTarget",
    description="Iceberg tables of a JDBC or REST catalog, on files or S3: one commit per snapshot and per batch, "
                "offsets in its summary",
    jars_env="TIDELINE_ICEBERG_JARS",   # Iceberg's Spark runtime, fetched by `make setup`
    state_refusal="tideline.targets.iceberg.catalog:state_refusal",   # a catalog of another type than JDBC
    packages=("org.apache.iceberg:iceberg-spark-runtime-4.0_2.13:1.11.0",
              "org.apache.iceberg:iceberg-aws-bundle:1.11.0"))   # S3FileIO: warehouses on S3
