"""Iceberg target: a full load commits the source's snapshot as one Iceberg commit, read back by a
reader that is not Spark (PyIceberg) and compared row for row with the source inside PostgreSQL."""
from __future__ import annotations

import json
import time

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyiceberg import types as it

import stackctl
from helpers import catching_up, drop_source, lake_settings, rows_as_text, stream_until
from test_dags import airflow_env  # noqa: F401 — fixture
from tideline import state
from tideline.core.errors import HaltedError
from tideline.load.full_load import FullLoad

pytestmark = pytest.mark.integration


def iceberg_pipeline(pipelines, unique_name, tables, **settings):
    return pipelines.make(tables, **{**lake_settings(unique_name), **settings})


def back_in_postgres(source_db, source_table: str, lake_table, schema: str = "public") -> list[str]:
    """The Iceberg table's rows, read by PyIceberg, written back into a temporary copy of the
    table `schema.source_table` of `source_db` by PostgreSQL's own input functions (dates from
    their day numbers, timestamps from their microseconds): its rows' text must be that table's."""
    arrow = lake_table.scan().to_arrow()
    fields = {f.name: f.field_type for f in lake_table.schema().fields}
    cols, exprs, values = list(arrow.column_names), [], []
    with source_db.cursor() as cur:
        cur.execute("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = %s::regclass "
                    "AND attnum > 0 AND NOT attisdropped", (f'"{schema}"."{source_table}"',))
        pg_types = dict(cur.fetchall())
    for name in cols:
        t, column = fields[name], arrow.column(name)
        if isinstance(t, it.DateType):
            exprs.append("DATE '1970-01-01' + (%s)::int")
            values.append(pc.cast(column, pa.int32()).to_pylist())
        elif isinstance(t, (it.TimestampType, it.TimestamptzType)):
            # whole days, then the microseconds of the day: an interval times a number is float8
            # arithmetic, exact only below 2^53 µs (seconds since 1970 times 10^6 is not, for
            # 294247 AD); days added to a timestamp without time zone are calendar days, so a
            # timestamptz is made from the UTC one
            utc = "'epoch'::timestamp + %s * interval '1 day' + %s * interval '1 microsecond'"
            exprs.append(f"(({utc}) AT TIME ZONE 'UTC')" if isinstance(t, it.TimestamptzType) else utc)
            micros = pc.cast(column, pa.int64()).to_pylist()
            values.append([None if m is None else divmod(m, 86_400_000_000) for m in micros])
        else:
            exprs.append(f"(%s)::{pg_types[name]}")   # (-32768::smallint would negate 32768)
            values.append([_floats_as_text(v) for v in column.to_pylist()])
    with source_db.cursor() as cur:
        cur.execute(f'CREATE TEMP TABLE back (LIKE "{schema}"."{source_table}")')
        names = ", ".join(f'"{c}"' for c in cols)
        row = ", ".join(f"CASE WHEN %s THEN NULL ELSE {e} END" if e.count("%s") == 2 else e for e in exprs)
        try:
            for r in range(arrow.num_rows):
                cur.execute(f"INSERT INTO back ({names}) VALUES ({row})", _with_null_flags(exprs, values, r))
            out = rows_as_text(source_db, "pg_temp", "back")
        finally:
            cur.execute("DROP TABLE back")
    return out


def _floats_as_text(v):
    """psycopg2 writes -0.0 as a bare -0.0, which PostgreSQL reads as a numeric zero: floats go
    as their text, which float input reads exactly (NaN, inf and -0 included)."""
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, list):
        return [_floats_as_text(x) for x in v]
    return v


def _with_null_flags(exprs, values, r) -> list:
    """Row r's parameters; a timestamp's two numbers come after a flag that says it is NULL."""
    params = []
    for i, expr in enumerate(exprs):
        v = values[i][r]
        if expr.count("%s") == 2:
            params += [v is None, *((0, 0) if v is None else v)]
        else:
            params.append(v)
    return params


