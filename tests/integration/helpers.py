"""Helpers the integration tests share: exact comparison done inside PostgreSQL, cleanup of
source tables, and letting Kafka retention really delete what a stopped stream still needs."""
from __future__ import annotations

import time
from typing import Callable

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from tideline.kafka_offsets import earliest_offsets


def rows_as_text(conn, schema: str, table: str, order_by: str = "1") -> list[str]:
    """Every row as PostgreSQL's own text form, in a stable order: the exact-equality oracle."""
    with conn.cursor() as cur:
        cur.execute(f'SELECT t::text FROM "{schema}"."{table}" t ORDER BY {order_by}')
        return [r[0] for r in cur.fetchall()]


def table_digest(conn, schema: str, table: str, order_by: str) -> tuple[int, str]:
    """(row count, md5 of all rows in key order) for large tables."""
    with conn.cursor() as cur:
        cur.execute(f'SELECT count(*), md5(coalesce(string_agg(t::text, E\'\\n\' ORDER BY {order_by}), \'\')) '
                    f'FROM "{schema}"."{table}" t')
        return cur.fetchone()


def drop_source(source_db, *tables: str) -> None:
    with source_db.cursor() as cur:
        for t in tables:
            cur.execute(f'DROP TABLE IF EXISTS public."{t}" CASCADE')


def _set_topic_configs(admin: AdminClient, topic: str, values: dict[str, str]) -> None:
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in values.items()]
    for fut in admin.incremental_alter_configs([ConfigResource("topic", topic, incremental_configs=entries)]).values():
        fut.result(30)


def let_retention_delete(bootstrap: str, topic: str, needed: int, touch: Callable[[], None],
                         timeout: float = 90) -> None:
    """Shortens the topic's retention until Kafka no longer holds offset `needed` of partition 0
    (calling `touch` to write more changes, so segments roll and old ones expire), then puts the
    topic's retention settings back."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    keys = ("retention.ms", "segment.ms")
    described = list(admin.describe_configs([ConfigResource("topic", topic)]).values())[0].result(30)
    original = {k: described[k].value for k in keys}
    _set_topic_configs(admin, topic, {"retention.ms": "1000", "segment.ms": "500"})
    try:
        deadline = time.time() + timeout
        while earliest_offsets(bootstrap, topic)[0] <= needed:
            assert time.time() < deadline, f"retention did not delete offset {needed} of {topic} in {timeout}s"
            touch()
            time.sleep(1)
    finally:
        _set_topic_configs(admin, topic, original)
