"""MariaDB capture: the Debezium MariaDB connector's config, its schema-history topic, the
heartbeat marker that proves the connector streams before a full load, recovering purged
binlogs, and the doctor's source checks (binlog settings, GTIDs, the capture user's grants).
A mixin of MariaDbEngine (engines.mariadb), which holds the catalog, full load, batch and repair."""
from __future__ import annotations

import re

import time
import zlib

from tideline.core.kafka_access import KafkaAccess
from tideline.engines.mariadb import types as mt
from tideline.core.errors import ConfigError, SourceError, TransientError

# The connector's binlog client id: unique per pipeline, away from the servers' own ids.
SERVER_ID_BASE = 5_400_000

q = mt.quote


class MariaDbCapture:
    def server_id(self, cfg) -> int:
        return SERVER_ID_BASE + zlib.crc32(cfg.name.encode()) % 1_000_000

    def schema_history_topic(self, cfg) -> str:
        return f"__tideline-schema-history.{cfg.kafka.topic_prefix}"

    def connector_config(self, cfg, kafka: KafkaAccess | None = None) -> dict[str, str]:
        from tideline.core import debezium
        if not cfg.source.heartbeat_table:
            raise ConfigError(f"pipeline {cfg.name}", [("source.heartbeat_table", (
                "is required for a MariaDB source: its marker row proves the connector streams before a full "
                "load starts (see tideline.engines.mariadb)"))])
        return {
            **debezium.common_connector_config(cfg, self.source),
            "connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
            "database.port": str(self.source.port or 3306),
            "database.server.id": str(self.server_id(cfg)),
            "database.include.list": ",".join(debezium.regex_literal(db) for db in cfg.source_schemas),
            # the connector reads the tables' schema (no rows) and streams from the current position
            "snapshot.locking.mode": "minimal",
            # a binlog connection the server dropped (a restart) is found and opened again by the
            # keep-alive thread, which looks every minute by default: ~100 s without capture after
            # each MariaDB restart in the soak; every 5 s it is back seconds after the server
            "connect.keep.alive.interval.ms": "5000",
            **self._tls_config(cfg),
            "schema.history.internal.kafka.bootstrap.servers": kafka.bootstrap if kafka else "",
            # the schema history's own Kafka clients reach a secured cluster like every other client
            # (its SASL login is a secret: engines.connect_secrets keeps it out of Connect's config)
            **{f"schema.history.internal.{client}.{k}": v for k, v in (kafka.java() if kafka else {}).items()
               for client in ("producer", "consumer") if k != "bootstrap.servers"},
            "schema.history.internal.kafka.topic": self.schema_history_topic(cfg),
            "schema.history.internal.store.only.captured.tables.ddl": "true",
            "schema.history.internal.producer.acks": "all",
            "schema.history.internal.producer.enable.idempotence": "true",
            "include.schema.changes": "false",
            # exact representations, decoded by core.debezium.value_expr (see core.mariadb_types)
            "decimal.handling.mode": "string",
            "bigint.unsigned.handling.mode": "precise",
            "binary.handling.mode": "hex",
            "time.precision.mode": "adaptive_time_microseconds",
            # years 0-99 are years 0-99, not 2000-2069 / 1970-1999 (the full load reads them so)
            "enable.time.adjuster": "false",
            "value.converter.decimal.format": "NUMERIC",
            "key.converter.decimal.format": "NUMERIC",
            "heartbeat.action.query": (
                f"INSERT INTO {q(cfg.source.schema_)}.{q(cfg.source.heartbeat_table)} (pipeline, beat_at) VALUES ('{cfg.name}', "
                f"UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE beat_at = UTC_TIMESTAMP(6)"),
        }

    def _tls_config(self, cfg) -> dict[str, str]:
        """TLS to the source for the connector (engines.mariadb_tls), as the connection says."""
        tls = getattr(self, "tls", None)
        if tls is None:
            return {}
        from tideline.engines.connect_secrets import secrets_dir
        from tideline.core.debezium import connector_name
        return tls.connector_config(secrets_dir(), connector_name(cfg))

    def capture_topics(self, cfg) -> dict[str, dict[str, str]]:
        """The schema history topic: kept forever (the connector rebuilds table schemas from it),
        with the pipeline's replication."""
        return {self.schema_history_topic(cfg): {"retention.ms": "-1", "retention.bytes": "-1"}}

    def position_holder(self, cfg) -> str:
        return "the binlog position stored by its connector"

    def heartbeat_table_ddl(self, cfg) -> str:
        return (f"CREATE TABLE IF NOT EXISTS {q(cfg.source.schema_)}.{q(cfg.source.heartbeat_table)} "
                f"(pipeline varchar(200) PRIMARY KEY, beat_at datetime(6) NOT NULL)")

    def ensure_heartbeat_table(self, cfg) -> None:
        """The heartbeat table: one a DBA made (with INSERT, UPDATE for the capture user, which then
        needs no CREATE), or made here."""
        conn = self.connect(autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = %s",
                            (cfg.source.schema_, cfg.source.heartbeat_table))
                if not cur.fetchone():
                    cur.execute(self.heartbeat_table_ddl(cfg))
        except Exception as exc:
            raise SourceError(f"cannot create the heartbeat table {cfg.source.schema_}.{cfg.source.heartbeat_table} "
                              f"on the source ({exc}). Create it as a privileged user: {self.heartbeat_table_ddl(cfg)}; "
                              f"and GRANT INSERT, UPDATE on it to the source user") from None
        finally:
            conn.close()

    def wait_capture_ready(self, cfg, client, connector: str, deadline: float) -> None:
        """Proves the connector reads the binlog from a position at or before now: writes a marker
        to the heartbeat table and waits until Connect has stored an offset past its GTID (offsets
        are stored only once the events before them are in Kafka). The connector's stored GTID set
        counts a transaction once it has met the next one, so the marker row is written again
        while waiting: an idle database would otherwise leave it waiting for the next heartbeat."""
        conn = self.connect(autocommit=True)
        beat = (f"INSERT INTO {q(cfg.source.schema_)}.{q(cfg.source.heartbeat_table)} (pipeline, beat_at) "
                f"VALUES (%s, UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE beat_at = UTC_TIMESTAMP(6)")
        seen, marker = None, None
        try:
            with conn.cursor() as cur:
                cur.execute(beat, (cfg.name,))
                cur.execute("SELECT @@last_gtid")
                marker = cur.fetchone()[0]
                want = parse_gtids(marker)
                while time.time() < deadline:
                    stored = client.offsets(connector) or {}
                    for entry in stored.get("offsets", []):
                        seen = (entry.get("offset") or {}).get("gtids")
                        if seen and gtids_cover(parse_gtids(seen), want):
                            return
                    time.sleep(0.5)
                    cur.execute(beat, (cfg.name,))
        finally:
            conn.close()
        raise TransientError(f"connector {connector} did not reach the marker written to "
                             f"{cfg.source.schema_}.{cfg.source.heartbeat_table} (GTID {marker}; its stored position: "
                             f"{seen or 'none yet'}); see the Kafka Connect log")

    def lost_capture(self, cfg, client, connector: str) -> str | None:
        """The binlog file the connector stopped at was purged: changes were missed (this
        source's slot loss)."""
        stored = client.offsets(connector) if client.status(connector) is not None else None
        files = [(e.get("offset") or {}).get("file") for e in (stored or {}).get("offsets", [])]
        files = [f for f in files if f]
        if not files:
            return None
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW BINARY LOGS")
                present = {r[0] for r in cur.fetchall()}
        finally:
            conn.close()
        missing = [f for f in files if f not in present]
        if not missing:
            return None
        return (f"binlog {missing[0]}, where connector {connector} stopped reading, was purged from the MariaDB "
                f"source (binlog_expire_logs_seconds or PURGE BINARY LOGS): changes made since were never captured")

    def oldest_transaction_s(self, conn) -> float | None:
        """(InnoDB's open transactions of this user; without the PROCESS privilege, None.)"""
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT MAX(TIMESTAMPDIFF(MICROSECOND, t.trx_started, NOW(6))) / 1e6 FROM "
                            "information_schema.innodb_trx t JOIN information_schema.processlist p "
                            "ON p.id = t.trx_mysql_thread_id WHERE p.user = SUBSTRING_INDEX(CURRENT_USER(), '@', 1) "
                            "AND p.id <> CONNECTION_ID()")
                row = cur.fetchone()
        except self.errors:
            return None
        return float(row[0]) if row and row[0] is not None else None

    def capture_hold(self, conn, cfg, stored_position=None):
        """The binlogs the source keeps from the connector's stored position on, and how long at most
        until expiry purges that position (its file is older than the last event read there)."""
        import time as clock
        from tideline.core.capture_hold import CaptureHold
        from tideline.core.debezium import connector_name
        holder = f"binlog position of connector {connector_name(cfg)}"
        stored = (stored_position() if stored_position else None) or {}
        offsets = [e.get("offset") or {} for e in stored.get("offsets", [])]
        position = next((o for o in offsets if o.get("file")), None)
        if position is None:
            return CaptureHold(holder, missing=True)
        with conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            logs = [(r[0], int(r[1])) for r in cur.fetchall()]
            cur.execute("SELECT @@binlog_expire_logs_seconds")
            expire = int(cur.fetchone()[0] or 0)
        kept = [(name, size) for name, size in logs if name >= position["file"]]
        purged = position["file"] not in [name for name, _ in logs]   # the newer files do not hold it
        retained = None if purged else sum(size for _, size in kept) - int(position.get("pos") or 0)
        read_at = position.get("ts_sec")
        return CaptureHold(holder, retained_bytes=retained,
                           expires_in_s=(expire - (clock.time() - int(read_at)) if expire and read_at else None),
                           status="lost" if purged else None)

    def reset_capture(self, cfg) -> None:
        """Nothing on the server holds a position for the connector (unlike a slot)."""

    def drop_capture(self, cfg) -> str:
        """Nothing on the server to drop; the connector and its offsets are removed by the caller."""
        return f"capture's place on the source ({self.position_holder(cfg)})"

    # ---------------------------------------------------------------- doctor

    def doctor_checks(self, cfg, streaming: int) -> list:
        conn = self.connect()
        try:
            settings = self.capture_settings(conn)
            out = mariadb_capture_checks(settings, cfg.kafka.allowed_downtime_hours)
            with conn.cursor() as cur:
                cur.execute("SHOW GRANTS")
                grants = " ".join(r[0] for r in cur.fetchall())
            out.append(mariadb_privileges(grants, f"`{cfg.source.schema_}`.`{cfg.source.heartbeat_table}`"))
            out += self.table_checks(conn, cfg)
        finally:
            conn.close()
        return out


