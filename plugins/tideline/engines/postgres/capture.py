"""PostgreSQL capture: the publication Tideline owns, the replication slot the connector keeps,
the heartbeat table, recovering a lost slot, and the doctor's source checks. A mixin of
PostgresEngine (engines.postgres), which holds the catalog, full load, batch and repair reads."""
from __future__ import annotations

import time

import psycopg2
from psycopg2 import sql

from tideline.core.kafka_access import KafkaAccess
from tideline.core import debezium
from tideline.core.errors import SourceError, TransientError


DISCONNECTED_LOOK_S = 5.0


class PostgresCapture:
    def connector_config(self, cfg, kafka: KafkaAccess | None = None) -> dict[str, str]:
        return debezium.connector_config(cfg, self.source)

    def capture_topics(self, cfg) -> dict[str, dict[str, str]]:
        return {}

    def prepare_capture(self, cfg) -> list[str]:
        """The pipeline's publication, owned by Tideline (the connector's autocreate is off): exactly
        the carried tables and the heartbeat table, a partition tree published as its root
        (publish_via_partition_root), so a partitioned table's changes reach its one topic. A
        publication made before this published by partition: it is repaired, and its partitioned
        tables are returned — their changes went to topics the stream never read."""
        self.ensure_heartbeat_table(cfg)
        wanted = {(cfg.source_schema(t.name), t.name) for t in cfg.tables if t.mode == "cdc"}
        wanted |= {(cfg.source.schema_, cfg.source.heartbeat_table)} if cfg.source.heartbeat_table else set()
        names = [sql.Identifier(s, n) for s, n in sorted(wanted)]
        conn = self.connect(autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT current_setting('server_version_num')::int >= 130000")
                via_root = cur.fetchone()[0]
                delegate = _use_delegate(cur, [n.as_string(cur) for n in names])
                cur.execute("SELECT oid, pubviaroot FROM pg_publication WHERE pubname = %s"
                            if via_root else "SELECT oid, true FROM pg_publication WHERE pubname = %s",
                            (cfg.publication_name,))
                row = cur.fetchone()
                members, missed = {}, []
                if row is not None:
                    cur.execute("SELECT n.nspname, c.relname, c.relkind FROM pg_publication_rel r JOIN pg_class c "
                                "ON c.oid = r.prrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
                                "WHERE r.prpubid = %s", (row[0],))
                    members = {(s, n): kind for s, n, kind in cur.fetchall()}
                    if not row[1]:
                        missed = sorted(n for (s, n), kind in members.items() if kind == "p" and (s, n) in wanted)
                if row is not None and row[1] and set(members) == wanted:
                    return []
                if delegate:   # the DBA's tideline_dba.publish (sql/dba/postgres_source.sql) does it for us
                    cur.execute("SELECT tideline_dba.publish(%s, %s)",
                                (cfg.publication_name, [n.as_string(cur) for n in names]))
                    return missed
                pub, tables = sql.Identifier(cfg.publication_name), sql.SQL(", ").join(names)
                if row is None:
                    cur.execute(sql.SQL("CREATE PUBLICATION {} FOR TABLE {}{}").format(
                        pub, tables, sql.SQL(" WITH (publish_via_partition_root = true)" if via_root else "")))
                    return []
                if not row[1]:
                    cur.execute(sql.SQL("ALTER PUBLICATION {} SET (publish_via_partition_root = true)").format(pub))
                if set(members) != wanted:
                    cur.execute(sql.SQL("ALTER PUBLICATION {} SET TABLE {}").format(pub, tables))
                return missed
        except psycopg2.Error as exc:
            raise SourceError(f"cannot set up publication {cfg.publication_name} on the source "
                              f"({str(exc).strip()}): the source role must own the tables — or its DBA installs "
                              f"sql/dba/postgres_source.sql and grants it tideline_dba.publish (see README, "
                              f"Security)") from None
        finally:
            conn.close()

    def position_holder(self, cfg) -> str:
        return f"replication slot {cfg.slot_name}"

    def ensure_heartbeat_table(self, cfg) -> None:
        """The source table the connector's heartbeats write to (see source.heartbeat_table): made by
        the role itself, or by the DBA's tideline_dba.heartbeat_table for a role that may not create."""
        if not cfg.source.heartbeat_table:
            return
        table = f'"{cfg.source.schema_}"."{cfg.source.heartbeat_table}"'
        conn = self.connect()
        try:
            for attempt in (1, 2):   # two pipelines creating it at once: the loser sees it exist
                try:
                    with conn, conn.cursor() as cur:
                        cur.execute("SELECT to_regclass(%s) IS NOT NULL, has_schema_privilege(%s, 'CREATE')",
                                    (table, cfg.source.schema_))
                        exists, may_create = cur.fetchone()
                        if exists and _may_beat(cur, table):
                            return
                        if _delegate_installed(cur) and (exists or not may_create):
                            cur.execute("SELECT tideline_dba.heartbeat_table(%s, %s)",
                                        (cfg.source.schema_, cfg.source.heartbeat_table))
                        elif not exists:
                            cur.execute(debezium.heartbeat_table_ddl(cfg))
                    return
                except psycopg2.errors.UniqueViolation:
                    if attempt == 2:
                        raise
                except psycopg2.Error as exc:
                    raise SourceError(
                        f"cannot create the heartbeat table {cfg.source.schema_}.{cfg.source.heartbeat_table} on "
                        f"the source ({str(exc).strip()}). Create it as a privileged user: "
                        f"{debezium.heartbeat_table_ddl(cfg)}; and GRANT INSERT, UPDATE on it to the source role — "
                        f"or set source.heartbeat_table: null (then idle synced tables let the slot pin WAL)") from None
        finally:
            conn.close()

    def wait_capture_ready(self, cfg, client, connector: str, deadline: float) -> None:
        """The slot exists: from its creation on, every change is kept for the connector."""
        with self.connect() as conn, conn.cursor() as cur:
            while True:
                cur.execute("SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s", (cfg.slot_name,))
                row = cur.fetchone()
                conn.rollback()
                if row is not None:
                    if row[0] == "lost":
                        raise SourceError(f"replication slot {cfg.slot_name} exists but its WAL is lost; changes "
                                          f"were missed: drop the slot and run a full reload")
                    break
                if time.time() > deadline:
                    raise TransientError(f"replication slot {cfg.slot_name} did not appear on the source; "
                                         f"see the Kafka Connect log for the connector's errors")
                time.sleep(0.5)
        conn.close()

    def slot_status(self, cfg) -> tuple[str, bool] | None:
        """(wal_status, active) of the pipeline's replication slot, or None when it does not exist."""
        with self.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT wal_status, active FROM pg_replication_slots WHERE slot_name = %s", (cfg.slot_name,))
            row = cur.fetchone()
        conn.close()
        return (row[0], row[1]) if row else None

    def capture_disconnected(self, cfg, connector_config: dict[str, str]) -> str | None:
        """The slot inactive on three looks 5 s apart (longer than a reconnect, shorter than
        Debezium's 10 s between tries); the cause from trying the connector's own login."""
        for look in range(3):
            slot = self.slot_status(cfg)
            if slot is None or slot[1]:
                return None   # active, or gone (lost_capture says that)
            if look < 2:
                time.sleep(DISCONNECTED_LOOK_S)
        try:
            # the connector's own login (its config may name another user), with the connection's TLS
            psycopg2.connect(self.source.postgres_dsn(), host=connector_config.get("database.hostname"),
                             port=connector_config.get("database.port"), dbname=connector_config.get("database.dbname"),
                             user=connector_config.get("database.user"), connect_timeout=5).close()
            cause = "its login works from here; the Kafka Connect log says what it meets"
        except psycopg2.Error as exc:
            cause = f"its login fails: {str(exc).strip().splitlines()[0]}"
        return (f"replication slot {cfg.slot_name} is inactive for {2 * DISCONNECTED_LOOK_S:.0f} s and more: the "
                f"connector cannot read the source ({cause})")

    def oldest_transaction_s(self, conn) -> float | None:
        with conn.cursor() as cur:
            cur.execute("SELECT extract(epoch FROM now() - min(xact_start)) FROM pg_stat_activity "
                        "WHERE usename = current_user AND pid <> pg_backend_pid() AND xact_start IS NOT NULL")
            row = cur.fetchone()
        return float(row[0]) if row and row[0] is not None else None

    def capture_hold(self, conn, cfg, stored_position=None):
        """The slot: the WAL it retains (from its restart_lsn), whether a walsender reads it, its
        wal_status, the server's bound on it, and (PostgreSQL 17+) since when nobody reads it."""
        from tideline.core.capture_hold import CaptureHold
        from tideline import sqlfiles
        holder = f"replication slot {cfg.slot_name}"
        with conn.cursor() as cur:
            cur.execute(sqlfiles.load("capture/postgres_slot_hold"), {"slot": cfg.slot_name})
            row = cur.fetchone()
        if row is None:
            return CaptureHold(holder, missing=True)
        active, status, retained, limit_mb, inactive_since = row
        return CaptureHold(holder, retained_bytes=int(retained) if retained is not None else None, active=active,
                           status=status, inactive_since=inactive_since,
                           limit_bytes=limit_mb * 1024 * 1024 if limit_mb is not None and limit_mb >= 0 else None)

    def lost_capture(self, cfg, client, connector: str) -> str | None:
        slot = self.slot_status(cfg)
        if slot is not None and slot[0] != "lost":
            return None
        if slot is None and client.status(connector) is not None and not (client.offsets(connector) or {}).get("offsets"):
            return None   # a connector that never streamed (no position stored) lost nothing: no slot made yet
        return (f"replication slot {cfg.slot_name} " + ("no longer exists at the source" if slot is None else
                                                       "lost the WAL it held (wal_status lost)")
                + ": changes made while it was missing were never captured")

    def reset_capture(self, cfg, timeout: float = 60.0) -> None:
        """Drops the pipeline's (lost) slot once the stopped connector's walsender has let go of it."""
        conn = self.connect(autocommit=True)
        try:
            deadline = time.time() + timeout
            with conn.cursor() as cur:
                while True:
                    cur.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (cfg.slot_name,))
                    row = cur.fetchone()
                    if row is None:
                        return
                    if not row[0]:
                        cur.execute("SELECT pg_drop_replication_slot(%s)", (cfg.slot_name,))
                        return
                    if time.time() > deadline:
                        raise TransientError(f"replication slot {cfg.slot_name} is still in use {timeout:.0f}s after "
                                             f"its connector stopped; it cannot be recreated yet (retry the run)")
                    time.sleep(0.5)
        finally:
            conn.close()

    def drop_capture(self, cfg) -> str:
        """The slot and the publication, so nothing keeps pinning WAL on the source."""
        self.reset_capture(cfg)
        conn = self.connect(autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute(f'DROP PUBLICATION IF EXISTS "{cfg.publication_name}"')
        finally:
            conn.close()
        return f"what the source holds for capture ({self.position_holder(cfg)}; a publication)"

    holds_slots = True

    def orphan_retained(self, slot: str) -> str | None:
        from tideline.core.capture_hold import mb
        conn = self.connect(autocommit=True, connect_timeout=10)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint FROM "
                            "pg_replication_slots WHERE slot_name = %s", (slot,))
                row = cur.fetchone()
        finally:
            conn.close()
        return mb(row[0]) + " of WAL" if row and row[0] is not None else None

    def drop_orphan_hold(self, slot: str, publication: str | None, timeout_s: float = 60) -> str:
        """The slot, once the removed connector's walsender has let go of it, and the publication."""
        conn = self.connect(autocommit=True)
        try:
            with conn.cursor() as cur:
                deadline = time.monotonic() + timeout_s
                while True:
                    cur.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,))
                    row = cur.fetchone()
                    if row is not None and not row[0]:
                        cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                    if row is None or not row[0]:
                        break
                    if time.monotonic() > deadline:
                        raise SourceError(f"replication slot {slot} is still read {timeout_s:.0f}s after its connector "
                                          f"was removed: something else reads it (pg_stat_replication says what); "
                                          f"not dropped")
                    time.sleep(0.5)
                if publication:
                    cur.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(publication)))
        finally:
            conn.close()
        return f"replication slot {slot}" + (f" and publication {publication}" if publication else "")

    # ---------------------------------------------------------------- doctor

    def doctor_checks(self, cfg, streaming: int) -> list:
        """wal_level, each table's shape (carried or refused), the slot and the WAL it
        holds against max_slot_wal_keep_size, the heartbeat."""
        from tideline.core import doctor_checks as dc
        cdc = [t.name for t in cfg.tables if t.mode == "cdc"]
        with self.connect() as conn, conn.cursor() as cur:
            cur.execute("SHOW wal_level")
            out = [dc.wal_level(cur.fetchone()[0])] + self.table_checks(conn, cfg)
            if not cdc:
                return out
            cur.execute("SELECT wal_status, active, pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint "
                        "FROM pg_replication_slots WHERE slot_name = %s", (cfg.slot_name,))
            row = cur.fetchone()
            slot = dict(zip(("wal_status", "active", "retained_bytes"), row)) if row else None
            out.append(dc.slot(cfg.slot_name, slot, streaming))
            cur.execute("SELECT setting::int FROM pg_settings WHERE name = 'max_slot_wal_keep_size'")
            out.append(dc.max_slot_wal_keep_size(cur.fetchone()[0], slot["retained_bytes"] if slot else None))
            out.append(dc.heartbeat(cfg.source.heartbeat_table, _heartbeat_age(cur, cfg)))
            out += role_checks(cur, cfg)
        conn.close()
        return out



