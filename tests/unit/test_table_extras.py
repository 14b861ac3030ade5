"""Soft deletes and change metadata (core.table_extras): what the config accepts and refuses
(naming the file, the line and the field), the columns a table gets, the source log position
each event carries, and the apply statements a soft-delete table's batch runs."""
import json

import pytest

from tideline.core import apply_sql
from tideline.core.config import load_pipeline, parse_pipeline
from tideline.core.errors import ConfigError, SourceError
from tideline.core.table_extras import DELETED_AT, TableExtras
from tideline.core.table_shape import Column

BASE = {"name": "shop", "source": {"conn_id": "src", "schema": "public"}, "target": {"conn_id": "tgt"},
        "kafka": {"topic_prefix": "tl.shop"}}


def cfg(*tables, target=None):
    return parse_pipeline({**BASE, **({"target": target} if target else {}), "tables": list(tables)}, "shop.yaml")


def test_a_table_asks_for_soft_deletes_and_metadata_and_gets_its_columns_in_a_fixed_order():
    c = cfg({"name": "orders", "deletes": "soft", "metadata": ["source_position", "synced_at"]})
    extras = TableExtras.of(c.table("orders"))
    assert extras.names == [DELETED_AT, "_tideline_synced_at", "_tideline_source_position"]
    assert [x.pg_type for x in extras.columns] == ["timestamp with time zone"] * 2 + ["text"]
    assert not TableExtras.of(cfg({"name": "orders"}).table("orders"))


def test_bad_extras_are_refused_when_the_file_is_read_naming_file_line_and_field(tmp_path):
    path = tmp_path / "shop.yaml"
    path.write_text("name: shop\nsource: {conn_id: s}\ntarget: {conn_id: t}\nkafka: {topic_prefix: p}\n"
                    "tables:\n  - name: a\n    deletes: sometimes\n  - name: b\n    metadata: [synced_at, lsn]\n")
    with pytest.raises(ConfigError) as err:
        load_pipeline(path)
    text = str(err.value)
    assert str(path) in text and "tables[0] (a).deletes" in text and "'hard' or 'soft'" in text
    assert "tables[1] (b).metadata[1]" in text and "(got 'lsn')" in text
    assert "line 7" in text and "line 9" in text, text


@pytest.mark.parametrize("table, says", [
    ({"name": "e", "mode": "batch", "cursor_column": "at", "deletes": "soft"}, "never sees a delete"),
    ({"name": "e", "metadata": ["op", "op"]}, "lists a column twice"),
    ({"name": "e", "columns": ["id", "_tideline_op"], "metadata": ["op"]}, "_tideline_op is a source column"),
])
def test_what_cannot_work_is_refused_with_why(table, says):
    with pytest.raises(ConfigError) as err:
        cfg(table)
    assert says in str(err.value)


def test_every_pair_carries_them_and_the_config_asks_the_support_table():
    from tideline.core import support
    lake = cfg({"name": "orders", "deletes": "soft"}, target={"kind": "iceberg", "catalog": "lake", "namespace": "s"})
    assert TableExtras.of(lake.table("orders")).soft_deletes and lake.supports("extras")
    assert all("extras" in modes for modes in support.SUPPORT.values())


def test_each_event_carries_its_source_log_position():
    from tideline.core.change_events import log_position, _Source
    assert log_position(_Source(lsn=0x16B3748)) == "0/16B3748"
    assert log_position(_Source(lsn=(5 << 32) + 0xABC)) == "5/ABC"
    assert log_position(_Source(gtid="0-1-42", file="mariadb-bin.000003", pos=1234)) == "0-1-42"
    assert log_position(_Source(file="mariadb-bin.000003", pos=1234)) == "mariadb-bin.000003:1234"
    assert log_position(_Source()) is None and log_position(None) is None


