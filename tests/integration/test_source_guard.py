"""Never harm the source: what capture holds on it is shown and alerted, and a slot the server
invalidates (max_slot_wal_keep_size) is followed by a reload of its tables with no person acting."""
from __future__ import annotations

import time

import pytest

import stackctl
from helpers import query, drop_source, table_digest, wait_until
from test_dags import airflow_env, make_table, run_dag  # noqa: F401,F811 — fixture
from tideline import state
from tideline.capture.connector import ConnectClient
from tideline.core.connections import get_connection
from tideline.core.debezium import connector_name
from tideline.core.errors import ResnapshotRequired
from tideline.load.full_load import FullLoad
from tideline.ops.status import pipeline_status
from tideline.stream.run import IncrementalRun

pytestmark = pytest.mark.integration
SUPER_URL = stackctl.pg_url(stackctl.DATABASES["source"], stackctl.PG_SUPERUSER, stackctl.PG_SUPERPASS)
MB = 1024 * 1024


def _super(sql: str, args=()) -> list:
    return query(SUPER_URL, sql, args)


def _slot(name: str) -> tuple:
    rows = _super("SELECT active, wal_status, pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn) "
                  "FROM pg_replication_slots WHERE slot_name = %s", (name,))
    return rows[0] if rows else (None, None, None)


def _write_wal(mb: int) -> None:
    """About `mb` MB of WAL on the source, in a scratch table dropped after."""
    _super("CREATE TABLE IF NOT EXISTS public.tideline_wal_filler (v text)")
    try:
        _super("INSERT INTO public.tideline_wal_filler SELECT repeat(md5(g::text), 32) "
               "FROM generate_series(1, %s) g", (mb * 1024,))   # ~1 KB a row
        _super("SELECT pg_switch_wal()")
    finally:
        _super("DROP TABLE IF EXISTS public.tideline_wal_filler")


def test_a_slot_nobody_reads_is_shown_and_alerted_and_one_the_server_invalidates_reloads_by_itself(
        airflow_env, spark, source_db, target_db, pipelines, unique_name, webhook):
    t = f"{unique_name}_slot"
    make_table(source_db, t, 500)
    run = None
    try:
        cfg = pipelines.make([{"name": t}], partitions=1, capture=True, stream={"trigger_interval_s": 0.5},
                             alerts={"webhook_conn_id": "tideline_test_hook", "max_retained_wal_mb": 24,
                                     "slot_inactive_minutes": 0.02})
        FullLoad(cfg, spark).run([t])
        client = ConnectClient(get_connection("tideline_connect").http_base_url())
        # its connector stops reading: the slot is kept, unread, and the source keeps WAL for it
        client.stop(connector_name(cfg))
        wait_until(lambda: _slot(cfg.slot_name)[0] is False, 60, "the slot to have no reader")
        with source_db.cursor() as cur:   # changes the slot holds and nobody reads
            cur.execute(f"UPDATE {t} SET qty = qty + 100 WHERE id <= 50")
        _write_wal(40)
        assert run_dag(f"watch_{cfg.name}")["headroom"] == "success"   # its first look: unread from now
        time.sleep(2)
        assert run_dag(f"watch_{cfg.name}")["headroom"] == "success"
        texts = [m["text"] for m in webhook]
        assert any(f"replication slot {cfg.slot_name} retains" in x and "max_retained_wal_mb=24" in x
                   for x in texts), texts
        assert any(f"replication slot {cfg.slot_name} has had no reader for" in x and f"trigger sync_{cfg.name}" in x
                   and "max_slot_wal_keep_size" in x for x in texts), texts
        [row] = pipeline_status(cfg, exact_counts=False)
        assert row.source_hold.startswith(f"replication slot {cfg.slot_name}: retains ") and "NOT READ" in row.source_hold
        assert row.source_retained_bytes > 24 * MB and row.source_unread_s >= 1

        # the stream runs; the server bounds retained WAL, and invalidates the slot past the bound
        run = IncrementalRun(cfg, spark, "continuous")
        from helpers import start_continuous
        thread, ended = start_continuous(run)
        _super("ALTER SYSTEM SET max_slot_wal_keep_size = '32MB'")
        _super("SELECT pg_reload_conf()")
        try:
            _write_wal(48)

            def others_read_within_the_bound() -> bool:   # other pipelines' read slots must not be lost
                lag = _super("SELECT coalesce(max(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)), 0) FROM "
                             "pg_replication_slots WHERE active AND slot_name <> %s", (cfg.slot_name,))[0][0]
                return lag < 16 * MB
            wait_until(others_read_within_the_bound, 90, "the read slots of other pipelines to confirm their WAL",
                       every=2)
            _super("CHECKPOINT")
            wait_until(lambda: _slot(cfg.slot_name)[1] == "lost", 60, "the server to invalidate the slot")
        finally:
            _super("ALTER SYSTEM RESET max_slot_wal_keep_size")
            _super("SELECT pg_reload_conf()")
        # the running stream sees it within its capture check, marks the table and stops for a reload
        thread.join(120)
        assert not thread.is_alive(), "the stream went on after its slot was invalidated"
        assert isinstance(ended.get("exc"), ResnapshotRequired), ended
        assert "lost the WAL it held" in str(ended["exc"])
        st = state.get(target_db, cfg.name, t)
        assert st.phase == "needs_resnapshot" and "capture lost its source position" in st.last_error
        assert run_dag(f"watch_{cfg.name}")["headroom"] == "success"
        assert any("was invalidated by the source (wal_status lost)" in m["text"] for m in webhook)

        # what the stream's exit starts (the DAG's restart): capture re-created, the table reloaded
        states = run_dag(f"sync_{cfg.name}", stream_mode="available_now")
        assert states["__run__"] == "success" and states["full_load"] == "success", states
        assert _slot(cfg.slot_name)[1] in ("reserved", "extended")
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE {t} SET qty = qty + 1 WHERE id > 450")
        wait_until(lambda: run_dag(f"sync_{cfg.name}", stream_mode="available_now")["__run__"] == "success" and
                   table_digest(source_db, "public", t, "id") == table_digest(target_db, cfg.name, t, "id"),
                   120, "the target to equal the source row for row", every=2)
    finally:
        if run is not None and run.query is not None and run.query.isActive:
            run.query.stop()
        drop_source(source_db, t)
