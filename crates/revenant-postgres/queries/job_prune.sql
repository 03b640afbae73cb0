-- job_prune: delete completed and cancelled jobs (and failure-log records) older than $2 ms,
-- at most $3. Dead jobs are never pruned: they wait for an operator. $1: now (NULL: the
-- database clock).
WITH t AS (
    SELECT date_trunc('milliseconds', coalesce($1::timestamptz, now())) AS now
),
-- Failure-log records older than the same cutoff go too (at most $3).
old_failures AS (
    DELETE FROM {schema}.attempt_failures
    WHERE ctid IN (
        SELECT f.ctid FROM {schema}.attempt_failures f
        WHERE f.at < (SELECT now FROM t) - $2::float8 * interval '1 millisecond'
        LIMIT $3
    )
)
DELETE FROM {schema}.jobs
WHERE id IN (
    SELECT j.id
    FROM {schema}.jobs j
    WHERE j.status IN ('completed', 'cancelled')
      AND j.finished_at < (SELECT now FROM t) - $2::float8 * interval '1 millisecond'
    ORDER BY j.finished_at, j.id
    LIMIT $3
    FOR UPDATE OF j SKIP LOCKED
)