def test_decoded_events_keep_the_position_through_the_batch_split():
    import pyarrow as pa
    from tideline.core.batch_events import split_batch
    from tideline.core.change_events import decode_records
    value = json.dumps({"op": "u", "after": {"id": "1"}, "source": {"ts_ms": 5, "ts_us": 5123, "lsn": 4096}}).encode()
    raw = pa.table({"topic": ["t"], "partition": pa.array([0], pa.int32()), "offset": pa.array([9], pa.int64()),
                    "key": pa.array([b'{"id":"1"}']), "value": pa.array([value])})
    rows = split_batch(decode_records(raw.to_batches())).rows.to_pylist()
    assert [(r["position"], r["ts_us"]) for r in rows] == [("0/1000", 5123)]   # the µs when Debezium gives them


COLUMNS = [Column("id", "integer", True), Column("note", "text", False)]


def rendered(statement) -> str:
    """psycopg2's Composed as text, without a connection (identifiers and literals quoted simply)."""
    from psycopg2 import sql

    def walk(part):
        if isinstance(part, sql.Composed):
            return "".join(walk(p) for p in part.seq)
        if isinstance(part, sql.Identifier):
            return ".".join(f'"{s}"' for s in part.strings)
        if isinstance(part, sql.Literal):
            return repr(part.wrapped)
        return part.string
    return walk(statement)


def test_a_soft_delete_marks_the_row_with_the_source_delete_time_and_keeps_its_values():
    text = rendered(apply_sql.delete_sql("s", "t", COLUMNS, ["id"], extras=TableExtras(True, ("op",))))
    assert text.startswith('UPDATE "s"."t" AS t SET "_tideline_deleted_at" = coalesce(to_timestamp(s.ts / 1000000.0), now())')
    assert '"_tideline_op" = s.op::text' in text and "s.op = 'd'" in text and '"note"' not in text
    assert rendered(apply_sql.delete_sql("s", "t", COLUMNS, ["id"])).startswith('DELETE FROM "s"."t"')


def test_an_upsert_clears_the_mark_and_writes_the_metadata_from_the_event():
    extras = TableExtras(True, ("synced_at", "op", "source_ts", "source_position"))
    update = rendered(apply_sql.update_sql("s", "t", COLUMNS, ["id"], extras=extras))
    # an insert or update clears the mark; a delete carrying its row's last image writes it marked
    assert '"_tideline_deleted_at" = CASE WHEN s.op = \'d\' THEN coalesce(to_timestamp(s.ts / 1000000.0), now()) END' \
        in update and '"_tideline_synced_at" = now()' in update
    assert "(s.op <> 'd' OR s.after IS NOT NULL)" in update
    assert '"_tideline_source_ts" = to_timestamp(s.ts / 1000000.0)' in update
    assert "concat(coalesce(s.pos, '-'), ' kafka ', s.part, ':', s.off)" in update
    insert = rendered(apply_sql.insert_sql("s", "t", COLUMNS, ["id"], extras=extras))
    assert '("id", "note", "_tideline_deleted_at", "_tideline_synced_at", "_tideline_op", "_tideline_source_ts", ' \
           '"_tideline_source_position")' in insert


def test_the_load_fills_the_extras_by_default_and_the_stage_carries_time_and_position():
    from tideline.core.table_shape import TableShape, create_table
    ddl = rendered(create_table(TableShape("public", "t", tuple(COLUMNS), ("id",)), "s", "t",
                                extras=TableExtras(True, ("synced_at", "op"))))
    assert ddl.endswith('"_tideline_deleted_at" timestamp with time zone, "_tideline_synced_at" timestamp with '
                        "time zone DEFAULT now(), \"_tideline_op\" text DEFAULT 'r')")
    assert "ts bigint, pos text" in rendered(apply_sql.CREATE_STAGE)