def capture_problems(s: dict) -> list[str]:
    """Each binlog setting capture needs that the server lacks, with the fix (pure)."""
    out = []
    if not s["log_bin"]:
        out.append("the binary log is off (log_bin): set log-bin = <path> in the server's config and restart it")
    if s["binlog_format"] != "ROW":
        out.append(f"binlog_format is {s['binlog_format']}, capture needs ROW: SET GLOBAL binlog_format = 'ROW' "
                   f"and binlog_format = ROW in the server's config")
    if s["binlog_row_image"] != "FULL":
        out.append(f"binlog_row_image is {s['binlog_row_image']}, capture needs FULL (every event must carry the "
                   f"whole row): SET GLOBAL binlog_row_image = 'FULL' and the same in the server's config")
    return out


def mariadb_capture_checks(s: dict, allowed_downtime_hours: float) -> list:
    """Binlog settings and retention against the pipeline's allowed downtime (pure)."""
    from tideline.core import doctor_checks as dc
    problems = capture_problems(s)
    out = [dc.Check("source", "binlog", dc.FAIL if problems else dc.PASS,
                    "; ".join(problems) if problems else f"row-based, full row images, GTID {s['gtid_binlog_pos']}",
                    "see the setting named" if problems else "")]
    expire = s["binlog_expire_logs_seconds"]
    need = allowed_downtime_hours * 3600
    if expire and expire < need:
        out.append(dc.Check("source", "binlog retention", dc.WARN,
                            f"binlogs expire after {expire / 3600:.1f} h, less than kafka.allowed_downtime_hours "
                            f"({allowed_downtime_hours:g} h): a connector stopped that long misses changes",
                            f"SET GLOBAL binlog_expire_logs_seconds = {int(need)} (and in the server's config)"))
    else:
        out.append(dc.Check("source", "binlog retention", dc.PASS,
                            "binlogs never expire" if not expire else f"{expire / 3600:.1f} h"))
    return out


