-- Locks the tables' state rows for this transaction, in name order (every batch takes them so:
-- two runs' batches never wait on each other crosswise), and returns each one's epoch, owner and
-- recorded position; the caller refuses to commit unless every epoch is its own.
SELECT table_name, epoch, epoch_owner, resume_offsets FROM tideline.table_state
 WHERE pipeline = %(pipeline)s AND table_name = ANY(%(tables)s::text[])
 ORDER BY table_name
   FOR UPDATE;
