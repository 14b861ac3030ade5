-- Installed once per source database by its DBA (a superuser), so a capture role with only
-- REPLICATION and SELECT can keep its pipeline's publication and heartbeat table up to date.
-- PostgreSQL lets only a table's owner publish it; giving the capture role the tables (or a
-- group owning them) would also let it ALTER and DROP them. These two functions run as their
-- owner and do exactly two things for the role that calls them (session_user):
--   publish(name, tables)        a publication named tideline_*, of exactly those tables (each one
--                                the caller may already SELECT), published via the partition root,
--                                owned by the caller; an existing one only if the caller owns it.
--   heartbeat_table(schema, t)   the connector's heartbeat table, (pipeline text, beat_at
--                                timestamptz), with SELECT, INSERT, UPDATE for the caller.
-- Then: GRANT USAGE ON SCHEMA tideline_dba TO <capture role>; GRANT EXECUTE ON FUNCTION
-- tideline_dba.publish(text, text[]), tideline_dba.heartbeat_table(text, text) TO <capture role>;
-- (the local stack does all of this at `make up`, see stack/services/postgres.py).
CREATE SCHEMA IF NOT EXISTS tideline_dba;
REVOKE ALL ON SCHEMA tideline_dba FROM PUBLIC;

CREATE OR REPLACE FUNCTION tideline_dba.publish(p_name text, p_tables text[]) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    t text;
    rel regclass;
    list text := '';
    caller oid := (SELECT oid FROM pg_roles WHERE rolname = session_user);
    owner oid;
BEGIN
    IF p_name !~ '^tideline_' OR length(p_name) > 63 THEN
        RAISE EXCEPTION 'tideline_dba.publish makes only publications named tideline_*, not %', p_name
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF coalesce(cardinality(p_tables), 0) = 0 THEN
        RAISE EXCEPTION 'tideline_dba.publish: no tables for publication %', p_name;
    END IF;
    FOREACH t IN ARRAY p_tables LOOP
        rel := t::regclass;   -- an unknown table fails here, by name
        IF NOT has_table_privilege(session_user, rel, 'SELECT') THEN
            RAISE EXCEPTION 'permission denied: % may not SELECT %, so it may not publish it', session_user, rel
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        list := list || CASE WHEN list = '' THEN '' ELSE ', ' END || rel::text;
    END LOOP;
    SELECT pubowner INTO owner FROM pg_publication WHERE pubname = p_name;
    IF NOT FOUND THEN
        EXECUTE format('CREATE PUBLICATION %I FOR TABLE %s WITH (publish_via_partition_root = true)', p_name, list);
        EXECUTE format('ALTER PUBLICATION %I OWNER TO %I', p_name, session_user);
    ELSIF owner <> caller THEN
        RAISE EXCEPTION 'permission denied: publication % belongs to %, not %', p_name, owner::regrole, session_user
            USING ERRCODE = 'insufficient_privilege';
    ELSE
        EXECUTE format('ALTER PUBLICATION %I SET (publish_via_partition_root = true)', p_name);
        EXECUTE format('ALTER PUBLICATION %I SET TABLE %s', p_name, list);
    END IF;
END $$;

CREATE OR REPLACE FUNCTION tideline_dba.heartbeat_table(p_schema text, p_table text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    rel regclass := to_regclass(format('%I.%I', p_schema, p_table));
BEGIN
    IF NOT has_schema_privilege(session_user, p_schema, 'USAGE') THEN
        RAISE EXCEPTION 'permission denied: % may not use schema %', session_user, p_schema
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF rel IS NULL THEN
        EXECUTE format('CREATE TABLE IF NOT EXISTS %I.%I (pipeline text PRIMARY KEY, beat_at timestamptz NOT NULL)',
                       p_schema, p_table);
    ELSIF (SELECT array_agg(attname || ' ' || format_type(atttypid, atttypmod) ORDER BY attnum)
             FROM pg_attribute WHERE attrelid = rel AND attnum > 0 AND NOT attisdropped)
          IS DISTINCT FROM ARRAY['pipeline text', 'beat_at timestamp with time zone'] THEN
        -- never hand write rights on an application's table that merely has the name
        RAISE EXCEPTION 'permission denied: %.% is not a heartbeat table (pipeline text, beat_at timestamptz)',
            p_schema, p_table USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- DELETE: a decommissioned pipeline removes its own row (ops.lifecycle)
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I.%I TO %I', p_schema, p_table, session_user);
END $$;

REVOKE ALL ON FUNCTION tideline_dba.publish(text, text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION tideline_dba.heartbeat_table(text, text) FROM PUBLIC;