def test_a_full_load_is_one_iceberg_commit_equal_row_for_row_to_the_source(spark, source_db, pipelines, unique_name,
                                                                           lake):
    t = f"{unique_name}_types"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TYPE {t}_mood AS ENUM ('ok', 'sad')")
        cur.execute(f"""CREATE TABLE public.{t} (
            id bigint PRIMARY KEY, n_exact numeric(38,10), n_free numeric, n_wide numeric(50,5), money_eur numeric(12,2),
            f4 real, f8 double precision, small smallint, flag boolean,
            ts timestamp, tstz timestamptz, d date, tm time, tmtz time with time zone, iv interval,
            j json, jb jsonb, u uuid, b bytea, tags text[], ints integer[], f8s double precision[], nums numeric[],
            vc varchar(20), ch char(3), big text, mood {t}_mood, ip inet, cash money)""")
        cur.execute(f"""INSERT INTO public.{t} VALUES
            (1, 1234567890123456789012345678.0123456789, 1e-30 + 123456789012345678901234567890.5,
             123456789012345678901234567890123456789012345.12345, -0.01, 3.4028235e38, 'NaN', -32768, true,
             '2024-02-29 23:59:59.999999', '1999-12-31 23:59:59.123456+14', '0044-03-15 BC', '24:00:00',
             '12:00+05:30', '1 year 2 mons -3 days 04:05:06.789', '{{"a": [1, 2.50, null]}}',
             '{{"ß": "Zoë \\\\ \\"quoted\\" \\t tab", "n": 1.000}}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
             '\\x00015c0a0d09ff', ARRAY['a,b', 'c"d', NULL, 'back\\slash', 'line
break', '😀'], ARRAY[1, NULL, -3], ARRAY['NaN', 'Infinity', '-0']::float8[], ARRAY[1.50, NULL],
             'Grüße, 李', 'ab', repeat('x€', 100000), 'sad', '10.0.0.1/8', 12.34),
            (2, NULL, 'NaN', NULL, NULL, '-Infinity', 'Infinity', NULL, false, '294247-01-10 04:00:54.775806',
             '4714-11-24 00:00:00+00 BC', NULL, NULL, NULL, NULL,
             NULL, 'null', NULL, '\\x', '{{}}', '{{}}', '{{}}', '{{}}', '', NULL, '', NULL, NULL, NULL),
            (3, 0, 0, 0, 0, '-0', '-0', 0, NULL, '0001-01-01 00:00:00', '1970-01-01 00:00:00+00', '5874897-12-31',
             '00:00', '00:00-12', '0', '[]', '[]', '00000000-0000-0000-0000-000000000000', NULL, ARRAY[NULL]::text[],
             NULL, NULL, NULL, 'tab	and
newline\\N', '   ', '\\N', 'ok', '::1', -1)""")
    try:
        # the change stream cannot carry timetz (test_types), and Iceberg has no batch mode (core.support):
        # the column is left out, and compared as NULL on both sides
        cfg = iceberg_pipeline(pipelines, unique_name, [{"name": t, "exclude_columns": ["tmtz"]}])
        [result] = FullLoad(cfg, spark).run([t])
        assert result.rows == 3
        table = lake.pyiceberg_catalog().load_table((unique_name, t))
        assert len(table.snapshots()) == 1, "the load is one commit"
        assert "tmtz" not in {f.name for f in table.schema().fields}
        # read by PyIceberg, written back by PostgreSQL's input functions: the source's rows exactly
        back = back_in_postgres(source_db, t, table)
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE public.{t} SET tmtz = NULL")
        assert back == rows_as_text(source_db, "public", t)
        # the types: exact Iceberg types where one holds every value, the exact text where none does
        types = {f.name: str(f.field_type) for f in table.schema().fields}
        assert types["n_exact"] == "decimal(38, 10)" and types["n_free"] == "string" and types["n_wide"] == "string"
        assert (types["tstz"], types["ts"], types["d"]) == ("timestamptz", "timestamp", "date")
        assert types["ints"] == "list<int>" and types["tm"] == "string" and types["b"] == "binary"
        # the position the stream resumes from is in the commit, with the load's epoch
        summary = table.current_snapshot().summary
        st = state.get(lake.connect(), cfg.name, t)
        assert st.phase == "streaming"
        assert lake.resume_offsets(unique_name, t) == ({0: 0, 1: 0}, st.epoch)
        assert summary["tideline.pipeline"] == cfg.name
    finally:
        drop_source(source_db, t)
        with source_db.cursor() as cur:
            cur.execute(f"DROP TYPE IF EXISTS {t}_mood")


def last_run_detail(lake, pipeline: str, table: str) -> str:
    with lake.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT detail FROM tideline.runs WHERE pipeline = %s AND table_name = %s ORDER BY run_id DESC "
                    "LIMIT 1", (pipeline, table))
        return cur.fetchone()[0]


def test_a_table_of_scalars_is_written_as_data_files_exactly_consistent_or_chunked_and_spark_reads_them(
        spark, source_db, pipelines, unique_name, lake):
    """Without lists, extra columns or partitions, a load writes the table's data files from the
    source's CSV (targets.iceberg.files): every scalar type's edge values exact — text that looks
    like NULL, NaN or NA stays text, an empty string stays empty, quotes, commas and line breaks,
    floats' infinities, NaN and -0, BC dates, the last microsecond — read back by PyIceberg and
    decoded column by column by Spark's own reader; chunked, the staged files go live as they are."""
    t = f"{unique_name}_scalars"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TYPE {t}_mood AS ENUM ('ok', 'sad')")
        cur.execute(f"""CREATE TABLE public.{t} (
            id bigint PRIMARY KEY, i int, s smallint, n numeric(12,2), n18 numeric(18,0), n38 numeric(38,10),
            nfree numeric, f4 real, f8 double precision, flag boolean, ts timestamp, tstz timestamptz, d date,
            tx text, vc varchar(5), ch char(3), tm time, u uuid, jb jsonb, iv interval, by bytea, mood {t}_mood)""")
        cur.execute(f"""INSERT INTO public.{t} VALUES
            (1, -2147483648, -32768, -0.01, 999999999999999999, 1234567890123456789012345678.0123456789, 'NaN',
             3.4028235e38, 'Infinity', true, '294247-01-10 04:00:54.775806', '1999-12-31 23:59:59.123456+14',
             '5874897-12-31', '', 'NULL', '  ', '24:00:00', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
             '{{"ß": "Zoë \\\\ \\"q\\"", "n": 1.000}}', '-3 days 04:05:06.789', '\\x', 'sad'),
            (2, 2147483647, 32767, 9999999999.99, -999999999999999999, NULL, 1e-30, 'NaN', 5e-324, false,
             '4714-11-24 00:00:00 BC', '4714-11-24 00:00:00+00 BC', '4714-11-24 BC', 'NA', 'nan', 'N/A',
             NULL, NULL, 'null', NULL, '\\x00ff5c0a0d2c22', 'ok'),
            (3, NULL, NULL, NULL, NULL, NULL, NULL, '-Infinity', '-0', NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL, NULL, NULL),
            (4, 0, 0, 0, 0, 0, 0, '-0', 1.7976931348623157e308, true, '2024-02-29 23:59:59.999999',
             '1970-01-01 00:00:00+00', '0044-03-15 BC', E'a,b"c\\nline break\\r\\nand \\\\N 😀', '#N/A', 'ab',
             '00:00', '00000000-0000-0000-0000-000000000000', '[]', '0', '\\x00', NULL),
            (5, 1, 1, 1.5, 1, 1, 1, 1.401298e-45, -1.5, false, '2000-01-01', '2000-01-01 12:00+05:30', '2000-01-01',
             repeat('x€', 100000), '', '', '23:59:59.999999', NULL, '{{"k": [1, 2.50, null]}}', '1 year', NULL, 'ok')""")
        cur.execute(f"INSERT INTO public.{t} (id, i, n, tx, ts, d) SELECT g, g % 7, g / 3.0, 'row ' || g, "
                    f"'2024-01-01'::timestamp + g * interval '1 minute', DATE '0100-01-01 BC' + g "
                    f"FROM generate_series(6, 3000) g")
    try:
        cfg = iceberg_pipeline(pipelines, unique_name, [{"name": t, "snapshot": "consistent"}])
        [result] = FullLoad(cfg, spark).run([t])
        assert result.rows == 3000
        assert "COPY CSV -> Arrow -> Parquet -> Iceberg" in last_run_detail(lake, cfg.name, t)
        table = lake.pyiceberg_catalog().load_table((unique_name, t))
        assert len(table.snapshots()) == 1, "the load is one commit"
        assert back_in_postgres(source_db, t, table) == rows_as_text(source_db, "public", t)
        # Spark's own Parquet reader decodes every column of every file (count(c) reads its values)
        lake.use(spark)
        nulls = {c: table.scan().to_arrow().column(c).null_count for c in table.schema().column_names}
        counted = spark.table(lake.table_id(unique_name, t)).selectExpr(
            *[f"count(`{c}`) AS `{c}`" for c in nulls]).collect()[0].asDict()
        assert counted == {c: 3000 - n for c, n in nulls.items()}
        # chunked, over a live table: the staging table's files become the live table's in one commit
        cfg = iceberg_pipeline(pipelines, unique_name, [{"name": t, "snapshot": "chunked", "chunk_rows": 400}],
                               parallelism=2, create_topics=False)
        with source_db.cursor() as cur:
            cur.execute(f"DELETE FROM public.{t} WHERE id BETWEEN 100 AND 199")
            cur.execute(f"UPDATE public.{t} SET tx = 'changed ' || id WHERE id % 50 = 0")
        [result] = FullLoad(cfg, spark).run([t])
        assert result.rows == 2900
        assert "COPY CSV -> Arrow -> Parquet -> Iceberg" in last_run_detail(lake, cfg.name, t)
        from tideline.targets.iceberg.load import staging_name
        assert not lake.pyiceberg_catalog().table_exists((unique_name, staging_name(t)))
        table = lake.pyiceberg_catalog().load_table((unique_name, t))
        assert len(table.snapshots()) == 2
        assert back_in_postgres(source_db, t, table) == rows_as_text(source_db, "public", t)
        assert spark.table(lake.table_id(unique_name, t)).count() == 2900
    finally:
        drop_source(source_db, t)
        with source_db.cursor() as cur:
            cur.execute(f"DROP TYPE IF EXISTS {t}_mood")


