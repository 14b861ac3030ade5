"""Kafka for the local stack: KRaft nodes on loopback, supervised — one broker, or three with
replication 3 and min.insync.replicas 2 (TIDELINE_KAFKA_CLUSTER=1)."""
from __future__ import annotations

import base64
import os
import shlex
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from services.base import (HOST, KAFKA_ADMIN, KAFKA_ADMIN_PASS, KAFKA_BROKERS, KAFKA_PASS, KAFKA_USER, LEAN_JVM, LIB, PORTS,
                           SECURE, VAR, StackError, java, wait_until)
from services import addresses
from services.supervisor import (KAFKA_PARTS, stop_unsupervised, unsupervise, supervise, supervised_command,
                                 supervised_state)


def _kafka_classpath() -> str:
    jars = sorted((LIB / "kafka").glob("*.jar"))
    if not jars:
        raise StackError(f"kafka: no jars in {LIB / 'kafka'}. Run `make setup` (mvn -f stack/jvm/pom.xml package).")
    return os.pathsep.join(str(j) for j in jars)


def _log4j_config(part: str) -> Path:
    path = VAR / "conf" / f"log4j2-{part}.properties"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("""status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
logger.kafka.name = kafka
logger.kafka.level = warn
logger.apache.name = org.apache.kafka
logger.apache.level = warn
logger.connectrt.name = org.apache.kafka.connect.runtime.WorkerSourceTask
logger.connectrt.level = info
logger.debezium.name = io.debezium
logger.debezium.level = info
logger.reflections.name = org.reflections
logger.reflections.level = error
""")
    return path


def _jvm(part: str, main: str, args: list[str], heap: str, light: bool = False) -> list[str]:
    """Kafka and Connect: G1 with a periodic collection once a minute when none ran, which gives
    heap a burst (a backlog, a snapshot) took back to the OS instead of keeping it forever.
    `light`: the serial collector and the client compiler only, for a JVM that lives a few
    seconds (the storage tool), a cluster a test throws away, or the test stack (LEAN_JVM): C2
    compiling the start-up's code is most of what such a JVM costs a 2-core host.
    jdk.nio.maxCachedBufferSize: a socket read into the heap goes through a temporary direct
    buffer of the read's size, which each network thread otherwise keeps; produce requests of
    tens of MB (a connector's batches for 100 topics, up to kafka.max_message_mb) had the broker's
    threads keep enough of them to exhaust its direct memory (= the heap) and stop answering
    (tests/bench/many_streams.py)."""
    collector = (["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"] if light
                 else ["-XX:+UseG1GC", "-XX:G1PeriodicGCInterval=60000"])
    return [java(), "-Xms256m" if not light else "-Xms64m", f"-Xmx{heap}", *collector,
            "-Djava.awt.headless=true", "-Djdk.nio.maxCachedBufferSize=1048576",
            f"-Dlog4j2.configurationFile={_log4j_config(part)}",
            "-cp", _kafka_classpath(), main, *args]


