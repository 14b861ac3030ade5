"""A history table (SCD type 2, core.table_extras) in Iceberg: a re-snapshot that keeps every
version, a stream batch's versions in one MERGE commit, and a repair's in one — the same rules as
the PostgreSQL target's (core.apply_sql.history_statement, targets.postgres.history), in Spark SQL."""
from __future__ import annotations

import logging

from tideline.core.lake_types import spark_ident
from tideline.core.table_extras import CURRENT, VALID_FROM, VALID_TO
from tideline.core.table_shape import TableShape

log = logging.getLogger("tideline.full_load")


def keep_versions(spark, live, new, shape: TableShape, at, label: str):
    """(the table's rows after a re-snapshot at `at`, the rows that are not the snapshot's):
    closed versions as they were; a current version the snapshot holds unchanged stays (the
    snapshot's copy goes); one it holds changed, or lacks, closes at `at`."""
    from pyspark.sql import functions as F
    keys = list(shape.primary_key)
    cols = [c for c in new.columns if c in live.columns]
    same = None
    for c in shape.written_columns:   # every source column equal, NULLs alike
        eq = F.col(f"l.{c}").eqNullSafe(F.col(f"n.{c}"))
        same = eq if same is None else same & eq
    current = live.where(F.col(CURRENT))
    joined = current.alias("l").join(new.alias("n"), [F.col(f"l.{k}") == F.col(f"n.{k}") for k in keys], "inner")
    unchanged = joined.where(same).select(*[F.col(f"l.{k}").alias(k) for k in keys])
    kept_current = current.join(unchanged, keys, "left_semi")
    closed_now = (current.join(unchanged, keys, "left_anti")
                  .withColumn(VALID_TO, F.lit(at).cast("timestamp")).withColumn(CURRENT, F.lit(False)))
    result = (new.join(unchanged, keys, "left_anti").select(*cols)
              .unionByName(live.where(~F.col(CURRENT)).select(*cols))
              .unionByName(kept_current.select(*cols))
              .unionByName(closed_now.select(*cols)))
    carried = result.count() - new.count()
    log.info("%s: history kept across the re-snapshot: %s versions carried over", label, f"{carried:,}")
    return result, carried


def history_merge_sql(apply, table_id: str, view: str) -> tuple[str, str]:
    """(the check for an event that lacks a value nobody has, the MERGE) of a batch's versions:
    the view holds the table's events of the batch, one per key and source transaction, each
    with the next one's time (`next_ts`). Events at or before the key's current version's start
    add nothing (a replay); the current version closes at the first new event; each insert or
    update opens a version the next event closes; a delete only closes. A value Debezium did not
    send is the current version's."""
    from tideline.core.table_extras import TableExtras, spark_event
    OP, PART, OFF, KEY, TS, POS, NT = apply.EVENT_COLUMNS
    keys = [spark_ident(k) for k in apply.primary_key]
    names = [spark_ident(c.name) for c in apply.columns]
    on = lambda a, b: " AND ".join(f"{a}.{k} <=> {b}.{k}" for k in keys)   # noqa: E731
    fresh = (f"SELECT v.*, cur.`__tl_vf`, {', '.join(f'cur.`__tl_cur_{i}`' for i in range(len(names)))} FROM {view} v LEFT JOIN (SELECT {', '.join(keys)}, {spark_ident(VALID_FROM)} "
             f"AS `__tl_vf`, {', '.join(f'{n} AS `__tl_cur_{i}`' for i, n in enumerate(names))} FROM {table_id} "
             f"WHERE {spark_ident(CURRENT)}) cur ON {on('v', 'cur')} "
             f"WHERE cur.`__tl_vf` IS NULL OR timestamp_micros(v.{TS}) > cur.`__tl_vf`")
    values = [f"CASE WHEN f.`u{i}` THEN f.`__tl_cur_{i}` ELSE f.{n} END" for i, n in enumerate(names)]
    meta = spark_event(TableExtras(metadata=apply.extras.metadata), False, f"f.{OP}", f"f.{TS}", f"f.{POS}",
                       f"f.{PART}", f"f.{OFF}")
    opened = (f"SELECT 'open' AS `__tl_action`, {', '.join(f'{v} AS {n}' for v, n in zip(values, names))}, "
              f"timestamp_micros(f.{TS}) AS `__tl_from`, timestamp_micros(f.{NT}) AS `__tl_to`, "
              f"f.{NT} IS NULL AS `__tl_current`, {', '.join([f'{v} AS {spark_ident(n)}' for n, v in meta] or ['0 AS `__tl_none`'])} "
              f"FROM fresh f WHERE f.{OP} <> 'd'")
    closing = (f"SELECT 'close' AS `__tl_action`, "
               f"{', '.join(f'f.{n} AS {n}' if c.name in apply.primary_key else f'NULL AS {n}' for c, n in zip(apply.columns, names))}, "
               f"CAST(NULL AS TIMESTAMP) AS `__tl_from`, timestamp_micros(min(f.{TS})) AS `__tl_to`, false AS `__tl_current`, "
               f"{', '.join([f'NULL AS {spark_ident(n)}' for n, _ in meta] or ['0 AS `__tl_none`'])} "
               f"FROM fresh f GROUP BY {', '.join(f'f.{k}' for k in keys)}")
    flags = " OR ".join(f"f.`u{i}`" for i in range(len(names))) or "false"
    broken = f"WITH fresh AS ({fresh}) SELECT f.{PART}, f.{OFF}, f.{KEY} FROM fresh f WHERE f.{OP} <> 'd' AND f.`__tl_vf` IS NULL AND ({flags}) LIMIT 1"
    inserted = names + [spark_ident(VALID_FROM), spark_ident(VALID_TO), spark_ident(CURRENT)] + \
        [spark_ident(n) for n, _ in meta]
    merge = (f"MERGE INTO {table_id} t USING (WITH fresh AS ({fresh}) {opened} UNION ALL {closing}) s "
             f"ON {on('t', 's')} AND t.{spark_ident(CURRENT)} AND s.`__tl_action` = 'close' "
             f"WHEN MATCHED THEN UPDATE SET t.{spark_ident(VALID_TO)} = s.`__tl_to`, t.{spark_ident(CURRENT)} = false "
             f"WHEN NOT MATCHED AND s.`__tl_action` = 'open' THEN INSERT ({', '.join(inserted)}) VALUES "
             f"({', '.join([f's.{n}' for n in names] + ['s.`__tl_from`', 's.`__tl_to`', 's.`__tl_current`'] + [f's.{spark_ident(n)}' for n, _ in meta])})")
    return broken, merge


