-- Fenced running -> running for a batch of kept retries (FailAction::Keep) whose
-- leases were checked in this transaction: the failure recorded, the next attempt
-- counted and due at its attempted_at, the lease left as it is. ?1 JSON array of
-- [id, attempted_at, history] triples.
-- `+status` as in job_fail_retry_batch.sql: the batch drives the plan, one primary-key
-- lookup per id.
UPDATE jobs
SET attempts = attempts + 1, attempted_at = kept.attempted_at, errors = kept.errors
FROM (SELECT value ->> 0 AS id, value ->> 1 AS attempted_at, value ->> 2 AS errors
      FROM json_each(?1)) AS kept
WHERE jobs.id = kept.id AND +jobs.status = 'running'
