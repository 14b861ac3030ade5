-- What the catalog says about the shape of one named relation (tideline.core.source_shapes
-- judges it): its kind, persistence, replica identity, key, and its place in a partition tree or
-- a legacy inheritance tree. No row when it does not exist.
SELECT c.relkind::text AS relkind,
       c.relpersistence::text AS persistence,
       c.relreplident::text AS replica_identity,
       EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary) AS has_primary_key,
       -- REPLICA IDENTITY USING INDEX: whether that index holds every primary-key column
       (SELECT bool_and(pk.attnum = ANY (ri.indkey::int2[]))
          FROM pg_index ri, pg_index pki, unnest(pki.indkey::int2[]) AS pk(attnum)
         WHERE ri.indrelid = c.oid AND ri.indisreplident AND pki.indrelid = c.oid AND pki.indisprimary)
           AS identity_index_has_key,
       -- a partition: the root of its tree
       CASE WHEN c.relispartition THEN
           (SELECT quote_ident(rn.nspname) || '.' || quote_ident(r.relname)
              FROM pg_partition_ancestors(c.oid) a(relid) JOIN pg_class r ON r.oid = a.relid
              JOIN pg_namespace rn ON rn.oid = r.relnamespace
             WHERE NOT r.relispartition) END AS partition_root,
       CASE WHEN c.relispartition THEN
           (SELECT ARRAY[rn.nspname::text, r.relname::text]
              FROM pg_partition_ancestors(c.oid) a(relid) JOIN pg_class r ON r.oid = a.relid
              JOIN pg_namespace rn ON rn.oid = r.relnamespace
             WHERE NOT r.relispartition) END AS partition_root_key,
       -- a legacy inheritance child (INHERITS): its parents
       (SELECT string_agg(quote_ident(pn.nspname) || '.' || quote_ident(p.relname), ', ' ORDER BY p.relname)
          FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent JOIN pg_namespace pn ON pn.oid = p.relnamespace
         WHERE i.inhrelid = c.oid AND NOT c.relispartition) AS inherits_from,
       -- a legacy inheritance parent: its children (their rows are read with it, their changes are not)
       (SELECT string_agg(quote_ident(kn.nspname) || '.' || quote_ident(k.relname), ', ' ORDER BY k.relname)
          FROM pg_inherits i JOIN pg_class k ON k.oid = i.inhrelid JOIN pg_namespace kn ON kn.oid = k.relnamespace
         WHERE i.inhparent = c.oid AND c.relkind <> 'p') AS inheritance_children,
       -- a partitioned table: partitions whose changes never reach the log
       (SELECT string_agg(quote_ident(pn.nspname) || '.' || quote_ident(p.relname), ', ' ORDER BY p.relname)
          FROM pg_partition_tree(c.oid) t JOIN pg_class p ON p.oid = t.relid
          JOIN pg_namespace pn ON pn.oid = p.relnamespace
         WHERE c.relkind = 'p' AND t.isleaf AND p.relpersistence <> 'p') AS unlogged_partitions,
       -- a partitioned table: foreign-table partitions (their rows live elsewhere, changes unseen)
       (SELECT string_agg(quote_ident(pn.nspname) || '.' || quote_ident(p.relname), ', ' ORDER BY p.relname)
          FROM pg_partition_tree(c.oid) t JOIN pg_class p ON p.oid = t.relid
          JOIN pg_namespace pn ON pn.oid = p.relnamespace
         WHERE c.relkind = 'p' AND t.isleaf AND p.relkind = 'f') AS foreign_partitions,
       current_setting('server_version_num')::int AS server_version
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = %(schema)s AND c.relname = %(table)s;
