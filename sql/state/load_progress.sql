-- Rows stored so far by the table's loads in the window (running ones included), sample by sample.
SELECT p.run_id, p.at, p.rows
  FROM tideline.load_progress p
  JOIN tideline.runs r USING (run_id)
 WHERE r.pipeline = %(pipeline)s AND r.table_name = %(table)s AND p.at >= %(since)s::timestamptz
 ORDER BY p.run_id, p.at;
