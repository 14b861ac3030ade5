-- A pipeline's replication slot: who reads it, its wal_status, the WAL it retains from its
-- restart_lsn, the server's bound (max_slot_wal_keep_size in MB, -1 unlimited) and, on
-- PostgreSQL 17+, since when nobody reads it (inactive_since; NULL before 17).
SELECT s.active, s.wal_status,
       pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END,
                       s.restart_lsn)::bigint,
       (SELECT setting::int FROM pg_settings WHERE name = 'max_slot_wal_keep_size'),
       (to_jsonb(s) ->> 'inactive_since')::timestamptz
  FROM pg_replication_slots s
 WHERE s.slot_name = %(slot)s;
