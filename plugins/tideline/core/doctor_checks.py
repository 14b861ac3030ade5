"""The doctor's judgements, pure: facts gathered from each part in, pass/warn/fail with what to
do out. tideline.ops.doctor gathers the facts; these functions are unit-tested on their own."""
from __future__ import annotations

from dataclasses import dataclass

from tideline.core.config import PipelineConfig

PASS, WARN, FAIL = "pass", "warn", "fail"
SLOT_WAL_WARN_FRACTION = 0.8


@dataclass(frozen=True)
class Check:
    part: str      # source | kafka | connect | target | airflow
    name: str      # what was checked, e.g. "slot tideline_demo"
    status: str    # pass | warn | fail
    detail: str    # what was found
    fix: str = ""  # what to do (warn/fail)
    table: str | None = None   # the one synced table it concerns: a failure refuses that table alone

    def describe(self) -> str:
        return f"{self.part} {self.name}: {self.detail}" + (f" → {self.fix}" if self.fix else "")


def _mb(n: int | float) -> str:
    return f"{n / 1024 / 1024:,.0f} MB"


def wal_level(level: str) -> Check:
    if level == "logical":
        return Check("source", "wal_level", PASS, "logical")
    return Check("source", "wal_level", FAIL, f"{level!r}: change capture needs 'logical'",
                 "ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL")


def table_shape(table: str, refusal) -> Check:
    """One table of the pipeline: carried exactly, or refused (core.source_shapes) — a refusal
    concerns that table alone: the run goes on with the others."""
    if refusal is None:
        return Check("source", f"table {table}", PASS, "carried exactly", table=table)
    return Check("source", f"table {table}", FAIL, f"refused: {refusal.reason}", refusal.fix, table=table)


def slot(slot_name: str, row: dict | None, streaming_tables: int) -> Check:
    """row: wal_status, active, retained_bytes (None = the slot does not exist)."""
    name = f"slot {slot_name}"
    if row is None:
        if streaming_tables:
            return Check("source", name, FAIL, f"missing while {streaming_tables} table(s) stream from it: changes "
                                               f"made since it went were not captured",
                         "run the sync DAG: it recreates the slot and reloads the affected tables by itself")
        return Check("source", name, WARN, "does not exist yet", "run the sync DAG (its prepare task creates it)")
    status, retained = row["wal_status"], _mb(row.get("retained_bytes") or 0)
    if status == "lost":
        return Check("source", name, FAIL, "wal_status lost: the WAL it needed was removed, changes were missed",
                     "run the sync DAG: it recreates the slot and reloads the affected tables by itself")
    if status == "unreserved":
        return Check("source", name, FAIL, f"wal_status unreserved: {retained} retained and past "
                                           f"max_slot_wal_keep_size; the next checkpoint removes WAL it needs",
                     "start the pipeline's connector now (or raise max_slot_wal_keep_size)")
    if not row.get("active"):
        return Check("source", name, WARN, f"{status}, inactive (no connector reading it); {retained} retained",
                     "start the connector (the sync DAG's prepare task does)")
    if status == "extended":
        return Check("source", name, WARN, f"wal_status extended: {retained} retained, beyond max_wal_size",
                     "check the connector keeps up")
    return Check("source", name, PASS, f"{status}, active; {retained} WAL retained")


def max_slot_wal_keep_size(setting_mb: int, retained_bytes: int | None) -> Check:
    name = "max_slot_wal_keep_size"
    if setting_mb < 0:
        return Check("source", name, WARN, "unlimited: a stopped pipeline keeps WAL until the source's disk fills",
                     "set max_slot_wal_keep_size (e.g. a few times the WAL of the longest allowed downtime)")
    limit = setting_mb * 1024 * 1024
    if retained_bytes is not None and retained_bytes > SLOT_WAL_WARN_FRACTION * limit:
        return Check("source", name, WARN, f"the slot retains {_mb(retained_bytes)} of {_mb(limit)} allowed: "
                                           f"the slot is close to being invalidated",
                     "start or speed up the pipeline's connector, or raise max_slot_wal_keep_size")
    return Check("source", name, PASS, f"{_mb(limit)}" + (f"; slot retains {_mb(retained_bytes)}"
                                                          if retained_bytes is not None else ""))


