"""Whether the target really holds the tables the state says are loaded, whatever the phases say.

Found from outside: a table halted during its load was once resumed as 'streaming' with none of
its rows in the target, and status, the view and the alerts all looked healthy. The plan no longer
does that (core.params.plan_tables), and this is the check that catches the next such hole: status
and the view (one error per table) and the watch DAG (an alert) ask it."""
from __future__ import annotations

import logging

from tideline import engines, state, targets
from tideline.core.phases import holds_load, missing_target
from tideline import alerts

log = logging.getLogger("tideline.watch")


def not_in_target(cfg, store, conn, st: state.TableState | None) -> str | None:
    """The error of a table whose state says it holds a load (core.phases.holds_load) and that the
    target lacks; None when the target has it, or the state claims no load."""
    if st is None or not holds_load(st.phase, st.raw.get("phase_before")):
        return None
    schema, name = cfg.target_schema(st.table_name), cfg.target_table(st.table_name)
    if store.table_exists(conn, schema, name):
        return None
    return missing_target(cfg.name, st.table_name, f"{schema}.{name}", st.phase, st.raw.get("snapshot_at"),
                          st.snapshot_rows, f"the stream reloads it when it next starts; to reload it now, trigger "
                                            f"sync_{cfg.name} with action=full_reload and tables=[{st.table_name}]")


def watch(cfg, conn, tables: list[str], send, resolve) -> list[str]:
    """The watch DAG's look (alert TARGET_MISSING): a table the target lacks, or that holds no row
    while the source has rows, though its state says it is loaded. Cheap where all is well: the
    catalog, then the target's statistics; the source is counted only where the target looks empty."""
    store = targets.for_pipeline(cfg, resolve(cfg.target.conn_id))
    engine, source, out = None, None, []
    try:
        for table in tables:
            st = state.get(conn, cfg.name, table)
            conn.rollback()
            if st is None or not holds_load(st.phase, st.raw.get("phase_before")):
                continue
            missing = not_in_target(cfg, store, conn, st)
            if missing:
                out.append(table)
                send(alerts.TARGET_MISSING, missing, subject=table)
                continue
            schema, name = cfg.target_schema(table), cfg.target_table(table)
            if store.row_count(conn, schema, name, exact=False) != 0 or store.row_count(conn, schema, name) != 0:
                continue
            if source is None:
                engine = engines.for_pipeline(cfg, resolve(cfg.source.conn_id))
                try:
                    source = engine.connect(autocommit=True, connect_timeout=10)
                except engine.errors as exc:   # the stalled-stream alert says what the stream meets
                    log.warning("%s: %s holds no row; not compared with the source, which does not answer: %s",
                                cfg.name, table, exc)
                    return out
            rows = engine.row_count(source, cfg.source_schema(table), table)
            if rows:
                out.append(table)
                send(alerts.TARGET_MISSING, f"{cfg.name}.{table}: the target table {schema}.{name} holds no row "
                                            f"while the source holds {rows:,}, and the state says {st.phase}. Run "
                                            f"sync_{cfg.name} with action=validate to see what differs, then "
                                            f"action=full_reload and tables=[{table}]", subject=table)
    finally:
        if source is not None:
            source.close()
    return out