def test_a_value_iceberg_cannot_hold_halts_only_its_table_naming_column_and_key_while_the_other_loads_and_streams(
        airflow_env, spark, source_db, pipelines, unique_name, lake):
    """Found as a new user would: one table's load refused a value (rightly), the whole full_load
    task failed, and the pipeline's other table was never loaded nor streamed. Now the refused
    table halts alone, with the column, the key and what to do; the other one loads and streams."""
    from test_dags import run_dag
    t, ok = f"{unique_name}_inf", f"{unique_name}_ok"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, due date, amount numeric(6,2))")
        cur.execute(f"INSERT INTO public.{t} SELECT g, DATE '2020-01-01' + g, g FROM generate_series(1, 1000) g")
        cur.execute(f"UPDATE public.{t} SET due = 'infinity' WHERE id = 777")
        cur.execute(f"CREATE TABLE public.{ok} (id int PRIMARY KEY, note text)")
        cur.execute(f"INSERT INTO public.{ok} SELECT g, 'n' || g FROM generate_series(1, 500) g")
    try:
        cfg = pipelines.adopt(iceberg_pipeline(pipelines, unique_name, [{"name": t}, {"name": ok}],
                                               create_topics=False))
        states = run_dag(f"sync_{cfg.name}", stream_mode="available_now")
        assert states["__run__"] == "success" and states["full_load"] == "success", states
        st = state.get(lake.connect(), cfg.name, t)
        assert st.phase == "halted", st.phase
        assert f"{cfg.name}.{t}: column due holds infinity" in st.last_error and "key id=777" in st.last_error
        assert f"action=full_reload and tables=[{t}]" in st.last_error and "(action=auto, or Resume" in st.last_error
        assert not lake.pyiceberg_catalog().table_exists((unique_name, t))
        assert state.get(lake.connect(), cfg.name, ok).phase == "streaming"
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE public.{ok} SET note = 'streamed ✓' WHERE id <= 10")
        stream_until_equal(cfg, spark, source_db, lake, [ok])
        # fixed at the source, the trigger most people use (action=auto, resume_halted by default)
        # loads it: it halted during its load, so nothing of it is in the target to stream onto
        # (found from outside: it was once "resumed" as streaming, and never got a row)
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE public.{t} SET due = '9999-12-31' WHERE id = 777")
        states = run_dag(f"sync_{cfg.name}", stream_mode="available_now")
        assert states["__run__"] == "success" and states["full_load"] == "success", states
        assert state.get(lake.connect(), cfg.name, t).phase == "streaming"
        assert lake_rows_equal(source_db, lake, cfg.name, t)
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE public.{t} SET amount = amount + 1 WHERE id <= 5")
        stream_until_equal(cfg, spark, source_db, lake, [t, ok])
        # a later reload replaces its rows in one more commit
        commits = len(lake.pyiceberg_catalog().load_table((unique_name, t)).snapshots())
        with source_db.cursor() as cur:
            cur.execute(f"DELETE FROM public.{t} WHERE id > 10")
            cur.execute(f"UPDATE public.{t} SET amount = -amount")
        FullLoad(cfg, spark).run([t])
        table = lake.pyiceberg_catalog().load_table((unique_name, t))
        assert len(table.snapshots()) == commits + 1
        assert back_in_postgres(source_db, t, table) == rows_as_text(source_db, "public", t)
    finally:
        drop_source(source_db, t, ok)


