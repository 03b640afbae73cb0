-- Creates a dependency's row if it is missing (its record starts empty: closed, no
-- counts). $1 key. Concurrent first calls both get here; one inserts.
INSERT INTO {schema}.dependencies (key, state, record, updated_at)
VALUES ($1, 'closed', '{}'::jsonb, now())
ON CONFLICT (key) DO NOTHING