@dataclass(frozen=True)
class KafkaCluster:
    """KRaft nodes (broker + controller each) on loopback, supervised: the stack's own Kafka (one
    node, or three with TIDELINE_KAFKA_CLUSTER=1), and the three-node cluster the durability tests
    start beside it. Node i listens on the broker/controller ports + 2·(i-1). With three nodes:
    replication 3, min.insync.replicas 2, no unclean leader election."""
    prefix: str            # supervised program name (one node), or prefix-1 .. prefix-n
    nodes: int
    broker_port: int
    controller_port: int
    home: Path
    stopwait: int = 60     # seconds a node gets to shut down cleanly
    secure: bool = False   # SASL_SSL (SCRAM-SHA-512) clients, SSL between controllers; no PLAINTEXT listener
    light_jvm: bool = False   # a cluster thrown away after a test, or the test stack: _jvm(light=True)

    @property
    def parts(self) -> tuple[str, ...]:
        return (self.prefix,) if self.nodes == 1 else tuple(f"{self.prefix}-{i}" for i in range(1, self.nodes + 1))

    def node_ports(self, node: int) -> tuple[int, int]:
        return addresses.kafka_node_ports(self.broker_port, self.controller_port, node)

    def bootstrap(self) -> str:
        return addresses.kafka_bootstrap_of(self.broker_port, self.nodes)

    def client_security(self, user: str = KAFKA_USER, password: str = KAFKA_PASS) -> dict[str, str]:
        """The librdkafka security settings of a client (the Airflow Kafka connection's extra)."""
        return addresses.kafka_client_security(self.secure, user, password)

    def java_client_security(self, user: str = KAFKA_USER, password: str = KAFKA_PASS) -> dict[str, str]:
        """The same for a Java client (Connect's worker, producers, consumers and admin)."""
        if not self.secure:
            return {}
        from services.tls import certificates
        return {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.jaas.config": f'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                    f'username="{user}" password="{password}";',
                "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certificates().ca)}

    def healthy(self) -> bool:
        import logging
        from confluent_kafka.admin import AdminClient
        quiet = logging.getLogger("stackctl.rdkafka")
        quiet.addHandler(logging.NullHandler())
        quiet.propagate = False
        admin = AdminClient({"bootstrap.servers": self.bootstrap(), "socket.timeout.ms": 3000,
                             **self.client_security()}, logger=quiet)
        return len(admin.list_topics(timeout=3).brokers) >= self.nodes

    def properties(self, node: int, data: Path) -> str:
        n = self.nodes
        broker, controller = self.node_ports(node)
        voters = ",".join(f"{i}@{HOST}:{self.node_ports(i)[1]}" for i in range(1, n + 1))
        replicas, min_isr = min(3, n), (2 if n >= 3 else 1)
        return f"""# Generated by stack/stackctl.py — KRaft node {node} of {n} ({self.prefix}).
process.roles=broker,controller
node.id={node}
controller.quorum.voters={voters}
{self._listeners(broker, controller)}
log.dirs={data}
num.partitions=1
default.replication.factor={replicas}
min.insync.replicas={min_isr}
offsets.topic.replication.factor={replicas}
transaction.state.log.replication.factor={replicas}
transaction.state.log.min.isr={min_isr}
share.coordinator.state.topic.replication.factor={replicas}
share.coordinator.state.topic.min.isr={min_isr}
unclean.leader.election.enable=false
# Topics are created on purpose (Debezium topic creation, tests), never by a typo.
auto.create.topics.enable=false
# Retention is enforced quickly so tests that shorten a topic's retention see it happen.
log.retention.hours=168
log.retention.check.interval.ms=2000
log.segment.delete.delay.ms=500
log.initial.task.delay.ms=1000
group.initial.rebalance.delay.ms=0
"""

    def _listeners(self, broker: int, controller: int) -> str:
        if not self.secure:
            return f"""listeners=PLAINTEXT://{HOST}:{broker},CONTROLLER://{HOST}:{controller}
advertised.listeners=PLAINTEXT://{HOST}:{broker}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT"""
        from services.tls import certificates
        certs = certificates()
        return f"""# secure mode: clients over SASL_SSL with SCRAM-SHA-512 only, controllers over SSL
listeners=SASL_SSL://{HOST}:{broker},CONTROLLER://{HOST}:{controller}
advertised.listeners=SASL_SSL://{HOST}:{broker}
controller.listener.names=CONTROLLER
listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:SSL
inter.broker.listener.name=SASL_SSL
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="{KAFKA_ADMIN}" password="{KAFKA_ADMIN_PASS}";
ssl.keystore.type=PEM
ssl.keystore.location={certs.bundle}
ssl.truststore.type=PEM
ssl.truststore.location={certs.ca}
ssl.endpoint.identification.algorithm=https"""

    def _node_dir(self, part: str) -> Path:
        return self.home if self.nodes == 1 else self.home / part   # a single broker keeps its old place

    def command(self, part: str) -> str:
        return shlex.join(_jvm(part, "kafka.Kafka", [str(self._node_dir(part) / "server.properties")],
                               "768m" if self.nodes == 1 else "512m", light=self.light_jvm))

    def start(self) -> None:
        if all(supervised_state(p) == "RUNNING" and supervised_command(p) == self.command(p) for p in self.parts):
            wait_until(self.prefix, self.healthy, 60, f"metadata from {self.bootstrap()}")
            return
        self.home.mkdir(parents=True, exist_ok=True)
        id_file = self.home / "cluster-id"
        if not id_file.exists():
            id_file.write_text(_random_cluster_id())
        cluster_id = id_file.read_text().strip()
        for node, part in enumerate(self.parts, start=1):
            ndir = self._node_dir(part)
            data, props = ndir / "data", ndir / "server.properties"
            ndir.mkdir(parents=True, exist_ok=True)
            props.write_text(self.properties(node, data))
            props.chmod(0o600)   # secure mode: the brokers' own SCRAM login
            if not (data / "meta.properties").exists():
                scram = [x for user, pw in ((KAFKA_ADMIN, KAFKA_ADMIN_PASS), (KAFKA_USER, KAFKA_PASS))
                         for x in ("--add-scram", f"SCRAM-SHA-512=[name={user},password={pw}]")] if self.secure else []
                fmt = subprocess.run(_jvm("kafka-storage", "kafka.tools.StorageTool",
                                          ["format", "-t", cluster_id, "-c", str(props), *scram], "256m", light=True),
                                     capture_output=True, text=True)
                if fmt.returncode != 0:
                    raise StackError(f"{part}: formatting {data} failed: {fmt.stdout}{fmt.stderr}")
            supervise(part, self.command(part), stopwait=self.stopwait)   # restarts one whose command changed
        wait_until(self.prefix, self.healthy, 120, f"metadata from {self.bootstrap()} with {self.nodes} broker(s)")

    def stop(self) -> None:
        unsupervise(self.parts)


def _random_cluster_id() -> str:
    """What `kafka-storage random-uuid` prints (Kafka's Uuid.randomUuid: 16 random bytes,
    base64url without padding, never starting with '-'), without starting a JVM for it."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


KAFKA = KafkaCluster("kafka", KAFKA_BROKERS, PORTS["kafka"], PORTS["kafka_controller"], VAR / "kafka", secure=SECURE,
                     light_jvm=LEAN_JVM)


def kafka_healthy() -> bool:
    return KAFKA.healthy()


def up_kafka() -> None:
    stop_unsupervised("kafka")
    unsupervise([p for p in ("kafka", "kafka-1", "kafka-2", "kafka-3") if p not in KAFKA_PARTS])
    KAFKA.start()


def kafka_node_ports(node: int) -> tuple[int, int]:
    """(broker, controller) port of the stack's KRaft node 1..KAFKA_BROKERS."""
    return KAFKA.node_ports(node)


def kafka_bootstrap() -> str:
    return KAFKA.bootstrap()   # the same as services.addresses.kafka_bootstrap(): the stack's nodes