def test_a_mariadb_table_of_every_type_lands_in_iceberg_as_it_lands_in_postgresql(
        spark, target_db, pipelines, unique_name, lake):
    """Every MariaDB type: loaded into PostgreSQL (exact, tested in test_mariadb) and into Iceberg;
    the Iceberg rows, written back into a copy of the PostgreSQL table, print the same."""
    from test_mariadb import DB, TYPES_DDL, TYPES_ROWS, _drop, _exec, mariadb_pipeline
    maria = stackctl.mariadb_connect(DB, autocommit=True)
    t = f"{unique_name}_mtypes"
    _exec(maria, "SET SESSION sql_mode = ''", "SET time_zone = '+00:00'", TYPES_DDL.format(t=t))
    _exec(maria, f"INSERT INTO `{t}` VALUES " + ", ".join(TYPES_ROWS))
    try:
        into_pg = mariadb_pipeline(pipelines, [{"name": t}])
        FullLoad(into_pg, spark).run([t])
        into_lake = mariadb_pipeline(pipelines, [{"name": t}], create_topics=False, **lake_settings(unique_name))
        [loaded] = FullLoad(into_lake, spark).run([t])
        assert loaded.rows == len(TYPES_ROWS)
        table = lake.pyiceberg_catalog().load_table((unique_name, t))
        assert back_in_postgres(target_db, t, table, schema=unique_name) == rows_as_text(target_db, unique_name, t)
    finally:
        _drop(maria, t)
        maria.close()


def lake_rows_equal(source_db, lake, schema: str, table: str) -> bool:
    t = lake.pyiceberg_catalog().load_table((schema, table))
    return back_in_postgres(source_db, table, t) == rows_as_text(source_db, "public", table)


def stream_until_equal(cfg, spark, source_db, lake, tables: list[str], timeout: float = 120) -> None:
    """Applies what Kafka holds (availableNow) until each Iceberg table, read by PyIceberg, equals
    its source table row for row (helpers.stream_until)."""
    stream_until(cfg, spark, lambda: all(lake_rows_equal(source_db, lake, cfg.name, t) for t in tables),
                 "the Iceberg tables to converge to the source", timeout)


def stamped_commits(lake, schema: str, table: str) -> list[dict]:
    """The table's snapshots Tideline committed (its offsets in the summary; another writer's are
    left out), oldest first, as (operation, offsets, epoch, snapshot id)."""
    t = lake.pyiceberg_catalog().load_table((schema, table))
    out = []
    for snap in sorted(t.snapshots(), key=lambda s: s.sequence_number):
        summary = dict(snap.summary.additional_properties)
        if "tideline.offsets" not in summary:
            continue
        out.append({"operation": snap.summary.operation.value, "offsets": json.loads(summary["tideline.offsets"]),
                    "epoch": int(summary["tideline.epoch"]), "snapshot": snap.snapshot_id})
    return out


def assert_offsets_only_move_forward(commits: list[dict]) -> None:
    """Each commit's offsets at or past the one before's on every partition: no batch applied
    twice (a replay would go back), and none of an older run after a newer one's (its epoch)."""
    for before, after in zip(commits, commits[1:]):
        assert all(after["offsets"][p] >= o for p, o in before["offsets"].items()), (before, after)
        assert after["epoch"] >= before["epoch"], (before, after)


