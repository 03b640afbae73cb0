-- job_redrive: dead jobs matching the filter ($1..$10), oldest (lowest id) first, at
-- most $11 (NULL: all) -> ready. Attempts reset to 0, history kept, redrives counted,
-- and the i-th job (from 0) runs at now + i * $12 ms. A job that stopped being dead
-- while we waited for its lock is left alone (READ COMMITTED re-checks the WHERE).
-- $13: now (NULL: the database clock).
WITH t AS (
    SELECT date_trunc('milliseconds', coalesce($13::timestamptz, now())) AS now
),
picked AS (
    SELECT j.id
    FROM {schema}.jobs j
    WHERE j.status = 'dead'
      AND {job_filter}
    ORDER BY j.id
    LIMIT $11
    FOR UPDATE OF j
),
numbered AS (
    SELECT p.id, row_number() OVER (ORDER BY p.id) - 1 AS n FROM picked p
)
UPDATE {schema}.jobs j
SET status = 'ready',
    attempts = 0,
    run_at = t.now + (n.n * $12::float8) * interval '1 millisecond',
    dead_reason = NULL,
    finished_at = NULL,
    lease_token = NULL,
    lease_expires_at = NULL,
    redrives = j.redrives + 1
FROM numbered n, t
WHERE j.id = n.id AND j.status = 'dead'
RETURNING j.id, j.queue, j.run_at <= t.now AS due
