"""Airflow connections -> Tideline's Conn inside tasks (never at DAG parse time); outside a task, as
Airflow's api-server finds them: tideline.commands.from_airflow."""
from __future__ import annotations

import json

from tideline.commands import from_airflow  # noqa: F401 — the view's lookup, re-exported
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
    wanted = list(conn_ids)
    for conn_id in wanted:
        c = get(conn_id)
        referenced = (c.extra or {}).get("aws_conn_id")   # an Iceberg catalog's object store (its keys)
        if referenced and referenced not in wanted:
            wanted.append(referenced)
        env[env_var_name(conn_id)] = json.dumps({
            "conn_type": c.conn_type, "host": c.host, "port": c.port, "login": c.login,
            "password": c.password, "schema": c.schema, "extra": c.extra})
    return env