def test_the_stream_commits_each_batch_once_with_its_offsets_and_equals_the_source(
        spark, source_db, pipelines, unique_name, lake):
    t, big = f"{unique_name}_chg", f"{unique_name}_toast"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id bigint PRIMARY KEY, qty int NOT NULL, note text, "
                    f"price numeric(12,2) DEFAULT 1.50, seen timestamptz, day date)")
        cur.execute(f"INSERT INTO public.{t} (id, qty, note, seen, day) SELECT g, g % 100, 'row ' || g, "
                    f"'2024-01-01'::timestamptz + g * interval '1 second', DATE '0100-01-01 BC' + g "
                    f"FROM generate_series(1, 2000) g")
        cur.execute(f"CREATE TABLE public.{big} (id int PRIMARY KEY, counter int, doc text, meta jsonb, tags text[])")
        cur.execute(f"INSERT INTO public.{big} SELECT g, 0, repeat(md5(g::text), 40000), "
                    f"jsonb_build_object('k', repeat('x', 300000)), ARRAY[repeat('t', 200000)] "
                    f"FROM generate_series(1, 3) g")
    try:
        cfg = iceberg_pipeline(pipelines, unique_name, [{"name": t}, {"name": big}], capture=True)
        loaded = {r.table: r for r in FullLoad(cfg, spark).run([t, big])}
        with source_db.cursor() as cur:
            cur.execute(f"INSERT INTO {t} (id, qty, note, seen) VALUES (5000, 1, 'new 😀', '1999-12-31 23:59:59.999999+14'),"
                        f" (5001, 2, NULL, NULL)")
            cur.execute(f"UPDATE {t} SET qty = qty * 2, price = 9.99, day = '5874897-12-31' WHERE id <= 100")
            cur.execute(f"DELETE FROM {t} WHERE id BETWEEN 101 AND 150")
            cur.execute(f"UPDATE {t} SET id = id + 100000 WHERE id BETWEEN 200 AND 210")   # key updates
            cur.execute(f"INSERT INTO {t} (id, qty) VALUES (200, 7)")                     # reuse a moved key
            cur.execute(f"DELETE FROM {t} WHERE id = 5001")
            cur.execute(f"INSERT INTO {t} (id, qty, note) VALUES (5001, 3, 'again')")      # delete + re-insert
            cur.execute(f"INSERT INTO {t} (id, qty, note) SELECT g, 1, 'bulk' FROM generate_series(200001, 230000) g")
            # large values unchanged while another column changes: Debezium sends a placeholder
            cur.execute(f"UPDATE {big} SET counter = counter + 1")
            cur.execute(f"UPDATE {big} SET counter = counter + 1, doc = 'short now' WHERE id = 2")
        stream_until_equal(cfg, spark, source_db, lake, [t, big])
        # every commit after the load's carries the offsets it applied, each batch's starting where
        # the one before ended: nothing applied twice, nothing skipped
        commits = stamped_commits(lake, unique_name, t)
        assert commits[0]["offsets"] == {str(p): o for p, o in loaded[t].offsets.items()}
        # row deltas (MERGE); Iceberg 1.11 names one that only adds rows "append", only deletes "delete"
        assert len(commits) >= 2 and all(c["operation"] in ("overwrite", "append", "delete") for c in commits[1:])
        st = state.get(lake.connect(), cfg.name, t)
        assert {str(p): o for p, o in st.resume_offsets.items()} == commits[-1]["offsets"]
        epochs = [c["epoch"] for c in commits]
        assert epochs == sorted(epochs) and epochs[-1] <= st.epoch   # each run a newer epoch
        assert_offsets_only_move_forward(commits)
        assert lake.row_count(None, unique_name, t) == 2000 + 2 - 50 + 1 + 30000
        # any engine reads it: DuckDB over PyIceberg's scan agrees with the source
        duck = lake.pyiceberg_catalog().load_table((unique_name, t)).scan().to_duckdb("orders")
        with source_db.cursor() as cur:
            cur.execute(f"SELECT count(*), sum(qty), sum(price)::text, count(note) FROM public.{t}")
            assert duck.execute("SELECT count(*), sum(qty), sum(price)::text, count(note) FROM orders").fetchone() \
                == cur.fetchone()
        # a run with nothing new commits nothing
        from tideline.stream.run import IncrementalRun
        IncrementalRun(cfg, spark, "available_now").run()
        assert len(stamped_commits(lake, unique_name, t)) == len(commits)
        # status shows the table's rows, its current snapshot and the files a reader opens
        from tideline.ops.status import pipeline_status, render
        rows = {r.table: r for r in pipeline_status(cfg)}
        assert rows[t].target_rows == rows[t].source_rows == 2000 + 2 - 50 + 1 + 30000
        facts = rows[t].target_facts
        assert facts["snapshots"] == len(commits) and facts["epoch"] == commits[-1]["epoch"]
        assert facts["delete_files"] >= 1 and facts["data_files"] >= 2   # merge-on-read: deletes are files
        assert f"iceberg snapshot {facts['snapshot']} committed" in render(cfg, list(rows.values()))
        # no stream holds the table now: status says so, beside its phase
        assert rows[t].phase == "streaming" and rows[t].stream_ended.startswith(
            "no stream is running: the last (available_now) ended")
        assert f"trigger sync_{cfg.name} to stream on" in render(cfg, list(rows.values()))
    finally:
        drop_source(source_db, t, big)


def test_every_type_streams_exactly_and_a_value_iceberg_cannot_hold_halts_only_its_table(
        spark, source_db, pipelines, unique_name, lake):
    t, other = f"{unique_name}_st", f"{unique_name}_other"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TYPE {t}_mood AS ENUM ('ok', 'sad')")
        cur.execute(f"""CREATE TABLE public.{t} (
            id bigint PRIMARY KEY, n_exact numeric(38,10), n_free numeric, n_wide numeric(50,5), f4 real,
            f8 double precision, small smallint, flag boolean, ts timestamp, tstz timestamptz, d date, tm time,
            iv interval, j json, jb jsonb, u uuid, b bytea, tags text[], ints integer[], f8s double precision[],
            nums numeric[], vc varchar(20), ch char(3), mood {t}_mood, ip inet)""")
        cur.execute(f"CREATE TABLE public.{other} (id int PRIMARY KEY, v text)")
    try:
        cfg = iceberg_pipeline(pipelines, unique_name, [{"name": t}, {"name": other}], capture=True,
                               stream={"stage_on": "executors"})   # decoded and staged by Spark's tasks
        FullLoad(cfg, spark).run([t, other])   # empty: every row below arrives through the stream
        with source_db.cursor() as cur:
            cur.execute(f"""INSERT INTO public.{t} VALUES
                (1, 1234567890123456789012345678.0123456789, 1e-30 + 123456789012345678901234567890.5,
                 123456789012345678901234567890123456789012345.12345, 3.4028235e38, 'NaN', -32768, true,
                 '2024-02-29 23:59:59.999999', '1999-12-31 23:59:59.123456+14', '0044-03-15 BC', '24:00:00',
                 '1 year 2 mons -3 days 04:05:06.789', '{{"a": [1, 2.50, null]}}', '{{"ß": "Zoë \\\\ \\"q\\" \\t"}}',
                 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '\\x00015c0a0d09ff', ARRAY['a,b', 'c"d', NULL, '😀'],
                 ARRAY[1, NULL, -3], ARRAY['NaN', 'Infinity', '-0']::float8[], ARRAY[1.50, NULL], 'Grüße, 李',
                 'ab', 'sad', '10.0.0.1/8'),
                (2, NULL, 'NaN', NULL, '-Infinity', 'Infinity', NULL, false, NULL, NULL, NULL, NULL, NULL, NULL,
                 'null', NULL, '\\x', '{{}}', '{{}}', '{{}}', '{{}}', '', NULL, NULL, NULL),
                (3, 0, 0, 0, '-0', '-0', 0, NULL, '0001-01-01 00:00:00', '1970-01-01 00:00:00+00', '5874897-12-31',
                 '00:00', '0', '[]', '[]', '00000000-0000-0000-0000-000000000000', NULL, ARRAY[NULL]::text[],
                 NULL, NULL, NULL, 'tab	and', '   ', 'ok', '::1')""")
            cur.execute(f"INSERT INTO public.{other} VALUES (1, 'one')")
        stream_until_equal(cfg, spark, source_db, lake, [t, other])
        # a date Iceberg cannot hold: this table halts at that event; the other one keeps streaming
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE public.{t} SET d = 'infinity', small = 1 WHERE id = 3")
            cur.execute(f"UPDATE public.{t} SET small = 2 WHERE id = 1")
            cur.execute(f"INSERT INTO public.{other} VALUES (2, 'two')")
        from tideline.stream.run import IncrementalRun
        deadline = time.time() + 90
        while not lake_rows_equal(source_db, lake, cfg.name, other):
            try:
                IncrementalRun(cfg, spark, "available_now").run()
            except HaltedError:
                pass
            assert time.time() < deadline
        st = state.get(lake.connect(), cfg.name, t)
        assert st.phase == "halted", st
        assert "column d = 'infinity'" in st.last_error and "cannot hold infinity" in st.last_error
        assert "exclude_columns" in st.last_error and f"{cfg.topic(t)} partition" in st.last_error
        rows = lake.pyiceberg_catalog().load_table((unique_name, t)).scan(selected_fields=("id", "small")).to_arrow()
        assert dict(zip(rows["id"].to_pylist(), rows["small"].to_pylist())) == {1: -32768, 2: None, 3: 0}
    finally:
        drop_source(source_db, t, other)
        with source_db.cursor() as cur:
            cur.execute(f"DROP TYPE IF EXISTS {t}_mood")


