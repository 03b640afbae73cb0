-- Fenced running -> running for a batch of kept retries (FailAction::Keep) whose
-- leases were checked in this transaction: the failure recorded, the next attempt
-- counted and due at its attempted_at, the lease left as it is. ?1 JSON array of
-- [id, attempted_at, entries, attempts] arrays (as job_fail_retry_batch.sql; attempts
-- counts the next attempt), ?2 how many history entries a job keeps. Three files, as
-- job_fail_retry_batch.sql, and `+status` as there: the batch drives the plan, one primary-key lookup per id.
UPDATE jobs
SET attempts = failed.attempts, attempted_at = failed.attempted_at,
    errors =
