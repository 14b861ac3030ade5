"""The database Tideline's state lives in: a PostgreSQL database named by the target's Airflow
connection — the target itself (its rows and its state commit together) or, for a target that
cannot hold it (an Iceberg catalog), the catalog's own PostgreSQL database.

Targets compose a `StateDatabase` for their connections instead of inheriting PostgreSQL's
target: how to connect, which failures are the connection's (worth waiting out), and the value
checks a repair makes with PostgreSQL's own input functions and order.
"""
from __future__ import annotations

import psycopg2
from psycopg2 import sql

ERRORS = (psycopg2.Error,)    # the state database is PostgreSQL, whatever the target


def connect_postgres(conn, autocommit: bool = False, connect_timeout: int | None = None):
    """A psycopg2 connection to a PostgreSQL database named by an Airflow connection."""
    kw = {"connect_timeout": connect_timeout} if connect_timeout else {}
    pg = psycopg2.connect(conn.postgres_dsn(), **kw)
    pg.autocommit = autocommit
    return pg


def lost_postgres_connection(exc: BaseException) -> bool:
    """The connection or the server's availability failed (not the data): worth waiting out."""
    if not isinstance(exc, (psycopg2.OperationalError, psycopg2.InterfaceError)):
        return False
    code = getattr(exc, "pgcode", None)   # psycopg2 gives none when the connection itself broke
    return code is None or code[:2] in ("08", "57", "53", "40")


class StateDatabase:
    """One target connection's state database."""

    errors = ERRORS

    def __init__(self, conn):
        self.conn = conn

    def connect(self, autocommit: bool = False, connect_timeout: int | None = None):
        return connect_postgres(self.conn, autocommit, connect_timeout)

    def lost_connection(self, exc: BaseException) -> bool:
        return lost_postgres_connection(exc)

    def dsn(self) -> str:
        return self.conn.postgres_dsn()

    # ------------------------------------------------ a repair's checks of the values a person gives
    @staticmethod
    def value_problem(conn, typ: str, value: str) -> str | None:
        """Why `value` is not a value of type `typ`, in PostgreSQL's words; None if it is."""
        with conn.cursor() as cur:
            try:
                cur.execute(sql.SQL("SELECT {}::{}").format(sql.Literal(value), sql.SQL(typ)))
                return None
            except psycopg2.Error as exc:
                return (exc.diag.message_primary or str(exc)).strip()
            finally:
                conn.rollback()

    @staticmethod
    def in_order(conn, typ: str, lo: str, hi: str) -> bool:
        with conn.cursor() as cur:
            cur.execute(sql.SQL("SELECT {lo}::{t} <= {hi}::{t}").format(lo=sql.Literal(lo), hi=sql.Literal(hi),
                                                                        t=sql.SQL(typ)))
            ordered = cur.fetchone()[0]
        conn.rollback()
        return ordered

    @staticmethod
    def utc_text(conn, value: str) -> str:
        with conn.cursor() as cur:
            cur.execute("SELECT (%s::timestamptz AT TIME ZONE 'UTC')::text", (value,))
            text = cur.fetchone()[0]
        conn.rollback()
        return text
