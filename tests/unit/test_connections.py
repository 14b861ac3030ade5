"""Connections resolve from AIRFLOW_CONN_* in URI and JSON form, as Airflow does."""
import json

import pytest

from tideline.core.connections import get_connection
from tideline.core.errors import ConfigError


def test_uri_form_with_escaped_password():
    c = get_connection("src", {"AIRFLOW_CONN_SRC": "postgresql://u%40x:p%2Fw%27d@db.local:6543/shop"})
    assert (c.conn_type, c.host, c.port, c.login, c.password, c.schema) == \
        ("postgres", "db.local", 6543, "u@x", "p/w'd", "shop")
    assert c.jdbc_url() == "jdbc:postgresql://db.local:6543/shop"
    assert "password='p/w\\'d'" in c.postgres_dsn()


def test_json_form_kafka():
    c = get_connection("k", {"AIRFLOW_CONN_K": json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": "a:1,b:2"}})})
    assert c.kafka_bootstrap == "a:1,b:2"


def test_missing_connection_names_the_variable():
    with pytest.raises(ConfigError) as info:
        get_connection("tideline_target", {})
    assert "AIRFLOW_CONN_TIDELINE_TARGET" in str(info.value)


def test_a_command_line_finds_a_connection_kept_in_airflow_when_the_environment_lacks_it(monkeypatch):
    import pytest as _pytest
    from tideline.core import connections as c
    from tideline.core.errors import ConfigError
    monkeypatch.delenv("AIRFLOW_CONN_KEPT_IN_AIRFLOW", raising=False)
    kept = c.Conn("kept_in_airflow", "postgres", "db.internal", 5432, "u", "p", "shop")
    monkeypatch.setattr(c, "_elsewhere", lambda conn_id: kept if conn_id == "kept_in_airflow" else 1 / 0)
    assert c.get_connection("kept_in_airflow") == kept
    with _pytest.raises(ConfigError, match="Airflow has no connection 'other' either .*Admin > Connections"):
        c.get_connection("other")
    with _pytest.raises(ConfigError, match="is not set"):   # an environment given: only that
        c.get_connection("kept_in_airflow", environ={})
