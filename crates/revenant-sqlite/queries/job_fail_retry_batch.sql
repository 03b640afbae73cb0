-- Fenced running -> ready for a batch whose leases were checked in this transaction;
-- each attempt stays spent. ?1 JSON array of [id, run_at, history] triples.
-- `+status` keeps SQLite off the index of the jobs in that state (jobs_lease,
-- jobs_ready; jobs_finished before migration 15), which it would otherwise walk whole,
-- probing the batch for each entry: the batch drives the plan, one primary-key lookup
-- per id (checked by a test of the query plans).
UPDATE jobs
SET status = 'ready', run_at = retry.run_at, errors = retry.errors,
    lease_token = NULL, lease_expires_at = NULL
FROM (SELECT value ->> 0 AS id, value ->> 1 AS run_at, value ->> 2 AS errors
      FROM json_each(?1)) AS retry
WHERE jobs.id = retry.id AND +jobs.status = 'running'
