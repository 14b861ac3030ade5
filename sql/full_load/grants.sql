-- Privileges granted on a relation to roles other than its owner (PUBLIC as grantee 0), to grant
-- them again on the table that replaces it.
SELECT a.privilege_type, CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END,
       a.is_grantable
  FROM pg_class c, aclexplode(c.relacl) a
 WHERE c.oid = %(relid)s AND a.grantee <> c.relowner
 ORDER BY 2, 1;