def heartbeat(table: str | None, age_s: float | None) -> Check:
    """table: the configured heartbeat table (None = off); age_s: since the pipeline's last beat."""
    if table is None:
        return Check("source", "heartbeat", WARN, "off (source.heartbeat_table: null): while the synced tables are "
                                                  "idle the slot cannot advance and pins the source's WAL",
                     "set source.heartbeat_table (the default tideline_heartbeat)")
    if age_s is None:
        return Check("source", "heartbeat", WARN, f"no heartbeat in {table} yet",
                     "run the sync DAG (the connector writes one every 10 s once it runs)")
    if age_s > 60:
        return Check("source", "heartbeat", WARN, f"last heartbeat {age_s:.0f}s ago in {table}: the connector is "
                                                  f"not running or cannot write there",
                     "check the connector (below) and that the source role may INSERT/UPDATE the table")
    return Check("source", "heartbeat", PASS, f"last beat {age_s:.0f}s ago in {table}")


def topic(cfg: PipelineConfig, name: str, facts: dict | None, made: bool = True) -> list[Check]:
    """facts: partitions, replication_factor, min_insync_replicas, unclean_leader_election, retention_ms
    (None = the topic does not exist). `made`: the pipeline has streamed, so its topics should exist
    (before its first run, a missing one is what the first run makes: a warning, as for the slot)."""
    if facts is None:
        return [Check("kafka", f"topic {name}", FAIL if made else WARN, "does not exist" if made else "does not exist yet",
                      "run the sync DAG (its prepare task creates the topics with the pipeline's settings)")]
    out = []
    label = f"topic {name}"
    parts, rf, isr = facts["partitions"], facts["replication_factor"], facts["min_insync_replicas"]
    if parts != cfg.kafka.partitions:
        out.append(Check("kafka", label, WARN, f"{parts} partition(s), the config says {cfg.kafka.partitions}",
                         "make kafka.partitions match the topic (Tideline never changes partition counts)"))
    durability = f"replication {rf}, min.insync.replicas {isr}, unclean leader election " \
                 f"{'on' if facts['unclean_leader_election'] else 'off'}"
    if isr > rf:
        out.append(Check("kafka", label, FAIL, f"{durability}: min.insync.replicas above the replication factor "
                                               f"makes Kafka refuse every write with acks=all",
                         f"kafka-configs --alter --entity-type topics --entity-name {name} --add-config "
                         f"min.insync.replicas={min(rf, 2)}"))
    elif cfg.kafka.durability == "production":
        problems = []
        if rf < 3:
            problems.append("replication factor below 3")
        if isr < 2:
            problems.append("min.insync.replicas below 2")
        if facts["unclean_leader_election"]:
            problems.append("unclean leader election on (an out-of-sync replica can become leader and drop "
                            "acknowledged changes)")
        if problems:
            out.append(Check("kafka", label, FAIL, f"{durability}: {'; '.join(problems)} for the production "
                                                   f"durability profile",
                             "recreate the topic with replication >= 3 (reassign partitions), set "
                             "min.insync.replicas=2 and unclean.leader.election.enable=false"))
        else:
            out.append(Check("kafka", label, PASS, durability))
    else:
        out.append(Check("kafka", label, PASS, f"{durability} (local profile)"))
    retention = facts["retention_ms"]
    allowed_ms = cfg.kafka.allowed_downtime_hours * 3_600_000
    if retention >= 0 and retention < allowed_ms:
        out.append(Check("kafka", f"{label} retention", FAIL,
                         f"retention.ms {retention} ({retention / 3_600_000:.1f} h) is shorter than the pipeline's "
                         f"allowed downtime ({cfg.kafka.allowed_downtime_hours:g} h): a stream stopped that long "
                         f"loses offsets and needs a re-snapshot",
                         f"kafka-configs --alter --entity-type topics --entity-name {name} --add-config "
                         f"retention.ms={int(max(cfg.kafka.retention_ms, allowed_ms))}"))
    else:
        out.append(Check("kafka", f"{label} retention", PASS,
                         "unlimited" if retention < 0 else f"{retention / 3_600_000:g} h ≥ allowed downtime "
                                                          f"{cfg.kafka.allowed_downtime_hours:g} h"))
    return out