def role_checks(cur, cfg) -> list:
    """The source role's rights against what capture needs (core.doctor_checks.source_role)."""
    from tideline.core import doctor_checks as dc
    cur.execute("SELECT current_user, rolsuper, rolreplication FROM pg_roles WHERE rolname = current_user")
    role, superuser, replication = cur.fetchone()
    tables, wanted = {}, []
    for t in cfg.tables:
        if t.mode != "cdc":
            continue
        schema = cfg.source_schema(t.name)
        cur.execute("SELECT has_table_privilege(c.oid, 'SELECT'), ARRAY(SELECT p FROM unnest(ARRAY['INSERT', 'UPDATE', "
                    "'DELETE', 'TRUNCATE']) p WHERE has_table_privilege(c.oid, p)), pg_has_role(c.relowner, 'USAGE') "
                    "FROM pg_class c WHERE c.oid = to_regclass(%s)", (f'"{schema}"."{t.name}"',))
        row = cur.fetchone()
        if row is None:
            continue   # a missing table is the table check's to report
        name = f"{schema}.{t.name}"
        wanted.append(name)
        tables[name] = {"table": t.name, "select": row[0], "modify": list(row[1]), "owner": row[2]}
    published = wanted + ([f"{cfg.source.schema_}.{cfg.source.heartbeat_table}"] if cfg.source.heartbeat_table else [])
    cur.execute("SELECT n.nspname || '.' || c.relname FROM pg_publication p JOIN pg_publication_rel r ON "
                "r.prpubid = p.oid JOIN pg_class c ON c.oid = r.prrelid JOIN pg_namespace n ON n.oid = "
                "c.relnamespace WHERE p.pubname = %s", (cfg.publication_name,))
    members = {r[0] for r in cur.fetchall()}
    cur.execute("SELECT EXISTS (SELECT FROM pg_publication WHERE pubname = %s)", (cfg.publication_name,))
    exists = cur.fetchone()[0]
    facts = {"superuser": superuser, "replication": replication, "tables": tables,
             "publication": {"exists": exists, "complete": exists and members == set(published),
                             "delegate": _delegate_installed(cur)}}
    return dc.source_role(role, facts, cfg.publication_name, wanted, published)