def repair_merge_sql(table_id: str, view: str, shape: TableShape, target_where: str,
                     delete_missing: bool) -> tuple[str, str, str]:
    """(count of versions it opens, count of current versions it closes for rows gone, the MERGE)
    of a repair: `view` holds the source's rows of the range as a load writes them (a current
    version from now). In one commit, as targets.postgres.history.repair_history: a current
    version that differs from the source's row closes where the source's row opens the key's
    next one (or, for a key range, whose row the source no longer has, closes now); where no
    current version stays, the source's row opens one.
    Closed versions are never touched."""
    keys = [spark_ident(k) for k in shape.primary_key]
    cur_ = spark_ident(CURRENT)
    on = lambda a, b: " AND ".join(f"{a}.{k} <=> {b}.{k}" for k in keys)   # noqa: E731
    same = lambda a, b: " AND ".join(f"{a}.{spark_ident(c)} <=> {b}.{spark_ident(c)}"   # noqa: E731
                                     for c in shape.written_columns)
    current = f"(SELECT * FROM {table_id} WHERE {cur_})"
    opening = (f"SELECT s.* FROM {view} s LEFT JOIN {current} c ON {on('s', 'c')} "
               f"WHERE c.{keys[0]} IS NULL OR NOT ({same('s', 'c')})")
    gone = (f"SELECT count(*) FROM (SELECT * FROM {table_id} WHERE {cur_} AND ({target_where})) t "
            f"LEFT ANTI JOIN {view} s ON {on('t', 's')}") if delete_missing else "SELECT 0"
    closes = lambda at: f"UPDATE SET t.{spark_ident(VALID_TO)} = {at}, t.{cur_} = false"   # noqa: E731
    merge = (f"MERGE INTO {table_id} t USING (SELECT s.*, 'close' AS `__tl_action` FROM {view} s UNION ALL "
             f"SELECT o.*, 'open' AS `__tl_action` FROM ({opening}) o) u "
             f"ON {on('t', 'u')} AND t.{cur_} AND u.`__tl_action` = 'close' "
             f"WHEN MATCHED AND NOT ({same('t', 'u')}) THEN {closes(f'u.{spark_ident(VALID_FROM)}')} "
             f"WHEN NOT MATCHED AND u.`__tl_action` = 'open' THEN INSERT * "
             + (f"WHEN NOT MATCHED BY SOURCE AND t.{cur_} AND ({target_where}) THEN {closes('current_timestamp()')}"
                if delete_missing else ""))
    return f"SELECT count(*) FROM ({opening})", gone, merge
