-- Dead jobs without a fingerprint (written before migration 0002), for the backfill.
SELECT id, dead_reason, errors FROM jobs
WHERE status = 'dead' AND fingerprint IS NULL
ORDER BY id
LIMIT 500
