-- A chunk's record, in the transaction that COPYs its rows into the shadow table: written only
-- while the load's run still holds the table's epoch (FOR SHARE waits for a newer run's claim and
-- then finds no row), so a zombie run's chunk commits nothing. The key (load_id, chunk) refuses a
-- chunk committed twice: its rows roll back with it.
INSERT INTO tideline.load_chunks (load_id, chunk, rows, seconds, epoch)
SELECT %(load_id)s, %(chunk)s, %(rows)s, %(seconds)s, s.epoch
  FROM tideline.table_state s
 WHERE s.pipeline = %(pipeline)s AND s.table_name = %(table)s AND s.epoch = %(epoch)s
   FOR SHARE OF s;
