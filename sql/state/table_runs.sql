-- One table's runs that overlap the window (full loads, re-snapshots and why, streams, batch
-- runs, verifies, repairs), with the Airflow task that ran each.
SELECT run_id, kind, epoch, started_at, ended_at, outcome, rows, detail, airflow, counts,
       (kind = 'full_load' AND detail LIKE 're-snapshot because:%%') AS resnapshot
  FROM tideline.runs
 WHERE pipeline = %(pipeline)s AND table_name = %(table)s
   AND coalesce(ended_at, 'infinity') >= %(since)s::timestamptz
 ORDER BY run_id DESC
 LIMIT 500;
