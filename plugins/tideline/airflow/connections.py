"""Airflow connections -> Tideline's Conn: inside tasks, and for the command lines (never at DAG
parse time)."""
from __future__ import annotations

import json
import os

from tideline.core.connections import Conn, env_var_name


def get(conn_id: str) -> Conn:
    from airflow.sdk import BaseHook
    c = BaseHook.get_connection(conn_id)
    return Conn(conn_id, c.conn_type or "", c.host, int(c.port) if c.port else None, c.login, c.password,
                c.schema, c.extra_dejson or {})


def spark_env(conn_ids: list[str]) -> dict[str, str]:
    """The connections a Spark job needs, handed over as AIRFLOW_CONN_* (JSON form) in its
    environment — so connections kept in Airflow's database reach the job too."""
    env = {}
    for conn_id in conn_ids:
        c = get(conn_id)
        env[env_var_name(conn_id)] = json.dumps({
            "conn_type": c.conn_type, "host": c.host, "port": c.port, "login": c.login,
            "password": c.password, "schema": c.schema, "extra": c.extra})
    return env


def from_airflow(conn_id: str) -> Conn:
    """A connection looked up the way Airflow's api-server does (secrets backends, AIRFLOW_CONN_*,
    the metadata database) — for code that runs in Airflow but outside a task (the view)."""
    from airflow.models.connection import Connection
    c = Connection.get_connection_from_secrets(conn_id)
    return Conn(conn_id, c.conn_type or "", c.host, int(c.port) if c.port else None, c.login, c.password,
                c.schema, c.extra_dejson or {})


def for_commands() -> None:
    """Tideline's command lines (status, doctor, verify, lifecycle) find a connection kept in
    Airflow — added in its UI or with `airflow connections add` — as its tasks do, when the
    environment does not define it; on a machine without Airflow configured they keep to the
    environment."""
    from tideline.core.connections import look_up_elsewhere
    if os.environ.get("AIRFLOW_HOME") or os.environ.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"):
        look_up_elsewhere(from_airflow)
