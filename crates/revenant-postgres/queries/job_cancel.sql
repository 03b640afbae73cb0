-- job_cancel: ready or running -> cancelled. $2 id; $3 lease token (NULL for an
-- operator's cancel by id; given, the cancel is fenced on it); $4 message to record in
-- the history (NULL: none). $1: now (NULL: the database clock). $5: how many history
-- entries a job keeps. $6: the history class. $7: whether to record the worker (a
-- handler cancelling its own attempt).
WITH t AS (
    SELECT date_trunc('milliseconds', coalesce($1::timestamptz, now())) AS now
)
UPDATE {schema}.jobs j
SET status = 'cancelled',
    finished_at = t.now,
    lease_token = NULL,
    lease_expires_at = NULL,
    errors = CASE
        WHEN $4::text IS NULL THEN j.errors
        ELSE {schema}.append_error(j.errors, jsonb_strip_nulls(jsonb_build_object(
            'attempt', j.attempts, 'at', t.now, 'class', $6::text,
            'message', $4::text, 'worker', CASE WHEN $7::boolean THEN j.worker END)), $5)
    END
FROM t
WHERE j.id = $2
  AND CASE WHEN $3::int8 IS NULL THEN j.status IN ('ready', 'running')
           ELSE j.status = 'running' AND j.lease_token = $3::int8 END
RETURNING j.id, j.queue, j.group_key IS NOT NULL AS grouped
