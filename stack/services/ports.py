"""Keeps the stack's listening ports out of Linux's ephemeral range, where a client socket can hold
one first.

The stack's ports (55432, 58080, 59092, …) sit inside Linux's default ephemeral range
(32768-60999): any outgoing connection on this host — Connect's to Kafka, a Spark driver's — may
be given one of them as its local port, and while it lives the service cannot bind it. Seen in CI:
the Airflow API server failed to bind 127.0.0.1:58080 for three minutes ("address already in use")
while nothing listened there. Adding the ports to `net.ipv4.ip_local_reserved_ports` stops the
kernel from handing them out to clients; the listeners still bind them. It needs root (a
machine-wide setting, kept until reboot); without it `make up` says so and goes on.
"""
from __future__ import annotations

from pathlib import Path

from services.base import (KAFKA_CLUSTER_NODES, PORTS, SECURE_TEST_PORTS, SIDE_CONNECT_OFFSET, SIDE_KAFKA_OFFSET,
                           SPARK_WORKERS)

RESERVED = Path("/proc/sys/net/ipv4/ip_local_reserved_ports")


def stack_ports() -> list[int]:
    """Every port a part of this stack listens on, in either mode (the three Kafka nodes' ports,
    +2 per node, and every Spark worker's UI are reserved even when they are not started), and
    those the cluster test (a Kafka and a Connect) and test_secure (a secure stack) start beside
    it: reserved when the stack starts, since a client connection made before, and kept open,
    holds its port for good (seen in CI: a broker of that Kafka failed to bind 59196 for nine
    minutes)."""
    ports = set(PORTS.values())
    for offset in (0, SIDE_KAFKA_OFFSET):   # the stack's Kafka, the cluster test's
        for node in range(KAFKA_CLUSTER_NODES):
            ports.update((PORTS["kafka"] + offset + 2 * node, PORTS["kafka_controller"] + offset + 2 * node))
    ports.add(PORTS["connect"] + SIDE_CONNECT_OFFSET)
    ports.update(SECURE_TEST_PORTS.values())
    ports.update(PORTS["spark_worker_ui"] + w for w in range(SPARK_WORKERS))
    return sorted(ports)


def parse(reserved: str) -> set[int]:
    """The ports of the sysctl's text: '55432,58080-58083'."""
    ports: set[int] = set()
    for item in filter(None, (s.strip() for s in reserved.split(","))):
        lo, _, hi = item.partition("-")
        ports.update(range(int(lo), int(hi or lo) + 1))
    return ports


def reserve_ports(path: Path = RESERVED) -> str | None:
    """Adds the stack's ports to the reserved ones; None when done (or already so), else why not."""
    try:
        current = path.read_text().strip()
    except OSError as exc:
        return f"cannot read {path} ({exc.strerror})"
    missing = [p for p in stack_ports() if p not in parse(current)]
    if not missing:
        return None
    try:
        path.write_text(",".join(filter(None, [current, *map(str, missing)])) + "\n")
    except OSError as exc:
        return (f"could not reserve ports {', '.join(map(str, missing))} in {path} ({exc.strerror}; it needs root): "
                f"a client connection may briefly hold one of them and a service fail to bind it; "
                f"`make up` again then, or set TIDELINE_*_PORT below 32768")
    return None
