-- Each table's latest stream run: whether a stream holds the table now (outcome 'running'), how it
-- was asked to stream, how and how long ago it ended.
-- (runs recorded before migration 015 name their mode only as their detail's first word)
SELECT DISTINCT ON (table_name) table_name, coalesce(stream_mode, split_part(detail, ' ', 1)), outcome, detail,
       extract(epoch FROM now() - ended_at) AS ended_s
  FROM tideline.runs
 WHERE pipeline = %(pipeline)s AND kind = 'incremental'
 ORDER BY table_name, run_id DESC;
