"""What Tideline's command lines share (status, doctor, verify, lifecycle): a connection kept in
Airflow is found as Airflow's own processes find it. Not in tideline.airflow: the command lines sit
below the orchestration layer (tests/unit/test_architecture.py), and import Airflow only lazily,
where it is configured."""
from __future__ import annotations

import os

from tideline.core.connections import Conn, look_up_elsewhere


def from_airflow(conn_id: str) -> Conn:
    """A connection looked up the way Airflow's api-server does (secrets backends, AIRFLOW_CONN_*,
    the metadata database) — for code that runs beside Airflow but outside a task (the view, the
    command lines)."""
    from airflow.models.connection import Connection
    c = Connection.get_connection_from_secrets(conn_id)
    return Conn(conn_id, c.conn_type or "", c.host, int(c.port) if c.port else None, c.login, c.password,
                c.schema, c.extra_dejson or {})


def for_commands() -> None:
    """Tideline's command lines find a connection kept in Airflow — added in its UI or with
    `airflow connections add` — as its tasks do, when the environment does not define it; on a
    machine without Airflow configured they keep to the environment."""
    if os.environ.get("AIRFLOW_HOME") or os.environ.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"):
        look_up_elsewhere(from_airflow)