def test_with_dead_letters_a_value_iceberg_cannot_hold_is_recorded_and_the_rest_of_the_batch_commits(
        spark, source_db, pipelines, unique_name, lake):
    """stream.on_bad_message: dead_letter: each event carrying a value the Iceberg column cannot
    hold goes to tideline.dead_letters, and the batch's other changes of the same table commit."""
    t = f"{unique_name}_dl"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, d date, tags float8[], b bytea)")
    try:
        cfg = iceberg_pipeline(pipelines, unique_name, [{"name": t}], partitions=1, capture=True,
                               stream={"on_bad_message": "dead_letter"})
        FullLoad(cfg, spark).run([t])
        with source_db.cursor() as cur:
            cur.execute(f"""INSERT INTO public.{t} VALUES (1, '2024-02-29', ARRAY[-0, 'NaN']::float8[], '\\x00ff'),
                            (2, 'infinity', '{{1.5}}', NULL), (3, '0044-03-15 BC', NULL, '\\x'),
                            (4, '-infinity', '{{}}', '\\x0a')""")
        refused = {2, 4}
        from tideline.stream.run import IncrementalRun
        deadline = time.time() + 90
        while True:
            IncrementalRun(cfg, spark, "available_now").run()
            with lake.connect() as conn, conn.cursor() as cur:
                cur.execute("SELECT key, error FROM tideline.dead_letters WHERE pipeline = %s ORDER BY kafka_offset",
                            (cfg.name,))
                letters = cur.fetchall()
            if len(letters) == len(refused):
                break
            assert time.time() < deadline, letters
        assert [k for k, _ in letters] == ['{"id": "2"}', '{"id": "4"}']
        assert all("column d" in e and "cannot hold infinity" in e for _, e in letters), letters
        assert state.get(lake.connect(), cfg.name, t).phase == "streaming"
        with source_db.cursor() as cur:   # the source without the refused rows is what the lake holds
            cur.execute(f"DELETE FROM public.{t} WHERE id IN (2, 4)")
        assert lake_rows_equal(source_db, lake, cfg.name, t)
    finally:
        drop_source(source_db, t)


def test_a_truncate_marks_the_iceberg_table_for_a_reload_which_replaces_its_rows_in_one_commit(
        spark, source_db, pipelines, unique_name, lake):
    from tideline.core.errors import ResnapshotRequired
    from tideline.stream.run import IncrementalRun
    t = f"{unique_name}_trunc"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, v text)")
        cur.execute(f"INSERT INTO public.{t} SELECT g, 'v' || g FROM generate_series(1, 50) g")
    try:
        cfg = iceberg_pipeline(pipelines, unique_name, [{"name": t}], partitions=1, capture=True)
        FullLoad(cfg, spark).run([t])
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE public.{t} SET v = 'changed' WHERE id <= 5")
        stream_until_equal(cfg, spark, source_db, lake, [t])
        commits = stamped_commits(lake, unique_name, t)
        with source_db.cursor() as cur:
            cur.execute(f"TRUNCATE public.{t}")
            cur.execute(f"INSERT INTO public.{t} VALUES (1, 'after the truncate')")
        deadline = time.time() + 60
        with pytest.raises(ResnapshotRequired, match=r"was truncated"):
            while time.time() < deadline:
                IncrementalRun(cfg, spark, "available_now").run()
                time.sleep(1)
        st = state.get(lake.connect(), cfg.name, t)
        assert st.phase == "needs_resnapshot" and "truncated" in st.last_error
        assert stamped_commits(lake, unique_name, t) == commits   # nothing of the batch was committed
        # the re-snapshot the sync DAG runs by itself: one more commit, equal to the source
        FullLoad(cfg, spark).run([t])
        assert lake_rows_equal(source_db, lake, cfg.name, t)
        assert len(stamped_commits(lake, unique_name, t)) == len(commits) + 1
        stream_until_equal(cfg, spark, source_db, lake, [t])
    finally:
        drop_source(source_db, t)


