-- A look at the pipeline's capture hold: unread_since is kept from the first look that found no
-- reader until a look finds one again. Returns the unread_since now in force.
INSERT INTO tideline.capture_holds AS h (pipeline, holder, unread_since, retained_bytes, looked_at)
VALUES (%(pipeline)s, %(holder)s, CASE WHEN %(unread)s THEN coalesce(%(server_since)s, now()) END, %(retained)s, now())
ON CONFLICT (pipeline) DO UPDATE
   SET holder = excluded.holder, retained_bytes = excluded.retained_bytes, looked_at = now(),
       unread_since = CASE WHEN NOT %(unread)s THEN NULL
                           ELSE coalesce(%(server_since)s, h.unread_since, now()) END
RETURNING unread_since;
