-- For a breaker that wants a probe: makes the first parked job of dependency $1 (claim
-- order) due now, unless one of them is due already. $2 now (NULL: the database clock).
WITH t AS (
    SELECT date_trunc('milliseconds', coalesce($2::timestamptz, now())) AS now
),
first AS (
    SELECT id FROM {schema}.jobs
    WHERE dependency = $1 AND dependency_wait = 'breaker' AND status = 'ready'
    ORDER BY priority DESC, run_at, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.jobs j
SET run_at = t.now
FROM first, t
WHERE j.id = first.id
  AND NOT EXISTS (
      SELECT 1 FROM {schema}.jobs p
      WHERE p.dependency = $1 AND p.dependency_wait = 'breaker' AND p.status = 'ready'
        AND p.run_at <= t.now)
RETURNING j.queue
