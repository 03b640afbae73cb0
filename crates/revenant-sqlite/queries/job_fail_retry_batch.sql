-- Fenced running -> ready for a batch whose leases were checked in this transaction;
-- each attempt stays spent. ?1 JSON array of [id, run_at, entries, attempts] arrays
-- (entries: the ErrorEntry objects to append, the job's kept failures first; attempts:
-- the job's count with its kept failures), ?2 how many history entries a job keeps.
-- Three files (sql.rs): this head, history_append.sql and job_fail_retry_batch_tail.sql.
-- `+status` keeps SQLite off the index of the jobs in that state (jobs_lease,
-- jobs_ready; jobs_finished before migration 15), which it would otherwise walk whole,
-- probing the batch for each entry: the batch drives the plan, one primary-key lookup
-- per id (checked by a test of the query plans).
UPDATE jobs
SET status = 'ready', run_at = failed.run_at, attempts = failed.attempts, lease_token = NULL,
    lease_expires_at = NULL,
    errors =
