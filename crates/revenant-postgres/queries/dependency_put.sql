-- Writes one dependency's record (its row is locked by this transaction). $1 key,
-- $2 breaker state, $3 record, $4 now.
UPDATE {schema}.dependencies
SET state = $2, record = $3::jsonb, updated_at = $4
WHERE key = $1
