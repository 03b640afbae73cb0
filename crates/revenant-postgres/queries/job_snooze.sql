-- job_snooze: running -> ready at now + $4 ms, giving the attempt back. Fenced on id
-- $2 and lease token $3. $1: now (NULL: the database clock).
WITH t AS (
    SELECT date_trunc('milliseconds', coalesce($1::timestamptz, now())) AS now
)
UPDATE {schema}.jobs j
SET status = 'ready',
    run_at = t.now + $4::float8 * interval '1 millisecond',
    attempts = greatest(j.attempts - 1, 0),
    lease_token = NULL,
    lease_expires_at = NULL
FROM t
WHERE j.id = $2 AND j.lease_token = $3 AND j.status = 'running'
RETURNING j.id, j.queue, j.run_at <= t.now AS due
