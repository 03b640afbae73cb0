-- job_prune: delete completed and cancelled jobs finished more than $2 ms before now,
-- at most $3. Dead jobs are never pruned: they wait for an operator. $1: now (NULL: the
-- database clock).
WITH t AS (
    SELECT date_trunc('milliseconds', coalesce($1::timestamptz, now())) AS now
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