def _heartbeat_age(cur, cfg) -> float | None:
    if not cfg.source.heartbeat_table:
        return None
    cur.execute("SELECT to_regclass(%s) IS NOT NULL", (f'"{cfg.source.schema_}"."{cfg.source.heartbeat_table}"',))
    if not cur.fetchone()[0]:
        return None
    cur.execute(f'SELECT extract(epoch FROM now() - beat_at)::float FROM "{cfg.source.schema_}".'
                f'"{cfg.source.heartbeat_table}" WHERE pipeline = %s', (cfg.name,))
    row = cur.fetchone()
    return row[0] if row else None


def _delegate_installed(cur) -> bool:
    """Whether this role may call the DBA's functions (sql/dba/postgres_source.sql)."""
    cur.execute("SELECT count(*) = 2 AND bool_and(has_schema_privilege(n.oid, 'USAGE') "
                "AND has_function_privilege(p.oid, 'EXECUTE')) FROM pg_proc p JOIN pg_namespace n "
                "ON n.oid = p.pronamespace WHERE n.nspname = 'tideline_dba' AND p.proname IN ('publish', "
                "'heartbeat_table')")
    return cur.fetchone()[0]


def _use_delegate(cur, tables: list[str]) -> bool:
    """The DBA's tideline_dba.publish, when the role itself may not publish the tables (PostgreSQL
    lets only their owner, or a superuser) and the function is there for it."""
    cur.execute("SELECT rolsuper OR coalesce((SELECT bool_and(pg_has_role(c.relowner, 'USAGE')) FROM pg_class c "
                "WHERE c.oid = ANY(%s::regclass[])), true) FROM pg_roles WHERE rolname = current_user", (tables,))
    return not cur.fetchone()[0] and _delegate_installed(cur)


def _may_beat(cur, table: str) -> bool:
    # DELETE: decommission removes the pipeline's row (a table granted before it gets it at the next run)
    cur.execute("SELECT has_table_privilege(%s, 'INSERT') AND has_table_privilege(%s, 'UPDATE') AND "
                "has_table_privilege(%s, 'DELETE')", (table, table, table))
    return cur.fetchone()[0]
