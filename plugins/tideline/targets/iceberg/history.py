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
    """(the check for an event that lacks a value nobody has, the MERGE) of a batch's versions, by
    the rules of the PostgreSQL target's (core.apply_sql.history_statement): the view holds the
    table's events of the batch, one per key and source transaction. Events the key's current
    version holds add nothing (a replay): by time, or by SOURCE_ORDER where the version records it
    (MariaDB: the GTID's sequence number). A version starts at its event's time, never before the
    one it follows; events whose versions would start at one time fold into the last. The
    current version closes where the first new one starts, or, starting there itself, becomes it
    (or goes, for a delete); each insert or update opens a version the next closes. A value
    Debezium did not send is the current version's."""
    from tideline.core.table_extras import SOURCE_ORDER, TableExtras, spark_event
    OP, PART, OFF, KEY, TS, POS, SEQ = apply.EVENT_COLUMNS
    keys = [spark_ident(k) for k in apply.primary_key]
    names = [spark_ident(c.name) for c in apply.columns]
    ordered = apply.extras.source_order
    on = lambda a, b: " AND ".join(f"{a}.{k} <=> {b}.{k}" for k in keys)   # noqa: E731
    by_key = ", ".join(f"f.{k}" for k in keys)
    co = spark_ident(SOURCE_ORDER) if ordered else "CAST(NULL AS BIGINT)"
    at = f"timestamp_micros(v.{TS})"
    fresh = (f"SELECT v.*, cur.`__tl_vf`, "
             f"{', '.join(f'cur.`__tl_cur_{i}`' for i in range(len(names)))} FROM {view} v LEFT JOIN (SELECT "
             f"{', '.join(keys)}, {spark_ident(VALID_FROM)} AS `__tl_vf`, {co} AS `__tl_co`, "
             f"{', '.join(f'{n} AS `__tl_cur_{i}`' for i, n in enumerate(names))} FROM {table_id} "
             f"WHERE {spark_ident(CURRENT)}) cur ON {on('v', 'cur')} "
             f"WHERE cur.`__tl_vf` IS NULL OR CASE WHEN cur.`__tl_co` IS NULL THEN {at} > cur.`__tl_vf` "
             f"ELSE v.{SEQ} > cur.`__tl_co` END")
    timed = (f"SELECT f.*, greatest(max(timestamp_micros(f.{TS})) OVER (PARTITION BY {by_key} ORDER BY f.{SEQ} "
             f"ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW), f.`__tl_vf`) AS `__tl_eff` FROM fresh f")
    folded = (f"SELECT f.*, lead(f.`__tl_eff`) OVER (PARTITION BY {by_key} ORDER BY f.`__tl_eff`) AS `__tl_then`, "
              f"f.`__tl_eff` <=> f.`__tl_vf` AS `__tl_same`, f.`__tl_eff` = min(f.`__tl_eff`) OVER "
              f"(PARTITION BY {by_key}) AS `__tl_first` FROM (SELECT *, row_number() OVER (PARTITION BY "
              f"{', '.join(f't.{k}' for k in keys)}, t.`__tl_eff` ORDER BY t.{SEQ} DESC) AS `__tl_n` "
              f"FROM timed t) f WHERE f.`__tl_n` = 1")
    values = [f"CASE WHEN f.`u{i}` THEN f.`__tl_cur_{i}` ELSE f.{n} END" for i, n in enumerate(names)]
    meta = spark_event(TableExtras(metadata=apply.extras.metadata), False, f"f.{OP}", f"f.{TS}", f"f.{POS}",
                       f"f.{PART}", f"f.{OFF}")
    extra = [("`__tl_from`", "f.`__tl_eff`"), ("`__tl_to`", "f.`__tl_then`"), ("`__tl_current`", "f.`__tl_then` IS NULL")] \
        + ([(spark_ident(SOURCE_ORDER), f"f.{SEQ}")] if ordered else []) + [(spark_ident(n), v) for n, v in meta]
    row = lambda action: (f"SELECT {action} AS `__tl_action`, "   # noqa: E731
                          f"{', '.join(f'{v} AS {n}' for v, n in zip(values, names))}, "
                          f"{', '.join(f'{v} AS {n}' for n, v in extra)} FROM folded f")
    # an open row for each new version; the current version is changed by the key's first one:
    # closed where it starts, or, starting where the current one does, the current one becomes it
    OPEN = "'open'"
    change = (f"CASE WHEN f.`__tl_same` THEN (CASE WHEN f.{OP} = 'd' THEN 'emptied' ELSE 'became' END) "
              f"ELSE 'close' END")
    versions = (f"{row(OPEN)} WHERE f.{OP} <> 'd' AND NOT f.`__tl_same` UNION ALL "
                f"{row(change)} WHERE f.`__tl_first` AND f.`__tl_vf` IS NOT NULL")
    flags = " OR ".join(f"f.`u{i}`" for i in range(len(names))) or "false"
    ctes = f"WITH fresh AS ({fresh}), timed AS ({timed}), folded AS ({folded})"
    broken = f"{ctes} SELECT f.{PART}, f.{OFF}, f.{KEY} FROM folded f WHERE f.{OP} <> 'd' AND f.`__tl_vf` IS NULL AND ({flags}) LIMIT 1"
    inserted = names + [spark_ident(VALID_FROM), spark_ident(VALID_TO), spark_ident(CURRENT)] + \
        [n for n, _ in extra[3:]]
    source = ["s." + n for n in names] + ["s.`__tl_from`", "s.`__tl_to`", "s.`__tl_current`"] + [f"s.{n}" for n, _ in extra[3:]]
    became = ", ".join(f"t.{n} = {v}" for n, v in zip(inserted, source)
                       if n not in {spark_ident(k) for k in apply.primary_key} and n != spark_ident(VALID_FROM))
    merge = (f"MERGE INTO {table_id} t USING ({ctes} {versions}) s "
             f"ON {on('t', 's')} AND t.{spark_ident(CURRENT)} AND s.`__tl_action` <> 'open' "
             f"WHEN MATCHED AND s.`__tl_action` = 'close' THEN UPDATE SET t.{spark_ident(VALID_TO)} = s.`__tl_from`, "
             f"t.{spark_ident(CURRENT)} = false "
             f"WHEN MATCHED AND s.`__tl_action` = 'emptied' THEN DELETE "
             f"WHEN MATCHED AND s.`__tl_action` = 'became' THEN UPDATE SET {became} "
             f"WHEN NOT MATCHED AND s.`__tl_action` = 'open' THEN INSERT ({', '.join(inserted)}) VALUES "
             f"({', '.join(source)})")
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
