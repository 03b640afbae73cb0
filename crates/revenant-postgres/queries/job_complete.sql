-- job_complete: running -> completed for every (id, lease token) in $2/$3 that still
-- holds its lease. Returns the ids that did. $1: now (NULL: the database clock).
WITH t AS (
    SELECT date_trunc('milliseconds', coalesce($1::timestamptz, now())) AS now
)
UPDATE {schema}.jobs j
SET status = 'completed',
    finished_at = t.now,
    lease_token = NULL,
    lease_expires_at = NULL
FROM unnest($2::int8[], $3::int8[]) AS i(id, lease_token), t
WHERE j.id = i.id AND j.lease_token = i.lease_token AND j.status = 'running'
RETURNING j.id, i.lease_token, j.queue, j.group_key IS NOT NULL AS grouped
