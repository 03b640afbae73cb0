-- ready -> running for a batch of claim candidates, in one statement: the attempt is
-- counted here, at claim. ?1 JSON array of [id, lease token] pairs, ?2 lease_expires_at,
-- ?3 now, ?4 worker. The candidates were read in the same write transaction, so every
-- one is still ready; the status check is a guard, not a race.
-- `+status` keeps SQLite off the index of the jobs in that state (jobs_lease,
-- jobs_ready; jobs_finished before migration 15), which it would otherwise walk whole,
-- probing the batch for each entry: the batch drives the plan, one primary-key lookup
-- per id (checked by a test of the query plans).
-- Returns nothing: the claimed jobs are read back as one value (job_claimed.sql)
-- instead of a row per job.
UPDATE jobs
SET status = 'running', attempts = attempts + 1, lease_token = claim.token,
    lease_expires_at = ?2, attempted_at = ?3, worker = ?4
FROM (SELECT value ->> 0 AS id, value ->> 1 AS token FROM json_each(?1)) AS claim
WHERE jobs.id = claim.id AND +jobs.status = 'ready'