def connector(name: str, status: dict | None, made: bool = True) -> Check:
    if status is None:
        return Check("connect", f"connector {name}", FAIL if made else WARN,
                     "does not exist" if made else "does not exist yet", "run the sync DAG (its prepare task creates it)")
    state = status["connector"]["state"]
    tasks = status.get("tasks", [])
    failed = [t for t in tasks if t["state"] == "FAILED"]
    if state == "FAILED" or failed:
        trace = (status["connector"].get("trace") if state == "FAILED" else failed[0].get("trace")) or "(no trace)"
        return Check("connect", f"connector {name}", FAIL,
                     f"connector {state}, tasks {[t['state'] for t in tasks]}: {trace.strip()[:800]}",
                     "fix the cause in the trace, then run the sync DAG (it restarts the connector)")
    if state in ("PAUSED", "STOPPED") or not tasks:
        return Check("connect", f"connector {name}", WARN, f"connector {state}, {len(tasks)} task(s): changes are "
                                                           f"not being captured; the slot holds WAL meanwhile",
                     "run the sync DAG (its prepare task resumes it)")
    return Check("connect", f"connector {name}", PASS, f"{state}, tasks {[t['state'] for t in tasks]}")


def target_privileges(schema: str, can_create: bool, state_schema_ok: bool) -> Check:
    if can_create and state_schema_ok:
        return Check("target", "privileges", PASS, f"can create tables in {schema} and write tideline state")
    missing = ([f"CREATE on schema {schema} (or on the database, to create it)"] if not can_create else []) + \
              (["USAGE and CREATE on schema tideline"] if not state_schema_ok else [])
    return Check("target", "privileges", FAIL, "the target connection's role lacks " + " and ".join(missing),
                 "GRANT " + "; GRANT ".join(missing) + " TO <the target role>")


def target_role(role: str, superuser: bool) -> Check:
    """The target role needs to own the target schemas and Tideline's state, nothing more."""
    if superuser:
        return Check("target", "role", WARN, f"{role} is a superuser: far more than the sync needs",
                     f"use a role that owns only the target schemas and schema tideline: CREATE ROLE tideline_sync "
                     f"LOGIN; GRANT CREATE ON DATABASE <target> TO tideline_sync")
    return Check("target", "role", PASS, f"{role} is not a superuser")


def state_version(current: int | None, latest: int) -> Check:
    if current == latest:
        return Check("target", "state schema", PASS, f"version {current}")
    if current is None or current < latest:
        return Check("target", "state schema", WARN, f"version {current or 'none'}, this Tideline has {latest}",
                     "nothing: the next run migrates it")
    return Check("target", "state schema", FAIL, f"version {current} is newer than this Tideline ({latest})",
                 "deploy the Tideline version that wrote it")


def connection(conn_id: str, error: str | None) -> Check:
    if error is None:
        return Check("airflow", f"connection {conn_id}", PASS, "defined")
    return Check("airflow", f"connection {conn_id}", FAIL, error,
                 f"define Airflow connection {conn_id!r} (Admin → Connections, or AIRFLOW_CONN_{conn_id.upper()})")


def halted_table(table: str, error: str | None) -> Check:
    """A halted table stops only itself; it is a warning here so the run that resumes it can start."""
    return Check("target", f"table {table}", WARN, f"HALTED: {(error or 'no reason recorded')[:1500]}",
                 "fix what the error names, then trigger the sync DAG (resume_halted) to resume it from its offsets")


