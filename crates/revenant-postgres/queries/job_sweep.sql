-- job_sweep: running jobs whose lease expired with no attempt left -> dead
-- (lease_expired), in every queue. Jobs with attempts left are left for job_claim.
-- $1: now (NULL: the database clock). $2: how many history entries a job keeps. $3: the
-- lease_expired fingerprint. Each death is logged in attempt_failures.
WITH t AS (
    SELECT date_trunc('milliseconds', coalesce($1::timestamptz, now())) AS now
),
exhausted AS (
    SELECT j.id
    FROM {schema}.jobs j
    WHERE j.status = 'running'
      AND j.lease_expires_at <= (SELECT now FROM t)
      AND j.attempts >= j.max_attempts
    FOR UPDATE OF j SKIP LOCKED
),
swept AS (
    UPDATE {schema}.jobs j
    SET status = 'dead',
        dead_reason = 'lease_expired',
        fingerprint = $3::text,
        finished_at = t.now,
        lease_token = NULL,
        lease_expires_at = NULL,
        errors = {schema}.append_error(j.errors, jsonb_strip_nulls(jsonb_build_object(
            'attempt', j.attempts, 'at', t.now, 'class', 'lease_expired',
            'message', format('lease held by worker %s expired at %s and no attempt is left; the worker died or stalled',
                             coalesce(j.worker, 'unknown'),
                             to_char(j.lease_expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')),
            'worker', j.worker)), $2)
    FROM exhausted x, t
    WHERE j.id = x.id
    RETURNING j.id, j.queue, t.now AS at
),
logged AS (
    INSERT INTO {schema}.attempt_failures (queue, class, at)
    SELECT s.queue, 'lease_expired', s.at FROM swept s
)
SELECT s.id FROM swept s
