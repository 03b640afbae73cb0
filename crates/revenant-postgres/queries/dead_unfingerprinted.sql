-- Dead jobs without a fingerprint (written before migration 2), for the backfill.
SELECT id, dead_reason, coalesce(errors -> -1 ->> 'message', '') AS message
FROM {schema}.jobs
WHERE status = 'dead' AND fingerprint IS NULL
ORDER BY id
LIMIT 500