def mariadb_privileges(grants: str, heartbeat: str | None = None) -> object:
    """REPLICATION SLAVE (read the binlog) and REPLICATION CLIENT / BINLOG MONITOR (its position);
    writing anything but the heartbeat table (`db`.`table`, as SHOW GRANTS spells it) is more."""
    from tideline.core import doctor_checks as dc
    raw, grants = grants, grants.upper()
    allp = "ALL PRIVILEGES ON *.*" in grants
    missing = [p for p, alts in (("REPLICATION SLAVE", ("REPLICATION SLAVE", "REPLICATION REPLICA")),
                                 ("REPLICATION CLIENT", ("REPLICATION CLIENT", "BINLOG MONITOR")))
               if not allp and not any(a in grants for a in alts)]
    if missing:
        return dc.Check("source", "privileges", dc.FAIL, f"the source user lacks {', '.join(missing)}",
                        f"GRANT {', '.join(missing)} ON *.* TO <the source user>")
    more = sorted({f"{p} ON {on}" for privs, on in re.findall(r"GRANT (.+?) ON (\S+) TO ", raw, re.I)
                   for p in (x.strip().upper() for x in privs.split(","))
                   if p in ("ALL PRIVILEGES", "SUPER", "DROP", "DELETE", "INSERT", "UPDATE", "ALTER", "CREATE")
                   and not (on == heartbeat and p in ("INSERT", "UPDATE", "DELETE"))})   # (DELETE: decommission)
    if more:
        return dc.Check("source", "privileges", dc.WARN, f"the source user also holds {'; '.join(more)}: more than "
                                                         f"capture needs (it only reads)",
                        "give capture its own user: GRANT SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, "
                        "REPLICATION CLIENT ON *.* TO <the capture user>, and nothing else")
    return dc.Check("source", "privileges", dc.PASS, "REPLICATION SLAVE, REPLICATION CLIENT, and no right to write")


def parse_gtids(text: str | None) -> dict[int, int]:
    """MariaDB GTID set 'domain-server-seq,...' → {domain: highest seq} (pure)."""
    out: dict[int, int] = {}
    for part in (text or "").replace(" ", "").split(","):
        if part.count("-") == 2:
            domain, _server, seq = part.split("-")
            out[int(domain)] = max(out.get(int(domain), 0), int(seq))
    return out


def gtids_cover(seen: dict[int, int], want: dict[int, int]) -> bool:
    return all(seen.get(d, -1) >= s for d, s in want.items())
