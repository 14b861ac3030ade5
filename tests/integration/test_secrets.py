"""The source password never sits in Kafka Connect's config: the connector holds a reference that
Connect resolves from a file only it and the sync DAG read, and a password rotated in the Airflow
connection reaches the running connector on the next run, without a person editing Connect."""
from __future__ import annotations

import dataclasses
import json
import os
import re
import stat
import time
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

import stackctl
from helpers import query
from tideline.capture.connector import ConnectClient, drop_capture, ensure_capture
from tideline.core.connections import get_connection
from tideline.core.debezium import connector_name
from tideline.kafka_offsets import end_offsets

pytestmark = pytest.mark.integration
SUPER = stackctl.pg_url(stackctl.DATABASES["source"], stackctl.PG_SUPERUSER, stackctl.PG_SUPERPASS)


def _super(sql: str, args=()) -> list:
    return query(SUPER, sql, args)


def _config_topic_values(bootstrap: str, topic: str = "_tideline_connect_configs") -> list[str]:
    """Every record Kafka Connect stored in its config topic, as text."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    try:
        end = end_offsets(bootstrap, topic)
        consumer.assign([TopicPartition(topic, p, 0) for p in end])
        values, seen = [], {p: 0 for p in end}
        deadline = time.time() + 30
        while any(seen[p] < end[p] for p in end) and time.time() < deadline:
            msg = consumer.poll(1.0)
            if msg is None or msg.error():
                continue
            seen[msg.partition()] = msg.offset() + 1
            values.append((msg.value() or b"").decode("utf-8", "replace"))
        return values
    finally:
        consumer.close()


def _events_arrive(bootstrap: str, topic: str, before: int, timeout: float = 90) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if sum(end_offsets(bootstrap, topic).values()) > before:
            return True
        time.sleep(1)
    return False


def test_the_connector_config_holds_a_reference_and_a_rotated_password_reaches_it(stack, source_db, pipelines,
                                                                                 unique_name):
    role, t = f"r_{unique_name}", f"{unique_name}_sec"
    first, second = f"first-{uuid.uuid4().hex}", f"second-{uuid.uuid4().hex}"
    source = dataclasses.replace(get_connection("tideline_source"), login=role, password=first)
    connect, kafka = get_connection("tideline_connect"), get_connection("tideline_kafka")
    _super(f"CREATE ROLE {role} LOGIN REPLICATION PASSWORD %s", (first,))
    cfg = None
    try:
        with source_db.cursor() as cur:
            cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, v text)")
            cur.execute(f"INSERT INTO public.{t} VALUES (1, 'a')")
        _super(f"ALTER TABLE public.{t} OWNER TO {role}")
        _super(f"GRANT CREATE ON DATABASE {stackctl.DATABASES['source']} TO {role}")
        # the role owns its table, and the heartbeat table (which a publication must own) is left out
        cfg = pipelines.adopt(pipelines.make([{"name": t}], source={"conn_id": "tideline_source", "schema": "public",
                                                                      "heartbeat_table": None}))
        ensure_capture(cfg, kafka, connect, source)
        name = connector_name(cfg)
        config = ConnectClient(connect.http_base_url()).config(name)
        # what Connect's REST API and its config topic hold: a reference, never the password
        ref = config["database.password"]
        assert re.fullmatch(r"\$\{directory:.+:database\.password\}", ref), ref
        assert first not in json.dumps(config)
        assert not [v for v in _config_topic_values(stack.kafka_bootstrap()) if first in v]
        # the file it refers to: the password, readable by its owner only
        folder = ref[len("${directory:"):-len(":database.password}")]
        path = os.path.join(folder, "database.password")
        assert open(path).read() == first
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and stat.S_IMODE(os.stat(folder).st_mode) == 0o700
        topic = cfg.topic(t)
        before = sum(end_offsets(stack.kafka_bootstrap(), topic).values())
        _super(f"INSERT INTO public.{t} VALUES (2, 'b')")
        assert _events_arrive(stack.kafka_bootstrap(), topic, before), "no change captured with the first password"

        # rotation: the DBA changes the password and ends the connector's session; Connect alone
        # cannot log in again. The Airflow connection gets the new password; the next run fixes it.
        _super(f"ALTER ROLE {role} PASSWORD %s", (second,))
        _super("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = %s "
               "AND active_pid IS NOT NULL", (cfg.slot_name,))
        ensure_capture(cfg, kafka, connect, dataclasses.replace(source, password=second))
        assert open(path).read() == second
        assert ConnectClient(connect.http_base_url()).config(name)["database.password"] == ref
        before = sum(end_offsets(stack.kafka_bootstrap(), topic).values())
        _super(f"UPDATE public.{t} SET v = 'c' WHERE id = 1")
        assert _events_arrive(stack.kafka_bootstrap(), topic, before), "no change captured after the rotation"
        assert not [v for v in _config_topic_values(stack.kafka_bootstrap()) if second in v]
    finally:
        if cfg is not None:
            drop_capture(cfg, connect, dataclasses.replace(   # the publication is the role's: a superuser drops it
                get_connection("tideline_source"), login=stackctl.PG_SUPERUSER, password=stackctl.PG_SUPERPASS))
            assert not os.path.exists(os.path.join(stackctl.VAR, "connect-secrets", connector_name(cfg)))
        _super(f"DROP TABLE IF EXISTS public.{t}")
        _super(f"REVOKE CREATE ON DATABASE {stackctl.DATABASES['source']} FROM {role}")
        _super(f"DROP ROLE IF EXISTS {role}")