def source_role(role: str, facts: dict, publication: str, wanted: list[str], published: list[str]) -> list[Check]:
    """What the source role may do, against what capture needs (README "Security"): REPLICATION and
    SELECT on each synced table, and a publication of exactly those tables that it owns or a DBA
    made for it. facts: superuser, replication, tables {name: {select, modify: [...], owner}},
    publication {"exists", "complete", "delegate": the DBA's tideline_dba.publish may keep it}. Missing a right fails (a table's SELECT fails that table
    alone); more than needed (superuser, writing or owning the synced tables) warns. `wanted`: the
    synced tables as schema.table; `published`: what the publication holds (they and the heartbeat
    table)."""
    out: list[Check] = []
    tables = facts["tables"]
    if facts["superuser"]:
        out.append(Check("source", "role", WARN, f"{role} is a superuser: far more than capture needs",
                         f"use a role with REPLICATION and SELECT on the synced tables only: CREATE ROLE tideline_cdc "
                         f"LOGIN REPLICATION; GRANT SELECT ON {', '.join(wanted)} TO tideline_cdc"))
        return out
    if not facts["replication"]:
        out.append(Check("source", "role", FAIL, f"{role} lacks REPLICATION: the connector cannot open its "
                                                 f"replication slot", f"ALTER ROLE {role} REPLICATION"))
    for name in wanted:
        t = tables[name]
        if not t["select"]:
            out.append(Check("source", f"privilege on {name}", FAIL, f"{role} cannot SELECT {name}: the full load "
                             f"cannot read it", f"GRANT SELECT ON {name} TO {role}", table=t["table"]))
    pub = facts["publication"]
    if not pub["complete"] and not pub.get("delegate") and not all(tables[n]["owner"] for n in wanted):
        what = "does not exist" if not pub["exists"] else "does not publish exactly the synced tables"
        verb = "CREATE PUBLICATION" if not pub["exists"] else "ALTER PUBLICATION"
        body = "FOR TABLE" if not pub["exists"] else "SET TABLE"
        opts = " WITH (publish_via_partition_root = true)" if not pub["exists"] else ""
        out.append(Check("source", f"publication {publication}", FAIL,
                         f"{what}, and {role} does not own every synced table, which creating it takes",
                         f"as the tables' owner: {verb} {publication} {body} {', '.join(published)}{opts}; "
                         f"ALTER PUBLICATION {publication} OWNER TO {role} — or install sql/dba/postgres_source.sql "
                         f"and GRANT EXECUTE on its functions to {role}, so Tideline keeps it"))
    writes = sorted(n for n in wanted if tables[n]["modify"])
    owns = sorted(n for n in wanted if tables[n]["owner"])
    if writes or owns:
        detail = "; ".join(filter(None, [
            f"may {'/'.join(sorted({p for n in writes for p in tables[n]['modify']}))} {', '.join(writes)}" if writes
            else "", f"owns (so may ALTER or DROP) {', '.join(owns)}" if owns else ""]))
        out.append(Check("source", "role", WARN, f"{role} {detail}: more than capture needs",
                         "; ".join(filter(None, [
                             f"REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON {', '.join(writes)} FROM {role}" if writes
                             else "",
                             f"let another role own {', '.join(owns)} and create publication {publication} for "
                             f"{role}" if owns else ""]))))
    if not any(c.status != PASS for c in out):
        out.append(Check("source", "role", PASS, f"{role}: REPLICATION and SELECT on the {len(wanted)} synced "
                                                 f"table(s), nothing more"))
    return out


LOOPBACK = ("localhost", "127.0.0.1", "::1")


def encryption(part: str, conn_id: str, hosts: list[str], protocol: str, verified: bool) -> Check:
    """How a connection travels (README "Security"): verified TLS passes; TLS that does not check
    the server's certificate, or no TLS to another host, warns with the setting to change; plain
    loopback (the local stack) passes as what it is. protocol: what the connection says (sslmode,
    or Kafka's security.protocol)."""
    where = ", ".join(hosts)
    if verified:
        return Check(part, "encryption", PASS, f"connection {conn_id} to {where}: {protocol}, the server verified")
    plain = protocol in ("disable", "allow", "prefer", "PLAINTEXT", "SASL_PLAINTEXT", "")
    if plain and all(h in LOOPBACK for h in hosts):
        return Check(part, "encryption", PASS, f"connection {conn_id} to {where}: not encrypted (loopback only)")
    kafka = part == "kafka"
    fix = ('set extra "security.protocol": "SASL_SSL" with "ssl.ca.location" (and the SASL login)' if kafka and plain
           else 'set extra "ssl.ca.location" and keep ssl.endpoint.identification.algorithm https' if kafka
           else 'set extra "sslmode": "verify-full" and "sslrootcert" (the CA that signed the server)')
    what = "not encrypted" if plain else "encrypted, but the server's certificate is not verified"
    return Check(part, "encryption", WARN, f"connection {conn_id} to {where}: {protocol or 'no TLS'}: {what}",
                 f"in connection {conn_id}: {fix}")

