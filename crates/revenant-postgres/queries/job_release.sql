-- job_release: running -> ready at now, giving the attempt back (graceful shutdown),
-- for every (id, lease token) in $2/$3 that still holds its lease. Returns those ids.
-- $1: now (NULL: the database clock).
WITH t AS (
    SELECT date_trunc('milliseconds', coalesce($1::timestamptz, now())) AS now
)
UPDATE {schema}.jobs j
SET status = 'ready',
    run_at = t.now,
    attempts = greatest(j.attempts - 1, 0),
    lease_token = NULL,
    lease_expires_at = NULL
FROM unnest($2::int8[], $3::int8[]) AS i(id, lease_token), t
WHERE j.id = i.id AND j.lease_token = i.lease_token AND j.status = 'running'
RETURNING j.id, i.lease_token, j.queue
