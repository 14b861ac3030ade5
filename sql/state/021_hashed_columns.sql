-- The hashed columns a table's full load wrote (hash_columns: core.column_hash), each with an id of
-- its salt (never the salt): a stream that finds the config's hashing changed since reloads the
-- table, whose rows hold the values hashed otherwise or in the clear. NULL: none (older loads too).
ALTER TABLE tideline.table_state ADD COLUMN IF NOT EXISTS hashed_columns jsonb;
