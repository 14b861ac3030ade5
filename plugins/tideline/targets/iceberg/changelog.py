"""A table's change log in Iceberg (`<table>__changes`, core.table_extras.CHANGE_LOG): every
event of a batch appended in one commit before the table's own MERGE, the log's own position
(next Kafka offset per partition) in the commit's summary. An event at or past that position is
appended; one before it is in the log already (a batch applied again after the log's commit but
before the table's: the table's offsets were not advanced). Exactly once, without the table's
transaction."""
from __future__ import annotations

import json

from tideline.core.table_extras import changes_table
from tideline.targets.iceberg.snapshots import SUMMARY_OFFSETS, SUMMARY_PIPELINE, summary_of

COLUMNS = ("`_tideline_op` STRING, `_tideline_source_ts` TIMESTAMP, `_tideline_source_position` STRING, "
           "`_tideline_synced_at` TIMESTAMP, `_tideline_topic` STRING, `_tideline_partition` INT, "
           "`_tideline_offset` BIGINT, `key` STRING, `before` STRING, `after` STRING")


def log_position(target, schema: str, table: str) -> dict[int, int] | None:
    """The log's position: the next Kafka offset per partition its newest commit says it holds."""
    t = target.iceberg_table(schema, changes_table(table))
    if t is None or t.current_snapshot() is None:
        return None
    return {int(p): o for p, o in json.loads(summary_of(t.current_snapshot()).get(SUMMARY_OFFSETS) or "{}").items()}


def append_changes(target, cur, pipeline: str, schema: str, table: str) -> int:
    """The table's staged log events (state.staging's tl_log) appended to its change log; how many."""
    from tideline.targets.iceberg.apply import commit_with
    cur.execute("SELECT s.op::text, s.ts, s.pos, s.topic, s.part, s.off, s.key::text, s.before::text, s.after::text "
                "FROM tl_log AS s WHERE s.tbl = %s ORDER BY s.part, s.off", (table,))
    rows = cur.fetchall()
    log_table = changes_table(table)
    t = target.iceberg_table(schema, log_table)
    done = {str(p): o for p, o in (log_position(target, schema, table) or {}).items()}
    fresh = [r for r in rows if r[5] >= done.get(str(r[4]), 0)]
    if not fresh:
        return 0
    spark, table_id = target.session(), target.table_id(schema, log_table)
    if t is None:
        spark.sql(f"CREATE TABLE IF NOT EXISTS {table_id} ({COLUMNS}) USING iceberg "
                  f"TBLPROPERTIES ('format-version' = '3')")
    df = spark.createDataFrame(fresh, "op string, ts long, pos string, topic string, part int, off long, key string, "
                                      "before string, after string").selectExpr(
        "op AS `_tideline_op`", "timestamp_micros(ts) AS `_tideline_source_ts`",
        "concat(coalesce(pos, '-'), ' kafka ', CAST(part AS STRING), ':', CAST(off AS STRING)) AS "
        "`_tideline_source_position`", "current_timestamp() AS `_tideline_synced_at`", "topic AS `_tideline_topic`",
        "part AS `_tideline_partition`", "off AS `_tideline_offset`", "key", "before", "after")
    position = dict(done)
    for r in fresh:
        position[str(r[4])] = max(position.get(str(r[4]), 0), r[5] + 1)
    commit_with(spark, {SUMMARY_OFFSETS: json.dumps(position), SUMMARY_PIPELINE: pipeline},
                lambda: df.writeTo(table_id).append())
    return len(fresh)
