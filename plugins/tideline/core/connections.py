"""Airflow connections without Airflow: Spark jobs read the same `AIRFLOW_CONN_<ID>` variables.

Airflow passes its environment to spark-submit, so the job resolves a connection id exactly as
Airflow would (URI or JSON form) and credentials never travel on the command line or in YAML.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Callable, Mapping
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from tideline.core.errors import ConfigError
from tideline.core.kafka_access import KafkaAccess, kafka_access

TLS_KEYS = ("sslmode", "sslrootcert", "sslcert", "sslkey")
SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")


@dataclass(frozen=True)
class Conn:
    conn_id: str
    conn_type: str
    host: str | None = None
    port: int | None = None
    login: str | None = None
    password: str | None = field(default=None, repr=False)
    schema: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def tls(self) -> dict[str, str]:
        """The database connection's TLS settings, libpq's names in the connection's extra (the
        Airflow Postgres connection's convention): sslmode, sslrootcert, sslcert, sslkey. Every
        client of the database — psycopg2, Spark's JDBC reads, the Debezium connector — gets them."""
        tls = {k: str(self.extra[k]) for k in TLS_KEYS if self.extra.get(k)}
        mode = tls.get("sslmode")
        if mode is not None and mode not in SSL_MODES:
            raise ConfigError(f"connection {self.conn_id}", [("extra.sslmode", f"is {mode!r}; one of {', '.join(SSL_MODES)}")])
        if ("sslcert" in tls) != ("sslkey" in tls):
            raise ConfigError(f"connection {self.conn_id}", [("extra.sslcert/sslkey", "a client certificate needs both")])
        return tls

    def postgres_dsn(self) -> str:
        """libpq keyword DSN for psycopg2."""
        parts = {"host": self.host or "localhost", "port": self.port or 5432, "dbname": self.schema,
                 "user": self.login, "password": self.password, **self.tls}
        return " ".join(f"{k}={_dsn_quote(str(v))}" for k, v in parts.items() if v not in (None, ""))

    def jdbc_url(self) -> str:
        """The PostgreSQL JDBC URL (pgjdbc takes libpq's TLS names: sslmode, sslrootcert, ...)."""
        base = f"jdbc:postgresql://{self.host or 'localhost'}:{self.port or 5432}/{self.schema or ''}"
        tls = self.tls
        return f"{base}?{urlencode(tls)}" if tls else base

    @property
    def kafka_bootstrap(self) -> str:
        return self.kafka_access.bootstrap

    @property
    def kafka_access(self) -> KafkaAccess:
        """Brokers and security settings of a Kafka connection (core.kafka_access)."""
        return kafka_access(self.conn_id, self.extra, self.host, self.port)

    def http_base_url(self) -> str:
        scheme = self.schema or "http"
        return f"{scheme}://{self.host or 'localhost'}{f':{self.port}' if self.port else ''}"


def _dsn_quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def env_var_name(conn_id: str) -> str:
    return f"AIRFLOW_CONN_{conn_id.upper()}"


def parse_connection(conn_id: str, value: str) -> Conn:
    value = value.strip()
    if value.startswith("{"):
        try:
            data = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigError(env_var_name(conn_id), [("(json)", str(exc))]) from None
        extra = data.get("extra") or {}
        if isinstance(extra, str):
            extra = json.loads(extra) if extra else {}
        return Conn(conn_id, data.get("conn_type", ""), data.get("host"),
                    int(data["port"]) if data.get("port") else None, data.get("login"),
                    data.get("password"), data.get("schema"), extra)
    parts = urlsplit(value)
    scheme = parts.scheme.replace("-", "_")
    conn_type = {"postgresql": "postgres"}.get(scheme, scheme)
    extra = dict(parse_qsl(parts.query))
    if "__extra__" in extra:
        extra = json.loads(extra["__extra__"])
    return Conn(conn_id, conn_type, unquote(parts.hostname) if parts.hostname else None, parts.port,
                unquote(parts.username) if parts.username else None,
                unquote(parts.password) if parts.password else None,
                unquote(parts.path.lstrip("/")) or None, extra)


# Where a connection the process environment lacks is looked up next: a command line run on a
# machine with Airflow sets Airflow's own lookup (its secrets backends and metadata database, so
# a connection added in Airflow's UI or CLI is found: tideline.commands.for_commands);
# None in a Spark job, which gets every connection it needs in its environment.
_elsewhere: Callable[[str], "Conn"] | None = None


def look_up_elsewhere(lookup: Callable[[str], "Conn"] | None) -> None:
    global _elsewhere
    _elsewhere = lookup


def get_connection(conn_id: str, environ: Mapping[str, str] | None = None) -> Conn:
    env = os.environ if environ is None else environ
    value = env.get(env_var_name(conn_id))
    if value is None and environ is None and _elsewhere is not None:
        try:
            return _elsewhere(conn_id)
        except Exception as exc:   # noqa: BLE001 — said below, with where it was looked for
            raise ConfigError(f"connection {conn_id!r}", [(
                env_var_name(conn_id), f"is not set, and Airflow has no connection {conn_id!r} either "
                                       f"({type(exc).__name__}: {str(exc).strip()[:200]}): add it in Airflow "
                                       f"(Admin > Connections, or `airflow connections add`)")]) from None
    if value is None:
        raise ConfigError(f"connection {conn_id!r}", [(
            env_var_name(conn_id),
            "is not set: define the Airflow connection (in the local stack `eval \"$(make -s env)\"` sets it)")])
    return parse_connection(conn_id, value)


def check_kind(pipeline: str, side: str, configured: str, conn: Conn, named: str) -> None:
    """The one rule for a pipeline's source and target: the kind its YAML says (`<side>.kind`) is
    the truth, and the connection (of kind `named`, by its type) must be one; else an error naming both."""
    if named != configured:
        raise ConfigError(f"pipeline {pipeline}", [(f"{side}.kind", (
            f"is {configured!r}, but connection {conn.conn_id!r} is a {named} connection: set "
            f"{side}.kind: {named}, or name a {configured} connection"))])
