-- What each pipeline's capture holds on its source, as last looked at (capture.hold): since when
-- its slot has had no reader — PostgreSQL before 17 does not say (pg_replication_slots.inactive_since).
CREATE TABLE IF NOT EXISTS tideline.capture_holds (
    pipeline        text PRIMARY KEY,
    holder          text NOT NULL,
    unread_since    timestamptz,
    retained_bytes  bigint,
    looked_at       timestamptz NOT NULL DEFAULT now()
);
