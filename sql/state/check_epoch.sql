-- Locks the table's state row for this transaction and returns its epoch and owner;
-- the caller refuses to commit unless the epoch is its own.
SELECT epoch, epoch_owner FROM tideline.table_state
 WHERE pipeline = %(pipeline)s AND table_name = %(table)s
   FOR UPDATE;
