"""How every Kafka client Tideline runs reaches the brokers, from the one Airflow Kafka connection.

The connection's extra holds librdkafka settings — the Airflow Kafka provider's own convention —
`bootstrap.servers` and, for a secured cluster, `security.protocol` (SASL_SSL, SSL,
SASL_PLAINTEXT), `sasl.mechanism` (SCRAM-SHA-512, SCRAM-SHA-256, PLAIN), `sasl.username`,
`sasl.password` and `ssl.ca.location` (a PEM file). From that one place come the settings of
confluent-kafka's admin clients and consumers (as they are), of Spark's Kafka source and of a
MariaDB connector's schema-history clients (the Java client's names: `sasl.jaas.config`, a PEM
truststore). A `sasl.*` or `ssl.*` key Tideline cannot carry to every client is refused, never
dropped: a security setting silently ignored by one client is a connection in clear.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from tideline.core.errors import ConfigError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = {
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
}
# the security settings Tideline carries to every client (librdkafka names)
CARRIED = ("security.protocol", "sasl.mechanism", "sasl.username", "sasl.password", "ssl.ca.location",
           "ssl.endpoint.identification.algorithm")


@dataclass(frozen=True)
class KafkaAccess:
    bootstrap: str
    security: Mapping[str, str] = field(default_factory=dict, repr=False)   # librdkafka names, validated

    def __str__(self) -> str:   # messages name the brokers, never the credentials
        return self.bootstrap

    @property
    def protocol(self) -> str:
        return self.security.get("security.protocol", "PLAINTEXT")

    def librdkafka(self, settings: Mapping | None = None) -> dict:
        """A confluent-kafka client's config: the brokers, the security settings, then `settings`."""
        return {"bootstrap.servers": self.bootstrap, **self.security, **(settings or {})}

    def java(self) -> dict[str, str]:
        """The same access for a Java Kafka client (Spark's Kafka source, Debezium's schema
        history): the SASL login as `sasl.jaas.config`, the CA file as a PEM truststore."""
        s, out = self.security, {"bootstrap.servers": self.bootstrap}
        if self.protocol != "PLAINTEXT":
            out["security.protocol"] = self.protocol
        if self.protocol.startswith("SASL_"):
            mechanism = s["sasl.mechanism"]
            out["sasl.mechanism"] = mechanism
            out["sasl.jaas.config"] = (f'{MECHANISMS[mechanism]} required username="{_jaas(s["sasl.username"])}" '
                                       f'password="{_jaas(s["sasl.password"])}";')
        if self.protocol in ("SSL", "SASL_SSL"):
            if s.get("ssl.ca.location"):
                out["ssl.truststore.type"] = "PEM"
                out["ssl.truststore.location"] = s["ssl.ca.location"]
            if s.get("ssl.endpoint.identification.algorithm", "https") == "none":
                out["ssl.endpoint.identification.algorithm"] = ""
        return out

    def spark_options(self) -> dict[str, str]:
        """Spark's Kafka source options (`kafka.` + the Java client's names)."""
        return {f"kafka.{k}": v for k, v in self.java().items()}


def _jaas(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def kafka_access(conn_id: str, extra: Mapping, host: str | None = None, port: int | None = None) -> KafkaAccess:
    """The connection's Kafka access, validated: what is wrong is named with the fix."""
    where = f"Kafka connection {conn_id!r}"
    servers = extra.get("bootstrap.servers") or (f"{host}:{port}" if host else None)
    if not servers:
        raise ConfigError(where, [("extra.bootstrap.servers", "is missing")])
    sec = {("sasl.mechanism" if k == "sasl.mechanisms" else k): str(v) for k, v in extra.items()
           if k.startswith(("security.", "sasl.", "ssl."))}
    problems = [(f"extra.{k}", f"is not supported (Tideline carries {', '.join(CARRIED)} to every Kafka client; "
                               "client certificates are not supported yet: use SASL_SSL)")
                for k in sorted(sec) if k not in CARRIED]
    protocol = sec.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        problems.append(("extra.security.protocol", f"is {protocol!r}; one of {', '.join(PROTOCOLS)}"))
    else:
        sec["security.protocol"] = protocol
    if protocol.startswith("SASL_"):
        mech = sec.get("sasl.mechanism", "").upper()
        if mech not in MECHANISMS:
            problems.append(("extra.sasl.mechanism", f"is {mech or 'missing'}; one of {', '.join(MECHANISMS)} "
                                                     f"with {protocol}"))
        else:
            sec["sasl.mechanism"] = mech
        for key in ("sasl.username", "sasl.password"):
            if not sec.get(key):
                problems.append((f"extra.{key}", f"is missing: {protocol} logs in with a user and password"))
    elif any(k.startswith("sasl.") for k in sec):
        problems.append(("extra.security.protocol", f"is {protocol}, but sasl.* settings are given: "
                                                   "set SASL_SSL (or SASL_PLAINTEXT) to use them"))
    if sec.get("ssl.endpoint.identification.algorithm", "https") not in ("https", "none"):
        problems.append(("extra.ssl.endpoint.identification.algorithm", "is https (the default) or none"))
    if problems:
        raise ConfigError(where, problems)
    if protocol == "PLAINTEXT":
        sec.pop("security.protocol", None)
    return KafkaAccess(servers, MappingProxyType(sec))


def client_config(kafka: KafkaAccess | str, settings: Mapping | None = None) -> dict:
    """A confluent-kafka config for `kafka` (a bare bootstrap string is a PLAINTEXT cluster: the
    stack's own tools and tests)."""
    access = kafka if isinstance(kafka, KafkaAccess) else KafkaAccess(kafka)
    return access.librdkafka(settings)
