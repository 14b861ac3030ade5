-- Lifecycle phases: 'paused' (a person paused the table; it keeps its position, nothing is applied
-- until resumed) and 'removed' (the table left its pipeline's YAML; its capture stopped).
ALTER TABLE tideline.table_state DROP CONSTRAINT IF EXISTS table_state_phase_check;
ALTER TABLE tideline.table_state ADD CONSTRAINT table_state_phase_check
    CHECK (phase IN ('new', 'loading', 'streaming', 'needs_resnapshot', 'halted', 'batch', 'refused', 'paused',
                     'removed'));
