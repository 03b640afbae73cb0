-- Fenced running -> moved to revenant.jobs_done (jobs_done.sql) for every (id, lease
-- token) of $1/$2: the completed job leaves the hot table for an append-only table of
-- finished jobs, one statement. For measuring that option (`--complete move`).
WITH done AS (
    DELETE FROM revenant.jobs j
    USING unnest($1::int8[], $2::int8[]) AS i(id, lease_token)
    WHERE j.id = i.id AND j.lease_token = i.lease_token
    RETURNING j.id, j.queue, j.kind, j.payload, j.attempts, j.created_at, j.attempted_at,
              j.worker, j.errors
)
INSERT INTO revenant.jobs_done
    (id, queue, kind, payload, attempts, created_at, attempted_at, finished_at, worker, errors)
SELECT d.id, d.queue, d.kind, d.payload, d.attempts, d.created_at, d.attempted_at,
       date_trunc('milliseconds', now()), d.worker, d.errors
FROM done d
