-- Claims a new fencing epoch for a table; any run still holding the old epoch is refused from now on.
INSERT INTO tideline.table_state AS s (pipeline, table_name, epoch, epoch_owner, epoch_claimed_at, topic)
VALUES (%(pipeline)s, %(table)s, 1, %(owner)s, now(), %(topic)s)
ON CONFLICT (pipeline, table_name) DO UPDATE
   SET epoch = s.epoch + 1, epoch_owner = EXCLUDED.epoch_owner,
       epoch_claimed_at = now(), updated_at = now()
RETURNING epoch;