def test_columns_added_and_widened_at_the_source_evolve_the_iceberg_table_and_other_changes_halt_it(
        spark, source_db, pipelines, unique_name, lake):
    t = f"{unique_name}_evo"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, n int, f real, amount numeric(10,2))")
        cur.execute(f"INSERT INTO public.{t} SELECT g, g, g / 3.0, g * 1.25 FROM generate_series(1, 500) g")
    try:
        cfg = iceberg_pipeline(pipelines, unique_name, [{"name": t}], capture=True)
        FullLoad(cfg, spark).run([t])
        with source_db.cursor() as cur:
            cur.execute(f"ALTER TABLE public.{t} ADD COLUMN note text, ADD COLUMN tags bigint[], "
                        f"ALTER COLUMN n TYPE bigint, ALTER COLUMN f TYPE double precision, "
                        f"ALTER COLUMN amount TYPE numeric(20,2)")
            cur.execute(f"INSERT INTO public.{t} VALUES (501, 9007199254740993, 0.1, 123456789012345678.99, 'new', "
                        f"'{{-9223372036854775808,NULL,7}}')")
            cur.execute(f"UPDATE public.{t} SET note = 'noted', tags = '{{}}' WHERE id <= 5")
        stream_until_equal(cfg, spark, source_db, lake, [t])
        table = lake.pyiceberg_catalog().load_table((unique_name, t))
        assert {f.name: str(f.field_type) for f in table.schema().fields} == {
            "id": "int", "n": "long", "f": "double", "amount": "decimal(20, 2)", "note": "string",
            "tags": "list<long>"}
        assert table.metadata.format_version == 3   # its deletes are deletion vectors
        # a widening PostgreSQL applies but an Iceberg decimal cannot (its scale): the table halts, named
        with source_db.cursor() as cur:
            cur.execute(f"ALTER TABLE public.{t} ALTER COLUMN amount TYPE numeric(22,4)")
            cur.execute(f"UPDATE public.{t} SET amount = 1.2345 WHERE id = 1")
        from tideline.stream.run import IncrementalRun
        deadline = time.time() + 90
        while state.get(lake.connect(), cfg.name, t).phase != "halted":
            try:
                IncrementalRun(cfg, spark, "available_now").run()
            except HaltedError:
                pass
            assert time.time() < deadline
        error = state.get(lake.connect(), cfg.name, t).last_error
        assert "column amount: type changed at the source from numeric(20,2) to numeric(22,4)" in error
        assert "action=full_reload" in error
    finally:
        drop_source(source_db, t)


def test_kill_9_and_a_second_run_at_once_lose_and_duplicate_nothing_in_iceberg(spark, source_db, pipelines, unique_name, lake):
    import os
    import random
    import signal
    from contextlib import closing

    from helpers import Writer, kill_tasks_mid_copy
    from test_incremental import make_items, spark_submit
    from tideline.core.errors import EXIT_FENCED
    t = f"{unique_name}_crash"
    make_items(source_db, t, 5_000)
    writer = Writer(f"public.{t}", 5_001, seed=5, pause=0.002)
    rng = random.Random(7)
    first = second = None
    try:
        cfg = iceberg_pipeline(pipelines, unique_name, [{"name": t}], capture=True,
                               stream={"max_offsets_per_trigger": 300, "trigger_interval_s": 0.5,
                                       "stage_on": "executors"})   # Spark's tasks stage each batch
        FullLoad(cfg, spark).run([t])
        writer.start()
        env = {"TIDELINE_PIPELINES": str(pipelines.dir)}
        commits = len(stamped_commits(lake, unique_name, t))
        proc = spark_submit("incremental.py", cfg, env_extra=env, master="local[2,4]")   # a task is tried 4 times

        def commits_after(than: int, run) -> None:
            deadline = time.time() + 180
            while len(stamped_commits(lake, unique_name, t)) == than:
                assert run.poll() is None, run.stdout.read()[-3000:]
                assert time.time() < deadline, "no Iceberg commit within 180s"
                time.sleep(0.2)
        commits_after(commits, proc)   # it commits at least once...
        # ...its tasks' Python is killed while one COPYs its staged rows: Spark runs them again, the
        # run goes on, and the rows are staged once (the contiguity and equality checks below)
        with closing(lake.connect()) as watch:
            watch.autocommit = True
            kill_tasks_mid_copy(watch, proc)
        commits_after(len(stamped_commits(lake, unique_name, t)), proc)
        time.sleep(rng.uniform(0.0, 1.5))   # ...then the driver dies at a random moment, mid-commit or not
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        # two runs at once: the second claims the table; the first is fenced and commits nothing more
        first = spark_submit("incremental.py", cfg, env_extra=env)
        commits_after(len(stamped_commits(lake, unique_name, t)), first)
        second = spark_submit("incremental.py", cfg, env_extra=env)
        out, _ = first.communicate(timeout=180)
        assert first.returncode == EXIT_FENCED, out[-3000:]
        epoch = state.get(lake.connect(), cfg.name, t).epoch
        deadline = time.time() + 120
        while stamped_commits(lake, unique_name, t)[-1]["epoch"] != epoch:   # the second commits on
            assert second.poll() is None, second.stdout.read()[-3000:]
            assert time.time() < deadline, "the second run did not commit within 120s"
            time.sleep(0.3)
        time.sleep(rng.uniform(0.0, 1.5))   # the run that took over dies too, at a random moment
        os.killpg(second.pid, signal.SIGKILL)
        second.wait(30)
        writer.stop()
        # what the killed run left behind, caught up in the target's own batch size (not 300 a commit)
        stream_until_equal(catching_up(cfg), spark, source_db, lake, [t])
        assert_offsets_only_move_forward(stamped_commits(lake, unique_name, t))
        # the batches the killed runs staged and never committed: dropped by the runs after them
        with lake.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'tideline' AND tablename LIKE 'stage\\_%'")
            assert cur.fetchall() == []
    finally:
        writer.stop_event.set()
        for p in (first, second):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        drop_source(source_db, t)


