-- The change event a halted table stopped at (topic, partition, offset, key, column, value,
-- sqlstate, error), so status, alerts and a person can see exactly what the target refused.
ALTER TABLE tideline.table_state ADD COLUMN IF NOT EXISTS last_error_event jsonb;
