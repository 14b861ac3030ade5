-- The stream task's wait (tideline.stream_waits): one row per pipeline, the latest episode.
INSERT INTO tideline.stream_waits (pipeline, waiting_for, since, tries, last_error, task, updated_at)
VALUES (%(pipeline)s, %(waiting_for)s, %(since)s, %(tries)s, %(last_error)s, %(task)s, now())
ON CONFLICT (pipeline) DO UPDATE
   SET waiting_for = excluded.waiting_for, since = excluded.since, tries = excluded.tries,
       last_error = excluded.last_error, task = excluded.task, updated_at = now();