def test_another_writer_committing_beside_the_stream_costs_a_retry_at_most_and_no_batch_twice(
        spark, source_db, pipelines, unique_name, lake):
    """A team's own job commits to the table while the stream does (a compaction that rewrites every
    data file, four times): Iceberg rebases a commit that does not conflict; one that does fails
    and is tried again (the stream's next batch, or its next run, from the offsets in the table).
    Nothing halts, nothing reloads, no batch is applied twice or skipped, and the table ends equal."""
    import os
    import signal

    from helpers import Writer, full_loads, wait_until
    from test_incremental import make_items, spark_submit
    t = f"{unique_name}_other"
    make_items(source_db, t, 3_000)
    writer = Writer(f"public.{t}", 3_001, seed=9, pause=0.005)
    proc = None
    try:
        cfg = iceberg_pipeline(pipelines, unique_name, [{"name": t}], capture=True,
                               stream={"max_offsets_per_trigger": 300, "trigger_interval_s": 0.5})
        FullLoad(cfg, spark).run([t])
        writer.start()
        proc = spark_submit("incremental.py", cfg, env_extra={"TIDELINE_PIPELINES": str(pipelines.dir)})
        wait_until(lambda: len(stamped_commits(lake, unique_name, t)) >= 3 or proc.poll() is not None, 180,
                   "the stream's first commits")
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        lake.use(spark)
        rewrote = lost = 0
        for _ in range(4):
            try:
                spark.sql(f"CALL {lake.catalog}.system.rewrite_data_files(table => '{unique_name}.{t}', "
                          f"options => map('rewrite-all', 'true'))").collect()
                rewrote += 1
            except Exception:   # noqa: BLE001 — the other job lost the race to the stream: its own retry's business
                lost += 1
            time.sleep(1)
        writer.stop()
        print(f"[measure] another writer beside the stream: {rewrote} rewrites committed, {lost} lost the race; "
              f"the stream {'ran on' if proc.poll() is None else f'ended with status {proc.returncode}'}")
        assert rewrote >= 1
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(60)
        stream_until_equal(catching_up(cfg), spark, source_db, lake, [t])
        assert_offsets_only_move_forward(stamped_commits(lake, unique_name, t))
        with lake.connect() as conn:
            assert full_loads(conn, cfg.name) == 1 and state.get(conn, cfg.name, t).phase == "streaming"
    finally:
        writer.stop_event.set()
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        drop_source(source_db, t)


def test_maintenance_compacts_a_streamed_table_keeps_its_resume_offsets_and_the_stream_goes_on(
        spark, source_db, pipelines, unique_name, lake):
    from test_incremental import spark_submit
    from tideline.ops.status import pipeline_status, render
    t = f"{unique_name}_mnt"
    with source_db.cursor() as cur:
        # an array column: Iceberg 1.10's rewrite of position deletes failed on it (apache/iceberg#15080)
        cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, v int, note text, tags text[])")
        cur.execute(f"INSERT INTO public.{t} SELECT g, g, 'row ' || g, ARRAY['t' || g % 7, NULL] "
                    f"FROM generate_series(1, 3000) g")
    try:
        cfg = iceberg_pipeline(pipelines, unique_name, [{"name": t}], capture=True,
                               stream={"max_offsets_per_trigger": 100},
                               maintenance={"snapshot_retention_hours": 0, "orphan_age_hours": 1})
        FullLoad(cfg, spark).run([t])
        with source_db.cursor() as cur:   # many small commits: one per 100 events
            for i in range(8):
                cur.execute(f"UPDATE public.{t} SET v = v + 1, tags = tags || 'u{i}'::text WHERE id % 8 = {i} AND id <= 800")
                cur.execute(f"DELETE FROM public.{t} WHERE id = {2000 + i}")
        stream_until_equal(cfg, spark, source_db, lake, [t])
        before = lake.table_facts(unique_name, t)
        offsets = lake.resume_offsets(unique_name, t)[0]
        assert before["snapshots"] >= 8 and before["data_files"] >= 8 and before["delete_files"] >= 1
        # as the maintain_<pipeline> DAG runs it: spark_jobs/maintain.py under spark-submit
        job = spark_submit("maintain.py", cfg, env_extra={"TIDELINE_PIPELINES": str(pipelines.dir)})
        out, _ = job.communicate(timeout=300)
        assert job.returncode == 0, out[-3000:]
        with lake.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT counts FROM tideline.runs WHERE pipeline = %s AND table_name = %s AND kind = "
                        "'maintenance' AND outcome = 'succeeded'", (cfg.name, t))
            [(figures,)] = cur.fetchall()
        after = lake.table_facts(unique_name, t)
        assert after["delete_files"] == 0 and after["data_files"] < before["data_files"]
        assert after["snapshots"] <= 3   # the stream's last (it holds the offsets) and the compaction's two
        assert figures["data_files"] == [before["data_files"], after["data_files"]]
        assert lake_rows_equal(source_db, lake, cfg.name, t)
        with lake.connect() as conn, conn.cursor() as cur:
            assert lake.applied_offsets(cur, cfg.name, unique_name, t, None) == offsets
        # the stream goes on from the same position after the compaction's commit
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE public.{t} SET note = 'after maintenance' WHERE id <= 10")
        stream_until_equal(cfg, spark, source_db, lake, [t])
        rows = {r.table: r for r in pipeline_status(cfg)}
        assert rows[t].last_maintenance.endswith(" orphan files removed, " + f"{figures['seconds']:.1f}s")
        assert "last maintenance" in render(cfg, list(rows.values()))
    finally:
        drop_source(source_db, t)