def test_the_iceberg_merge_marks_a_soft_delete_and_writes_the_metadata_like_the_postgres_apply():
    from tideline.targets.iceberg.apply import LakeApply
    apply = LakeApply(None, "p", "s", "t", "topic", COLUMNS, ["id"], extras=TableExtras(True, ("op", "source_ts")))
    merge = apply.merge_sql("lake.s.t", "v")
    assert ("WHEN MATCHED AND s.__tl_op = 'd' AND NOT s.__tl_img THEN UPDATE SET t.`_tideline_deleted_at` = "
            "coalesce(timestamp_micros(s.__tl_ts), current_timestamp()), t.`_tideline_op` = s.__tl_op") in merge
    assert ("t.`_tideline_deleted_at` = CASE WHEN s.__tl_op = 'd' THEN coalesce(timestamp_micros(s.__tl_ts), "
            "current_timestamp()) ELSE CAST(NULL AS TIMESTAMP) END") in merge and "DELETE" not in merge
    # a key inserted and deleted within one batch: its delete carries the row's last image, written marked
    assert "WHEN NOT MATCHED AND (s.__tl_op <> 'd' OR s.__tl_img) THEN INSERT" in merge
    assert merge.endswith("INSERT (`id`, `note`, `_tideline_deleted_at`, `_tideline_op`, `_tideline_source_ts`) "
                          "VALUES (s.`id`, s.`note`, CASE WHEN s.__tl_op = 'd' THEN coalesce(timestamp_micros("
                          "s.__tl_ts), current_timestamp()) ELSE CAST(NULL AS TIMESTAMP) END, s.__tl_op, "
                          "timestamp_micros(s.__tl_ts))")
    plain = LakeApply(None, "p", "s", "t", "topic", COLUMNS, ["id"]).merge_sql("lake.s.t", "v")
    assert "THEN DELETE" in plain and "_tideline" not in plain


def test_a_row_filter_parses_in_the_sources_sql_and_runs_on_each_event_in_postgresql():
    from tideline.core.row_filter import parse
    f = parse("Status IN ('paid', 'shipped') AND IFNULL(amount, 0) > 10", "mariadb")
    assert f.columns == ["Status", "amount"] and f.unknown(["id", "status", "amount"]) == []
    assert f.source_sql() == "Status IN ('paid', 'shipped') AND COALESCE(amount, 0) > 10"
    assert f.target_sql(["id", "status", "amount"], "v") == 'v."status" IN (\'paid\', \'shipped\') AND COALESCE(v."amount", 0) > 10'
    assert parse("region <> 'test'", "postgres").unknown(["id", "area"]) == ["region"]


@pytest.mark.parametrize("text, says", [
    ("select 1", "is not a predicate"), ("a = (select max(x) from t)", "subquery is not allowed"),
    ("t.a = 1", "name the table's columns alone"), ("a = ", "does not parse"), ("1 = 1", "is not a predicate"),
    ("created_at > now() - interval '1 day'", "changes by itself"), ("d > CURRENT_DATE", "changes by itself"),
])
def test_what_is_not_a_row_filter_is_refused_saying_why(text, says):
    from tideline.core.row_filter import parse
    with pytest.raises(ValueError, match=says):
        parse(text, "postgres")


def test_the_config_refuses_a_filter_on_a_column_not_synced_or_on_a_batch_table():
    with pytest.raises(ConfigError, match="row_filter names region, which the table does not sync"):
        cfg({"name": "orders", "columns": ["id", "status"], "row_filter": "region = 'eu'"})
    with pytest.raises(ConfigError, match="row_filter goes with mode: cdc"):
        cfg({"name": "e", "mode": "batch", "cursor_column": "at", "row_filter": "a = 1"})
    assert cfg({"name": "orders", "row_filter": "status <> 'test'"}).table("orders").row_filter == "status <> 'test'"


def test_events_the_filter_does_not_keep_become_deletes_of_their_key_in_the_stage():
    text = rendered(apply_sql.leave_filter_sql("t", COLUMNS, 'v."note" <> \'x\''))
    # an insert or update, or a delete's carried row image (core.batch_events.with_last_image): never written
    assert text.startswith("UPDATE \"tl_stage\" AS t SET op = 'd', after = NULL WHERE t.tbl = 't' AND t.after IS NOT NULL")
    assert "LATERAL (SELECT " in text and "AND NOT coalesce((v.\"note\" <> 'x'), false)) RETURNING 1" in text


