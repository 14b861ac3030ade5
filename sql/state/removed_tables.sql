-- A pipeline's tables its YAML no longer names, and where their loads put them (core.target_names;
-- NULL schema: the target's default, NULL table: the source table's name).
SELECT table_name, phase, topic, target_names->>'schema', coalesce(target_names->>'table', table_name)
  FROM tideline.table_state
 WHERE pipeline = %(pipeline)s AND NOT table_name = ANY(%(kept)s)
 ORDER BY table_name;
