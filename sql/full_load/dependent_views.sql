-- Views and materialized views that depend on a table, directly or through other views, with what
-- it takes to recreate them after the table is swapped: definition, options, owner, grants, comment.
-- Ordered so each comes after everything it depends on (create in this order, drop in reverse).
WITH RECURSIVE deps (oid, depth) AS (
    SELECT DISTINCT r.ev_class, 1
      FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid
     WHERE d.classid = 'pg_rewrite'::regclass AND d.refobjid = %(relid)s AND r.ev_class <> %(relid)s
    UNION
    SELECT DISTINCT r.ev_class, deps.depth + 1
      FROM deps JOIN pg_depend d ON d.refobjid = deps.oid JOIN pg_rewrite r ON r.oid = d.objid
     WHERE d.classid = 'pg_rewrite'::regclass AND r.ev_class <> deps.oid
)
SELECT c.oid, c.relkind, n.nspname, c.relname, pg_get_viewdef(c.oid), c.reloptions, pg_get_userbyid(c.relowner),
       obj_description(c.oid, 'pg_class'),
       (SELECT array_agg(pg_get_indexdef(i.indexrelid)) FROM pg_index i WHERE i.indrelid = c.oid),
       max(deps.depth) AS depth
  FROM deps JOIN pg_class c ON c.oid = deps.oid JOIN pg_namespace n ON n.oid = c.relnamespace
 GROUP BY c.oid, c.relkind, n.nspname, c.relname, c.reloptions, c.relowner
 ORDER BY depth, c.oid;
