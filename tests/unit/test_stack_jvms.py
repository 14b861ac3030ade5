"""The JVM command lines of the stack's Kafka and Connect (stack/services/kafka.py): the default
(G1, both compilers) and the lean one of a thrown-away cluster or the test stack."""
import base64
from pathlib import Path

from services.kafka import KafkaCluster, _jvm, _random_cluster_id


def test_the_default_runs_g1_and_the_lean_jvm_the_serial_collector_and_c1_only():
    default = _jvm("kafka", "kafka.Kafka", ["server.properties"], "768m")
    lean = _jvm("kafka", "kafka.Kafka", ["server.properties"], "768m", light=True)
    assert "-XX:+UseG1GC" in default and not any("TieredStopAtLevel" in a for a in default)
    assert "-XX:TieredStopAtLevel=1" in lean and "-XX:+UseSerialGC" in lean
    assert not any("G1" in a for a in lean)   # two collectors selected: the JVM would refuse to start
    assert default[-2:] == lean[-2:] == ["kafka.Kafka", "server.properties"]


def test_a_cluster_s_command_follows_its_jvm_mode(tmp_path: Path):
    lean = KafkaCluster("kafka-x", 3, 40000, 41000, tmp_path, light_jvm=True)
    full = KafkaCluster("kafka-x", 3, 40000, 41000, tmp_path)
    assert lean.command("kafka-x-2") != full.command("kafka-x-2")   # so `up` registers the part again
    assert f"{tmp_path}/kafka-x-2/server.properties" in lean.command("kafka-x-2")


def test_cluster_ids_look_like_kafka_s_own():
    for _ in range(200):
        cid = _random_cluster_id()
        assert len(cid) == 22 and not cid.startswith("-")
        assert len(base64.urlsafe_b64decode(cid + "==")) == 16
