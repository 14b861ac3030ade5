-- Resolves each schema.table to its oid and checks that this role can read it (one round trip
-- for all the tables a stream batch applies; a table not found has no row).
SELECT n.nspname, c.relname, c.oid, has_table_privilege(c.oid, 'SELECT') AS can_select, c.relkind
  FROM unnest(%(schemas)s::text[], %(tables)s::text[]) AS w(nspname, relname)
  JOIN pg_namespace n ON n.nspname = w.nspname
  JOIN pg_class c     ON c.relnamespace = n.oid AND c.relname = w.relname;
