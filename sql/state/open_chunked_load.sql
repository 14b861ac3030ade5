-- The table's chunked load that started and did not finish, with the chunks committed so far.
SELECT l.load_id, l.topic_id, l.offsets, l.ranges, l.shape, l.rows_estimate,
       coalesce(jsonb_object_agg(c.chunk, c.rows) FILTER (WHERE c.chunk IS NOT NULL), '{}'::jsonb)
  FROM tideline.chunked_loads l
  LEFT JOIN tideline.load_chunks c ON c.load_id = l.load_id
 WHERE l.pipeline = %(pipeline)s AND l.table_name = %(table)s AND l.ended_at IS NULL
 GROUP BY l.load_id;
