-- job_heartbeat: extend a running job's lease to now + $4 ms. Fenced on id $2 and
-- lease token $3. $1: now (NULL: the database clock).
WITH t AS (
    SELECT date_trunc('milliseconds', coalesce($1::timestamptz, now())) AS now
)
UPDATE {schema}.jobs j
SET lease_expires_at = t.now + $4::float8 * interval '1 millisecond'
FROM t
WHERE j.id = $2 AND j.lease_token = $3 AND j.status = 'running'
RETURNING j.id