def test_history_versions_every_event_of_a_key_and_fills_an_unsent_value_from_the_one_before():
    import pyarrow as pa
    from tideline.core.batch_events import split_batch
    from tideline.core.change_events import decode_records

    def event(off, op, after, us):
        return {"topic": "h" if off < 10 else "p", "partition": 0, "offset": off, "key": b'{"id":"1"}',
                "value": json.dumps({"op": op, "after": after, "source": {"ts_ms": us // 1000, "ts_us": us}}).encode()}
    rows = [event(0, "c", {"id": "1", "big": "x" * 5, "n": "1"}, 1_000_000),
            event(1, "u", {"id": "1", "big": "__debezium_unavailable_value", "n": "2"}, 2_000_000),
            event(2, "u", {"id": "1", "big": "__debezium_unavailable_value", "n": "3"}, 3_000_000),
            event(10, "c", {"id": "1", "n": "1"}, 1), event(11, "u", {"id": "1", "n": "2"}, 2)]
    raw = pa.Table.from_pylist(rows, schema=pa.schema([("topic", pa.string()), ("partition", pa.int32()),
                                                       ("offset", pa.int64()), ("key", pa.binary()),
                                                       ("value", pa.binary())]))
    split = split_batch(decode_records(raw.to_batches()), versioned=frozenset({"h"}))
    kept = split.rows.to_pylist()
    history = [r for r in kept if r["topic"] == "h"]
    assert [r["offset"] for r in history] == [0, 1, 2] and [r["offset"] for r in kept if r["topic"] == "p"] == [11]
    assert all(json.loads(r["after"])["big"] == "xxxxx" for r in history)   # each version's value, not a placeholder
    assert [r["ts_us"] for r in history] == [1_000_000, 2_000_000, 3_000_000]


def test_the_history_statement_closes_the_current_version_and_opens_one_per_event():
    text = rendered(apply_sql.history_statement("s", "t", COLUMNS, ["id"], extras=TableExtras(history=True)))
    assert "SELECT DISTINCT ON (\"id\", o)" in text            # one version per key and source transaction
    assert "coalesce(s.ts, (extract(epoch FROM now()) * 1000000)::bigint) AS o" in text   # ordered by commit time
    assert "NULL::bigint AS co" in text
    assert "CASE WHEN cur.co IS NULL THEN to_timestamp(ev.ts / 1000000.0) > cur.vf ELSE ev.o > cur.co END" in text
    assert "lead(folded.eff) OVER (PARTITION BY \"folded\".\"id\" ORDER BY folded.eff)" in text
    assert 'SET "_tideline_valid_to" = f.first, "_tideline_current" = false' in text
    assert "AND t.\"_tideline_valid_from\" < f.first" in text   # closed only when the next version starts later
    assert "s.next_eff IS NULL FROM seq AS s WHERE s.op <> 'd'" in text   # a delete only closes
    assert "_tideline_source_order" not in text


def test_a_mariadb_history_table_orders_its_versions_by_gtid_and_folds_a_time_tick_into_its_last_version():
    extras = TableExtras.of(cfg({"name": "o", "history": True}).table("o"), "mariadb")
    assert extras.source_order and extras.names[-1] == "_tideline_source_order"
    assert not TableExtras.of(cfg({"name": "o", "history": True}).table("o"), "postgres").source_order
    text = rendered(apply_sql.history_statement("s", "t", COLUMNS, ["id"], extras=extras))
    assert "split_part(s.pos, '-', 3)::bigint AS o" in text     # the GTID's sequence number
    assert 't."_tideline_source_order" AS co' in text
    # a version never starts before the one it follows (binlog times are whole seconds, and may run back)
    assert "greatest(max(to_timestamp(fresh.ts / 1000000.0)) OVER (PARTITION BY \"fresh\".\"id\" ORDER BY fresh.o" in text
    assert "SELECT DISTINCT ON (\"id\", eff) * FROM timed ORDER BY \"id\", eff, o DESC" in text
    assert "emptied AS (DELETE FROM" in text and "became AS (UPDATE" in text
    assert '"_tideline_source_order" = s.o' in text


def test_history_is_refused_with_soft_deletes_chunks_a_batch_table_or_a_pair_without_it():
    for table, says in (({"name": "o", "history": True, "deletes": "soft"}, "drop deletes: soft"),
                        ({"name": "o", "history": True, "snapshot": "chunked"}, "one consistent snapshot"),
                        ({"name": "o", "mode": "batch", "cursor_column": "at", "history": True}, "go with mode: cdc")):
        with pytest.raises(ConfigError, match=says):
            cfg(table)
    assert TableExtras.of(cfg({"name": "o", "history": True}).table("o")).key_columns == ["_tideline_valid_from"]


def test_the_iceberg_history_merge_closes_and_opens_versions_in_one_commit():
    from tideline.targets.iceberg.apply import LakeApply
    from tideline.targets.iceberg.history import history_merge_sql
    apply = LakeApply(None, "p", "s", "t", "topic", COLUMNS, ["id"], extras=TableExtras(history=True))
    unsent, merge = history_merge_sql(apply, "lake.s.t", "v")
    assert ("WHERE cur.`__tl_vf` IS NULL OR CASE WHEN cur.`__tl_co` IS NULL THEN timestamp_micros(v.__tl_ts) > "
            "cur.`__tl_vf`") in merge   # replays add nothing
    assert "ON t.`id` <=> s.`id` AND t.`_tideline_current` AND s.`__tl_action` <> 'open'" in merge
    assert ("WHEN MATCHED AND s.`__tl_action` = 'close' THEN UPDATE SET t.`_tideline_valid_to` = s.`__tl_from`, "
            "t.`_tideline_current` = false") in merge
    assert "WHEN MATCHED AND s.`__tl_action` = 'emptied' THEN DELETE" in merge   # a second's delete (MariaDB)
    assert "CAST(NULL AS BIGINT) AS `__tl_co`" in merge
    lake = LakeApply(None, "p", "s", "t", "topic", COLUMNS, ["id"], extras=TableExtras(history=True, source_order=True))
    ordered = history_merge_sql(lake, "lake.s.t", "v")[1]
    assert "ELSE v.__tl_seq > cur.`__tl_co` END" in ordered and "ORDER BY f.__tl_seq ROWS" in ordered
    # the view's order (seq) is the GTID's number from MariaDB, the commit time from PostgreSQL
    assert "split_part(s.pos, '-', 3)::bigint AS seq" in rendered(lake._events())
    assert "DISTINCT ON (s.key, seq)" in rendered(apply._events()) and "s.ts" in rendered(apply._events())
    assert "t.`_tideline_source_order` = s.`_tideline_source_order`" in ordered
    assert "WHEN NOT MATCHED AND s.`__tl_action` = 'open' THEN INSERT (`id`, `note`, `_tideline_valid_from`" in merge
    assert "CASE WHEN f.`u1` THEN f.`__tl_cur_1` ELSE f.`note` END" in merge   # an unsent value: the current one's
    assert "f.`__tl_vf` IS NULL" in unsent


def test_a_change_log_keeps_every_event_with_its_before_image_and_only_for_its_tables():
    import pyarrow as pa
    from tideline.core.batch_events import split_batch
    from tideline.core.change_events import decode_records

    def event(topic, off, op, before, after):
        return {"topic": topic, "partition": 0, "offset": off, "key": b'{"id":"1"}',
                "value": json.dumps({"op": op, "before": before, "after": after, "source": {"ts_us": off}}).encode()}
    raw = pa.Table.from_pylist([event("logged", 0, "c", None, {"id": "1", "n": "a"}),
                                event("logged", 1, "u", {"id": "1", "n": "a"}, {"id": "1", "n": "b"}),
                                event("logged", 2, "d", {"id": "1"}, None),
                                event("plain", 0, "u", {"id": "1"}, {"id": "1", "n": "x"})],
                               schema=pa.schema([("topic", pa.string()), ("partition", pa.int32()),
                                                 ("offset", pa.int64()), ("key", pa.binary()), ("value", pa.binary())]))
    split = split_batch(decode_records(raw.to_batches(), keep_before=frozenset({"logged"})),
                        logged=frozenset({"logged"}))
    log = split.log.to_pylist()
    assert [(r["op"], r["offset"]) for r in log] == [("c", 0), ("u", 1), ("d", 2)]   # every event, in order
    assert json.loads(log[1]["before"]) == {"id": "1", "n": "a"} and json.loads(log[2]["before"]) == {"id": "1"}
    assert [r["topic"] for r in split.rows.to_pylist()] == ["logged", "plain"]        # the tables: last per key
    assert split_batch(decode_records(raw.to_batches())).log is None


def test_the_change_log_appends_each_staged_event_once_keyed_by_its_kafka_position():
    create = rendered(apply_sql.create_change_log_sql("s", "t__changes"))
    assert "PRIMARY KEY (_tideline_topic, _tideline_partition, _tideline_offset)" in create
    append = rendered(apply_sql.append_change_log_sql("s", "t__changes", "t"))
    assert append.endswith("WHERE s.tbl = 't' ORDER BY s.part, s.off ON CONFLICT DO NOTHING")
    with pytest.raises(ConfigError, match="changelog and metadata go with mode: cdc"):
        cfg({"name": "e", "mode": "batch", "cursor_column": "at", "changelog": True})


def test_a_slimmed_source_block_must_keep_what_the_tables_read_from_it():
    slim = {**BASE, "kafka": {"topic_prefix": "tl.shop", "source_fields": ["ts_ms"]}}
    with pytest.raises(ConfigError, match="reads lsn from the change events' source block"):
        parse_pipeline({**slim, "tables": [{"name": "o", "metadata": ["source_position"]}]}, "x.yaml")
    with pytest.raises(ConfigError, match="reads ts_us"):
        parse_pipeline({**slim, "tables": [{"name": "o", "history": True}]}, "x.yaml")
    kept = {**BASE, "kafka": {"topic_prefix": "tl.shop", "source_fields": ["ts_ms", "ts_us", "lsn"]}}
    assert parse_pipeline({**kept, "tables": [{"name": "o", "history": True, "metadata": ["source_position"]}]}, "x")


def test_history_from_mariadb_is_refused_on_a_binlog_of_several_gtid_domains_and_seeds_each_partitions_snapshot():
    from tideline.engines import Snapshot
    from tideline.engines.mariadb.engine import MariaDbEngine, _one_domain
    _one_domain("0-1-42", "p.t")
    _one_domain("", "p.t")
    with pytest.raises(SourceError, match=r"p\.t: .*several GTID domains \(0-1-42,1-2-7\)"):
        _one_domain("0-1-42,1-2-7", "p.t")
    snap = Snapshot("gtid 0-1-42", None, "0-1-42", None, ["TRUE"], "START TRANSACTION WITH CONSISTENT SNAPSHOT")
    MariaDbEngine.order_snapshot(None, snap, "p.t")
    assert snap.session_init.startswith("START TRANSACTION WITH CONSISTENT SNAPSHOT; SET @tl_snapshot_seq = ")
    assert "BINLOG_GTID_POS(" in snap.session_init and "BINLOG_SNAPSHOT_POSITION" in snap.session_init
    assert snap.order == "CAST(@tl_snapshot_seq AS CHAR)"
    with pytest.raises(SourceError, match="orders a history table's versions by commit time"):
        from tideline.engines.postgres.engine import PostgresEngine
        PostgresEngine.order_snapshot(type("E", (), {"kind": "postgres"})(), snap, "p.t")
