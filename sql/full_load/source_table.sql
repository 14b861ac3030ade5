-- Resolves schema.table to its oid and checks that this role can read it.
SELECT c.oid, has_table_privilege(c.oid, 'SELECT') AS can_select, c.relkind
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = %(schema)s AND c.relname = %(table)s;
