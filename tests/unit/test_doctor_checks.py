"""The doctor's judgements from facts: each misconfiguration it knows, and what it tells to do."""
from tideline.alerts import webhook_url
from tideline.core import doctor_checks as dc
from tideline.core.config import parse_pipeline
from tideline.core.connections import Conn


def cfg(**kafka):
    return parse_pipeline({"name": "shop", "source": {"conn_id": "s"}, "target": {"conn_id": "t"},
                           "kafka": {"topic_prefix": "shop", **kafka}, "tables": [{"name": "orders"}]}, "test")


TOPIC = {"partitions": 1, "replication_factor": 1, "min_insync_replicas": 1, "unclean_leader_election": False,
         "retention_ms": 7 * 24 * 3600 * 1000}


def statuses(checks):
    return [c.status for c in checks]


def test_source_checks():
    assert dc.wal_level("replica").status == "fail" and "wal_level = logical" in dc.wal_level("replica").fix
    assert dc.slot("s", None, streaming_tables=2).status == "fail"
    assert dc.slot("s", None, streaming_tables=0).status == "warn"
    row = {"wal_status": "reserved", "active": True, "retained_bytes": 10}
    assert dc.slot("s", row, 1).status == "pass"
    assert dc.slot("s", {**row, "wal_status": "lost"}, 1).status == "fail"
    assert dc.slot("s", {**row, "wal_status": "unreserved"}, 1).status == "fail"
    assert dc.slot("s", {**row, "active": False}, 1).status == "warn"
    assert dc.max_slot_wal_keep_size(-1, 0).status == "warn"
    assert dc.max_slot_wal_keep_size(1024, 900 * 1024 * 1024).status == "warn"
    assert dc.max_slot_wal_keep_size(1024, 10).status == "pass"
    assert [dc.heartbeat(None, None).status, dc.heartbeat("hb", None).status, dc.heartbeat("hb", 300).status,
            dc.heartbeat("hb", 5).status] == ["warn", "warn", "warn", "pass"]


def test_topic_against_durability_profiles_and_downtime():
    assert statuses(dc.topic(cfg(), "x", TOPIC)) == ["pass", "pass"]
    bad_isr = dc.topic(cfg(), "x", {**TOPIC, "min_insync_replicas": 2})
    assert bad_isr[0].status == "fail" and "min.insync.replicas=1" in bad_isr[0].fix
    prod = dc.topic(cfg(durability="production"), "x", {**TOPIC, "unclean_leader_election": True})
    assert prod[0].status == "fail"
    assert "replication factor below 3" in prod[0].detail and "unclean leader election on" in prod[0].detail
    good = {**TOPIC, "replication_factor": 3, "min_insync_replicas": 2}
    assert statuses(dc.topic(cfg(durability="production"), "x", good)) == ["pass", "pass"]
    short = dc.topic(cfg(), "x", {**TOPIC, "retention_ms": 3600 * 1000})
    assert short[-1].status == "fail" and "allowed downtime (72 h)" in short[-1].detail
    assert dc.topic(cfg(), "x", {**TOPIC, "retention_ms": -1})[-1].status == "pass"
    assert dc.topic(cfg(partitions=3), "x", TOPIC)[0].status == "warn"
    assert statuses(dc.topic(cfg(), "x", None)) == ["fail"]


def test_connector_target_and_connections():
    running = {"connector": {"state": "RUNNING"}, "tasks": [{"state": "RUNNING"}]}
    assert dc.connector("c", running).status == "pass"
    assert dc.connector("c", None).status == "fail"
    failed = {"connector": {"state": "RUNNING"}, "tasks": [{"state": "FAILED", "trace": "boom\n at x"}]}
    assert dc.connector("c", failed).status == "fail" and "boom" in dc.connector("c", failed).detail
    assert dc.connector("c", {"connector": {"state": "STOPPED"}, "tasks": []}).status == "warn"
    assert dc.target_privileges("shop", False, True).status == "fail"
    assert dc.state_version(4, 4).status == "pass" and dc.state_version(3, 4).status == "warn"
    assert dc.state_version(5, 4).status == "fail"
    assert dc.connection("x", "is not set").status == "fail"


def test_config_refuses_retention_shorter_than_allowed_downtime():
    import pytest

    from tideline.core.errors import ConfigError
    with pytest.raises(ConfigError, match="shorter than kafka.allowed_downtime_hours"):
        cfg(retention_ms=3600 * 1000)


def test_webhook_url_from_an_airflow_http_connection():
    assert webhook_url(Conn("h", "http", "127.0.0.1", 8080, schema="http", extra={"endpoint": "/hooks/a"})) == \
        "http://127.0.0.1:8080/hooks/a"
    assert webhook_url(Conn("h", "http", "https://chat.example/hooks/abc")) == "https://chat.example/hooks/abc"
    assert webhook_url(Conn("h", "http", extra={"webhook_url": "https://x/y"})) == "https://x/y"


def test_a_halted_table_warns_with_its_error_and_the_way_back():
    c = dc.halted_table("orders", "refused at offset 7")
    assert c.status == dc.WARN and "refused at offset 7" in c.detail and "resume_halted" in c.fix


def test_a_topic_or_connector_the_first_run_makes_is_a_warning_before_it_and_a_failure_after():
    """Found following the tutorial: `make doctor` before the first trigger said FAIL for every
    topic and the connector — what the first run makes. As for the replication slot: 'not yet'."""
    from tideline.core.config import parse_pipeline
    from tideline.core.doctor_checks import FAIL, WARN, connector, topic
    cfg = parse_pipeline({"name": "p", "source": {"conn_id": "s"}, "target": {"conn_id": "t"},
                          "kafka": {"topic_prefix": "p"}, "tables": [{"name": "a"}]}, "p.yaml")
    [before] = topic(cfg, "p.public.a", None, made=False)
    [after] = topic(cfg, "p.public.a", None)
    assert (before.status, before.detail) == (WARN, "does not exist yet") and after.status == FAIL
    assert connector("tideline-p", None, made=False).status == WARN and connector("tideline-p", None).status == FAIL
